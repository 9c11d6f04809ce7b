"""Version-step adapters for elementwise ops: legacy broadcasting (version 7) and Gemm's C.

* Binary ops 1/6 → 7 (up): ``broadcast=1`` with ``axis`` aligned the second input's dims at
  ``axis`` of the first's; numpy broadcasting aligns them at the end. When ``axis`` is not
  ``rank(A) - rank(B)``, ``B`` gets trailing size-1 dims (``Unsqueeze``) first. Without
  ``broadcast=1`` the shapes were equal, which numpy broadcasting keeps.
* ``Equal`` 11 → 7 on floats (Equal-7 takes bool and integers only): ``a == b`` is "neither
  ``a < b`` nor ``a > b``, and neither is NaN", where "x is not NaN" is ``x < inf or x > -inf``
  (true for every number and both infinities, false for NaN): Less, Greater, Or, And and Not
  give exactly Equal's answer, ±0 and NaN included. On (u)int8/16 and uint32 (Equal-7 takes int32
  and int64) both sides are widened to int32 (int64 for uint32): every value kept.
* ``Greater``/``Less`` 9 → 7 on integers of at most 32 bits: in double, where each is exact.
  ``Max``/``Min`` 12 → 8 below 9 on (u)int8/16: in float (each is exact), cast back; (u)int32 in
  double at 8 (onnxruntime's Max-6/Min-6 take float only).
* ``Gemm`` 11 → 9: C became optional at 11; Gemm-9 gets C = -0.0 (or +0.0 when ``beta`` < 0), so
  that ``beta * C`` is -0.0 and adding it changes no value, the sign of a zero included (0 for
  integer types).
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute
from lowerer.steps.changes import AttrRemoved, OptionalInput, Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["arithmetic_14_13", "binary_legacy_broadcast_up", "equal_11_7", "gemm_11_9", "greater_less_9_7",
           "max_min_12_8", "mod_28_13"]

#: Ops whose version 7 replaced ``broadcast``/``axis`` by numpy-style broadcasting.
LEGACY_BROADCAST_OPS = ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less")


@adapter(LEGACY_BROADCAST_OPS, 7, UP)
def binary_legacy_broadcast_up(em: Emitter, step: Step, direction: str) -> None:
    """``broadcast``/``axis`` → numpy broadcasting, with ``Unsqueeze`` where the alignment differs."""
    node = copy_of(em.node)
    broadcast = attribute_value(node, "broadcast")
    axis = attribute_value(node, "axis")
    remove_attribute(node, "broadcast")
    remove_attribute(node, "axis")
    if broadcast and axis is not None:
        a, b = node.input[0], node.input[1]
        rank_a, rank_b = em.rank(a), em.rank(b)
        if rank_a is None or rank_b is None:
            em.refuse(f"broadcast=1 with axis={axis} aligns {b!r} at that axis of {a!r}; making that numpy-style "
                      "needs both ranks, and one is unknown (add shape information)")
        start = int(axis) + rank_a if int(axis) < 0 else int(axis)  # type: ignore[call-overload]
        trailing = rank_a - start - rank_b
        if trailing < 0:
            em.refuse(f"axis={axis} does not fit a second input of rank {rank_b} into a first of rank {rank_a}")
        if trailing > 0:
            node.input[1] = em.op("Unsqueeze", [b], axes=list(range(rank_b, rank_b + trailing)))
    generic.cross(em, step, direction, node, handled=(AttrRemoved,))


@adapter("Gemm", 11, DOWN)
def gemm_11_9(em: Emitter, step: Step, direction: str) -> None:
    """A missing C becomes a constant signed zero that adds nothing."""
    node = copy_of(em.node)
    if len(node.input) < 3 or not node.input[2]:
        elem = em.elem_type(node.input[0])
        if elem is None:
            em.refuse("C is optional from Gemm-11 only, and the zero that replaces it needs the type of A, "
                      "which is unknown (add type information)")
        dtype = np_dtype(elem)
        beta = attribute_value(node, "beta")
        negative = beta is not None and float(beta) < 0  # type: ignore[arg-type]
        zero = np.array(0.0 if negative else -0.0, dtype=dtype) if dtype.kind == "f" else np.array(0, dtype=dtype)
        while len(node.input) < 3:
            node.input.append("")
        node.input[2] = em.const(zero, "C")
    generic.cross(em, step, direction, node, handled=(OptionalInput,))



_FLOAT_TYPES = frozenset({1, 10, 11, 16})  # float, float16, double, bfloat16


@adapter("Mod", 28, DOWN)
def mod_28_13(em: Emitter, step: Step, direction: str) -> None:
    """Mod-13 takes ``fmod=0`` on integers and ``fmod=1`` on floats only (28 allowed the other two)."""
    elem = em.elem_type(em.node.input[0])
    if elem is None:
        em.refuse("whether Mod-13 can express this node depends on its input type, which is unknown")
    fmod = attribute_value(em.node, "fmod") or 0
    is_float = elem in _FLOAT_TYPES
    if bool(fmod) != is_float:
        em.refuse(f"fmod={fmod} on {'floating-point' if is_float else 'integer'} inputs is new at Mod-28; "
                  "Mod-13 has no such mode")
    generic.cross(em, step, direction, handled=(Semantics,))


adapter("Mod", 28, UP)(generic.meaning_kept)  # Mod-28 only accepts more (fmod with either type)


_INT_TYPES = frozenset({2, 3, 4, 5, 6, 7, 12, 13})  # (u)int8/16/32/64


@adapter(("Max", "Min"), 12, DOWN)
def max_min_12_8(em: Emitter, step: Step, direction: str) -> None:
    """Max/Min on integers (new at 12) as ``Where(Greater(a, b), a, b)`` pairwise; other types relabel."""
    node = em.node
    types = {em.elem_type(n) for n in node.input if n}
    if not types & _INT_TYPES:
        generic.cross(em, step, direction)
        return
    if em.target < 9:
        # Exact in a float type that holds every such integer (max/min picks one of them): float for (u)int8/16;
        # double for (u)int32, whose Max/Min kernels onnxruntime has from version 8 only.
        wide = onnx.TensorProto.FLOAT if types <= _TINY_INTS else onnx.TensorProto.DOUBLE
        if types <= _TINY_INTS or (types <= _SMALL_INTS and em.target >= 8):
            widened = [em.op("Cast", [n], to=wide) for n in node.input if n]
            (elem,) = types
            em.op("Cast", [em.op(node.op_type, widened)], list(node.output), to=elem)
            return
        em.refuse(f"{node.op_type} takes integers from version 12 on; the exact form with Where and an integer "
                  "Greater/Less needs opset 9; below it a form in float is exact for (u)int8/16 only (in double, "
                  "(u)int32 from opset 8, where onnxruntime's Max/Min take doubles); the lowest opset for this "
                  "node is 9")
    compare = "Greater" if node.op_type == "Max" else "Less"
    inputs = [n for n in node.input if n]
    (output,) = node.output
    if len(inputs) == 1:
        em.op("Identity", inputs, [output])
        return
    acc = inputs[0]
    for k, other in enumerate(inputs[1:], start=1):
        chosen = em.op(compare, [acc, other])
        acc = em.op("Where", [chosen, acc, other], [output] if k == len(inputs) - 1 else None)


_FLOATS = {1, 10, 11}  # float, float16, double: what Less/Greater-7 take
#: Integers of at most 32 bits: each is a double exactly ((u)int8/16/32).
_SMALL_INTS = frozenset({2, 3, 4, 5, 6, 12})
#: (u)int8/16: each is a float exactly.
_TINY_INTS = frozenset({2, 3, 4, 5})


@adapter(("Greater", "Less"), 9, DOWN)
def greater_less_9_7(em: Emitter, step: Step, direction: str) -> None:
    """Greater/Less on integers (new at 9): integers of at most 32 bits compared as doubles (exact)."""
    elem = em.elem_type(em.node.input[0])
    if elem not in _SMALL_INTS:
        generic.cross(em, step, direction)
        return
    a, b = (em.op("Cast", [n], to=onnx.TensorProto.DOUBLE) for n in em.node.input)
    em.op(em.node.op_type, [a, b], list(em.node.output))


@adapter("Equal", 11, DOWN)
def equal_11_7(em: Emitter, step: Step, direction: str) -> None:
    """Equal on floats (new at 11) from Less, Greater and a NaN test; other types cross as the generic step."""
    a, b = em.node.input
    elem = em.elem_type(a)
    if elem in _SMALL_INTS - {6}:  # Equal-7 takes int32 and int64: widened, every value kept
        wide = onnx.TensorProto.INT64 if elem == 12 else onnx.TensorProto.INT32
        em.op("Equal", [em.op("Cast", [a], to=wide), em.op("Cast", [b], to=wide)], list(em.node.output))
        return
    if elem not in _FLOATS:
        generic.cross(em, step, direction)
        return
    dtype = np_dtype(elem)
    inf, minus_inf = em.const(np.array(np.inf, dtype), "inf"), em.const(np.array(-np.inf, dtype), "minus_inf")

    def is_number(x: str) -> str:
        return em.op("Or", [em.op("Less", [x, inf]), em.op("Greater", [x, minus_inf])])

    ordered = em.op("Or", [em.op("Less", [a, b]), em.op("Greater", [a, b])])
    numbers = em.op("And", [is_number(a), is_number(b)])
    em.op("And", [em.op("Not", [ordered]), numbers], list(em.node.output))


#: (u)int8/16: what Add/Sub/Mul/Div take from version 14 only.
_NARROW_INTS = {2: "uint8", 3: "int8", 4: "uint16", 5: "int16"}


@adapter(("Add", "Sub", "Mul", "Div"), 14, DOWN)
def arithmetic_14_13(em: Emitter, step: Step, direction: str) -> None:
    """Add/Sub/Mul/Div on (u)int8/16 (new at 14): computed in int64 and cast back; other types cross as they are.

    Every sum, difference and product of two such values is an int64 exactly, and a quotient truncates
    toward zero in both; the cast back keeps the low bits, as the narrow kernel's wrap-around does
    (onnxruntime computes them in C++, where the narrow values are promoted and the result converted).
    """
    node = em.node
    elem = em.elem_type(node.input[0])
    if elem not in _NARROW_INTS:
        generic.cross(em, step, direction)
        return
    a, b = (em.op("Cast", [n], to=onnx.TensorProto.INT64) for n in node.input)
    em.op("Cast", [em.op(node.op_type, [a, b])], list(node.output), to=elem)
