"""Version-step adapters for ops whose newer versions took narrower types: computed in a wider type, exactly.

* ``IsInf`` 20 → 10 on float16: in float (every float16 is a float, infinities included).
* ``MaxPool`` 12 → 11 on (u)int8: in float (every such integer is one; padding is skipped in both).
* ``Clip`` 12 → 11 on (u)int8/16: in float, bounds too (constant bounds become float constants, so
  that they fold into Clip-6's attributes further down); the result cast back.
* ``ReduceMax``/``ReduceMin`` 20 → 18 on bool: in float (0 and 1), then ``> 0.5``: a reduction over
  nothing gives float's lowest (highest) value, which reads as false (true), bool's identity too.
* ``Max``/``Min``/``Sum``/``Mean`` 8 → 6 (one shape for all inputs): constant inputs of another shape
  written out at the output's static shape.
* ``BitShift`` 28 → 11 on signed integers: through BitShift-11 on uint64 (:func:`bit_shift_28_11`).
* ``QLinearMatMul`` 21 → 10 with float16 scales: the scales in float (each float16 is one).
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of
from lowerer.steps.changes import Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, adapter

__all__ = ["bit_shift_28_11", "clip_12_11", "is_inf_20_10", "max_pool_12_11", "qlinear_matmul_21_10",
           "reduce_bool_20_18", "variadic_broadcast_8_6"]

_FLOAT = onnx.TensorProto.FLOAT
#: (u)int8/16: each is a float exactly.
_TINY_INTS = frozenset({2, 3, 4, 5})


def _in_float(em: Emitter, inputs: list[str]) -> list[str]:
    """``inputs`` cast to float (an empty name stays empty; a constant becomes a float constant)."""
    out: list[str] = []
    for name in inputs:
        value = em.constant(name) if name else None
        if not name:
            out.append(name)
        elif value is not None:
            out.append(em.const(value.astype(np.float32), "float"))
        else:
            out.append(em.op("Cast", [name], to=_FLOAT))
    return out


def _widened(em: Emitter, inputs: list[str], back: list[int | None]) -> None:
    """``em.node`` on ``inputs``, its outputs cast back to ``back`` (None: kept as they are)."""
    node = copy_of(em.node)
    del node.input[:]
    node.input.extend(inputs)
    finals = list(node.output)
    for k, (name, elem) in enumerate(zip(finals, back, strict=False)):
        if name and elem is not None:
            node.output[k] = em.fresh(f"{name}_float")
    em.nodes.append(node)
    em.facts.add_node(node, em.opset)
    for k, (name, elem) in enumerate(zip(finals, back, strict=False)):
        if name and elem is not None:
            em.op("Cast", [node.output[k]], [name], to=elem)


@adapter("IsInf", 20, DOWN)
def is_inf_20_10(em: Emitter, step: Step, direction: str) -> None:
    """IsInf on float16 (new at 20) in float."""
    if em.elem_type(em.node.input[0]) != onnx.TensorProto.FLOAT16:
        generic.cross(em, step, direction)
        return
    _widened(em, [em.op("Cast", [em.node.input[0]], to=_FLOAT)], [None])


@adapter("MaxPool", 12, DOWN)
def max_pool_12_11(em: Emitter, step: Step, direction: str) -> None:
    """MaxPool on (u)int8 (new at 12) in float, cast back (the indices stay)."""
    elem = em.elem_type(em.node.input[0])
    if elem not in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8):
        generic.cross(em, step, direction)
        return
    _widened(em, [em.op("Cast", [em.node.input[0]], to=_FLOAT)], [elem, None])


@adapter("Clip", 12, DOWN)
def clip_12_11(em: Emitter, step: Step, direction: str) -> None:
    """Clip on (u)int8/16 (new at 12) in float, bounds too, cast back."""
    elem = em.elem_type(em.node.input[0])
    if elem not in _TINY_INTS:
        generic.cross(em, step, direction)
        return
    bounds = [n for n in list(em.node.input)[1:] if n and em.constant(n) is None]
    if bounds and em.target < 11:
        em.refuse(f"Clip-6 takes its bounds as attributes, and {bounds[0]!r} is not a constant; the lowest opset "
                  "this node can be taken to is 11")
    _widened(em, _in_float(em, list(em.node.input)), [elem])


@adapter(("ReduceMax", "ReduceMin"), 20, DOWN)
def reduce_bool_20_18(em: Emitter, step: Step, direction: str) -> None:
    """ReduceMax/ReduceMin on bool (new at 20) in float, then ``> 0.5``."""
    node = em.node
    if em.elem_type(node.input[0]) != onnx.TensorProto.BOOL:
        generic.cross(em, step, direction)
        return
    reduced = copy_of(node)
    reduced.input[0] = em.op("Cast", [node.input[0]], to=_FLOAT)
    reduced.output[0] = em.fresh(f"{node.output[0]}_float")
    em.nodes.append(reduced)
    em.facts.add_node(reduced, em.opset)
    em.op("Greater", [reduced.output[0], em.const(np.array(0.5, np.float32), "half")], list(node.output))


#: The largest constant a broadcast of a constant input makes (elements).
_MAX_BROADCAST = 1 << 16


@adapter(("Max", "Min", "Sum", "Mean"), 8, DOWN)
def variadic_broadcast_8_6(em: Emitter, step: Step, direction: str) -> None:
    """Numpy broadcasting (new at 8) of constant inputs: each made a constant of the output's static shape.

    Max-6/Min-6/Sum-6/Mean-6 take inputs of one shape. Where every input's dims are static, the inputs
    that are not of the broadcast shape are constants (an expanded body's ``CastLike(0.5, x)``) and the
    result is small, each is written out at that shape (the same values, repeated): exact. Otherwise
    the generic crossing decides (and refuses).
    """
    node = em.node
    names = [n for n in node.input if n]
    shapes = [em.dims(n) for n in names]
    if any(s is None or None in s for s in shapes):
        generic.cross(em, step, direction)
        return
    try:
        out = tuple(int(d) for d in np.broadcast_shapes(*(tuple(int(d or 0) for d in s or []) for s in shapes)))
    except ValueError:
        generic.cross(em, step, direction)
        return
    values = [em.constant(n) if list(s or []) != list(out) else None for n, s in zip(names, shapes, strict=True)]
    odd = [n for n, s in zip(names, shapes, strict=True) if list(s or []) != list(out)]
    if not odd or any(em.constant(n) is None for n in odd) or int(np.prod(out)) > _MAX_BROADCAST:
        generic.cross(em, step, direction)
        return
    made = copy_of(node)
    for k, name in enumerate(made.input):
        value = values[names.index(name)] if name in names else None
        if name and value is not None:
            made.input[k] = em.const(np.ascontiguousarray(np.broadcast_to(value, out)), "full")
    generic.cross(em, step, direction, made)


_SIGNED_WIDTHS = {3: 8, 5: 16, 6: 32, 7: 64}  # int8/16/32/64 → bits


@adapter("BitShift", 28, DOWN)
def bit_shift_28_11(em: Emitter, step: Step, direction: str) -> None:
    """BitShift on signed integers (new at 28) through BitShift-11 on uint64.

    ``x`` is taken as uint64 (its two's-complement bits, sign-extended), the shift ``s`` is valid when
    ``0 <= s < w`` (``w`` the width of the type). Left: ``u << s``; its low ``w`` bits are the result,
    the bits pushed past the sign discarded. Right, arithmetic: ``u >> s`` for ``x >= 0``, and
    ``~(~u >> s)`` for ``x < 0`` (``~v`` written ``2**64 - 1 - v``), which fills the vacated bits with
    ones. An invalid shift gives what the sign extension alone does: 0, or -1 for a right shift of a
    negative ``x``. The selection is arithmetic in uint64 (wrapping, exact); the result is cast back to
    the type (its low ``w`` bits, as onnxruntime's integer Cast keeps them).
    """
    node = em.node
    elem = em.elem_type(node.input[0])
    if elem not in _SIGNED_WIDTHS:
        generic.cross(em, step, direction)
        return
    width = _SIGNED_WIDTHS[elem]
    u64, i64 = onnx.TensorProto.UINT64, onnx.TensorProto.INT64
    spelled = attribute_value(node, "direction")
    right = (spelled.decode() if isinstance(spelled, bytes) else str(spelled)).upper() == "RIGHT"
    x, y = node.input
    x_wide, y_wide = em.op("Cast", [x], to=i64), em.op("Cast", [y], to=i64)
    u = em.op("Cast", [x_wide], to=u64)
    valid = em.op("And", [em.op("Not", [em.op("Less", [y_wide, em.const(np.array(0, np.int64), "zero")])]),
                          em.op("Less", [y_wide, em.const(np.array(width, np.int64), "width")])])
    valid_u = em.op("Cast", [valid], to=u64)
    shift = em.op("Mul", [em.op("Cast", [y_wide], to=u64), valid_u])  # an invalid shift read as 0, then dropped
    ones = em.const(np.array(np.iinfo(np.uint64).max, np.uint64), "ones")
    if not right:
        picked = em.op("BitShift", [u, shift], direction="LEFT")
        fallback = ""
    else:
        negative_u = em.op("Cast", [em.op("Less", [x_wide, em.const(np.array(0, np.int64), "zero")])], to=u64)
        logical = em.op("BitShift", [u, shift], direction="RIGHT")
        filled = em.op("Sub", [ones, em.op("BitShift", [em.op("Sub", [ones, u]), shift], direction="RIGHT")])
        # logical + negative * (filled - logical), in wrapping uint64 arithmetic
        picked = em.op("Add", [logical, em.op("Mul", [negative_u, em.op("Sub", [filled, logical])])])
        fallback = em.op("Mul", [negative_u, ones])  # -1 for a negative x, else 0
    result = em.op("Mul", [picked, valid_u])
    if fallback:
        one = em.const(np.array(1, np.uint64), "one")
        result = em.op("Add", [result, em.op("Mul", [fallback, em.op("Sub", [one, valid_u])])])
    em.op("Cast", [result], list(node.output), to=elem)


@adapter("QLinearMatMul", 21, DOWN)
def qlinear_matmul_21_10(em: Emitter, step: Step, direction: str) -> None:
    """QLinearMatMul with float16 scales (new at 21): the scales cast to float, which holds every float16."""
    node = em.node
    scales = (1, 4, 6)
    if not any(k < len(node.input) and em.elem_type(node.input[k]) == onnx.TensorProto.FLOAT16 for k in scales):
        generic.cross(em, step, direction)
        return
    made = copy_of(node)
    for k in scales:
        if k < len(made.input) and made.input[k] and em.elem_type(made.input[k]) == onnx.TensorProto.FLOAT16:
            value = em.constant(made.input[k])
            made.input[k] = em.const(value.astype(np.float32), "scale") if value is not None else \
                em.op("Cast", [made.input[k]], to=_FLOAT)
    generic.cross(em, step, direction, made)
