"""Owned ops inside If/Loop/Scan bodies (nested too) and model-local functions, converted up and down.

The bodies read outer-scope values (``x``, ``cond``, ``bias``); rewrites there need constants (made
initializers of the body) and shapes (from body inputs and outer values). The expected numbers
come from a numpy re-enactment of the graph with the *source* versions' oracle; the converted model
also matches the original in onnxruntime exactly (not for functions whose opset import differs
from the model's: ORT inlines them with the model's opset, a limitation shown below).
"""

from __future__ import annotations

import numpy as np
import onnx
import oracle
import pytest
from _convert_helpers import check_model_full, make_model, ort_run, since, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
SHAPE = (2, 3, 4)


def _axes(src: int) -> dict[str, int]:
    """Axes whose conversion needs a rewrite from ``src``: inner-axis coerced (≤12), non-last (13+)."""
    return {"if": 1 if src < 13 else 0, "loop": 1 if src < 13 else -2}


def _argattrs(src: int, **attrs: int) -> dict[str, int]:
    if src >= 12:
        attrs["select_last_index"] = 1
    return attrs


def control_flow_model(src: int) -> onnx.ModelProto:
    """If (two outputs per branch), Loop (with an If nested in the body) and Scan, all reading outer values."""
    ax = _axes(src)
    then_b = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["h_then"], axis=ax["if"]),
         helper.make_node("ArgMax", ["x"], ["a_then"], **_argattrs(src, axis=-1 if src >= 11 else 2, keepdims=1))],
        "then_b", [], [value_info("h_then", F, SHAPE), value_info("a_then", I64, [2, 3, 1])])
    else_b = helper.make_graph(
        [helper.make_node("Softmax", ["x"], ["h_else"], axis=ax["if"]),
         helper.make_node("ArgMin", ["x"], ["a_else"], **_argattrs(src, axis=2, keepdims=1))],
        "else_b", [], [value_info("h_else", F, SHAPE), value_info("a_else", I64, [2, 3, 1])])
    inner_then = helper.make_graph(
        [helper.make_node("ArgMax", ["v_in"], ["i_then"], **_argattrs(src, axis=1, keepdims=0))],
        "inner_then", [], [value_info("i_then", I64, [2, 4])])
    inner_else = helper.make_graph(
        [helper.make_node("ArgMin", ["v_in"], ["i_else"], **_argattrs(src, axis=1, keepdims=0))],
        "inner_else", [], [value_info("i_else", I64, [2, 4])])
    body = helper.make_graph(
        [helper.make_node("Hardmax", ["v_in"], ["hv"], axis=ax["loop"]),
         helper.make_node("Add", ["hv", "x"], ["v_out"]),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("If", ["cond"], ["idx"], then_branch=inner_then, else_branch=inner_else)],
        "body", [value_info("i", I64, []), value_info("c_in", B, []), value_info("v_in", F, SHAPE)],
        [value_info("c_out", B, []), value_info("v_out", F, SHAPE), value_info("idx", I64, [2, 4])])
    scan_body = helper.make_graph(
        [helper.make_node("LogSoftmax", ["s"], ["ls"], axis=0),
         helper.make_node("Add", ["ls", "bias"], ["lsb"]),
         helper.make_node("Add", ["acc_in", "lsb"], ["acc_out"]),
         helper.make_node("ArgMax", ["s"], ["so"], **_argattrs(src, axis=-1 if src >= 11 else 1, keepdims=0))],
        "scan_body", [value_info("acc_in", F, [3, 4]), value_info("s", F, [3, 4])],
        [value_info("acc_out", F, [3, 4]), value_info("so", I64, [3])])
    nodes = [
        helper.make_node("If", ["cond"], ["h", "a"], then_branch=then_b, else_branch=else_b),
        helper.make_node("Loop", ["trip", "true", "x"], ["v_final", "idxs"], body=body),
        helper.make_node("Scan", ["acc0", "x"], ["acc", "sos"], body=scan_body, num_scan_inputs=1),
    ]
    inits = [numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(np.zeros((3, 4), np.float32), "acc0"),
             numpy_helper.from_array(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "bias")]
    inputs = [value_info("x", F, SHAPE), value_info("cond", B, []), value_info("trip", I64, [])]
    outputs = [value_info("h", F, SHAPE), value_info("a", I64, [2, 3, 1]), value_info("v_final", F, SHAPE),
               value_info("idxs", I64, [None, 2, 4]), value_info("acc", F, [3, 4]), value_info("sos", I64, [2, 3])]
    return make_model(nodes, inputs, outputs, src, initializers=inits)


