"""lowerer.facts.reference against onnxruntime wherever onnxruntime runs the op, plus the flatten meaning by hand."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from lowerer.facts import reference

_SO = ort.SessionOptions()
_SO.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
_SO.intra_op_num_threads = 1
_SO.log_severity_level = 3

ELEM = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16, np.dtype(np.float64): T.DOUBLE,
        np.dtype(np.int32): T.INT32, np.dtype(np.int64): T.INT64, np.dtype(np.uint8): T.UINT8,
        np.dtype(np.int8): T.INT8}


def run_both(nodes: list[onnx.NodeProto], opset: int, x: np.ndarray, inits: list[onnx.TensorProto] = ()) -> tuple:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", ELEM[x.dtype], list(x.shape))],
                              [onnx.ValueInfoProto(name="y")], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    got_ort = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    consts = {t.name: numpy_helper.to_array(t) for t in inits}
    got_ref = reference.evaluate(nodes, opset, {"x": x, **consts}, ["y"])[0]
    return got_ort, got_ref


def ties(shape: tuple[int, ...], dtype: type, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(-2, 3, size=shape).astype(dtype)


@pytest.mark.parametrize(("op", "opset", "axis", "keepdims", "last", "dtype"), [
    (op, opset, axis, keepdims, last, dtype)
    for op, opset, axis, keepdims, last, dtype in itertools.product(
        ["ArgMax", "ArgMin"], [7, 11, 12, 13], [0, 2, -1], [0, 1], [0, 1], [np.float32, np.int32, np.uint8])
    if not (axis < 0 and opset < 11) and not (last and opset < 12)
])
def test_arg_extremum_matches_ort(op: str, opset: int, axis: int, keepdims: int, last: int, dtype: type) -> None:
    attrs = {"axis": axis, "keepdims": keepdims}
    if opset >= 12:
        attrs["select_last_index"] = last
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    got_ort, got_ref = run_both([node], opset, ties((2, 3, 4), dtype))
    np.testing.assert_array_equal(got_ort, got_ref)
    assert got_ref.dtype == np.int64


@pytest.mark.parametrize(("opset", "axis", "dtype"), [
    (opset, axis, dtype) for opset, axis, dtype in itertools.product(
        [7, 11, 13], [None, 0, 1, 2, -1], [np.float32, np.float16])
    if not (axis is not None and axis < 0 and opset < 11)
])
def test_hardmax_matches_ort(opset: int, axis: int | None, dtype: type) -> None:
    attrs = {} if axis is None else {"axis": axis}
    got_ort, got_ref = run_both([helper.make_node("Hardmax", ["x"], ["y"], **attrs)], opset, ties((2, 3, 4), dtype))
    np.testing.assert_array_equal(got_ort, got_ref)


@pytest.mark.parametrize(("op", "opset", "axis", "dtype"), [
    (op, opset, axis, dtype) for op, opset, axis, dtype in itertools.product(
        ["Softmax", "LogSoftmax"], [7, 11, 13], [None, 0, 1, -1], [np.float32, np.float64])
    if not (axis is not None and axis < 0 and opset < 11)
])
def test_softmax_matches_ort(op: str, opset: int, axis: int | None, dtype: type) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(dtype)
    attrs = {} if axis is None else {"axis": axis}
    got_ort, got_ref = run_both([helper.make_node(op, ["x"], ["y"], **attrs)], opset, x)
    np.testing.assert_allclose(got_ort, got_ref, rtol=1e-5, atol=1e-6)


def test_hardmax_flatten_meaning_by_hand() -> None:
    x = np.array([[[1, 5], [2, 0]], [[7, 1], [1, 9]]], dtype=np.float32)  # shape (2, 2, 2)
    # version 11, axis=1: each batch row is the flattened 2x2 block; one 1 per block.
    want11 = np.array([[[0, 1], [0, 0]], [[0, 0], [0, 1]]], dtype=np.float32)
    np.testing.assert_array_equal(reference.hardmax(x, version=11, axis=1), want11)
    # version 13, axis=1: one 1 per column of each block.
    want13 = np.array([[[0, 1], [1, 0]], [[1, 0], [0, 1]]], dtype=np.float32)
    np.testing.assert_array_equal(reference.hardmax(x, version=13, axis=1), want13)
    assert reference.hardmax(x.astype(np.float64), version=1).dtype == np.float64


def test_arg_extremum_versions() -> None:
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype=np.float32)
    np.testing.assert_array_equal(reference.arg_extremum(x, op="ArgMax", version=12, axis=1, select_last_index=1),
                                  [[2], [1]])
    np.testing.assert_array_equal(reference.arg_extremum(x, op="ArgMax", version=11, axis=1, keepdims=0,
                                                         select_last_index=1), [1, 0])  # ignored before 12
    with pytest.raises(reference.ReferenceEvalError):
        reference.arg_extremum(x, op="ArgMin", version=1, axis=-1)


def test_global_max_pool_matches_ort() -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("GlobalMaxPool", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", T.FLOAT, list(x.shape))],
                              [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    session = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, reference.global_max_pool(x))


@pytest.mark.parametrize("opset", [9, 10, 13, 18])
def test_movement_ops_match_ort(opset: int) -> None:
    x = ties((2, 3, 4), np.float32, seed=3)
    c = [numpy_helper.from_array(np.array([2, 1, 0], dtype=np.int64), "idx")]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Gather", ["t", "idx"], ["g"], axis=2),
             helper.make_node("Flatten", ["g"], ["f"], axis=1),
             helper.make_node("Shape", ["x"], ["s"])]
    if opset >= 10:
        c += [numpy_helper.from_array(np.array([-1], dtype=np.int64), n) for n in ("st", "step")]
        c += [numpy_helper.from_array(np.array([np.iinfo(np.int64).min], dtype=np.int64), "en"),
              numpy_helper.from_array(np.array([1], dtype=np.int64), "ax")]
        nodes.append(helper.make_node("Slice", ["f", "st", "en", "ax", "step"], ["sl"]))
    else:
        nodes.append(helper.make_node("Slice", ["f"], ["sl"], starts=[1], ends=[5], axes=[1]))
    nodes += [helper.make_node("ReduceMax", ["sl"], ["r"], axes=[1], keepdims=1) if opset < 18 else
              helper.make_node("ReduceMax", ["sl", "ax"], ["r"], keepdims=1),
              helper.make_node("ArgMax", ["sl"], ["am"], axis=1, keepdims=0),
              helper.make_node("Cast", ["am"], ["amf"], to=T.FLOAT),
              helper.make_node("Sub", ["r", "amf"], ["y"])]
    got_ort, got_ref = run_both(nodes, opset, x, c)
    np.testing.assert_array_equal(got_ort, got_ref)


def test_supports_names_what_is_missing() -> None:
    assert reference.supports([helper.make_node("ArgMax", ["x"], ["y"])], 13) is None
    assert "Neg" in (reference.supports([helper.make_node("Neg", ["x"], ["y"])], 13) or "")
