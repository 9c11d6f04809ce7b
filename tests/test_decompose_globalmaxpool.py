"""GlobalMaxPool → ReduceMax (``decompose=globalmaxpool``): exact against numpy, in onnxruntime.

Versions 1 and 22, ranks 3-5, float/float16/double (bfloat16 for 22), static, symbolic and
unknown shapes, targets below and from opset 18 (axes attribute vs input); If/Loop bodies and
model-local functions; refusals; ``decompose=all`` with Hardmax in one model.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _decompose_oracle import (
    NP_TYPES,
    bf16_as_float,
    feeds_for,
    global_max_pool_oracle,
    hardmax_oracle,
    op_types_everywhere,
    session,
    single_op_model,
    tie_heavy,
)
from onnx import TensorProto, helper

import lowerer

F32, F16, F64, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16
SHAPES = {3: (2, 3, 5), 4: (2, 3, 4, 5), 5: (1, 2, 3, 2, 4)}
TARGETS = (None, 7, 11, 12, 13, 17, 18, 21, 22)
_TYPE_NAMES = {F32: "float", F16: "float16", F64: "double", BF16: "bfloat16"}


def _decompose(model: onnx.ModelProto, target: int | None = None, names: str = "globalmaxpool") -> onnx.ModelProto:
    out = lowerer.convert(model, decompose=names, target_opset=target, verify=False).model
    assert "GlobalMaxPool" not in op_types_everywhere(out)
    return out


def _inputs(shape: tuple[int, ...], dtype: type) -> list[np.ndarray]:
    rng = np.random.default_rng(len(shape))
    return [rng.standard_normal(shape).astype(dtype), tie_heavy(shape, dtype, seed=1),
            np.full(shape, -np.inf, dtype=dtype)]


def _check(model: onnx.ModelProto, inputs: list[np.ndarray], elem: int) -> None:
    expected = [global_max_pool_oracle(x) for x in inputs]
    if elem == BF16:
        model = bf16_as_float(model)
        inputs = [x.astype(np.float32) for x in inputs]
        expected = [e.astype(np.float32) for e in expected]
    sess = session(model)
    for x, want in zip(inputs, expected, strict=True):
        got = sess.run(None, feeds_for(model, x))[0]
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert np.array_equal(got, want)


@pytest.mark.parametrize(("source", "rank", "elem"), [
    pytest.param(source, rank, elem, id=f"opset{source}-rank{rank}-{_TYPE_NAMES[elem]}")
    for source in (13, 22) for rank in (3, 4, 5) for elem in (F32, F16, F64, BF16)
    if elem != BF16 or source >= 22  # GlobalMaxPool takes bfloat16 from version 22 on
])
def test_matches_numpy_at_every_target(source: int, rank: int, elem: int) -> None:
    shape = SHAPES[rank]
    inputs = _inputs(shape, NP_TYPES[elem])
    for kind in ("static", "symbolic", "unknown rank"):
        dims = {"static": list(shape), "symbolic": [f"d{i}" for i in range(rank)], "unknown rank": None}[kind]
        model = single_op_model("GlobalMaxPool", elem, dims, source, out_shape=None, rank=rank)
        for target in TARGETS:
            opset = target or source
            if elem == BF16 and opset < 13:
                with pytest.raises(lowerer.ConversionError, match="bfloat16"):
                    _decompose(model, target)
                continue
            out = _decompose(model, target)
            reduce = next(n for n in out.graph.node if n.op_type == "ReduceMax")
            assert [a.i for a in reduce.attribute if a.name == "keepdims"] == [1]
            if kind == "unknown rank" and opset < 18:  # the rank-free form: Reshape, ReduceMax axis 2, Reshape
                assert [list(a.ints) for a in reduce.attribute if a.name == "axes"] == [[2]]
                assert {"Flatten", "Reshape"} <= set(op_types_everywhere(out))
            elif opset >= 18:
                assert len(reduce.input) == 2 and not any(a.name == "axes" for a in reduce.attribute)
            else:
                assert len(reduce.input) == 1
                assert [list(a.ints) for a in reduce.attribute if a.name == "axes"] == [list(range(2, rank))]
            float_casts = [n for n in out.graph.node if n.op_type == "Cast" and n.attribute[0].i != TensorProto.INT64]
            assert bool(float_casts) == (elem == BF16)
            _check(out, inputs, elem)


def test_double_runs_after_decomposition() -> None:
    """onnxruntime has no double GlobalMaxPool kernel; ReduceMax runs."""
    model = single_op_model("GlobalMaxPool", F64, [2, 3, 4, 4], 13, out_shape=None)
    with pytest.raises(Exception, match=r"NOT_IMPLEMENTED|Could not find an implementation"):
        session(model)
    _check(_decompose(model), _inputs((2, 3, 4, 4), np.float64), F64)


def test_all_minus_inf_plane_is_minus_inf() -> None:
    """The max of a plane of -inf is -inf (numpy, the ONNX reference, ReduceMax).

    onnxruntime's CPU GlobalMaxPool gives -FLT_MAX there instead (its pooling starts from
    -FLT_MAX), so the decomposition deliberately differs from it on such planes.
    """
    model = single_op_model("GlobalMaxPool", F32, [2, 3, 1, 1], 13, out_shape=None)
    x = np.full((2, 3, 1, 1), -np.inf, dtype=np.float32)
    got = session(_decompose(model)).run(None, {"x": x})[0]
    assert np.array_equal(got, x)


@pytest.mark.parametrize(("source", "dims", "elem", "target", "message"), [
    (13, [2, 3], F32, None, r"input 'x' has rank 2; GlobalMaxPool needs \(N, C, D1, ...\), rank >= 3"),
    (13, None, F32, 5, r"rank of input 'x_any_rank' is unknown, and ReduceMax below opset 18 takes its axes.*"
                       r"needs Cast-6 \(opset >= 6\)"),
    (22, [1, 2, 3], BF16, 12, "bfloat16"),
])
def test_refusals(source: int, dims: list[int] | None, elem: int, target: int | None, message: str) -> None:
    model = single_op_model("GlobalMaxPool", elem, dims, source, out_shape=None, rank=4)
    with pytest.raises(lowerer.ConversionError, match=message) as info:
        _decompose(model, target)
    assert "GlobalMaxPool" in str(info.value)


def _control_flow_model(opset: int) -> onnx.ModelProto:
    """``y = If(c, GlobalMaxPool(x), Loop(1){ GlobalMaxPool(x) })``."""
    vi = helper.make_tensor_value_info
    out_shape = [2, 3, 1, 1]
    loop_body = helper.make_graph(
        [helper.make_node("GlobalMaxPool", ["x"], ["p"], name="gmp_loop"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "loop_body", [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                      vi("acc_in", F32, out_shape)],
        [vi("cond_out", TensorProto.BOOL, []), vi("p", F32, out_shape)],
    )
    then_g = helper.make_graph([helper.make_node("GlobalMaxPool", ["x"], ["t"], name="gmp_then")], "then", [],
                               [vi("t", F32, out_shape)])
    else_g = helper.make_graph([helper.make_node("Loop", ["trips", "", "init"], ["l"], name="loop",
                                                 body=loop_body)], "else", [], [vi("l", F32, out_shape)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="top_if", then_branch=then_g, else_branch=else_g)], "g",
        [vi("x", F32, [2, 3, 4, 5]), vi("c", TensorProto.BOOL, [])], [vi("y", F32, out_shape)],
        initializer=[helper.make_tensor("trips", TensorProto.INT64, [], [1]),
                     onnx.numpy_helper.from_array(np.zeros(out_shape, np.float32), "init")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize(("opset", "target"), [(13, None), (13, 18), (18, 13), (22, None)])
def test_inside_if_and_loop(opset: int, target: int | None) -> None:
    out = _decompose(_control_flow_model(opset), target)
    sess = session(out)
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    for c in (True, False):
        assert np.array_equal(sess.run(None, {"x": x, "c": np.array(c)})[0], global_max_pool_oracle(x))


@pytest.mark.parametrize(("opset", "typed", "target"), [(13, True, None), (18, False, None), (13, True, 18),
                                                        (22, False, 17)])
def test_inside_model_local_function(opset: int, typed: bool, target: int | None) -> None:
    """Untyped, the function is called on a rank-4 and a rank-3 input: its rank is unknown (below 18: the
    rank-free form)."""
    vi = helper.make_tensor_value_info
    body = [helper.make_node("GlobalMaxPool", ["a"], ["b"], name="gmp_fn")]
    fn = helper.make_function("pkg", "GMP", ["a"], ["b"], body, [helper.make_opsetid("", opset)])
    nodes = [helper.make_node("GMP", ["x"], ["y"], domain="pkg")]
    inputs, outputs = [vi("x", F32, [2, 3, 4, 5])], [vi("y", F32, [2, 3, 1, 1])]
    if typed:
        fn.value_info.extend([vi("a", F32, [2, 3, 4, 5])])
    else:
        nodes.append(helper.make_node("GMP", ["x3"], ["y3"], domain="pkg"))
        inputs.append(vi("x3", F32, [2, 3, 4]))
        outputs.append(vi("y3", F32, [2, 3, 1]))
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, functions=[fn], ir_version=10,
                              opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("pkg", 1)])
    out = _decompose(model, target)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((2, 3, 4, 5)).astype(np.float32)}
    if not typed:
        feeds["x3"] = rng.standard_normal((2, 3, 4)).astype(np.float32)
    for got, x in zip(session(out).run(None, feeds), feeds.values(), strict=True):
        assert np.array_equal(got, global_max_pool_oracle(x))


def test_decompose_all_with_hardmax_and_down_conversion() -> None:
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("GlobalMaxPool", ["x"], ["p"]), helper.make_node("Hardmax", ["x"], ["h"], axis=1)],
        "g", [vi("x", F32, [2, 3, 4, 5])], [vi("p", F32, [2, 3, 1, 1]), vi("h", F32, [2, 3, 4, 5])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    x = tie_heavy((2, 3, 4, 5), np.float32, seed=2)
    for target in (None, 11, 7):
        out = _decompose(model, target, names="all")
        assert "Hardmax" not in op_types_everywhere(out)
        p, h = session(out).run(None, {"x": x})
        assert np.array_equal(p, global_max_pool_oracle(x))
        assert np.array_equal(h, hardmax_oracle(x, 1, 13))


def _unknown_rank_loop_model(opset: int, hide_rank: bool = True) -> onnx.ModelProto:
    """``Loop(2)`` whose body pools its state (stated with no shape) as a scan output.

    With ``hide_rank`` the state starts as ``Reshape(x, shape)`` with a run-time shape, so its rank is
    unknown everywhere; without it the state is ``x`` itself, and lowerer proves the body keeps its rank
    (the body returns it unchanged).
    """
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["s_in"], ["s_out"]),
         helper.make_node("GlobalMaxPool", ["s_in"], ["p"], name="gmp_body")],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("s_in", F32, None)],
        [vi("cond_out", TensorProto.BOOL, []), vi("s_out", F32, None), vi("p", F32, None)])
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["x_any"])] if hide_rank else []
    nodes.append(helper.make_node("Loop", ["trips", "", "x_any" if hide_rank else "x"], ["s", "ps"], name="loop",
                                  body=body))
    graph = helper.make_graph(
        nodes, "g", [vi("x", F32, ["N", "C", "H", "W"]), vi("shape", TensorProto.INT64, ["r"])],
        [vi("s", F32, ["N", "C", "H", "W"]), vi("ps", F32, [2, "N", "C", 1, 1])],
        initializer=[helper.make_tensor("trips", TensorProto.INT64, [], [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize(("opset", "target"), [(13, None), (17, 11), (13, 7), (22, 17)])
def test_unknown_rank_in_loop_body_below_18(opset: int, target: int | None) -> None:
    """The motivating case: a body value of unknown rank; exact against the original, in onnxruntime."""
    model = _unknown_rank_loop_model(opset)
    out = _decompose(model, target)
    assert "Flatten" in op_types_everywhere(out) and "Range" not in op_types_everywhere(out)
    ranked = _decompose(_unknown_rank_loop_model(opset, hide_rank=False), target)
    assert "Flatten" not in op_types_everywhere(ranked) and "ReduceMax" in op_types_everywhere(ranked)
    original, converted = session(model), session(out)
    rng = np.random.default_rng(4)
    for shape in ((2, 3, 4, 5), (1, 1, 1, 1), (3, 2, 7, 1), (0, 3, 4, 5)):
        x = rng.standard_normal(shape).astype(np.float32)
        feeds = {"x": x, "shape": np.array(shape, np.int64)}
        want, got = original.run(None, feeds), converted.run(None, feeds)
        for w, g in zip(want, got, strict=True):
            assert g.shape == w.shape and np.array_equal(g, w)
        assert got[1].shape == (2, shape[0], shape[1], 1, 1)


def test_rank_free_form_on_empty_planes() -> None:
    """N = 0: the same empty output as the original, whatever else is 0. A zero C or spatial dim with
    N > 0 is an input the original rejects at run time ("Only N can be zero"); the rank-free form gives
    an empty output, -inf, or fails there (documented in the module)."""
    model = single_op_model("GlobalMaxPool", F32, None, 13, out_shape=None, rank=4)
    out = _decompose(model, 11)
    original, converted = session(model), session(out)
    for shape in ((0, 3, 4, 5), (0, 0, 0, 0), (0, 3, 0, 5), (0, 0, 4, 5), (0, 3, 4, 0)):
        x = np.zeros(shape, np.float32)
        want, got = original.run(None, feeds_for(model, x))[0], converted.run(None, feeds_for(out, x))[0]
        assert got.shape == want.shape == (0, shape[1], 1, 1)
    for shape, outcome in (((2, 0, 4, 5), "empty"), ((2, 3, 0, 4), "-inf"), ((2, 3, 4, 0), "fails")):
        x = np.zeros(shape, np.float32)
        with pytest.raises(Exception, match="Only N can be zero"):
            original.run(None, feeds_for(model, x))
        if outcome == "fails":
            with pytest.raises(Exception, match="cannot be reshaped"):
                converted.run(None, feeds_for(out, x))
            continue
        got = converted.run(None, feeds_for(out, x))[0]
        assert got.shape == (shape[0], shape[1], 1, 1) and bool(np.all(got == -np.inf))
