"""onnxruntime-qnn (``--for qnn``): the forms lowerer writes for it, and its witness.

CPU only: HardSwish's body is written ``Mul(HardSigmoid(X), X)`` (onnx's own order, ``Mul(X, hs)``
with the HardSigmoid named, is computed as ``X * X`` by onnxruntime-qnn 2.7). Where onnxruntime-qnn
is installed (lowerer's Python or ``LOWERER_WITNESS_PYTHON``; skipped otherwise): the written body and
``mobilenet_v3_small`` at ``--target-opset 13`` run on its HTP simulator and match onnxruntime CPU on
the original within the fp16 budget.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.backends.probe_models import LOWERED
from lowerer.backends.witnesses import find_witness

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real"


def _hardswish(opset: int = 14) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    graph = helper.make_graph([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("backend", [None, "qnn==2.7"])
def test_hardswish_body_is_written_hardsigmoid_first(backend: str | None) -> None:
    """Below opset 14 HardSwish is Mul(HardSigmoid(X), X): the HardSigmoid's output is the Mul's first operand."""
    result = lowerer.convert(_hardswish(), target_opset=13, for_backend=backend)
    nodes = list(result.model.graph.node)
    assert [n.op_type for n in nodes] == ["HardSigmoid", "Mul"]
    hs, mul = nodes
    assert list(mul.input) == [hs.output[0], "x"] and list(mul.output) == ["y"]
    assert hs.name  # named (the trigger on onnxruntime-qnn is the operand order, not the name alone)


def _qnn_or_skip() -> None:
    witness, why = find_witness("onnxruntime-qnn")
    if witness is None:
        pytest.skip(f"onnxruntime-qnn is not installed here: {why}")


def _converted(source: object, **options: object) -> lowerer.ConvertResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lowerer.convert(source, for_backend="qnn==2.7", **options)  # type: ignore[arg-type]


def test_written_hardswish_body_runs_right_on_qnn() -> None:
    _qnn_or_skip()
    model, _ = LOWERED["HardSwish-14"][0]()
    deployment = _converted(model, target_opset=13).report.backend["deployment"]
    assert deployment["status"] == "equal", deployment


def test_mobilenet_v3_at_opset_13_runs_right_on_qnn() -> None:
    """Every logit was off (x * x) with onnx's operand order; the deployment check runs it on the HTP."""
    _qnn_or_skip()
    source = REAL / "mobilenet_v3_small.legacy.opset17.onnx"
    deployment = _converted(source, target_opset=13).report.backend["deployment"]
    assert deployment["status"] == "equal", deployment
    assert "CPU fallback" in deployment["reason"]
