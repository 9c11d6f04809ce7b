"""Lowerings of CumSum-11/14 (below 11) and CumProd-26 (below 26): an unrolled chain of Slice + Add (Mul).

CumProd is the same chain with Mul and ones for ``exclusive=1``.

onnxruntime's kernel sums slice by slice along the axis: the first output slice is the first
input slice (``exclusive=1``: zeros), and each next one is the previous output slice plus one
input slice (``reverse=1``: from the back). The lowering writes exactly that chain, one Add per
slice, so the float results round as the kernel's do (exact by construction, checked on floats
in the tests): the axis input must be a constant and the size along it static and at most
:data:`MAX_UNROLLED` (larger sizes would need a MatMul with a triangular matrix, which sums in
another order: refused, not budgeted).
"""

from __future__ import annotations

import numpy as np

from lowerer.reference import np_dtype
from lowerer.steps.emitter import Emitter, attr, normalize_axis
from lowerer.steps.registry import lowering

__all__ = ["MAX_UNROLLED", "cumprod", "cumsum"]

#: The largest static size along the axis that is unrolled into Slice + Add.
MAX_UNROLLED = 64


def _axis_and_size(em: Emitter, x: str) -> tuple[int, int]:
    """The non-negative axis (a constant input) and the static size of ``x`` along it; else refuse."""
    node = em.node
    value = em.constant(node.input[1])
    if value is None:
        em.refuse(f"the axis input {node.input[1]!r} is not a constant, and the unrolled Slice + Add chain needs it; "
                  "choose a target opset >= 11")
    rank = em.require_rank(x, "(for the axis of the unrolled Slice + Add chain)")
    axis = normalize_axis(int(np.asarray(value).reshape(-1)[0]), rank)
    dims = em.dims(x) or []
    size = dims[axis] if axis < len(dims) else None
    if size is None or size > MAX_UNROLLED:
        em.refuse(f"the size of {x!r} along axis {axis} is {'not static' if size is None else size}, and CumSum "
                  f"is lowered exactly as an unrolled Slice + Add chain only up to {MAX_UNROLLED} slices; "
                  "make the shape static or choose a target opset >= 11")
    return axis, size


def _zeros_like_slice(em: Emitter, x: str, part: str, axis: int, fill: int = 0) -> str:
    """``fill`` (zeros) shaped like one slice ``part`` of ``x`` along ``axis`` (a constant for a static shape)."""
    dtype = np_dtype(em.require_elem_type(x, "the exclusive sum starts from zeros of that type"))
    dims = em.dims(x) or []
    if all(d is not None for d in dims):
        shape = [int(d or 0) for d in dims]
        shape[axis] = 1
        return em.const(np.full(shape, fill, dtype), "start")
    if em.target < 8:
        em.refuse(f"{x!r} has a dynamic dim, and the zeros the exclusive sum starts from then need Expand "
                  "(opset >= 8); make the shape static or choose a target opset >= 8")
    return em.op("Expand", [em.const(np.full((), fill, dtype), "start"), em.op("Shape", [part])])


@lowering("CumSum")
def cumsum(em: Emitter) -> None:
    """CumSum as one Slice per position along the axis and a sequential chain of Adds, then Concat."""
    _chain(em, "Add", 0)


@lowering("CumProd")
def cumprod(em: Emitter) -> None:
    """CumProd as one Slice per position along the axis and a sequential chain of Muls, then Concat."""
    _chain(em, "Mul", 1)


def _chain(em: Emitter, combine: str, identity: int) -> None:
    node = em.node
    x = node.input[0]
    axis, size = _axis_and_size(em, x)
    exclusive, reverse = bool(attr(node, "exclusive", 0)), bool(attr(node, "reverse", 0))
    if size == 0 or (size == 1 and not exclusive):
        em.op("Identity", [x], list(node.output))
        return
    i64 = np.int64
    axes = em.const(np.array([axis], i64), "axes")

    def piece(i: int) -> str:
        starts, ends = em.const(np.array([i], i64), "start"), em.const(np.array([i + 1], i64), "end")
        return em.op("Slice", [x, starts, ends, axes])

    order = list(range(size - 1, -1, -1)) if reverse else list(range(size))
    parts = [piece(i) for i in order]
    sums = [_zeros_like_slice(em, x, parts[0], axis, identity) if exclusive else parts[0]]
    for j in range(1, size):
        sums.append(em.op(combine, [sums[-1], parts[j - 1] if exclusive else parts[j]]))
    if reverse:
        sums.reverse()
    if size == 1:
        em.op("Identity", [sums[0]], list(node.output))
        return
    em.op("Concat", sums, list(node.output), axis=axis)
