"""Lowering of GatherElements-11/13 for targets below opset 11: Gather on the flattened data.

With static shapes of ``data`` and ``indices``, output element ``p`` (a position in ``indices``)
is ``data.flat[base[p] + idx[p] * stride[axis]]``, where ``base`` is the constant flat offset of
``p``'s coordinates on every axis but ``axis``. Negative indices are counted from the back
(``idx + size`` where ``idx < 0``), in the graph (below opset 9, with no integer Less, by
integer division: ``(idx + size) mod size``) or, for constant indices, in advance. It only
moves values: exact for every type. Indices out of range are an error for the kernel and
undefined here (they select some other element or fail), as they are invalid input.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter, normalize_axis
from lowerer.steps.registry import lowering

__all__ = ["gather_elements"]


def _static_dims(em: Emitter, name: str, what: str) -> list[int]:
    dims = em.dims(name)
    if dims is None or any(d is None for d in dims):
        em.refuse(f"the shape of {what} {name!r} is not static, and the flat indices of Gather on the flattened "
                  "data are computed from it; make the shapes static (python -m onnxruntime.tools."
                  "make_dynamic_shape_fixed) or choose a target opset >= 11")
    return [int(d or 0) for d in dims]


def _nonnegative(em: Emitter, indices: str, size: int) -> str:
    """``indices`` as int64 with negative entries counted from the back (``+ size``)."""
    if em.elem_type(indices) != TensorProto.INT64:
        indices = em.op("Cast", [indices], to=TensorProto.INT64)
    dim = em.const(np.array(size, np.int64), "size")
    if em.target < 9:
        # No integer Less before 9: (idx + size) - size * ((idx + size) / size), with Div's truncation
        # toward zero on a non-negative dividend, is idx + size for a negative idx and idx otherwise.
        shifted = em.op("Add", [indices, dim])
        return em.op("Sub", [shifted, em.op("Mul", [dim, em.op("Div", [shifted, dim])])])
    zero = em.const(np.array(0, np.int64), "zero")
    negative = em.op("Cast", [em.op("Less", [indices, zero])], to=TensorProto.INT64)
    return em.op("Add", [indices, em.op("Mul", [negative, dim])])


@lowering("GatherElements")
def gather_elements(em: Emitter) -> None:
    """GatherElements as Gather(Reshape(data, [-1]), flat indices) for static shapes."""
    node = em.node
    data, indices = node.input[0], node.input[1]
    ddims = _static_dims(em, data, "data")
    idims = _static_dims(em, indices, "indices")
    if len(ddims) != len(idims) or not ddims:
        em.refuse(f"data is {len(ddims)}-D and indices {len(idims)}-D; GatherElements needs the same rank >= 1")
    rank = len(ddims)
    axis = normalize_axis(int_attribute(node, "axis", 0) or 0, rank)
    strides = [int(np.prod(ddims[d + 1:], dtype=np.int64)) for d in range(rank)]
    grid = np.indices(idims, dtype=np.int64) if idims else np.zeros((0,), np.int64)
    base = sum((grid[d] * strides[d] for d in range(rank) if d != axis), np.zeros(idims, np.int64))
    value = em.constant(indices)
    if value is not None:
        idx = np.asarray(value).astype(np.int64)
        flat = em.const(base + np.where(idx < 0, idx + ddims[axis], idx) * strides[axis], "flat_indices")
    else:
        scaled = em.op("Mul", [_nonnegative(em, indices, ddims[axis]), em.const(np.array(strides[axis], np.int64),
                                                                                  "stride")])
        flat = em.op("Add", [scaled, em.const(base, "base")])
        em.facts.mark_non_negative(flat)  # every valid index counted from the front: Gather-1 reads it as is
    flat_data = em.op("Reshape", [data, em.const(np.array([-1], np.int64), "flat")])
    em.op("Gather", [flat_data, flat], list(node.output), axis=0)
