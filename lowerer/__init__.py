"""lowerer: convert ONNX models across opsets and lower ops, exactly, with proof.

The public API::

    import lowerer
    result = lowerer.convert("model.onnx", target_opset=11, decompose=["hardmax"])
    result.model   # an onnx.ModelProto (or an onnx_ir.Model when one was given)
    result.report  # one record per rewrite

    # whole-model check with a tolerance and steered inputs
    options = lowerer.ModelCheckOptions(tolerance=lowerer.Tolerance(rtol=1e-6), input_shapes={"ids": (1, 128)})
    lowerer.convert("model.onnx", target_opset=11, verify_model=options)

Errors are :class:`LowererError` (a ``ValueError``): :class:`InputError`,
:class:`ConversionError` and :class:`VerificationError`.
"""

from __future__ import annotations

import sys as _sys

_argv0 = (getattr(_sys, "argv", None) or [""])[0]
if _argv0 == "-m" or "lowerer" in _argv0:  # maybe the ``lowerer`` command: hold signals from this line on
    import _signal  # type: ignore[import-not-found]

    _held: list[int] = []
    _before = {s: _signal.signal(s, lambda n, f: _held.append(n)) for s in (_signal.SIGINT, _signal.SIGTERM)}
    from lowerer.core import interrupts as _interrupts

    _interrupts.take_over(_before, _held)

from typing import TYPE_CHECKING, Any  # noqa: E402

from lowerer._version import __version__  # noqa: E402
from lowerer.core.errors import (  # noqa: E402
    ConversionError,
    InputError,
    LowererError,
    VerificationError,
)

if TYPE_CHECKING:
    from lowerer.api import ConvertResult, convert
    from lowerer.core.progress import Progress
    from lowerer.core.report import Report, Rewrite
    from lowerer.ir_pass import LowerPass
    from lowerer.verification.compare import Tolerance
    from lowerer.verification.whole import ModelCheckOptions

__all__ = [
    "ConversionError",
    "ConvertResult",
    "InputError",
    "LowerPass",
    "LowererError",
    "ModelCheckOptions",
    "Progress",
    "Report",
    "Rewrite",
    "Tolerance",
    "VerificationError",
    "__version__",
    "convert",
]

_LAZY = {
    "convert": "lowerer.api",
    "ConvertResult": "lowerer.api",
    "Report": "lowerer.core.report",
    "Rewrite": "lowerer.core.report",
    "LowerPass": "lowerer.ir_pass",
    "ModelCheckOptions": "lowerer.verification.whole",
    "Progress": "lowerer.core.progress",
    "Tolerance": "lowerer.verification.compare",
}


def __getattr__(name: str) -> Any:
    """Import the heavy parts (onnx, onnxruntime) only when they are used."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lowerer' has no attribute {name!r}")
    import importlib

    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name in ("onnx_ir", "onnxscript"):
            raise ImportError(f"lowerer.{name} needs {e.name.replace('_', '-')}: pip install 'lowerer[ir]'") from e
        raise
    value = getattr(imported, name)
    globals()[name] = value
    return value
