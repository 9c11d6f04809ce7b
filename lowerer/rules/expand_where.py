"""Lowerings of Expand (below 8) and Where (below 9): broadcasting and selection with older ops, exactly.

* ``Expand`` → ``Mul(x, ones)`` (``Or(x, false)`` for bool), where ``ones`` has the target shape on
  the axes ``x`` broadcasts along and 1 elsewhere. Multiplying by 1 returns every value unchanged
  (±inf, -0.0 and NaN included), and Mul broadcasts both ways as Expand does. Needs the shape
  constant and ``x``'s dims static where the shape is not 1 (to size ``ones``).
* ``Where`` → a ``Gather`` from ``Concat(flat(X'), flat(Y'))`` (X', Y' broadcast to the output shape
  by the Expand form above) at ``arange(N) + N * (1 - cond)``: it picks the very element, for every
  value and type. Needs every input's dims static.

Both refuse what they cannot size statically, naming the input, and element types Mul-7 lacks
(8- and 16-bit integers): Or and Gather take every type.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.facts.reference import np_dtype
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import lowering

__all__ = ["expand_lowering", "where_lowering"]

#: The most elements a constant these lowerings make may have.
_MAX_ELEMENTS = 1 << 20
#: Element types Mul-7 takes (the rest, but bool, have no exact broadcast below Expand-8).
_MUL_7 = {onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT32,
          onnx.TensorProto.INT64, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64}


def _static_dims(em: Emitter, name: str) -> list[int]:
    dims = em.dims(name)
    if dims is None or any(d is None for d in dims):
        em.refuse(f"the dims of {name!r} are not all static, and below this op's first version its broadcast is "
                  "built from constants; make the shapes static (python -m onnxruntime.tools.make_dynamic_shape_fixed)")
    return [int(d) for d in dims if d is not None]


def _broadcast(em: Emitter, x: str, x_dims: list[int], out_dims: list[int], output: str | None = None) -> str:
    """``x`` broadcast to ``out_dims`` exactly: Mul by ones (Or with false for bool) on the broadcast axes."""
    elem = em.elem_type(x)
    if elem is None or (elem != onnx.TensorProto.BOOL and elem not in _MUL_7):
        shown = "unknown" if elem is None else onnx.TensorProto.DataType.Name(elem)
        em.refuse(f"{x!r} is {shown}, and below Expand-8 an exact broadcast needs Mul-7 (float16/32/64, "
                  "int32/64, uint32/64) or Or (bool)")
    padded = [1] * (len(out_dims) - len(x_dims)) + x_dims
    if output is None and padded == out_dims:
        return x  # already that shape (the flat side Reshape takes it as it is)
    ones_dims = [o if p == 1 else 1 for p, o in zip(padded, out_dims, strict=True)]
    if int(np.prod(ones_dims)) > _MAX_ELEMENTS:
        em.refuse(f"broadcasting {x!r} needs a constant of {int(np.prod(ones_dims))} elements")
    outs = None if output is None else [output]
    if elem == onnx.TensorProto.BOOL:
        return em.op("Or", [x, em.const(np.zeros(ones_dims, dtype=np.bool_), "false")], outs)
    return em.op("Mul", [x, em.const(np.ones(ones_dims, dtype=np_dtype(elem)), "ones")], outs)


@lowering("Expand")
def expand_lowering(em: Emitter) -> None:
    """Expand → Mul by ones of the broadcast axes (bool: Or with false); constant shape, static dims."""
    x, shape = em.node.input[0], em.node.input[1]
    value = em.constant(shape)
    if value is None:
        em.refuse(f"its shape {shape!r} is not a constant, and below Expand-8 the broadcast is a constant")
    x_dims = _static_dims(em, x)
    wanted = [int(v) for v in value.reshape(-1)]
    rank = max(len(wanted), len(x_dims))
    a = [1] * (rank - len(x_dims)) + x_dims
    b = [1] * (rank - len(wanted)) + wanted
    if any(p != q and 1 not in (p, q) for p, q in zip(a, b, strict=True)):
        em.refuse(f"shape {wanted} does not broadcast with {x!r}'s dims {x_dims}")
    _broadcast(em, x, x_dims, [max(p, q) for p, q in zip(a, b, strict=True)], em.node.output[0])


@lowering("Where")
def where_lowering(em: Emitter) -> None:
    """Where → Gather from the two broadcast, flattened sides at arange(N) + N * (1 - cond)."""
    cond, x, y = em.node.input
    dims = [_static_dims(em, n) for n in (cond, x, y)]
    try:
        out_dims = [int(d) for d in np.broadcast_shapes(*(tuple(d) for d in dims))]
    except ValueError:
        em.refuse(f"the dims of its inputs {dims} do not broadcast")
    n = int(np.prod(out_dims))
    if 2 * n > _MAX_ELEMENTS:
        em.refuse(f"its output has {n} elements, more than the Gather form's constants may hold")
    flat = em.const(np.array([-1], dtype=np.int64), "flat")
    sides = [em.op("Reshape", [_broadcast(em, v, d, out_dims), flat]) for v, d in ((x, dims[1]), (y, dims[2]))]
    both = em.op("Concat", sides, axis=0)
    picked_y = em.op("Sub", [em.const(np.array(1, dtype=np.int64), "one"),
                             em.op("Cast", [cond], to=onnx.TensorProto.INT64)])
    offset = em.op("Mul", [picked_y, em.const(np.array(n, dtype=np.int64), "n")])
    index = em.op("Add", [offset, em.const(np.arange(n, dtype=np.int64).reshape(out_dims), "arange")])
    em.facts.mark_non_negative(index)  # arange(N) + N * (0 or 1): Gather-1 reads it as it is
    em.op("Gather", [both, index], [em.node.output[0]], axis=0)
