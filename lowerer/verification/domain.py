"""Generated inputs kept inside the original op's domain, and inputs where the spec says nothing.

Random values make some ops fail (an index out of range, a zero divisor) or leave the spec
(Reshape ``allowzero=1`` with both -1 and 0): :func:`into_domain` moves the generated values
into the op's domain, :func:`outside_spec` names an input set nothing is judged on.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import int_attribute

__all__ = ["into_domain", "outside_spec"]


def outside_spec(node: onnx.NodeProto, feeds: dict[str, np.ndarray], fixed: dict[str, np.ndarray]) -> str | None:
    """Why the original node is outside the ONNX spec on ``feeds`` (then nothing is judged there), or None.

    Reshape with ``allowzero=1`` and a shape holding both -1 and 0 is invalid by the spec (onnxruntime
    still answers, inconsistently).
    """
    if node.op_type == "Reshape" and any(a.name == "allowzero" and a.i == 1 for a in node.attribute) \
            and len(node.input) > 1:
        shape = feeds.get(node.input[1])
        if shape is None:
            shape = fixed.get(node.input[1])
        if shape is not None and bool(np.any(shape == -1)) and bool(np.any(shape == 0)):
            return "the original is outside the ONNX spec there (Reshape allowzero=1 with both -1 and 0 in the shape)"
    return None


def into_domain(node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> None:
    """Generated values moved into the original op's domain, where random ones would make it fail.

    Indices of Gather/GatherElements/ScatterElements are folded into ``[-dim, dim)`` of their axis (each
    last-axis column of GatherND/ScatterND indices into its data dim's), an integer divisor
    of Mod/Div that is 0 (or -1 under the type's minimum, which overflows) becomes 1, and a shape for
    ConstantOfShape becomes small and non-negative. Run-time axes (Reduce* axes, CumSum's axis) become
    distinct axes of the data (negative where the generated value was), Split's run-time sizes a
    partition of the split dim, and Pad's run-time pads small and non-negative. The values stay seeded
    and tie-heavy otherwise.
    """
    op, ins = node.op_type, list(node.input)
    if _run_time_parameters(op, ins, node, feeds):
        return
    if op in ("GatherND", "ScatterND") and len(ins) > 1 and ins[0] in feeds and ins[1] in feeds:
        data, idx = feeds[ins[0]], feeds[ins[1]]
        batch = int_attribute(node, "batch_dims", 0) if op == "GatherND" else 0
        k = idx.shape[-1] if idx.ndim else 0
        if idx.dtype.kind in "iu" and 0 < k <= data.ndim - batch:
            dims = np.array(data.shape[batch:batch + k], np.int64)
            if (dims > 0).all():
                feeds[ins[1]] = (np.mod(idx.astype(np.int64), 2 * dims) - dims).astype(idx.dtype)
    elif op in ("Gather", "GatherElements", "ScatterElements") and len(ins) > 1 and ins[0] in feeds \
            and ins[1] in feeds:
        data, idx = feeds[ins[0]], feeds[ins[1]]
        axis = int_attribute(node, "axis", 0)
        axis = axis + data.ndim if axis < 0 else axis
        dim = data.shape[axis] if 0 <= axis < data.ndim else 0
        if dim > 0 and idx.dtype.kind in "iu":
            feeds[ins[1]] = (np.mod(idx.astype(np.int64), 2 * dim) - dim).astype(idx.dtype)
    elif op in ("Mod", "Div") and len(ins) > 1 and ins[1] in feeds and feeds[ins[1]].dtype.kind in "iu":
        b = feeds[ins[1]].copy()
        b[b == 0] = 1
        if b.dtype.kind == "i":
            b[b == -1] = 1
        feeds[ins[1]] = b
    elif op == "ConstantOfShape" and ins and ins[0] in feeds:
        feeds[ins[0]] = np.mod(np.abs(feeds[ins[0]]), 5).astype(feeds[ins[0]].dtype)


def _axes_in_range(axes: np.ndarray, rank: int) -> np.ndarray:
    """``axes`` folded into distinct axes of ``[-rank, rank)`` (a generated value's sign kept)."""
    flat = axes.astype(np.int64).reshape(-1)
    if rank == 0 or flat.size > rank:
        return axes
    taken: list[int] = []
    out = []
    for value in flat:
        axis = int(np.mod(value, rank))
        while axis in taken:
            axis = (axis + 1) % rank
        taken.append(axis)
        out.append(axis - rank if value < 0 else axis)
    return np.array(out, np.int64).reshape(axes.shape).astype(axes.dtype)


def _run_time_parameters(op: str, ins: list[str], node: onnx.NodeProto, feeds: dict[str, np.ndarray]) -> bool:
    """Fold the run-time parameters of ops whose lowerings take them from a graph input; True when done."""
    if len(ins) < 2 or ins[0] not in feeds or ins[1] not in feeds or feeds[ins[1]].dtype.kind not in "iu":
        return False
    data, value = feeds[ins[0]], feeds[ins[1]]
    if op.startswith("Reduce") or op == "CumSum" or op == "CumProd":
        feeds[ins[1]] = _axes_in_range(value, data.ndim)
        return True
    if op == "Split" and value.ndim == 1 and value.size > 0:
        axis = int_attribute(node, "axis", 0)
        axis = axis + data.ndim if axis < 0 else axis
        if 0 <= axis < data.ndim:
            dim, parts = data.shape[axis], value.size
            sizes = [dim // parts + (1 if i < dim % parts else 0) for i in range(parts)]
            feeds[ins[1]] = np.array(sizes, value.dtype)
        return True
    if op == "Pad":
        feeds[ins[1]] = np.mod(np.abs(value.astype(np.int64)), 3).astype(value.dtype)
        return True
    return False
