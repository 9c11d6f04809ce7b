"""Opset facts: supported range, schema since-versions, and the IR version to write."""

from __future__ import annotations

import functools

import onnx
import onnx.defs

__all__ = [
    "DEFAULT_DOMAINS",
    "MAX_IR_VERSION",
    "MAX_OPSET",
    "MIN_OPSET",
    "check_target_opset",
    "default_opset",
    "is_default_domain",
    "since_version",
]

#: The names the default ONNX operator domain goes by.
DEFAULT_DOMAINS = ("", "ai.onnx")
MIN_OPSET = 1
#: The newest default-domain opset the installed onnx knows.
MAX_OPSET = onnx.defs.onnx_opset_version()
#: The newest IR version lowerer writes (the newest that onnxruntime 1.31+ loads).
MAX_IR_VERSION = 13


def is_default_domain(domain: str) -> bool:
    """Whether ``domain`` names the default ONNX operator set."""
    return domain in DEFAULT_DOMAINS


def default_opset(opset_imports: object) -> int | None:
    """The default-domain version in a list of ``OperatorSetIdProto``, or None if absent."""
    for entry in opset_imports:  # type: ignore[attr-defined]
        if is_default_domain(entry.domain):
            return int(entry.version)
    return None


def check_target_opset(target: int) -> None:
    """Raise :class:`~lowerer.core.errors.InputError` unless ``target`` is an opset onnx knows."""
    from lowerer.core.errors import InputError

    if not isinstance(target, int) or isinstance(target, bool):
        raise InputError(f"target opset must be an integer, got {target!r}")
    if not MIN_OPSET <= target <= MAX_OPSET:
        raise InputError(
            f"target opset {target} is out of range: the installed onnx {onnx.__version__} "
            f"knows default-domain opsets {MIN_OPSET}..{MAX_OPSET}"
        )


@functools.lru_cache(maxsize=4096)
def since_version(op_type: str, opset: int, domain: str = "") -> int | None:
    """The since-version of the schema of ``op_type`` in force at ``opset``, or None.

    None means the op does not exist at that opset (not yet introduced, or unknown).
    """
    try:
        return int(onnx.defs.get_schema(op_type, opset, "" if is_default_domain(domain) else domain).since_version)
    except onnx.defs.SchemaError:
        return None
