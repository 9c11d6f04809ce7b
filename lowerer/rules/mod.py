"""Lowering of Mod-10/13 for targets below opset 10, for integer inputs.

``t = a - (a / b) * b`` with integer Div (truncating, as onnxruntime's kernel does) is the
truncated remainder (``fmod=1``, and both modes for unsigned types); ``fmod=0`` (the sign follows
the divisor) adds ``b`` where ``t`` is non-zero and its sign differs from ``b``'s. Every step is
exact in integers: ``|q * b| <= |a|``, and ``t + b`` is only taken when the two have opposite signs.

Guards: 8- and 16-bit inputs are computed in int32 (Div below 14 takes 32- and 64-bit integers
only) and cast back; a divisor of -1 is replaced by 1 for 32- and 64-bit signed inputs (the
remainder is 0 either way, and ``INT_MIN / -1`` overflows: onnxruntime's int64 Div traps on it).
Comparisons of integers below opset 9 (Less-7 takes floats only) are made on a float64 copy,
whose sign is the integer's. Float inputs are refused: ``a - trunc(a / b) * b`` rounds where the
kernel's ``fmod`` does not.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import lowering

__all__ = ["mod"]

#: Types Div-7 (and Mul/Sub/Add-7) take as they are; the smaller integers go through int32.
_NATIVE = (TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32, TensorProto.UINT64)


def _sign_tests(em: Emitter, value: str, zero: str) -> tuple[str, str]:
    """(value < 0, value > 0), on a float64 copy below opset 9 (Less-7/Greater-7 take floats only)."""
    if em.target < 9:
        value = em.op("Cast", [value], to=TensorProto.DOUBLE)
        zero = em.const(np.array(0.0), "zero_f64")
    return em.op("Less", [value, zero]), em.op("Greater", [value, zero])


@lowering("Mod")
def mod(em: Emitter) -> None:
    """Integer Mod as Div/Mul/Sub (and the divisor's sign fixed up for ``fmod=0``); floats refused."""
    node = em.node
    a, b = node.input[0], node.input[1]
    fmod = int_attribute(node, "fmod", 0)
    elem = em.require_elem_type(a, "Mod is lowered exactly for integers only")
    dtype = np_dtype(elem)
    if dtype.kind not in "iu":
        em.refuse(f"{a!r} is {dtype}: a float remainder written with Div/Mul/Sub rounds where Mod's fmod does not "
                  "(no exact form); choose a target opset >= 10")
    work = elem if elem in _NATIVE else TensorProto.INT32
    wdtype = np_dtype(work)
    if work != elem:
        a, b = em.op("Cast", [a], to=work), em.op("Cast", [b], to=work)
    elif dtype.kind == "i":  # b = -1 → 1: same remainder (0), and no INT_MIN / -1 overflow
        is_minus_one = em.op("Equal", [b, em.const(np.array(-1, wdtype), "minus_one")])
        shift = em.op("Mul", [em.op("Cast", [is_minus_one], to=work), em.const(np.array(2, wdtype), "two")])
        b = em.op("Add", [b, shift])
    cast_back = work != elem
    signed_fix = fmod == 0 and dtype.kind == "i"
    final = None if cast_back else list(node.output)
    t = em.op("Sub", [a, em.op("Mul", [em.op("Div", [a, b]), b])], None if signed_fix else final)
    if signed_fix:
        zero = em.const(np.array(0, wdtype), "zero")
        t_neg, t_pos = _sign_tests(em, t, zero)
        b_neg, b_pos = _sign_tests(em, b, zero)
        differ = em.op("Or", [em.op("And", [t_neg, b_pos]), em.op("And", [t_pos, b_neg])])
        t = em.op("Add", [t, em.op("Mul", [b, em.op("Cast", [differ], to=work)])], final)
    if cast_back:
        em.op("Cast", [t], list(node.output), to=elem)
