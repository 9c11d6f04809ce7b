"""Ops lowerer does not own ride along: Conv, Relu, Add, ReduceSum/Unsqueeze/Squeeze/Split (axes and split
attributes become inputs at 13 and back), next to ArgMax/Hardmax/Softmax and a model-local function,
converted 11→13 and 13→11 (and further). Outputs equal the original's in onnxruntime exactly and the
oracle for the owned ops; functions and other domains' opset imports are kept.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import oracle
import pytest
from _convert_helpers import check_model_full, make_model, ort_run, since, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def mixed_model(opset: int) -> onnx.ModelProto:
    """The model at ``opset`` (11 or 13+): axes/split as attributes below 13, as inputs from 13."""
    rng = np.random.default_rng(7)
    w = rng.integers(-1, 2, size=(3, 2, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(np.array([0.5, -1, 0], np.float32), "B"),
             numpy_helper.from_array(np.array([1, 0, -2], np.float32).reshape(3, 1, 1), "bias")]
    as_inputs = opset >= 13

    def axes_node(op: str, x: str, out: str, axes: list[int], **attrs: int) -> onnx.NodeProto:
        if as_inputs:
            name = f"{out}_axes"
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), name))
            return helper.make_node(op, [x, name], [out], **attrs)
        return helper.make_node(op, [x], [out], axes=axes, **attrs)

    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "bias"], ["a"]),
        axes_node("ReduceSum", "a", "s", [3], keepdims=0),
        axes_node("Unsqueeze", "s", "u", [0]),
        axes_node("Squeeze", "u", "q", [0]),
    ]
    if as_inputs:
        inits.append(numpy_helper.from_array(np.array([1, 3], np.int64), "split"))
        nodes.append(helper.make_node("Split", ["q", "split"], ["sp1", "sp2"], axis=2))
    else:
        nodes.append(helper.make_node("Split", ["q"], ["sp1", "sp2"], axis=2, split=[1, 3]))
    arg_attrs = {"select_last_index": 1} if opset >= 12 else {}
    nodes += [
        helper.make_node("Softmax", ["sp2"], ["sm"], axis=1),
        helper.make_node("Hardmax", ["q"], ["hm"], axis=1),
        helper.make_node("ArgMax", ["a"], ["am"], axis=1, keepdims=0, **arg_attrs),
        helper.make_node("G", ["q"], ["g"], domain="custom.fn"),
    ]
    fn = helper.make_function(
        "custom.fn", "G", ["p"], ["o"],
        [helper.make_node("Relu", ["p"], ["pr"]), helper.make_node("Hardmax", ["pr"], ["ph"], axis=-1),
         helper.make_node("Add", ["ph", "pr"], ["o"])],
        [helper.make_opsetid("", opset)])
    # Types inside the function: needed to prove Relu/Add's version steps are type-only.
    fn.value_info.extend([value_info(n, F, [1, 3, 4]) for n in ("p", "pr", "ph")])
    outputs = [value_info("sp1", F, [1, 3, 1]), value_info("sm", F, [1, 3, 3]), value_info("hm", F, [1, 3, 4]),
               value_info("am", I64, [1, 4, 4]), value_info("g", F, [1, 3, 4]), value_info("q", F, [1, 3, 4]),
               value_info("a", F, [1, 3, 4, 4])]
    return make_model(nodes, [value_info("x", F, [1, 2, 4, 4])], outputs, opset, initializers=inits,
                      functions=[fn], extra_opsets=[("custom.fn", 1), ("ai.onnx.ml", 3)])


PAIRS = [(11, 13), (13, 11), (11, 18), (18, 11), (13, 12), (12, 13), (11, 21), (21, 13)]


@pytest.mark.parametrize(("src", "target"), PAIRS, ids=[f"{s}to{t}" for s, t in PAIRS])
def test_foreign_ops_ride_along(src: int, target: int) -> None:
    model = mixed_model(src)
    check_model_full(model)
    converted = lowerer.convert(model, target_opset=target, verify=False).model
    check_model_full(converted)
    # ai.onnx.ml is imported but no node uses it: dropped (keep_imports keeps it)
    assert {o.domain: o.version for o in converted.opset_import} == {"": target, "custom.fn": 1}
    kept = lowerer.convert(model, target_opset=target, verify=False, keep_imports=True).model
    assert {o.domain: o.version for o in kept.opset_import} == {"": target, "custom.fn": 1, "ai.onnx.ml": 3}
    assert [(f.domain, f.name) for f in converted.functions] == [("custom.fn", "G")]
    assert {o.domain: o.version for o in converted.functions[0].opset_import} == {"": target}
    ops = [n.op_type for n in converted.graph.node]
    for op in ("Conv", "Relu", "Add", "ReduceSum", "Unsqueeze", "Squeeze", "Split"):
        assert op in ops
    rng = np.random.default_rng(src * 31 + target)
    feeds = [{"x": rng.integers(-2, 3, size=(1, 2, 4, 4)).astype(np.float32)} for _ in range(4)]
    feeds.append({"x": np.ones((1, 2, 4, 4), np.float32)})
    names = [o.name for o in converted.graph.output]
    hv, av = since("Hardmax", src), since("ArgMax", src)
    for got, orig in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        out = dict(zip(names, got, strict=True))
        for name, a, b in zip(names, got, orig, strict=True):
            assert np.array_equal(a, b), name
        q, a = out["q"], out["a"]
        assert np.array_equal(out["hm"], oracle.hardmax(q, 1, hv))
        assert np.array_equal(out["am"], oracle.argextremum("ArgMax", a, 1, 0, 1 if src >= 12 else None, av))
        np.testing.assert_allclose(out["sm"], oracle.softmax(q[:, :, 1:], 1, hv), rtol=2e-6, atol=2e-6)
        pr = np.maximum(q, 0)
        assert np.array_equal(out["g"], oracle.hardmax(pr, -1, hv) + pr)


def test_softmax13_axis1_down_to_11_is_exact_where_onnx_is_not() -> None:
    from onnx import version_converter

    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    model = make_model([node], [value_info("x", F, [2, 3, 4])], [value_info("y", F, [2, 3, 4])], 13)
    x = np.random.default_rng(3).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    ours = lowerer.convert(model, target_opset=11, verify=False).model
    assert np.array_equal(ort_run(ours, [{"x": x}])[0][0], ort_run(model, [{"x": x}])[0][0])
    theirs = version_converter.convert_version(model, 11)
    assert not np.allclose(ort_run(theirs, [{"x": x}])[0][0], ort_run(model, [{"x": x}])[0][0])


def test_int8_add_14_down_is_widened_not_relabelled() -> None:
    """Add-13 takes no int8: the sum is computed in int64 and cast back (onnxruntime's wrap-around kept)."""
    node = helper.make_node("Add", ["a", "b"], ["c"])
    i8 = TensorProto.INT8
    model = make_model([node], [value_info("a", i8, [4]), value_info("b", i8, [4])], [value_info("c", i8, [4])], 14)
    converted = lowerer.convert(model, target_opset=13).model
    check_model_full(converted)
    assert [n.op_type for n in converted.graph.node] != ["Add"]
    feeds = {"a": np.array([127, -128, 5, -1], np.int8), "b": np.array([1, -1, -3, 1], np.int8)}
    assert np.array_equal(ort_run(converted, [feeds])[0][0], ort_run(model, [feeds])[0][0])


def test_rank_from_shape_inference() -> None:
    # Hardmax-13 axis 0 reads a Relu output with no value_info: the rank comes from inference.
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Hardmax", ["r"], ["y"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [2, 3, 4])], [value_info("y", F, [2, 3, 4])], 13)
    converted = lowerer.convert(model, target_opset=11, verify=False).model
    check_model_full(converted)
    x = np.random.default_rng(2).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    assert np.array_equal(ort_run(converted, [{"x": x}])[0][0], oracle.hardmax(np.maximum(x, 0), 0, 13))


def test_select_last_in_a_function_below_9_is_refused() -> None:
    # Functions have no initializers; the index table needs an int64 Constant, which needs opset 9.
    fn = helper.make_function("custom.fn", "A", ["p"], ["o"],
                              [helper.make_node("ArgMax", ["p"], ["o"], axis=1, select_last_index=1)],
                              [helper.make_opsetid("", 12)])
    fn.value_info.extend([value_info("p", F, [2, 3])])
    model = make_model([helper.make_node("A", ["x"], ["y"], domain="custom.fn")], [value_info("x", F, [2, 3])],
                       [value_info("y", I64, [2, 1])], 12, functions=[fn], extra_opsets=[("custom.fn", 1)])
    with pytest.raises(lowerer.ConversionError, match=r"function:custom\.fn\.A.*Constant-9"):
        lowerer.convert(model, target_opset=8, verify=False)
    converted = lowerer.convert(model, target_opset=9, verify=False).model
    check_model_full(converted)
    x = np.array([[1, 3, 3], [2, 2, 0]], np.float32)
    assert np.array_equal(ort_run(converted, [{"x": x}])[0][0], oracle.argextremum("ArgMax", x, 1, 1, 1, 12))


@pytest.mark.parametrize("axes_from", ["initializer", "constant-node"])
@pytest.mark.parametrize("target", [17, 13, 12, 11, 9])
def test_reducemax_18_down_chains_converter_and_relabels(axes_from: str, target: int) -> None:
    """ReduceMax-18 (axes an input, as torch.onnx.export writes it) down to 11: onnx's converter
    does 18 -> 13 (axes to attribute) but has no adapter for the type-only 13 -> 12 -> 11; lowerer
    lets the converter take the first step and relabels the rest."""
    axes = np.array([2, 3], dtype=np.int64)
    nodes = [helper.make_node("ReduceMax", ["x", "axes"], ["y"], name="rmax", keepdims=1)]
    initializers = [numpy_helper.from_array(axes, "axes")]
    if axes_from == "constant-node":
        nodes.insert(0, helper.make_node("Constant", [], ["axes"], name="axes_c",
                                         value=numpy_helper.from_array(axes, "axes")))
        initializers = []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 1, 1])],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    converted = lowerer.convert(model, target_opset=target).model
    onnx.checker.check_model(converted, full_check=True)
    (reduce,) = [n for n in converted.graph.node if n.op_type == "ReduceMax"]
    assert [a.ints for a in reduce.attribute if a.name == "axes"] == [[2, 3]]
    x = np.random.default_rng(target).integers(-3, 4, size=(2, 3, 4, 5)).astype(np.float32)
    x[0, 0] = -np.inf
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = ort.InferenceSession(model.SerializeToString(), so).run(None, {"x": x})[0]
    got = ort.InferenceSession(converted.SerializeToString(), so).run(None, {"x": x})[0]
    assert np.array_equal(got, want)
    np.testing.assert_array_equal(got, x.max(axis=(2, 3), keepdims=True))
