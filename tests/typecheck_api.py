"""Static checks of the API's types: run by mypy (``.ci/run``), not by pytest.

``convert`` returns the kind of model it was given: ``ModelProto`` for a ModelProto or a path,
``onnx_ir.Model`` for an ``onnx_ir.Model`` or an object holding one (``torch.onnx.ONNXProgram``).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx_ir as ir
from typing_extensions import assert_type

import lowerer
from lowerer.core.report import Rewrite


class Program:
    """Like torch.onnx.ONNXProgram."""

    @property
    def model(self) -> ir.Model:
        return ir.Model(ir.Graph([], [], nodes=[]), ir_version=10)


def check(proto: onnx.ModelProto, model: ir.Model) -> None:
    assert_type(lowerer.convert(proto).model, onnx.ModelProto)
    assert_type(lowerer.convert("m.onnx").model, onnx.ModelProto)
    assert_type(lowerer.convert(Path("m.onnx")).model, onnx.ModelProto)
    assert_type(lowerer.convert(model).model, ir.Model)
    assert_type(lowerer.convert(Program()).model, ir.Model)
    for rewrite in lowerer.convert(proto).report:
        assert_type(rewrite, Rewrite)
    options = lowerer.ModelCheckOptions(tolerance=lowerer.Tolerance(rtol=1e-6), input_shapes={"ids": (1, 128)})
    lowerer.convert(proto, verify_model=options, optimize=True, progress=lambda p: print(p.describe()))
