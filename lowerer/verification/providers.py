"""Which onnxruntime execution providers verification runs on, and where ORT put the nodes."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from lowerer.core.errors import InputError

__all__ = ["CPU", "CUDA", "CUDA_CHECK_OPTIONS", "DML", "PREFERENCE", "TF32_ENV", "available_providers", "cuda_settings",
           "provider_problem", "select_providers", "session_providers", "usable"]

logger = logging.getLogger(__name__)

CUDA = "CUDAExecutionProvider"
DML = "DmlExecutionProvider"
CPU = "CPUExecutionProvider"

#: The default choice, best first.
PREFERENCE = (CUDA, DML, CPU)

_SHORT = {"cuda": CUDA, "dml": DML, "directml": DML, "cpu": CPU}

#: The CUDA provider options of every session lowerer opens: float32 MatMul/Gemm/Conv without TF32
#: (onnxruntime's ``use_tf32`` defaults to 1: about 10 mantissa bits, which turns an expansion's 1-ulp
#: change into 1e-3), and cuDNN's fixed default convolution algorithm rather than an exhaustive search
#: whose pick varies from run to run (``cudnn_conv_algo_search``, onnxruntime's
#: ``onnxruntime/core/providers/cuda/cuda_execution_provider_info.cc``).
CUDA_CHECK_OPTIONS = {"use_tf32": "0", "cudnn_conv_algo_search": "DEFAULT"}
#: cuDNN's frontend ignores ``use_tf32=0`` (onnxruntime PR #19470); CUDA's own switch, read when CUDA
#: starts in the process, turns TF32 off everywhere (onnxruntime issue #19288).
TF32_ENV = "NVIDIA_TF32_OVERRIDE"


def session_providers(providers: Sequence[str],
                      env: dict[str, str] | None = None) -> list[str | tuple[str, dict[str, str]]]:
    """``providers`` as onnxruntime's ``providers=`` argument, CUDA with :data:`CUDA_CHECK_OPTIONS`.

    With CUDA among them, ``NVIDIA_TF32_OVERRIDE=0`` is set in the process's environment (``env``:
    os.environ when None) before the session starts CUDA, unless it is set already (the user's choice
    wins, and is recorded in the verification summary).
    """
    out: list[str | tuple[str, dict[str, str]]] = []
    for p in providers:
        if p == CUDA:
            (os.environ if env is None else env).setdefault(TF32_ENV, "0")
            out.append((p, dict(CUDA_CHECK_OPTIONS)))
        else:
            out.append(p)
    return out


def cuda_settings(providers: Sequence[str]) -> dict[str, Any] | None:
    """What the CUDA sessions of a check run with (for the report), or None without CUDA."""
    if CUDA not in providers:
        return None
    return {"provider_options": dict(CUDA_CHECK_OPTIONS), TF32_ENV: os.environ.get(TF32_ENV)}


def available_providers() -> list[str]:
    """The execution providers the installed onnxruntime offers (imports onnxruntime, telemetry off)."""
    from lowerer.verification.ort import load_onnxruntime

    onnxruntime = load_onnxruntime()
    return list(onnxruntime.get_available_providers())


def provider_problem(provider: str) -> str | None:
    """Why ``provider``, listed by onnxruntime, cannot run here (None: it can); see :mod:`.provider_probe`."""
    from lowerer.verification.provider_probe import provider_problem as probe

    return probe(provider)


_WARNED: set[str] = set()


def usable(provider: str) -> bool:
    """Whether ``provider`` can run here; the first time one cannot, one warning line says why."""
    why = provider_problem(provider)
    if why is not None and provider not in _WARNED:
        _WARNED.add(provider)
        logger.warning("%s is listed by onnxruntime %s but cannot run here (%s); it is not used", provider,
                       _ort_version(), why)
    return why is None


def _ort_version() -> str:
    from lowerer.verification.ort import load_onnxruntime

    return str(load_onnxruntime().__version__)


def _resolve(name: str) -> str | None:
    key = name.strip()
    if key.lower() in _SHORT:
        return _SHORT[key.lower()]
    for full in (*PREFERENCE, *available_providers()):
        if key.lower() == full.lower():
            return full
    return None


def select_providers(requested: Sequence[str] | None = None) -> list[str]:
    """The provider list to give onnxruntime sessions, the one checks run on first.

    Args:
        requested: short names (``cuda``, ``dml``, ``cpu``) or full names, in priority order;
            None picks CUDA, then DirectML, then CPU, whichever is available.

    Returns:
        Full provider names; onnxruntime places a node on the first that has a kernel for it.

    Raises:
        InputError: a name is unknown or its provider is not available here.
    """
    available = available_providers()
    offered = ", ".join(p for p in available if p in PREFERENCE or p.endswith("ExecutionProvider")) or "none"
    if requested is None:
        for name in PREFERENCE:
            if name in available and (name == CPU or usable(name)):
                return [name] if name == CPU else [name, CPU]
        raise InputError(f"onnxruntime offers none of CUDA, DirectML, CPU (available: {offered})")
    chosen: list[str] = []
    for item in requested:
        if not item.strip():
            continue
        full = _resolve(item)
        if full is None:
            raise InputError(f"unknown execution provider {item!r}; use cuda, dml, cpu or a full name "
                             f"(available here: {offered})")
        if full not in available:
            raise InputError(f"execution provider {item!r} ({full}) is not available in this onnxruntime "
                             f"(available here: {offered})")
        why = None if full == CPU else provider_problem(full)
        if why is not None:
            raise InputError(f"execution provider {item!r} ({full}) is listed by onnxruntime {_ort_version()} but "
                             f"cannot run here: {why}")
        if full not in chosen:
            chosen.append(full)
    if not chosen:
        raise InputError(f"no execution provider given (available here: {offered})")
    return chosen
