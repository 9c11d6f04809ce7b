"""Proof of placement: where onnxruntime puts each node of the converted model, and why any is on the CPU.

For a provider other than the CPU, the converted model is opened with that provider and the CPU
(graph optimizations at the basic level, as placement happens after them), onnxruntime records
where each node went (``session.record_ep_graph_assignment_info=1``, onnxruntime >= 1.24.1), and
each node on the CPU is classed (:mod:`lowerer.backends.placement`): no kernel of the provider,
a kernel that refuses it (the profile's entries), or onnxruntime's own preference for shape
computation. Placement is proven when only the last class is on the CPU; the report lists those
nodes. (``session.disable_cpu_ep_fallback=1``, used before, refuses every model with a shape
subgraph: 26 of 35 real exports on CUDA.) An onnxruntime older than 1.24.1 cannot say where nodes
went: there the strict option is the proof.

For the CPU provider, opening the model with the CPU provider alone proves every node has a CPU
kernel in the installed onnxruntime.

Where the provider is not installed, or listed but unable to run here (onnxruntime-gpu without
CUDA's libraries or a GPU), nothing is run: the provider's kernel table of the installed release
says which nodes it has no kernel for, stated as the table's (``per the profile, not proven here``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from lowerer.backends.placement import Classified, assigned_nodes, classify, record_option

__all__ = ["NOT_PROVEN", "PROVEN", "Placement", "prove_placement"]

#: The report's words (``report.backend["placement"]``).
PROVEN = "placement proven"
NOT_PROVEN = "per the profile, not proven here"
FAILED = "placement not proven"

_FALLBACK_OPTION = "session.disable_cpu_ep_fallback"


@dataclass(frozen=True)
class Placement:
    """The outcome of the proof: one of :data:`PROVEN`, :data:`NOT_PROVEN`, :data:`FAILED`, and how."""

    status: str
    provider: str
    detail: str
    #: The CPU-placed nodes by class (None: not classed).
    classes: Classified | None = None

    @property
    def proven(self) -> bool:
        """Whether placement was proven."""
        return self.status == PROVEN

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        out: dict[str, Any] = {"placement": self.status, "provider": self.provider, "detail": self.detail}
        if self.classes is not None:
            out["classes"] = self.classes.to_dict()
        return out


def prove_placement(model: onnx.ModelProto, provider: str, data_dir: str | os.PathLike[str] | None = None,
                    available: list[str] | None = None, rejected: dict[str, str] | None = None) -> Placement:
    """Open ``model`` with ``provider`` and class every node onnxruntime puts on the CPU (see the module docstring).

    Args:
        model: the converted model.
        provider: the onnxruntime execution provider of the backend.
        data_dir: the folder the model's external data locations are relative to.
        available: the providers installed (None: asked from onnxruntime).
        rejected: node name -> why, for nodes the backend's profile names (kept with --allow-fallback).
    """
    from lowerer.backends.installed_kernels import installed_kernels
    from lowerer.verification.ort import load_onnxruntime
    from lowerer.verification.providers import CPU, provider_problem

    ort = load_onnxruntime()
    if available is None:
        available = list(ort.get_available_providers())
    if provider == CPU:
        return _open_cpu(ort, model, data_dir)
    why_not = (f"{provider} is not installed in this onnxruntime (available: {', '.join(available) or 'none'})"
               if provider not in available else provider_problem(provider))
    kernels = installed_kernels(provider, warn=why_not is None)  # not installed: the placement line says it once
    rows = None if kernels is None else kernels.rows
    if why_not is not None:
        if kernels is None:
            return Placement(NOT_PROVEN, provider, f"{why_not}; no {provider} kernel table of this onnxruntime "
                                                   "release is known: nothing is stated about placement")
        classes = classify(model, None, provider, rows, rejected or {})
        return Placement(NOT_PROVEN, provider, f"{why_not}; per {kernels.source}, not run here: "
                                               f"{classes.describe()}", classes)
    options = _options(ort, data_dir)
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    record_option(options)
    from lowerer.verification.providers import session_providers

    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=session_providers([provider, CPU]))
    except Exception as e:
        return Placement(FAILED, provider, f"{provider} refused the model: {_text(e)}")
    placed = assigned_nodes(session)
    if placed is None:  # onnxruntime < 1.24.1: it cannot say where nodes went
        return _open_strict(ort, model, provider, data_dir)
    classes = classify(model, placed, provider, rows, rejected or {})
    source = f"; kernels per {kernels.source}" if kernels is not None else ""
    if classes.proven:
        return Placement(PROVEN, provider, f"opened with {provider}: {classes.describe()}{source}", classes)
    return Placement(FAILED, provider, f"opened with {provider}: {classes.describe()}{source}", classes)


def _options(ort: Any, data_dir: str | os.PathLike[str] | None) -> Any:
    from lowerer.verification.runner import EXTERNAL_DATA_FOLDER, quiet_session_options

    options = quiet_session_options(ort)
    if data_dir is not None:
        options.add_session_config_entry(EXTERNAL_DATA_FOLDER, os.fspath(Path(data_dir).resolve()))
    return options


def _text(e: BaseException) -> str:
    return " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")


def _open_cpu(ort: Any, model: onnx.ModelProto, data_dir: str | os.PathLike[str] | None) -> Placement:
    provider = "CPUExecutionProvider"
    try:
        ort.InferenceSession(model.SerializeToString(), _options(ort, data_dir), providers=[provider])
    except Exception as e:
        return Placement(FAILED, provider, f"{provider} refused the model: {_text(e)}")
    return Placement(PROVEN, provider, "opened with CPUExecutionProvider alone: every node has a CPU kernel")


def _open_strict(ort: Any, model: onnx.ModelProto, provider: str,
                 data_dir: str | os.PathLike[str] | None) -> Placement:
    from lowerer.verification.providers import session_providers

    options = _options(ort, data_dir)
    options.add_session_config_entry(_FALLBACK_OPTION, "1")
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=session_providers([provider]))
    except Exception as e:
        return Placement(FAILED, provider, f"{provider} with {_FALLBACK_OPTION}=1 refused the model (onnxruntime "
                                           f"{ort.__version__} cannot say where nodes went): {_text(e)}")
    return Placement(PROVEN, provider, f"opened with {provider} alone and {_FALLBACK_OPTION}=1: no node fell back "
                                       "to the CPU")
