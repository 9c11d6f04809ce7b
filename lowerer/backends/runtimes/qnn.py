"""onnxruntime-qnn: Qualcomm's QNN execution provider as an onnxruntime plugin, on its HTP simulator, fp16.

The plugin (``onnxruntime_qnn.get_library_path()``) is registered with
``register_execution_provider_library`` and its devices added with ``backend_type=htp``,
``enable_htp_fp16_precision=1`` and ``soc_model=60`` (the HTP simulator on x86 Linux); the CPU provider
takes nothing (``session.disable_cpu_ep_fallback=1``): what QNN cannot take fails to compile, so a
run says what QNN itself computes. Versioned as the plugin (2.7.0), not as onnxruntime. Loaded by path in
the witness worker: imports only the standard library, numpy, onnxruntime and onnxruntime_qnn.
"""

from __future__ import annotations

import importlib
from typing import Any

NAME = "onnxruntime-qnn"
LABEL = "onnxruntime-qnn"
DEVICE = "QNNExecutionProvider (HTP simulator, fp16)"
DISTRIBUTION = "onnxruntime-qnn"
INSTALL = "pip install onnxruntime-qnn"
BACKENDS = ("qnn",)
BUDGET = 1e-2
BUDGET_SOURCE = ("the HTP computes in float16 (provider option enable_htp_fp16_precision=1): float16's unit "
                 "roundoff is 2^-11 (4.9e-4), 1e-2 x scale allows about 20 of them, as for rknn-toolkit2")
_PROVIDER = "QNNExecutionProvider"
_OPTIONS = {"backend_type": "htp", "enable_htp_fp16_precision": "1", "soc_model": "60"}


def version(param: str) -> dict[str, str]:
    """The plugin's version (ImportError: not installed)."""
    from importlib import metadata

    importlib.import_module("onnxruntime_qnn")
    return {"version": metadata.version(DISTRIBUTION)}


def load(model: str, param: str) -> Any:
    """The model's path (onnxruntime reads it when it builds the session)."""
    return model


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """A session whose every node runs on QNN's HTP (no CPU fallback)."""
    ort = importlib.import_module("onnxruntime")
    plugin = importlib.import_module("onnxruntime_qnn")
    if not any(d.ep_name == _PROVIDER for d in ort.get_ep_devices()):
        ort.register_execution_provider_library(_PROVIDER, plugin.get_library_path())
    devices = [d for d in ort.get_ep_devices() if d.ep_name == _PROVIDER]
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_provider_for_devices(devices, dict(_OPTIONS))
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return ort.InferenceSession(loaded, options)


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run."""
    return list(prepared.run(names, feeds))
