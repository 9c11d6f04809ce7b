"""Proof of placement: the converted model opened with the backend's provider and no CPU fallback.

onnxruntime's session option ``session.disable_cpu_ep_fallback=1`` turns a node that would
silently fall back to the CPU into an error when the session is created. Opening the converted
model with only the backend's execution provider and that option proves that every node is placed
on the backend. For the CPU backend the option does not apply (onnxruntime refuses it with the CPU
provider itself); there, opening with the CPU provider alone proves every node has a CPU kernel.

Where the provider is not installed nothing can be proven here: the profile is the only
statement (``per the profile, not proven here``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnx

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

    @property
    def proven(self) -> bool:
        """Whether placement was proven."""
        return self.status == PROVEN

    def to_dict(self) -> dict[str, str]:
        """JSON-ready."""
        return {"placement": self.status, "provider": self.provider, "detail": self.detail}


def prove_placement(model: onnx.ModelProto, provider: str, data_dir: str | os.PathLike[str] | None = None,
                    available: list[str] | None = None) -> Placement:
    """Open ``model`` with ``provider`` alone and CPU fallback disabled (see the module docstring).

    Args:
        model: the converted model.
        provider: the onnxruntime execution provider of the backend.
        data_dir: the folder the model's external data locations are relative to.
        available: the providers installed (None: asked from onnxruntime).
    """
    from lowerer.verification.ort import load_onnxruntime
    from lowerer.verification.providers import CPU
    from lowerer.verification.runner import EXTERNAL_DATA_FOLDER, quiet_session_options

    ort = load_onnxruntime()
    if available is None:
        available = list(ort.get_available_providers())
    if provider not in available:
        return Placement(NOT_PROVEN, provider, f"{provider} is not installed in this onnxruntime "
                                               f"(available: {', '.join(available) or 'none'})")
    options = quiet_session_options(ort)
    if data_dir is not None:
        options.add_session_config_entry(EXTERNAL_DATA_FOLDER, os.fspath(Path(data_dir).resolve()))
    if provider == CPU:
        how = "opened with CPUExecutionProvider alone: every node has a CPU kernel"
    else:
        options.add_session_config_entry(_FALLBACK_OPTION, "1")
        how = f"opened with {provider} alone and {_FALLBACK_OPTION}=1: no node fell back to the CPU"
    try:
        ort.InferenceSession(model.SerializeToString(), options, providers=[provider])
    except Exception as e:
        text = " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")
        return Placement(FAILED, provider, f"{provider} with {_FALLBACK_OPTION}=1 refused the model: {text}"
                         if provider != CPU else f"{provider} refused the model: {text}")
    return Placement(PROVEN, provider, how)
