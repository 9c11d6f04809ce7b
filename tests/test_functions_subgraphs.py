"""Model-local functions (nested, with their own opsets and value_info) and If/Loop/Scan bodies.

Every converted model runs in onnxruntime and is compared exactly with the numpy oracle of the
source semantics or with the original model.
"""

from __future__ import annotations

import _fuzz_oracle as oracle
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.core.errors import ConversionError

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
_SO = ort.SessionOptions()
_SO.log_severity_level = 3


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _vi(name: str, elem: int, shape: list[int | str] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _x(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-3, 4, size=shape).astype(np.float32)


def _default_versions(model: onnx.ModelProto) -> list[int]:
    out = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    for fn in model.functions:
        out.extend(o.version for o in fn.opset_import if o.domain in ("", "ai.onnx"))
    return out


def _all_ops(nodes: object) -> list[str]:
    ops = []
    for n in nodes:  # type: ignore[attr-defined]
        ops.append(n.op_type)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                ops.extend(_all_ops(a.g.node))
            for g in a.graphs:
                ops.extend(_all_ops(g.node))
    return ops


def _convert(model: onnx.ModelProto, target: int, decompose: tuple[str, ...] = ()) -> onnx.ModelProto:
    out = lowerer.convert(model, target_opset=target, decompose=decompose).model
    assert set(_default_versions(out)) == {target}
    onnx.checker.check_model(out, full_check=True)
    return out


# -- functions -----------------------------------------------------------------------------------
def _nested_functions(fn_opset: int, model_opset: int, value_info: bool = True) -> onnx.ModelProto:
    """main: y = Outer(x); Outer(a) = ArgMax(Inner(a)), Softmax(a, axis=0); Inner(a) = Hardmax(a, axis=1)."""
    inner = helper.make_function(
        "pkg", "Inner", ["a"], ["h"], [helper.make_node("Hardmax", ["a"], ["h"], name="inner_hm", axis=1)],
        [helper.make_opsetid("", fn_opset)])
    outer = helper.make_function(
        "pkg", "Outer", ["a"], ["am", "sm"],
        [helper.make_node("Inner", ["a"], ["h"], name="call_inner", domain="pkg"),
         helper.make_node("ArgMax", ["h"], ["am"], name="outer_am", axis=-1, keepdims=0),
         helper.make_node("Softmax", ["a"], ["sm"], name="outer_sm", axis=0)],
        [helper.make_opsetid("", fn_opset), helper.make_opsetid("pkg", 1)])
    if value_info:
        for fn in (inner, outer):
            fn.value_info.append(_vi("a", F, [2, 3, 4]))
        outer.value_info.append(_vi("h", F, [2, 3, 4]))
    graph = helper.make_graph(
        [helper.make_node("Outer", ["x"], ["am", "sm"], name="call_outer", domain="pkg")], "main",
        [_vi("x", F, [2, 3, 4])], [_vi("am", I64, [2, 3]), _vi("sm", F, [2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", model_opset), helper.make_opsetid("pkg", 1)],
                             functions=[inner, outer], ir_version=10, producer_name="test")


def _nested_expected(x: np.ndarray, fn_opset: int) -> list[np.ndarray]:
    hm_since = 1 if fn_opset < 11 else (11 if fn_opset < 13 else 13)
    h = oracle.coerced_family("Hardmax", x, 1, hm_since)
    am = oracle.arg_extremum("ArgMax", h, -1, 0, None, 13)
    sm = oracle.coerced_family("Softmax", x, 0, hm_since)
    return [am, sm]


@pytest.mark.parametrize(("fn_opset", "target"), [(11, 13), (11, 18), (13, 11), (13, 7), (8, 21), (18, 12)])
@pytest.mark.parametrize("decompose", [(), ("hardmax",)])
def test_nested_functions_convert_keeping_boundaries(fn_opset: int, target: int, decompose: tuple[str, ...]) -> None:
    model = _nested_functions(fn_opset, fn_opset)
    x = _x((2, 3, 4))
    want = _nested_expected(x, fn_opset)
    got_original = _run(model, {"x": x})
    np.testing.assert_array_equal(got_original[0], want[0])
    if decompose and target < 9:  # the one-hot needs an int constant: Constant-9 inside a function
        with pytest.raises(ConversionError, match="a non-float constant is needed, and inside a function"):
            lowerer.convert(model, target_opset=target, decompose=decompose)
        return
    out = _convert(model, target, decompose)
    assert [(f.domain, f.name) for f in out.functions] == [("pkg", "Inner"), ("pkg", "Outer")]
    assert [n.op_type for n in out.graph.node] == ["Outer"]
    assert "Inner" in [n.op_type for n in out.functions[1].node]
    if decompose:
        assert "Hardmax" not in _all_ops(out.functions[0].node)
    got = _run(out, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], got_original[1])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


@pytest.mark.parametrize(("fn_opset", "model_opset", "target"), [(11, 13, 13), (11, 13, 11), (13, 11, 11),
                                                                   (13, 11, 13), (11, 18, 15)])
def test_function_with_its_own_opset(fn_opset: int, model_opset: int, target: int) -> None:
    """A function importing another default opset than the model's keeps its own meaning."""
    model = _nested_functions(fn_opset, model_opset)
    x = _x((2, 3, 4), seed=3)
    out = _convert(model, target)
    got = _run(out, {"x": x})
    want = _nested_expected(x, fn_opset)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_function_value_info_is_used_and_kept() -> None:
    model = _nested_functions(13, 13)
    out = _convert(model, 11)  # Softmax-13(axis=0) -> Transpose + Softmax-11: needs the rank
    assert [vi.name for vi in out.functions[1].value_info][:2] == ["a", "h"]
    assert "Transpose" in _all_ops(out.functions[1].node)


def test_function_without_value_info_takes_types_from_its_call_sites() -> None:
    """No value_info in the functions: the types come from the call sites (Outer's from main's x,
    Inner's from Outer's body), so the rank-needing rewrites are made, and exactly."""
    model = _nested_functions(13, 13, value_info=False)
    out = _convert(model, 11)
    assert "Transpose" in _all_ops(out.functions[0].node) and "Transpose" in _all_ops(out.functions[1].node)
    x = _x((2, 3, 4), seed=6)
    got, want = _run(out, {"x": x}), _nested_expected(x, 13)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6)


def test_function_called_with_different_ranks_refuses_clearly() -> None:
    """Call sites that disagree on the rank give the function body no rank: refused, not guessed."""
    model = _nested_functions(13, 13, value_info=False)
    model.graph.node.append(helper.make_node("Outer", ["x2"], ["y2", "z2"], name="call2", domain="pkg"))
    model.graph.input.append(_vi("x2", F, [6, 4]))
    model.graph.output.extend([_vi("y2", I64, None), _vi("z2", F, [6, 4])])
    with pytest.raises(ConversionError, match=r"^node '(inner_hm|outer_sm)' \((Hardmax|Softmax)-13, in "
                                              r"function:pkg.(Inner|Outer)\) cannot be converted to opset 11: "
                                              r"the rank of input 'a' is unknown"):
        lowerer.convert(model, target_opset=11)


def test_function_with_subgraph_inside() -> None:
    """An If inside a function: the branch's owned ops are converted, the function kept."""
    then_g = helper.make_graph([helper.make_node("ArgMax", ["a"], ["t"], name="then_am", axis=-1,
                                                 select_last_index=1)], "then", [], [_vi("t", I64, [3, 1])])
    else_g = helper.make_graph([helper.make_node("ArgMin", ["a"], ["e"], name="else_am", axis=1,
                                                 select_last_index=1)], "else", [], [_vi("e", I64, [3, 1])])
    fn = helper.make_function(
        "pkg", "Pick", ["a", "c"], ["r"],
        [helper.make_node("If", ["c"], ["r"], name="fn_if", then_branch=then_g, else_branch=else_g)],
        [helper.make_opsetid("", 13)])
    fn.value_info.append(_vi("a", F, [3, 3]))
    graph = helper.make_graph([helper.make_node("Pick", ["x", "c"], ["y"], name="call", domain="pkg")], "main",
                              [_vi("x", F, [3, 3]), _vi("c", B, [])], [_vi("y", I64, [3, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("pkg", 1)],
                              functions=[fn], ir_version=10)
    x = _x((3, 3), seed=5)
    for target in (11, 9):
        out = lowerer.convert(model, target_opset=target).model
        for c in (True, False):
            got = _run(out, {"x": x, "c": np.array(c)})[0]
            want = (oracle.arg_extremum("ArgMax", x, -1, None, 1, 13) if c
                    else oracle.arg_extremum("ArgMin", x, 1, None, 1, 13))
            np.testing.assert_array_equal(got, want)


# -- subgraphs -----------------------------------------------------------------------------------
def _deep_model(opset: int) -> onnx.ModelProto:
    """Loop > If > Scan, each level using owned ops on outer-scope values from the main graph.

    main: r = Relu(x)                     (an intermediate: its shape comes from inference)
    Loop(2 trips) body: hm = Hardmax(r, axis=1); If(c) then: Scan over rows of hm with
    ArgMax(row, select_last_index=1) + Softmax(r, axis=0); else: LogSoftmax(r, axis=1), ...
    """
    scan_body = helper.make_graph(
        [helper.make_node("ArgMax", ["row"], ["row_am"], name="scan_am", axis=-1, keepdims=0,
                          **({"select_last_index": 1} if opset >= 12 else {})),
         helper.make_node("Identity", ["acc_in"], ["acc_out"], name="scan_acc")],
        "scan_body", [_vi("acc_in", F, [1]), _vi("row", F, [3, 4])], [_vi("acc_out", F, [1]), _vi("row_am", I64, [3])])
    then_g = helper.make_graph(
        [helper.make_node("Scan", ["acc0", "hm"], ["acc", "ams"], name="the_scan", body=scan_body,
                          num_scan_inputs=1),
         helper.make_node("Softmax", ["r"], ["then_sm"], name="then_sm", axis=0)],
        "then", [], [_vi("ams", I64, [2, 3]), _vi("then_sm", F, [2, 3, 4])])
    else_g = helper.make_graph(
        [helper.make_node("ArgMin", ["r"], ["else_am"], name="else_am", axis=2, keepdims=0),
         helper.make_node("LogSoftmax", ["r"], ["else_sm"], name="else_lsm", axis=1)],
        "else", [], [_vi("else_am", I64, [2, 3]), _vi("else_sm", F, [2, 3, 4])])
    body = helper.make_graph(
        [helper.make_node("Hardmax", ["r"], ["hm"], name="loop_hm", axis=1),
         helper.make_node("If", ["c"], ["ia", "ib"], name="the_if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond")],
        "loop_body", [_vi("i", I64, []), _vi("cond_in", B, []), _vi("carry_in", F, [1])],
        [_vi("cond_out", B, []), _vi("carry_in", F, [1]), _vi("ia", I64, [2, 3]), _vi("ib", F, [2, 3, 4])])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Loop", ["trip", "keep", "acc0"], ["carry", "ya", "yb"], name="the_loop", body=body)],
        "main", [_vi("x", F, [2, 3, 4]), _vi("c", B, []), _vi("trip", I64, []), _vi("keep", B, []),
                 _vi("acc0", F, [1])],
        [_vi("ya", I64, [2, 2, 3]), _vi("yb", F, [2, 2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize(("source", "target", "decompose"), [
    (11, 13, ()), (11, 13, ("hardmax",)), (13, 11, ()), (16, 11, ("all",)), (12, 17, ()), (17, 12, ()),
    (13, 11, ("globalmaxpool",)), (9, 13, ("hardmax",)),
])
def test_nested_subgraphs_with_outer_scope_values(source: int, target: int, decompose: tuple[str, ...]) -> None:
    model = _deep_model(source)
    onnx.checker.check_model(model, full_check=True)
    out = _convert(model, target, decompose)
    if {"hardmax", "all"} & set(decompose):
        assert "Hardmax" not in _all_ops(out.graph.node)
    x = _x((2, 3, 4), seed=7)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c), "trip": np.array(2, dtype=np.int64), "keep": np.array(True),
                 "acc0": np.zeros(1, np.float32)}
        want = _run(model, feeds)
        got = _run(out, feeds)
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(g, w)
        r = np.maximum(x, 0)
        hm_since = 11 if source < 13 else 13
        hm = oracle.coerced_family("Hardmax", r, 1, hm_since)
        if c:
            rows = [oracle.arg_extremum("ArgMax", hm[i], -1, 0, 1, 12 if source >= 12 else 11) for i in range(2)]
            np.testing.assert_array_equal(got[0][0], np.stack(rows))
        else:
            np.testing.assert_array_equal(got[0][0], oracle.arg_extremum("ArgMin", r, 2, 0, None, 11))


def test_subgraph_constants_at_ir3() -> None:
    """Constants a rewrite needs inside an If branch of an IR-3 model (initializers must be inputs there)."""
    branch = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["t"], name="am", axis=1, select_last_index=1)], "b", [],
        [_vi("t", I64, [2, 1])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch,
                                                else_branch=branch)],
                              "main", [_vi("x", F, [2, 5]), _vi("c", B, [])], [_vi("y", I64, [2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=3)
    x = _x((2, 5), seed=2)
    out = _convert(model, 8)
    assert out.ir_version >= 4
    got = _run(out, {"x": x, "c": np.array(True)})[0]
    np.testing.assert_array_equal(got, oracle.arg_extremum("ArgMax", x, 1, None, 1, 12))


def _function_with_attribute_reference() -> onnx.ModelProto:
    """F(a) with attribute ax: Softmax(a, axis=@ax), ArgMax(a, axis=@ax, select_last_index=1); called with ax=1."""
    ref = onnx.AttributeProto()
    ref.name, ref.ref_attr_name, ref.type = "axis", "ax", onnx.AttributeProto.INT
    softmax = helper.make_node("Softmax", ["a"], ["b"], name="fsm")
    softmax.attribute.append(ref)
    argmax = helper.make_node("ArgMax", ["a"], ["c"], name="fam", keepdims=0, select_last_index=1)
    argmax.attribute.append(ref)
    fn = helper.make_function("pkg", "F", ["a"], ["b", "c"], [softmax, argmax], [helper.make_opsetid("", 13)],
                              attributes=["ax"])
    fn.value_info.append(_vi("a", F, [2, 3, 4]))
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y", "z"], name="call", domain="pkg", ax=1)], "g",
                              [_vi("x", F, [2, 3, 4])], [_vi("y", F, [2, 3, 4]), _vi("z", I64, [2, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("pkg", 1)],
                             functions=[fn], ir_version=10)


def test_attribute_references_are_refused_not_misread() -> None:
    """Regression: axis=@ax was read as axis 0 and converted into a model computing something else."""
    model = _function_with_attribute_reference()
    with pytest.raises(ConversionError, match=r"^node 'fsm' \(Softmax-13, in function:pkg.F\) cannot be converted "
                                              r"to opset 11: its attribute\(s\) axis=@ax refer to the function's"):
        lowerer.convert(model, target_opset=11)
    x = _x((2, 3, 4), seed=4)
    out = _convert(model, 18)  # nothing to rewrite: the references stay as they are
    for want, got in zip(_run(model, {"x": x}), _run(out, {"x": x}), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_run(out, {"x": x})[1], oracle.arg_extremum("ArgMax", x, 1, 0, 1, 13))
