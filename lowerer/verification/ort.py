"""Importing onnxruntime, with its telemetry off unless the user opts in.

onnxruntime 1.2x+ records telemetry events (process info, session creations, error texts that
name nodes and ops, the interpreter's path) in a database under the user's home
(``~/.cache/Microsoft/DeveloperTools/.onnxruntime/``) as soon as it is imported. lowerer imports
onnxruntime only through :func:`load_onnxruntime`, which first sets ``ORT_DISABLE_TELEMETRY=1``
in the environment (unless it is set already: the user's own choice wins) and then calls
``onnxruntime.disable_telemetry_events()``. Setting ``LOWERER_ORT_TELEMETRY=1`` leaves
onnxruntime's telemetry as onnxruntime has it.
"""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["OPT_IN", "load_onnxruntime"]

#: The environment variable that, set to ``1``, leaves onnxruntime's telemetry on.
OPT_IN = "LOWERER_ORT_TELEMETRY"


def load_onnxruntime() -> ModuleType:
    """The ``onnxruntime`` module, imported with telemetry off (see the module's docstring)."""
    opted_in = os.environ.get(OPT_IN, "") == "1"
    if not opted_in:
        os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    import onnxruntime

    if not opted_in:
        disable = getattr(onnxruntime, "disable_telemetry_events", None)
        if disable is not None:
            disable()
    module: ModuleType = onnxruntime
    return module