def control_flow_expected(src: int, x: np.ndarray, cond: bool, trip: int) -> dict[str, np.ndarray]:
    """The model's outputs computed in numpy with the source versions' oracle."""
    ax = _axes(src)
    hv, av = since("Hardmax", src), since("ArgMax", src)
    sl = 1 if src >= 12 else None
    out: dict[str, np.ndarray] = {}
    if cond:
        out["h"] = oracle.hardmax(x, ax["if"], hv)
        out["a"] = oracle.argextremum("ArgMax", x, -1 if src >= 11 else 2, 1, sl, av)
    else:
        out["h"] = oracle.softmax(x, ax["if"], hv)
        out["a"] = oracle.argextremum("ArgMin", x, 2, 1, sl, av)
    v, idxs = x, []
    for _ in range(trip):
        idxs.append(oracle.argextremum("ArgMax" if cond else "ArgMin", v, 1, 0, sl, av))
        v = oracle.hardmax(v, ax["loop"], hv) + x
    out["v_final"] = v
    out["idxs"] = np.stack(idxs) if idxs else np.zeros((0, 2, 4), np.int64)
    bias = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    acc = np.zeros((3, 4), np.float32)
    sos = []
    for s in x:
        acc = acc + (oracle.log_softmax(s, 0, hv) + bias)
        sos.append(oracle.argextremum("ArgMax", s, -1 if src >= 11 else 1, 0, sl, av))
    out["acc"] = acc
    out["sos"] = np.stack(sos)
    return out


CF_PAIRS = [(11, 13), (11, 18), (12, 11), (13, 11), (13, 12), (18, 11), (10, 13), (9, 12), (21, 11), (11, 21),
            (26, 13), (13, 26), (13, 10), (13, 9)]


@pytest.mark.parametrize(("src", "target"), CF_PAIRS, ids=[f"{s}to{t}" for s, t in CF_PAIRS])
def test_control_flow_bodies(src: int, target: int) -> None:
    model = control_flow_model(src)
    check_model_full(model)
    result = lowerer.convert(model, target_opset=target, verify=False)
    converted = result.model
    check_model_full(converted)
    # A node crossing a meaning change as it is (Scan 9 -> 11) is recorded, to be checked: not counted here.
    scopes = {r.scope for r in result.report.rewrites if [r.original] != r.replacement}
    # Upward ArgMax/ArgMin steps and Hardmax 1 -> 11 leave the node as it is: no rewrite then.
    argmax_rewritten = since("ArgMax", target) < since("ArgMax", src)
    hardmax_rewritten = since("Hardmax", src) != since("Hardmax", target) and \
        (since("Hardmax", src), since("Hardmax", target)) != (1, 11)
    if not (argmax_rewritten or hardmax_rewritten):
        assert not scopes  # only opset imports (and foreign relabels) change
    else:
        assert any("then_branch" in s for s in scopes) and any(".body" in s for s in scopes), scopes
        if argmax_rewritten:
            assert any("body/" in s and "branch" in s for s in scopes), scopes  # the If nested in the Loop
    rng = np.random.default_rng(src + target)
    feeds = []
    for cond in (True, False):
        for trip in (0, 2):
            x = rng.integers(-2, 3, size=SHAPE).astype(np.float32)
            x[0, 0, :] = -np.inf
            feeds.append({"x": x, "cond": np.array(cond), "trip": np.array(trip, np.int64)})
    names = [o.name for o in converted.graph.output]
    got = ort_run(converted, feeds)
    original = ort_run(model, feeds)
    for f, outs, orig in zip(feeds, got, original, strict=True):
        want = control_flow_expected(src, f["x"], bool(f["cond"]), int(f["trip"]))
        for name, actual, o in zip(names, outs, orig, strict=True):
            assert np.array_equal(actual, o, equal_nan=True), name  # exactly the original in ORT
            if name == "acc" or (name == "h" and not f["cond"]):
                np.testing.assert_allclose(actual, want[name], rtol=2e-6, atol=2e-6)
            else:
                assert np.array_equal(actual, want[name]), (name, actual, want[name])


