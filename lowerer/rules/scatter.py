"""Version-step adapters for Scatter 9 ↔ 11, and for ScatterElements/ScatterND reductions going down.

Scatter was deprecated at 11 for ScatterElements; ScatterElements and ScatterND gained ``reduction``
at 16 (``add``, ``mul``) and 18 (``max``, ``min``).

* Up: Scatter-9 becomes ScatterElements-11 (the same meaning: Scatter-9 has no negative
  indices, ScatterElements-11 only adds them); the engine takes it on to the target.
* Down: a Scatter-11 node (already invalid: onnx.checker rejects the deprecated op) maps to
  Scatter-9 when its indices are a constant, negative ones counted from the back with the static
  size along ``axis``.
* ScatterElements/ScatterND with ``reduction`` ``add``/``mul`` going below 16, ``max``/``min`` below 18:
  ``Scatter(data, i, combine(Gather(data, i), updates))`` with Add, Mul, Max or Min, exact when the
  indices are a constant that writes no position twice (negative ones counted from the back first);
  refused otherwise. ``none`` (and ``add``/``mul`` crossing 18 → 16) is crossed as usual.
"""

from __future__ import annotations

import numpy as np

from lowerer.remedies import ADD_SHAPES
from lowerer.steps import generic
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter, normalize_axis
from lowerer.steps.generic import attribute_value
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["nonnegative_indices", "scatter_11", "scatter_11_9", "scatter_reduction_16_13", "scatter_reduction_18_16",
           "unique_element_indices", "unique_nd_indices"]


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


# -- reductions going down, and the ops below their first versions ------------------------------
#: The op that combines the current value with an update, per ``reduction``.
_COMBINE = {"add": "Add", "mul": "Mul", "max": "Max", "min": "Min"}
#: The op reading back what each scatter writes over.
_GATHER = {"ScatterElements": "GatherElements", "ScatterND": "GatherND"}
_UNIQUE = ("the indices are a constant (an initializer that is not a graph input, a Constant node) that "
           "writes no position twice")


def _static_dims(em: Emitter, data: str, count: int | None, why: str) -> list[int]:
    """The first ``count`` (None: all) dims of ``data``, all static; else refuse saying ``why`` they are needed."""
    dims = em.dims(data)
    chosen = None if dims is None else dims if count is None else dims[:count]
    if chosen is None or any(d is None for d in chosen):
        em.refuse(f"the shape of {data!r} is not static, and {why}; {ADD_SHAPES}")
    return [int(d) for d in chosen if d is not None]


def _constant_indices(em: Emitter, indices: str, what: str) -> np.ndarray:
    """The value of ``indices``, or a refusal saying what the form needs."""
    value = em.constant(indices)
    if value is None:
        em.refuse(f"indices {indices!r} are not a constant, and {what} is exact only when {_UNIQUE}")
    return np.asarray(value).astype(np.int64)


def unique_element_indices(em: Emitter, data: str, indices: str, axis: int, what: str) -> np.ndarray:
    """ScatterElements' constant ``indices`` made non-negative, proven to write no position twice; else refuse."""
    value = _constant_indices(em, indices, what)
    if value.size and bool(np.any(value < 0)):
        size = _static_dims(em, data, None, "negative indices need the size along the axis")[axis]
        value = np.where(value < 0, value + size, value)
    if value.size and value.shape[axis] > 1 and bool(np.any(np.diff(np.sort(value, axis=axis), axis=axis) == 0)):
        em.refuse(f"indices {indices!r} write some position twice, and {what} is exact only when {_UNIQUE}")
    return value


def unique_nd_indices(em: Emitter, data: str, indices: str, what: str) -> np.ndarray:
    """ScatterND's constant ``indices`` made non-negative, proven to address no slice twice; else refuse."""
    value = _constant_indices(em, indices, what)
    k = value.shape[-1] if value.ndim else 0
    rows = value.reshape(-1, k) if k else value.reshape(-1, 0)
    if rows.size and bool(np.any(rows < 0)):
        sizes = np.array(_static_dims(em, data, k, "negative indices need the sizes they count from"))
        rows = np.where(rows < 0, rows + sizes, rows)
    if len(rows) > 1 and len(np.unique(rows, axis=0)) != len(rows):
        em.refuse(f"indices {indices!r} address some slice twice, and {what} is exact only when {_UNIQUE}")
    return rows.reshape(value.shape)


def _reduction_by_reading(em: Emitter, reduction: str) -> None:
    """``em.node`` (a Scatter* with ``reduction``) as Scatter*(data, i, combine(Gather*(data, i), updates))."""
    node = em.node
    data, indices, updates = node.input
    what = f"reduction={reduction!r} written as a plain {node.op_type} of the combined values"
    axis_attrs: dict[str, int] = {}
    if node.op_type == "ScatterElements":
        rank = em.require_rank(data, "to normalize the axis")
        given = attribute_value(node, "axis")
        axis = normalize_axis(given if isinstance(given, int) else 0, rank)
        value = unique_element_indices(em, data, indices, axis, what)
        axis_attrs["axis"] = axis
    else:
        value = unique_nd_indices(em, data, indices, what)
    idx = em.const(value, "indices")
    current = em.op(_GATHER[node.op_type], [data, idx], None, **axis_attrs)
    combined = em.op(_COMBINE[reduction], [current, updates])
    em.op(node.op_type, [data, idx, combined], list(node.output), **axis_attrs)


@adapter(("ScatterElements", "ScatterND"), 16, DOWN)
def scatter_reduction_16_13(em: Emitter, step: Step, direction: str) -> None:
    """Down from 16: a reduction other than ``none`` is written with unique constant indices, else crossed."""
    reduction = str(attribute_value(em.node, "reduction") or "none")
    if reduction == "none":
        generic.cross(em, step, direction)
        return
    _reduction_by_reading(em, reduction)


@adapter(("ScatterElements", "ScatterND"), 18, DOWN)
def scatter_reduction_18_16(em: Emitter, step: Step, direction: str) -> None:
    """Down from 18: ``max``/``min`` (new at 18) are written with unique constant indices, else crossed."""
    reduction = str(attribute_value(em.node, "reduction") or "none")
    if reduction not in ("max", "min"):
        generic.cross(em, step, direction)
        return
    _reduction_by_reading(em, reduction)
