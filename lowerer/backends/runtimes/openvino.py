"""OpenVINO: its ONNX frontend and CPU plugin, inference precision fp32.

``INFERENCE_PRECISION_HINT=f32``: the CPU plugin may otherwise compute in bf16 where the processor has
it. Loaded by path in the witness worker: imports only the standard library, numpy and openvino.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

NAME = "openvino"
LABEL = "OpenVINO"
DEVICE = "CPU"
DISTRIBUTION = "openvino"
INSTALL = "pip install openvino"
BACKENDS = ("openvino",)
PRIORITY = 0
BUDGET = 1e-5
BUDGET_SOURCE = ("the probe budget; worst measured on OpenVINO 2026.4.1 CPU fp32 over the 29 real fixtures: "
                 "8.3e-7 x scale")
NONFINITE = (
    ("Relu", "OpenVINO's CPU Relu gives 0 for a NaN input where onnxruntime gives NaN (a ±inf input makes NaN in a "
             "Conv before it: inf - inf)",
     "measured on OpenVINO 2026.4.1 CPU (2026-11-28): Relu-6 float32 [inf, -inf, 1, -1, nan, 0] gives "
     "[inf, 0, 1, 0, 0, 0], onnxruntime 1.32.0 CPU [inf, 0, 1, 0, nan, 0]; examples/example_opset11.onnx's inf set "
     "departs first at its Relu-6"),
    ("Softmax", "OpenVINO's CPU Softmax of a row holding +inf gives NaN at the +inf positions and 0 elsewhere, "
                "where onnxruntime gives NaN for the whole row (exp(inf - inf))",
     "measured on OpenVINO 2026.4.1 CPU (2026-11-28): Softmax-11 (axis 1) and Softmax-13 of float32 "
     "[[inf, 1, 2], [inf, inf, 0]] give [[nan, 0, 0], [nan, nan, 0]], onnxruntime 1.32.0 CPU all NaN"),
)


def version(param: str) -> dict[str, str]:
    """The installed OpenVINO's version (ImportError: none)."""
    from importlib import metadata

    return {"version": metadata.version("openvino")}


@functools.lru_cache(maxsize=1)
def _core() -> Any:
    try:
        return importlib.import_module("openvino").Core()
    except (ImportError, AttributeError):  # 2023.0: the API is in openvino.runtime
        return importlib.import_module("openvino.runtime").Core()


def load(model: str, param: str) -> Any:
    """The model read by OpenVINO's ONNX frontend."""
    return _core().read_model(model)


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """The model compiled for the CPU plugin at fp32, with ``names`` added as outputs."""
    if names:
        loaded.add_outputs([n for n in names if not any(n in p.get_names() for p in loaded.outputs)])
    compiled = _core().compile_model(loaded, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    wanted = names or [str(p.get_any_name()) for p in loaded.outputs]
    return compiled, compiled.create_infer_request(), wanted


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run; the outputs wanted, copied."""
    import numpy as np

    compiled, request, wanted = prepared
    results = request.infer({compiled.input(n): v for n, v in feeds.items()})
    return [np.array(results[compiled.output(n)], copy=True) for n in wanted]
