"""Lowerings of CumSum-11/14 (below 11) and CumProd-26 (below 26): an unrolled chain of Slice + Add (Mul).

CumProd is the same chain with Mul and ones for ``exclusive=1``.

onnxruntime's kernel sums slice by slice along the axis: the first output slice is the first
input slice (``exclusive=1``: zeros), and each next one is the previous output slice plus one
input slice (``reverse=1``: from the back). The lowering writes exactly that chain, one Add per
slice, so the float results round as the kernel's do (exact by construction, checked on floats
in the tests): the axis input must be a constant and the size along it static and at most
:data:`MAX_UNROLLED` (larger sizes would need a MatMul with a triangular matrix, which sums in
another order: refused, not budgeted). An axis computed at run time picks one chain per axis in
nested Ifs (every dim static and at most :data:`MAX_UNROLLED`); the branch taken is the chain.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter, normalize_axis
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
    if em.constant(node.input[1]) is None:
        _by_run_time_axis(em, combine, identity)
        return
    axis, size = _axis_and_size(em, node.input[0])
    _chain_along(em, axis, size, node.output[0], combine, identity)


def _by_run_time_axis(em: Emitter, combine: str, identity: int) -> None:
    """The chain along each axis in the branches of nested Ifs, picked by the run-time axis (exact: one runs).

    ``If(axis == 0 or axis == -rank, chain along 0, If(axis == 1 or ..., chain along 1, ... chain along
    rank - 1))``. Every dim must be static and at most :data:`MAX_UNROLLED` (each branch unrolls one).
    """
    node = em.node
    x, given = node.input[0], node.input[1]
    rank = em.require_rank(x, "(one branch per axis, for the run-time axis)")
    dims = em.dims(x) or []
    if None in dims or any(int(d or 0) > MAX_UNROLLED for d in dims):
        em.refuse(f"the axis input {given!r} is not a constant, and picking the unrolled Slice + Add chain along "
                  f"it at run time (an If per axis) needs every dim of {x!r} static and at most {MAX_UNROLLED} "
                  f"(they are {dims}); choose a target opset >= 11")
    elem = em.require_elem_type(given, "the axis is compared with each candidate")
    if elem not in (onnx.TensorProto.INT32, onnx.TensorProto.INT64):
        em.refuse(f"the axis input {given!r} is {onnx.TensorProto.DataType.Name(elem).lower()}, not int32 or int64")
    out_elem = em.require_elem_type(x, "each branch states its output's type")
    shape = [int(d or 0) for d in dims]
    if rank == 1:  # the only axis (another value is an error in the original)
        _chain_along(em, 0, shape[0], node.output[0], combine, identity)
        return
    dtype = np.int32 if elem == onnx.TensorProto.INT32 else np.int64
    # Each condition holds one element (If's condition may be [1]): the axis, scalar or [1], against [k].
    conds = [em.op("Or", [em.op("Equal", [given, em.const(np.array([k], dtype), "axis")]),
                          em.op("Equal", [given, em.const(np.array([k - rank], dtype), "axis")])])
             for k in range(rank - 1)]

    def branch(k: int, out: str) -> onnx.GraphProto:
        start = len(em.nodes)
        _chain_along(em, k, shape[k], out, combine, identity)
        nodes = em.nodes[start:]
        del em.nodes[start:]
        return onnx.helper.make_graph(nodes, em.fresh(f"axis{k}"), [],
                                      [onnx.helper.make_tensor_value_info(out, out_elem, shape)])

    inner = branch(rank - 1, em.fresh(f"{node.output[0]}_axis{rank - 1}"))
    for k in range(rank - 2, -1, -1):
        out = node.output[0] if k == 0 else em.fresh(f"{node.output[0]}_from{k}")
        then = branch(k, em.fresh(f"{node.output[0]}_axis{k}"))
        made = onnx.helper.make_node("If", [conds[k]], [out], name=em.fresh(f"{node.name or node.op_type}/If"),
                                     then_branch=then, else_branch=inner)
        if k == 0:
            em.nodes.append(made)
            em.facts.add_node(made, em.opset)
            return
        inner = onnx.helper.make_graph([made], em.fresh(f"from{k}"), [],
                                       [onnx.helper.make_tensor_value_info(out, out_elem, shape)])


def _chain_along(em: Emitter, axis: int, size: int, output: str, combine: str, identity: int) -> None:
    """The chain along the non-negative constant ``axis`` (static ``size``), written to ``output``."""
    node = em.node
    x = node.input[0]
    exclusive, reverse = bool(int_attribute(node, "exclusive", 0)), bool(int_attribute(node, "reverse", 0))
    if size == 0 or (size == 1 and not exclusive):
        em.op("Identity", [x], [output])
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
        em.op("Identity", [sums[0]], [output])
        return
    em.op("Concat", sums, [output], axis=axis)
