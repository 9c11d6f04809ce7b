"""Version-step adapter for Scatter 9 ↔ 11 (Scatter was deprecated at 11 for ScatterElements).

* Up: Scatter-9 becomes ScatterElements-11 (the same meaning: Scatter-9 has no negative
  indices, ScatterElements-11 only adds them); the engine takes it on to the target.
* Down: a Scatter-11 node (already invalid: onnx.checker rejects the deprecated op) maps to
  Scatter-9 when its indices are a constant, negative ones counted from the back with the static
  size along ``axis``.
"""

from __future__ import annotations

import numpy as np

from lowerer.steps import generic
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter, normalize_axis
from lowerer.steps.generic import attribute_value
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["nonnegative_indices", "scatter_11", "scatter_11_9"]


def nonnegative_indices(em: Emitter, data: str, indices: str, axis: int, why: str) -> str:
    """``indices`` as a value with no negative entry: itself, or a constant counted from the back; else refuse."""
    value = em.constant(indices)
    if value is None:
        em.refuse(f"indices {indices!r} are not a constant, so they cannot be proven non-negative, which {why}")
    if value.size == 0 or bool(np.all(value >= 0)):
        return indices
    dims = em.dims(data)
    size = dims[normalize_axis(axis, len(dims))] if dims is not None else None
    if size is None:
        em.refuse(f"indices {indices!r} hold negative entries, which {why}, and the size of {data!r} along axis "
                  f"{axis} is not static; add shape information")
    return em.const(np.where(value < 0, value + size, value).astype(value.dtype), "indices")


@adapter("Scatter", 11, UP)
def scatter_11(em: Emitter, step: Step, direction: str) -> None:
    """Scatter-9 → ScatterElements-11 (going up; the engine takes it on to the target)."""
    node = em.node
    axis = attribute_value(node, "axis")
    em.op("ScatterElements", list(node.input), list(node.output), axis=axis)


@adapter("Scatter", 11, DOWN)
def scatter_11_9(em: Emitter, step: Step, direction: str) -> None:
    """Scatter-11 → Scatter-9 with indices proven non-negative (a constant)."""
    node = generic.copy_of(em.node)
    axis = attribute_value(node, "axis")
    node.input[1] = nonnegative_indices(em, node.input[0], node.input[1], axis if isinstance(axis, int) else 0,
                                        "Scatter-9 does not accept")
    generic.cross(em, step, direction, node, handled=(Semantics,))
