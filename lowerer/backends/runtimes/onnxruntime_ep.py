"""onnxruntime with one named execution provider (``onnxruntime:CUDAExecutionProvider``), the CPU provider after it.

A witness of no profile by itself (onnxruntime is what lowerer verifies on): the probe suite runs on it
(``--runtime onnxruntime:CPUExecutionProvider``) and tests use it as a witness that is always there.
Loaded by path in the witness worker: imports only the standard library, numpy and onnxruntime.
"""

from __future__ import annotations

import importlib
from typing import Any

NAME = "onnxruntime"
LABEL = "onnxruntime"
DEVICE = "{param}"
DISTRIBUTION = "onnxruntime"
INSTALL = "pip install onnxruntime"
BACKENDS: tuple[str, ...] = ()
PRIORITY = 9
BUDGET = 1e-5
BUDGET_SOURCE = "the probe budget"


def version(param: str) -> dict[str, str]:
    """The version of onnxruntime, where the provider ``param`` is available (ImportError: not)."""
    ort = importlib.import_module("onnxruntime")
    if param not in ort.get_available_providers():
        raise ImportError(f"{param} is not available in this onnxruntime")
    return {"version": str(ort.__version__)}


def load(model: str, param: str) -> Any:
    """The model's path and the provider (onnxruntime reads the model when it builds the session)."""
    return model, param


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """An inference session on the provider, the CPU provider taking what it refuses."""
    ort = importlib.import_module("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    model, provider = loaded
    return ort.InferenceSession(model, options, providers=[provider, "CPUExecutionProvider"])


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run."""
    return list(prepared.run(names, feeds))
