"""The clean-up pass: what the rewrites left unread is removed.

A rewrite may stop reading a value: an axes initializer folded into an attribute, a Constant whose
value the replacement writes as a literal. Such a value is dead weight (onnxruntime prints
"Removing initializer ... It is not used" on every load) and a dead Constant may even fail onnx's
full check at the target. Only values a rewritten node read are candidates, so nothing else of the
user's model is touched; one is removed when nothing anywhere reads it any more, it is no graph
input or output, and it is an initializer or the output of a Constant node (which computes nothing
else). A name read anywhere, in any scope, counts as read.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from lowerer.core.report import Rewrite
from lowerer.model_io.scopes import iter_scopes, used_names

__all__ = ["remove_dead"]


def remove_dead(model: onnx.ModelProto, rewrites: Iterable[Rewrite], read: set[str] | None = None) -> int:
    """Remove, in place, the initializers and Constant nodes only ``rewrites``' nodes read; how many were removed.

    ``read``: every name read in the converted model, when the conversion walk collected it (else the model
    is scanned).
    """
    candidates: dict[str, set[str]] = {}
    for r in rewrites:
        if r.original is not None:
            candidates.setdefault(r.scope, set()).update(n for n in r.original.input if n)
    if not candidates:
        return 0
    used = read if read is not None else used_names(model)
    dead = {scope: names - used for scope, names in candidates.items() if names - used}
    if not dead:
        return 0
    removed = 0
    for root in iter_scopes(model):
        for scope in root.scopes():
            names = dead.get(scope.path)
            if names:
                removed += _remove(scope.holder, names)
    return removed


def _remove(holder: onnx.GraphProto | onnx.FunctionProto, names: set[str]) -> int:
    """Remove from ``holder`` the Constant nodes and initializers that define ``names`` (never its inputs)."""
    removed = 0
    for i in range(len(holder.node) - 1, -1, -1):
        node = holder.node[i]
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1 and \
                node.output[0] in names:
            del holder.node[i]
            removed += 1
    if isinstance(holder, onnx.GraphProto):
        inputs = {vi.name for vi in holder.input}
        for i in range(len(holder.initializer) - 1, -1, -1):
            name = holder.initializer[i].name
            if name in names and name not in inputs:
                del holder.initializer[i]
                removed += 1
        for i in range(len(holder.value_info) - 1, -1, -1):
            if holder.value_info[i].name in names:
                del holder.value_info[i]
    return removed
