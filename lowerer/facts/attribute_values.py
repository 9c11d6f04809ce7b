"""The values a string attribute may take at each version of its op, where the spec lists them and versions differ.

onnx's checker and shape inference check an attribute's type, not a string's value: GridSample-16 with
``mode='linear'`` (GridSample-20's spelling of ``bilinear``) passes both, and onnx's reference runs it.
A rewrite, or a relabel the step table believed, that writes such a node writes a model no runtime
following the spec of that version need accept (onnxruntime's GridSample-16 kernel refuses it). The
values are data (``attribute_values.json``, each entry citing the spec text); :func:`value_problem` says
why a node's values are not its version's.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import onnx

from lowerer.core.opsets import since_version

__all__ = ["allowed_values", "value_problem"]


@cache
def _table() -> dict[tuple[str, int, str], tuple[str, ...]]:
    data = json.loads(Path(__file__).with_name("attribute_values.json").read_text(encoding="utf-8"))
    out: dict[tuple[str, int, str], tuple[str, ...]] = {}
    for op, entries in data["ops"].items():
        for entry in entries:
            if not entry.get("source"):
                raise ValueError(f"attribute_values.json: an entry of {op} cites no source")
            for version in entry["versions"]:
                out[(op, int(version), entry["attribute"])] = tuple(entry["values"])
    return out


@cache
def _ops() -> frozenset[str]:
    return frozenset(op for op, _, _ in _table())


def allowed_values(op: str, version: int, attribute: str) -> tuple[str, ...] | None:
    """The values ``attribute`` of ``op``-``version`` (a since-version) may take; None: not listed."""
    return _table().get((op, version, attribute))


def value_problem(node: onnx.NodeProto, opset: int) -> str | None:
    """Why a default-domain ``node`` at ``opset`` has a string attribute value its version does not define, or None."""
    if node.op_type not in _ops() or node.domain not in ("", "ai.onnx"):
        return None
    version = since_version(node.op_type, opset)
    if version is None:
        return None
    for a in node.attribute:
        if a.type != onnx.AttributeProto.STRING:
            continue
        allowed = allowed_values(node.op_type, version, a.name)
        value = a.s.decode("utf-8", "replace")
        if allowed is not None and value not in allowed:
            where = f"node {node.name!r} ({node.op_type}-{version})" if node.name else f"{node.op_type}-{version}"
            return (f"{where}: attribute {a.name}={value!r} is not one of {node.op_type}-{version}'s values "
                    f"({', '.join(allowed)})")
    return None
