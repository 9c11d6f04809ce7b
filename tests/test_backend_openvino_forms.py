"""OpenVINO 2023.0's IsNaN: written as Not(Equal(x, x)) there (its CPU plugin fails to compile the IsNaN of a
transformer's attention mask, measured), exact on NaN, ±inf and ±0; left as it is for the newer releases."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import lowerer


def _isnan(opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, ["n", 8])
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("IsNaN", ["s"], ["y"], name="nan")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def test_isnan_becomes_equal_and_not_for_openvino_2023() -> None:
    model = _isnan()
    out = lowerer.convert(model, for_backend="openvino==2023.0").model
    assert [n.op_type for n in out.graph.node] == ["Softmax", "Equal", "Not"]
    x = np.array([[np.nan, 1, np.inf, -np.inf, 0, -0.0, np.nan, 3], [1e30, -1e30, 0, 0, 1, 2, 3, 4]], np.float32)
    want, got = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                 for m in (model, out))
    assert want.dtype == got.dtype and np.array_equal(want, got)


def test_isnan_stays_for_newer_openvino() -> None:
    out = lowerer.convert(_isnan(), for_backend="openvino==2024.0", verify=False).model
    assert "IsNaN" in [n.op_type for n in out.graph.node]
