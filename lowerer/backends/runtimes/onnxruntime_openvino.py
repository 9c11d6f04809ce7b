"""onnxruntime-openvino: onnxruntime with ``OpenVINOExecutionProvider`` (device CPU, FP32), the CPU provider after it.

As users run it: what the provider refuses runs on onnxruntime's CPU provider. Its version is
onnxruntime's; the release it stands for is the OpenVINO its wheel bundles (``RELEASE``), read from its
``libopenvino_c.so`` by ``ov_get_openvino_version``: ``2025.4.1`` in onnxruntime-openvino 1.24.1.
Loaded by path in the witness worker: imports only the standard library, numpy and onnxruntime.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

NAME = "onnxruntime-openvino"
LABEL = "onnxruntime-openvino"
DEVICE = "OpenVINOExecutionProvider (CPU)"
DISTRIBUTION = "onnxruntime-openvino"
INSTALL = "pip install onnxruntime-openvino"
BACKENDS = ("openvino",)
PRIORITY = 1
BUDGET = 1e-5
BUDGET_SOURCE = "the probe budget (OpenVINO's CPU plugin at fp32)"
RELEASE = "openvino"
_PROVIDER = "OpenVINOExecutionProvider"


def version(param: str) -> dict[str, str]:
    """onnxruntime-openvino's version and the OpenVINO release it bundles (ImportError: not installed)."""
    from importlib import metadata

    ort = importlib.import_module("onnxruntime")
    if _PROVIDER not in ort.get_available_providers():
        raise ImportError(f"{_PROVIDER} is not available in this onnxruntime")
    return {"version": metadata.version(DISTRIBUTION), RELEASE: bundled_openvino()}


def bundled_openvino() -> str:
    """The OpenVINO release inside onnxruntime-openvino: ``ov_get_openvino_version`` of its libopenvino_c.

    The wheel ships ``onnxruntime/capi/libopenvino_c.so`` (and no ``openvino`` package); its build number
    reads ``2025.4.1-0-test`` in onnxruntime-openvino 1.24.1, of which the release is the part before ``-``.
    """
    import ctypes
    import glob

    ort = importlib.import_module("onnxruntime")
    capi = os.path.join(os.path.dirname(str(ort.__file__)), "capi")
    found = sorted(glob.glob(os.path.join(capi, "libopenvino_c.so*")))
    if not found:
        raise ImportError(f"no libopenvino_c.so in {capi}")

    class _Version(ctypes.Structure):
        _fields_ = [("buildNumber", ctypes.c_char_p), ("description", ctypes.c_char_p)]

    found_version = _Version()
    if ctypes.CDLL(found[0]).ov_get_openvino_version(ctypes.byref(found_version)) != 0:
        raise ImportError("ov_get_openvino_version failed")
    return str((found_version.buildNumber or b"").decode()).split("-", 1)[0]


def load(model: str, param: str) -> Any:
    """The model's path (onnxruntime reads it when it builds the session)."""
    return model


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """A session on the OpenVINO provider (CPU, FP32), the CPU provider taking what it refuses."""
    ort = importlib.import_module("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(loaded, options, providers=[_PROVIDER, "CPUExecutionProvider"],
                                provider_options=[{"device_type": "CPU", "precision": "FP32"}, {}])


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run."""
    return list(prepared.run(names, feeds))
