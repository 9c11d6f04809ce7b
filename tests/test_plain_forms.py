"""Expanded bodies in forms every runtime reads alike: ConstantOfShape's value written, no empty Split part."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import lowerer

REAL = Path(__file__).parent / "fixtures" / "real"


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _empty_parts(model: onnx.ModelProto) -> list[str]:
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    consts |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in model.graph.node
               if n.op_type == "Constant" and n.attribute[0].name == "value"}
    return [n.name for n in model.graph.node if n.op_type == "Split" and len(n.input) > 1
            and n.input[1] in consts and 0 in consts[n.input[1]].reshape(-1).tolist()]


def test_decoder_bodies_have_explicit_values_and_no_empty_split_parts() -> None:
    path = REAL / "decoder.dynamo.opset23.onnx"
    data = np.load(REAL / "decoder.inputs.npz")
    feeds = {k: data[k] for k in data.files}
    original = onnx.load(path)
    assert _empty_parts(original) == []  # the empty parts come from RotaryEmbedding's body, not the export
    for target in (13, 11):
        converted = lowerer.convert(str(path), target_opset=target, verify_model=True).model
        constant_of_shape = [n for n in converted.graph.node if n.op_type == "ConstantOfShape"]
        assert constant_of_shape and all(any(a.name == "value" for a in n.attribute) for n in constant_of_shape)
        assert _empty_parts(converted) == []
        assert not {"If", "Loop"} & {n.op_type for n in converted.graph.node}  # Reshape-14's allowzero, static
        assert not [n for n in converted.graph.node if n.op_type == "Split" and
                    any(a.name == "split" and 0 in list(a.ints) for a in n.attribute)]
        for a, b in zip(_run(original, feeds), _run(converted, feeds), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_full_rotation_has_no_empty_part() -> None:
    # RotaryEmbedding rotating the whole head: its body splits off an empty "rest" part, dropped with its Concat.
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 3, 8])
    pos = helper.make_tensor_value_info("p", onnx.TensorProto.INT64, [1, 3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 2, 3, 8])
    rng = np.random.default_rng(0)
    cos = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "cos")
    sin = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "sin")
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "p"], ["y"], rotary_embedding_dim=8)
    model = helper.make_model(helper.make_graph([node], "g", [x, pos], [y], [cos, sin]),
                              opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    converted = lowerer.convert(model, target_opset=13).model
    assert _empty_parts(converted) == []
    feeds = {"x": rng.standard_normal((1, 2, 3, 8)).astype(np.float32), "p": np.array([[0, 3, 1]], np.int64)}
    np.testing.assert_allclose(_run(model, feeds)[0], _run(converted, feeds)[0], rtol=1e-6, atol=1e-6)


def test_reshape_allowzero_on_a_run_time_shape_has_no_if() -> None:
    # Reshape-14 allowzero=1 with a shape only known at run time: 14 -> 13 without control flow, exact on 0s.
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["a", "b", "c"])
    shape = helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["p", "q", "r"])
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1, name="view")
    model = helper.make_model(helper.make_graph([node], "g", [x, shape], [y]),
                              opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    converted = lowerer.convert(model, target_opset=13).model
    assert not {"If", "Loop"} & {n.op_type for n in converted.graph.node}
    rng = np.random.default_rng(1)
    for dims, target in [((2, 3, 4), [4, -1, 2]), ((2, 3, 4), [24, 1, 1]), ((0, 5, 1), [5, 0, 2]),
                         ((0, 3, 1), [0, 3, 0]), ((4, 0, 1), [0, 0, 7]), ((2, 0, 2), [2, 2, 0])]:
        feeds = {"x": rng.standard_normal(dims).astype(np.float32), "s": np.array(target, np.int64)}
        (want,), (got,) = _run(model, feeds), _run(converted, feeds)
        assert want.shape == got.shape and np.array_equal(want, got), (dims, target, want.shape, got.shape)
