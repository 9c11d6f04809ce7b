"""Remedies and forms that fit the model in hand (issue 38): each checked where it is true and where it is not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError

F = TensorProto.FLOAT


def _dequantize_model(scale_shape: list[int], constant_scale: bool = True) -> onnx.ModelProto:
    """x + DequantizeLinear-13(bias int32[4], scale, zero point): the int32 bias quantize_static writes."""
    scale = np.full(scale_shape, 0.25, dtype=np.float32) if scale_shape else np.float32(0.25)
    inits = [numpy_helper.from_array(np.array([3, -7, 11, 0], dtype=np.int32), "bias"),
             numpy_helper.from_array(np.zeros(scale_shape, dtype=np.int32), "zp")]
    inputs = [helper.make_tensor_value_info("x", F, [2, 4])]
    if constant_scale:
        inits.append(numpy_helper.from_array(np.asarray(scale), "scale"))
    else:
        inputs.append(helper.make_tensor_value_info("scale", F, scale_shape))
    nodes = [helper.make_node("DequantizeLinear", ["bias", "scale", "zp"], ["b"], axis=0, name="dq"),
             helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("constant_scale", [True, False])
def test_one_element_scale_is_per_tensor(constant_scale: bool) -> None:
    # quantize_static(per_channel=False) writes the int32 bias scale as a 1-element 1-D tensor: per-tensor
    result = lowerer.convert(_dequantize_model([1], constant_scale), target_opset=11)
    onnx.checker.check_model(result.model, full_check=True)
    assert [r.status for r in result.report if r.op_type == "DequantizeLinear"] == ["verified"]


def test_per_channel_scale_still_refused() -> None:
    with pytest.raises(ConversionError, match="per-axis quantization came at 13"):
        lowerer.convert(_dequantize_model([4]), target_opset=11)


def _unknown_rank_model(dims: list[int | str]) -> onnx.ModelProto:
    """Flatten-11 with axis=-1 on a value whose rank comes from the input's data (lowerer cannot know it)."""
    nodes = [helper.make_node("Mul", ["x", "zf"], ["x0"]),
             helper.make_node("ReduceMin", ["x0"], ["m"], keepdims=1, axes=[0, 1, 2, 3]),
             helper.make_node("Reshape", ["m", "one"], ["m1"]),
             helper.make_node("Cast", ["m1"], ["mi"], to=TensorProto.INT64),
             helper.make_node("Add", ["mi", "three"], ["end"]),
             helper.make_node("Slice", ["tail", "zero", "end"], ["shape"]),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Flatten", ["r"], ["y"], axis=-1, name="flat")]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zf"),
             numpy_helper.from_array(np.array([1, -1, 40], np.int64), "tail"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([3], np.int64), "three")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, dims)],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


def test_static_shapes_advised_only_for_dynamic_inputs() -> None:
    with pytest.raises(ConversionError) as dynamic:
        lowerer.convert(_unknown_rank_model(["n", 3, 40, 40]), target_opset=10)
    assert "make the input shapes static" in str(dynamic.value)
    with pytest.raises(ConversionError) as static:
        lowerer.convert(_unknown_rank_model([1, 3, 40, 40]), target_opset=10)
    message = str(static.value)
    assert "make the input shapes static" not in message
    assert "input shapes are static already" in message and "onnxscript.optimizer.optimize" in message
    assert all("make the input shapes static" not in r["refusal"] for r in static.value.refused)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("runtime", "provider_named"), [("openvino", False), ("onnxruntime", True)])
def test_backend_line_speaks_of_the_runtime_named(runtime: str, provider_named: bool) -> None:
    from lowerer.backends.lowering import placement_line
    from lowerer.backends.proof import NOT_PROVEN

    record = {"spec": "x==1", "provider": "OpenVINOExecutionProvider", "rewritten": 0, "left": [],
              "placement": NOT_PROVEN, "placement_detail": "OpenVINOExecutionProvider is not installed",
              "loads": {"runtime": runtime}, "deployment": {"reason": "not run here"}}
    line = placement_line(record)
    assert ("OpenVINOExecutionProvider" in line) is provider_named
    assert line.endswith("deployment: not run here")