@pytest.mark.parametrize("target", [11, 12])
def test_body_local_value_gets_its_rank_from_inference(target: int) -> None:
    # ``t`` is made inside the Loop body and has no value_info; the Loop's cond is absent ("").
    body = helper.make_graph(
        [helper.make_node("Relu", ["v_in"], ["t"]), helper.make_node("Hardmax", ["t"], ["v_out"], axis=0),
         helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("ArgMax", ["t"], ["so"], axis=-1, select_last_index=1)],
        "body", [value_info("i", I64, []), value_info("c_in", B, []), value_info("v_in", F, SHAPE)],
        [value_info("c_out", B, []), value_info("v_out", F, SHAPE), value_info("so", I64, [2, 3, 1])])
    model = make_model([helper.make_node("Loop", ["trip", "", "x"], ["v", "sos"], body=body)],
                       [value_info("x", F, SHAPE), value_info("trip", I64, [])],
                       [value_info("v", F, SHAPE), value_info("sos", I64, [None, 2, 3, 1])], 13)
    check_model_full(model)
    converted = lowerer.convert(model, target_opset=target, verify=False).model
    check_model_full(converted)
    x = np.random.default_rng(target).integers(-2, 3, size=SHAPE).astype(np.float32)
    v, sos = ort_run(converted, [{"x": x, "trip": np.array(2, np.int64)}])[0]
    want_v, want_sos = x, []
    for _ in range(2):
        t = np.maximum(want_v, 0)
        want_sos.append(oracle.argextremum("ArgMax", t, -1, 1, 1, 13))
        want_v = oracle.hardmax(t, 0, 13)
    assert np.array_equal(v, want_v) and np.array_equal(sos, np.stack(want_sos))


