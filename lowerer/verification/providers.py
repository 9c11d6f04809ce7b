"""Which onnxruntime execution providers verification runs on, and where ORT put the nodes."""

from __future__ import annotations

from collections.abc import Sequence

from lowerer.errors import InputError

__all__ = ["CPU", "CUDA", "DML", "PREFERENCE", "available_providers", "select_providers"]

CUDA = "CUDAExecutionProvider"
DML = "DmlExecutionProvider"
CPU = "CPUExecutionProvider"

#: The default choice, best first.
PREFERENCE = (CUDA, DML, CPU)

_SHORT = {"cuda": CUDA, "dml": DML, "directml": DML, "cpu": CPU}


def available_providers() -> list[str]:
    """The execution providers the installed onnxruntime offers (imports onnxruntime, telemetry off)."""
    from lowerer.verification.ort import load_onnxruntime

    onnxruntime = load_onnxruntime()
    return list(onnxruntime.get_available_providers())


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
            if name in available:
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
        if full not in chosen:
            chosen.append(full)
    if not chosen:
        raise InputError(f"no execution provider given (available here: {offered})")
    return chosen
