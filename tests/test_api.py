"""The Python API: input kinds, the report, errors, the onnx_ir pass, the public surface."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer


def _hardmax_model(opset: int = 11, axis: int = 1) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hm", axis=axis)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _tie_heavy(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 3, shape).astype(np.float32)


def test_modelproto_in_modelproto_out_and_input_untouched() -> None:
    model = _hardmax_model()
    before = model.SerializeToString()
    result = lowerer.convert(model, target_opset=13, verify=False)
    assert isinstance(result.model, onnx.ModelProto)
    assert model.SerializeToString() == before
    x = _tie_heavy((2, 3, 4))
    assert np.array_equal(_run(model, x), _run(result.model, x))
    assert [n.op_type for n in result.model.graph.node] == ["Shape", "Flatten", "Hardmax", "Reshape"]


def test_path_in_modelproto_out(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_hardmax_model(13), path)
    result = lowerer.convert(str(path), target_opset=11, verify=False)
    assert isinstance(result.model, onnx.ModelProto)
    assert [n.op_type for n in result.model.graph.node] == ["Transpose", "Hardmax", "Transpose"]


def test_onnx_ir_in_onnx_ir_out() -> None:
    model = ir.serde.deserialize_model(_hardmax_model())
    result = lowerer.convert(model, target_opset=13, verify=False)
    assert isinstance(result.model, ir.Model)
    assert result.model.opset_imports[""] == 13
    assert model.opset_imports[""] == 11  # the given model is not modified
    x = _tie_heavy((2, 3, 4))
    assert np.array_equal(_run(_hardmax_model(), x), _run(ir.serde.serialize_model(result.model), x))


def test_lower_pass_in_an_onnx_ir_pipeline() -> None:
    model = ir.serde.deserialize_model(_hardmax_model())
    lower = lowerer.LowerPass(target_opset=13, verify=False)
    result = ir.passes.Sequential(lower)(model)
    assert result.modified
    assert result.model.opset_imports[""] == 13
    assert [n.op_type for n in result.model.graph] == ["Shape", "Flatten", "Hardmax", "Reshape"]
    assert lower.report is not None and len(lower.report) == 1
    x = _tie_heavy((2, 3, 4))
    assert np.array_equal(_run(_hardmax_model(), x), _run(ir.serde.serialize_model(result.model), x))


def test_report_records_one_rewrite_per_node() -> None:
    result = lowerer.convert(_hardmax_model(), target_opset=13, verify=False)
    (record,) = result.report.rewrites
    assert (record.node, record.op_type, record.from_version, record.to_opset) == ("hm", "Hardmax", 11, 13)
    assert record.status == "unverified"
    data = result.report.to_dict()
    assert data["summary"]["rewrites"] == 1
    assert data["rewrites"][0]["emitted"] == ["Shape", "Flatten", "Hardmax", "Reshape"]


def test_errors_are_value_errors_with_one_line() -> None:
    with pytest.raises(lowerer.ConversionError) as info:
        model = _hardmax_model(13, axis=1)
        del model.graph.input[0].type.tensor_type.shape.dim[:]
        model.graph.input[0].type.tensor_type.ClearField("shape")
        model.graph.output[0].type.tensor_type.ClearField("shape")
        lowerer.convert(model, target_opset=11, verify=False)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, lowerer.LowererError)
    message = str(info.value)
    assert "\n" not in message
    assert "'hm'" in message and "Hardmax-13" in message and "opset 11" in message and "rank" in message


def test_bad_model_kind_and_bad_target() -> None:
    with pytest.raises(lowerer.InputError, match="cannot convert a int"):
        lowerer.convert(3, target_opset=13)  # type: ignore[arg-type]
    with pytest.raises(lowerer.InputError, match="out of range"):
        lowerer.convert(_hardmax_model(), target_opset=0, verify=False)
    with pytest.raises(lowerer.InputError, match="unknown decomposition 'nope'"):
        lowerer.convert(_hardmax_model(), decompose=["nope"], verify=False)


def test_public_api_is_what_is_documented() -> None:
    assert sorted(lowerer.__all__) == sorted([
        "ConversionError", "ConvertResult", "InputError", "LowerPass", "LowererError", "Report", "Rewrite",
        "VerificationError", "__version__", "convert",
    ])
    for name in lowerer.__all__:
        assert getattr(lowerer, name) is not None