def test_loop_without_carried_values_is_refused_below_11() -> None:
    """Loop-1 takes at least one loop-carried value (3 inputs); a Loop-11+ without one has no Loop-1 form."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Relu", ["x"], ["so"])],
        "body", [value_info("i", I64, []), value_info("c_in", B, [])],
        [value_info("c_out", B, []), value_info("so", F, SHAPE)])
    model = make_model([helper.make_node("Loop", ["trip", ""], ["sos"], body=body, name="lp")],
                       [value_info("x", F, SHAPE), value_info("trip", I64, [])],
                       [value_info("sos", F, [None, *SHAPE])], 13)
    check_model_full(model)
    with pytest.raises(lowerer.ConversionError, match=r"'lp' \(Loop-13.*opset 10: Loop-1 takes at least 3 inputs"):
        lowerer.convert(model, target_opset=10, verify=False)
    converted = lowerer.convert(model, target_opset=11, verify=False).model
    check_model_full(converted)


def test_if_below_11_needs_equal_static_branch_shapes() -> None:
    """If-1 needs equal branch shapes (onnx's inference merges them): stated or inferred, and equal, or refused.

    A branch stating ``[n, 3]`` for ``Neg(x)`` with ``x`` of ``[2, 3]`` yields ``[2, 3]`` (inference merges
    the statement with what it infers); one stating ``[1, 3]`` contradicts the then branch's ``[2, 3]``.
    """
    def model(else_shape: list) -> onnx.ModelProto:
        then_b = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                                   [value_info("t", F, [2, 3])])
        else_b = helper.make_graph([helper.make_node("Neg", ["x"], ["u"])], "else", [],
                                   [value_info("u", F, else_shape)])
        return make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                          [value_info("x", F, [2, 3]), value_info("c", B, [])], [value_info("y", F, [2, 3])], 13)

    with pytest.raises(lowerer.ConversionError, match=r"If-1 needs both branches to yield the same shape"):
        lowerer.convert(model([1, 3]), target_opset=10, verify=False)
    for shape in ([2, 3], ["n", 3]):
        converted = lowerer.convert(model(shape), target_opset=10, verify=False).model
        check_model_full(converted)
        x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
        for c in (True, False):
            got = ort_run(converted, [{"x": x, "c": np.array(c)}])[0][0]
            assert np.array_equal(got, np.maximum(x, 0) if c else -x)


# -- model-local functions ----------------------------------------------------------------------
def function_model(model_opset: int, function_opset: int, with_value_info: bool = True,
                   x_shape: tuple | None = SHAPE) -> onnx.ModelProto:
    """A model calling local.F (own default opset ``function_opset``) twice, plus Hardmax in the graph."""
    fv = since("Hardmax", function_opset)
    hm_axis = 1 if fv < 13 else 0
    body = [helper.make_node("Hardmax", ["a"], ["b"], axis=hm_axis),
            helper.make_node("ArgMax", ["a"], ["c"], **_argattrs(function_opset, axis=1, keepdims=0))]
    fn = helper.make_function("local", "F", ["a"], ["b", "c"], body, [helper.make_opsetid("", function_opset)])
    if with_value_info:
        fn.value_info.extend([value_info("a", F, SHAPE)])
    nodes = [helper.make_node("F", ["x"], ["y", "z"], domain="local"),
             helper.make_node("Hardmax", ["x"], ["w"], axis=1)]
    return make_model(nodes, [value_info("x", F, x_shape)],
                      [value_info("y", F, SHAPE), value_info("z", I64, [2, 4]), value_info("w", F, SHAPE)],
                      model_opset, functions=[fn], extra_opsets=[("local", 1)])


FN_CASES = [(13, 11, 11), (13, 11, 13), (11, 13, 13), (11, 13, 11), (12, 12, 9), (18, 12, 13), (11, 11, 18)]


@pytest.mark.parametrize(("model_opset", "function_opset", "target"), FN_CASES)
def test_function_with_its_own_opset(model_opset: int, function_opset: int, target: int) -> None:
    model = function_model(model_opset, function_opset)
    # onnx's checker rejects a function whose ops resolve to other versions than the model's
    # ("not compatible with the version imported by model"); after conversion both import the
    # target, so the converted model must pass.
    try:
        onnx.checker.check_model(model, full_check=True)
        input_valid = True
    except onnx.checker.ValidationError as e:
        assert "not compatible with the version imported by model" in str(e)
        input_valid = False
    assert input_valid == (since("Hardmax", model_opset) == since("Hardmax", function_opset)
                           and since("ArgMax", model_opset) == since("ArgMax", function_opset))
    converted = lowerer.convert(model, target_opset=target, verify=False).model
    check_model_full(converted)
    assert [f.name for f in converted.functions] == ["F"]
    assert {o.domain: o.version for o in converted.opset_import} == {"": target, "local": 1}
    assert {o.domain: o.version for o in converted.functions[0].opset_import} == {"": target}
    fv, fav, mv = since("Hardmax", function_opset), since("ArgMax", function_opset), since("Hardmax", model_opset)
    rng = np.random.default_rng(target)
    xs = [rng.integers(-2, 3, size=SHAPE).astype(np.float32) for _ in range(3)]
    got = ort_run(converted, [{"x": x} for x in xs])
    for x, (y, z, w) in zip(xs, got, strict=True):
        assert np.array_equal(y, oracle.hardmax(x, 1 if fv < 13 else 0, fv))
        assert np.array_equal(z, oracle.argextremum("ArgMax", x, 1, 0, 1 if function_opset >= 12 else None, fav))
        assert np.array_equal(w, oracle.hardmax(x, 1, mv))


def test_ort_ignores_a_function_opset_that_differs_from_the_model() -> None:
    # Why the function tests use the oracle, not the original in ORT: ORT runs local.F's Hardmax-11
    # with the model's opset-13 meaning. After lowerer, both import the target and ORT is right.
    model = function_model(13, 11)
    x = np.array([[[1, 5, 0, 0], [5, 0, 0, 0], [0, 0, 0, 0]]] * 2, np.float32)
    (y, _z, _w) = ort_run(model, [{"x": x}])[0]
    assert not np.array_equal(y, oracle.hardmax(x, 1, 11))
    converted = lowerer.convert(model, target_opset=13, verify=False).model
    assert np.array_equal(ort_run(converted, [{"x": x}])[0][0], oracle.hardmax(x, 1, 11))


def test_function_without_shapes_refuses_where_rank_is_needed() -> None:
    # No value_info in the function, and its call site passes a value of unknown rank.
    model = function_model(13, 13, with_value_info=False)
    model.graph.node.pop()  # the graph's own Hardmax
    # The call site passes a value of unknown rank (a Reshape to a runtime shape).
    model.graph.input.append(value_info("s", I64, ["k"]))
    model.graph.node.insert(0, helper.make_node("Reshape", ["x", "s"], ["xr"]))
    model.graph.node[1].input[0] = "xr"
    model.graph.node.append(helper.make_node("Flatten", ["y"], ["yf"], axis=0))
    del model.graph.output[:]
    model.graph.output.append(value_info("yf", F, [1, "n"]))
    onnx.checker.check_model(model)
    model.functions[0].value_info.append(value_info("a", F, None))  # the type, not the rank
    with pytest.raises(lowerer.ConversionError, match=r"Hardmax-13, in function:local\.F.*rank of input 'a'"):
        lowerer.convert(model, target_opset=11, verify=False)


# -- names -------------------------------------------------------------------------------------------
def test_generated_names_never_collide() -> None:
    # Convert once, then build a model that already uses the names that conversion generated (and
    # other __lw-style names) for its own values and nodes, in the graph and in a subgraph.
    first = lowerer.convert(control_flow_model(13), target_opset=11, verify=False).model
    taken = set()
    subgraphs = [a.g for n in first.graph.node for a in n.attribute if a.type == onnx.AttributeProto.GRAPH]
    for g in [first.graph, *subgraphs]:
        for n in g.node:
            taken.update(v for v in n.output if "__lw" in v)
            if "__lw" in n.name:
                taken.add(n.name)
        taken.update(t.name for t in g.initializer if "__lw" in t.name)
    taken.update({"y__lw1", "y__lw2", "h__lw1", "x__lw3"})
    assert len(taken) > 5
    model = control_flow_model(13)
    chain_in = "x"
    for i, name in enumerate(sorted(taken)):
        model.graph.node.append(helper.make_node("Identity", [chain_in], [name], name=f"{name}__node{i}"))
        chain_in = name
    model.graph.output.append(value_info(chain_in, F, SHAPE))
    check_model_full(model)
    converted = lowerer.convert(model, target_opset=11, verify=False).model
    check_model_full(converted)  # SSA: a clash would fail here
    feeds = [{"x": np.random.default_rng(1).integers(-2, 3, size=SHAPE).astype(np.float32),
              "cond": np.array(True), "trip": np.array(2, np.int64)}]
    for a, b in zip(ort_run(converted, feeds)[0], ort_run(model, feeds)[0], strict=True):
        assert np.array_equal(a, b)
    # Round trip 11 → 13 → 11 keeps working on the generated names.
    again = lowerer.convert(lowerer.convert(converted, target_opset=13, verify=False).model, target_opset=11,
                            verify=False).model
    check_model_full(again)
    for a, b in zip(ort_run(again, feeds)[0], ort_run(model, feeds)[0], strict=True):
        assert np.array_equal(a, b)


def test_function_rank_from_its_call_site() -> None:
    model = function_model(13, 13, with_value_info=False)
    converted = lowerer.convert(model, target_opset=11, verify=False).model
    x = np.random.default_rng(5).integers(-2, 3, size=SHAPE).astype(np.float32)
    (y, _z, _w) = ort_run(converted, [{"x": x}])[0]
    assert np.array_equal(y, oracle.hardmax(x, 0, 13))
