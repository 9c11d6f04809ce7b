"""The text every ``lowerer`` help page ends with: examples and the exit codes."""

from __future__ import annotations

__all__ = ["EPILOG"]

#: Shown after the options of ``lowerer --help`` and of each command's help.
EPILOG = """\b
Examples:
  lowerer convert model.onnx -o model-11.onnx --target-opset 11
  lowerer convert model.onnx -o lowered.onnx --decompose hardmax,globalmaxpool
  lowerer convert model.onnx -o out.onnx --target-opset 13 --report report.json
  lowerer convert model.onnx -o model-cuda.onnx --for cuda
  lowerer inspect model.onnx --target-opset 11
  lowerer inspect model.onnx --for coreml
  lowerer verify original.onnx converted.onnx --rtol 1e-6 --input-shapes ids:1x128

\b
Exit codes: 0 success, 1 verification failed (or a check asked for could not run),
2 bad input or usage, 3 internal error, 130 interrupted, 141 output pipe closed.
"""
