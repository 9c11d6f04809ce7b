"""Backend forms that find a first (or last) extremum with reductions only: no ArgMax, no TopK.

Some backends break ArgMax/ArgMin, Hardmax *and* ``TopK(k=1)`` ties wrongly (OpenVINO 2023.0 and
2024.0 pick a later maximum along a last axis of 16 or more elements); a profile (``--for BACKEND``)
then names one of these exact forms:

* :class:`ArgReduceForm` (``argmax-reduce``): ArgMax/ArgMin → the index of the first extremum as
  ``ReduceMin(Where(Equal(x, ReduceMax(x, axis, keepdims=1)), iota, n - 1), axis)`` (ArgMin: ``ReduceMin``
  for the extremum); ``select_last_index=1`` → ``ReduceMax(Where(.., iota, 0), axis)``;
* :class:`HardmaxReduceForm` (``hardmax-reduce``): Hardmax → the ``hardmax`` decomposition's one-hot,
  each first maximum found that way instead of by ``ArgMax``.

Why it is exact: ``Equal(x, max)`` is true exactly at the maxima along the axis (the maximum is one
of the values, bit for bit), so the least index where it holds is the first maximum and the
greatest the last (ONNX: "the index of the first occurrence" / "the last" with ``select_last_index``).
The value put where it does not hold never wins over an index where it does: ``n - 1`` for the
least (no index exceeds it), ``0`` for the greatest. Where it holds nowhere (a NaN row: ONNX leaves
NaN open, and verification records NaN differences without judging them) the index is ``n - 1``
(or 0): always in range, so a Gather downstream cannot fail on it.

Types: Equal takes the float types from Equal-11 (Equal-7 only bool/int32/int64); at opset 9 and 10 a
float extremum is found by ``Not(Less(x, max))`` (ArgMin: ``Not(Greater(x, min))``, Less/Greater-9 take
floats): every value is at most the row's maximum, so "not below it" is "equal to it", bit for bit
(-0 and +0 alike, as for Equal; a NaN makes the two differ, and the index stays in range). Where exists
from opset 9; below, refused. ReduceMax/ReduceMin at the target, with an onnxruntime kernel to verify
them, take float16/float/double/int32/int64 (int8/uint8 from version 12). Others are widened exactly
(int8/16 and uint8/16 → int32, uint32 → int64 with Cast-6, bfloat16 → float32 with Cast-13), uint64
is refused (no exact widening has a kernel).
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import int_attribute
from lowerer.rules.backend_forms import SelectLastIndexForm
from lowerer.rules.hardmax_decomposition import IOTA_CONST_MAX, HardmaxDecomposition
from lowerer.steps.emitter import Emitter, normalize_axis

__all__ = ["ArgReduceForm", "HardmaxReduceForm", "extremum_index_reduce"]

T = onnx.TensorProto
_FLOATS: frozenset[int] = frozenset({T.FLOAT16, T.FLOAT, T.DOUBLE})
#: Types ReduceMax/ReduceMin take with an onnxruntime kernel (measured with onnxruntime 1.32.0: no uint32/uint64
#: kernel; int8/uint8 from version 12; int16/uint16 not in the schema).
_REDUCE_TAKES: frozenset[int] = _FLOATS | {T.INT32, T.INT64}
_WIDER: dict[int, int] = {T.INT8: T.INT32, T.UINT8: T.INT32, T.INT16: T.INT32, T.UINT16: T.INT32, T.UINT32: T.INT64,
          T.BFLOAT16: T.FLOAT}


def _type_name(elem: int) -> str:
    return str(T.DataType.Name(elem)).lower()


def _takes(opset: int) -> frozenset[int]:
    return _REDUCE_TAKES | {T.INT8, T.UINT8} if opset >= 12 else _REDUCE_TAKES


def _checked_type(em: Emitter, v: str) -> int | None:
    """The type ``v`` is widened to (exactly) for the form, or None when it is taken as it is; else a refusal.

    Every type needs Where-9 (opset 9); floats are compared by Less/Greater below opset 11.
    """
    elem = em.elem_type(v)
    if elem is None:
        if em.node.op_type == "Hardmax" and em.source_version < 13:  # float16/float/double only
            elem = T.FLOAT
        else:
            elem = em.require_elem_type(v, "the first extremum's form (Equal, Where, ReduceMax) depends on it")
    wide = _WIDER.get(elem) if elem not in _takes(em.opset) else None
    final = wide if wide is not None else elem
    if final not in _takes(em.opset):
        em.refuse(f"the extremum is found by ReduceMax/ReduceMin + Equal + Where (opset {em.opset}), which "
                  f"onnxruntime runs on {', '.join(sorted(_type_name(t) for t in _takes(em.opset)))}, not "
                  f"{_type_name(elem)}, and no exact widening reaches one of them")
    if wide == T.FLOAT and em.opset < 13:
        em.refuse_bfloat16(v)
    if em.opset < 9:
        em.refuse("the extremum is found by Equal (Less on floats) + Where + ReduceMin, and Where needs opset 9; "
                  "target opset >= 9")
    return wide


def _reduce(em: Emitter, op: str, v: str, axis: int, keepdims: int, outputs: list[str] | None = None) -> str:
    """``ReduceMax``/``ReduceMin`` of ``v`` over ``axis`` in the target's form (axes as an input from 18)."""
    if (em.version_of(op) or 1) >= 18:
        return em.op(op, [v, em.const(np.array([axis], dtype=np.int64), "axes")], outputs, keepdims=keepdims)
    return em.op(op, [v], outputs, axes=[axis], keepdims=keepdims)


def _iota_and_fill(em: Emitter, v: str, axis: int, last: bool) -> tuple[str, str]:
    """``0..n-1`` (int64) laid along ``axis`` of ``v``, and the value for "not an extremum" (``n - 1``; 0 for last)."""
    dims = em.dims(v)
    trailing = -axis - 1 if axis < 0 else em.require_rank(v, f"to lay the index along axis {axis}") - 1 - axis
    size = dims[axis] if dims is not None else None
    layout = [-1] + [1] * trailing
    if size is not None and (size <= IOTA_CONST_MAX or em.opset < 11):
        iota = em.const(np.arange(size, dtype=np.int64).reshape([size] + [1] * trailing), "iota")
        fill = em.const(np.array(0 if last else max(size - 1, 0), dtype=np.int64), "fill")
        return iota, fill
    if em.opset < 11:
        em.refuse("the size along the axis is dynamic, and below opset 11 there is no Range to build the index "
                  "from it; add shape information or target opset >= 11")
    one = em.const(np.array(1, dtype=np.int64), "one")
    if size is not None:
        n = em.const(np.array(size, dtype=np.int64), "size")
    else:
        n = em.op("Gather", [em.op("Shape", [v]), em.const(np.array(axis, dtype=np.int64), "axis")], axis=0)
    iota = em.op("Range", [em.const(np.array(0, dtype=np.int64), "zero"), n, one])
    if trailing:
        iota = em.op("Reshape", [iota, em.const(np.array(layout, dtype=np.int64), "shape")])
    fill = em.const(np.array(0, dtype=np.int64), "fill") if last else em.op("Sub", [n, one])
    return iota, fill


def extremum_index_reduce(em: Emitter, v: str, axis: int, keepdims: int | None, largest: bool,
                          last: bool = False, outputs: list[str] | None = None) -> str:
    """The int64 index of the first (``last``: the last) maximum (``largest``) or minimum of ``v`` along ``axis``.

    ``ReduceMin(Where(Equal(v, ReduceMax(v)), iota, n - 1))`` (``last``: ``ReduceMax(Where(.., iota, 0))``),
    keeping the axis unless ``keepdims`` is 0; written to ``outputs`` when given. ``v`` is widened first
    where ReduceMax/Equal at the target cannot take its type (see the module); a negative axis below
    opset 11 is made non-negative (needs the rank).
    """
    wide = _checked_type(em, v)
    floats = (wide or em.elem_type(v) or T.FLOAT) in _FLOATS  # unknown only for Hardmax before 13: a float
    if axis < 0 and em.opset < 11:
        axis = normalize_axis(axis, em.require_rank(v, "to make the negative axis non-negative"))
    if wide is not None:
        v = em.op("Cast", [v], to=wide)
    extremum = _reduce(em, "ReduceMax" if largest else "ReduceMin", v, axis, 1)
    if floats and em.opset < 11:  # no Equal on floats: "not below the maximum"
        at = em.op("Not", [em.op("Less" if largest else "Greater", [v, extremum])])
    else:
        at = em.op("Equal", [v, extremum])
    iota, fill = _iota_and_fill(em, v, axis, last)
    chosen = em.op("Where", [at, iota, fill])
    return _reduce(em, "ReduceMax" if last else "ReduceMin", chosen, axis, 0 if keepdims == 0 else 1, outputs)


class ArgReduceForm(SelectLastIndexForm):
    """``ArgMax``/``ArgMin`` (1, 11, 12, 13) → the extremum's index from reductions (no ArgMax/TopK), exactly.

    Cases:

    1. ``ReduceMax`` (ArgMin: ``ReduceMin``) with ``keepdims=1`` → ``Equal`` → ``Where(.., iota, n - 1)`` →
       ``ReduceMin`` with the node's ``keepdims`` (see :func:`extremum_index_reduce`);
    2. ``select_last_index=1``: ``Where(.., iota, 0)`` → ``ReduceMax``;
    3. an empty input: the reductions give the empty result ArgMax gives (an empty axis with other
       dims non-empty fails in onnxruntime's ArgMax: nothing to match there);
    4. an element type the reductions cannot take: widened exactly, else refused; floats at opset 9
       and 10 compared by Less/Greater (no Equal on floats there); every type below 9 refused (Where-9).
    """

    name = "argmax-reduce"
    decomposition = "argmax-reduce"

    def rewrite(self, em: Emitter) -> None:
        """Emit the reduction form of ``em.node``."""
        node = em.node
        axis = int_attribute(node, "axis", 0)
        assert axis is not None
        select_last = int_attribute(node, "select_last_index", 0) if em.source_version >= 12 else 0
        if select_last:
            extremum_index_reduce(em, node.input[0], axis, int_attribute(node, "keepdims", 1), node.op_type == "ArgMax",
                                  last=True, outputs=list(node.output))
            return
        self._first_extremum(em, node.input[0], axis, int_attribute(node, "keepdims", 1), list(node.output))

    def _first_extremum(self, em: Emitter, v: str, axis: int, keepdims: int | None,
                        outputs: list[str] | None = None) -> str:
        return extremum_index_reduce(em, v, axis, keepdims, em.node.op_type == "ArgMax", outputs=outputs)


class HardmaxReduceForm(HardmaxDecomposition):
    """``Hardmax`` (1, 11, 13) → the ``hardmax`` decomposition with each first maximum from reductions.

    The one-hot, the coerced-to-2-D meaning of versions 1/11, the two-level search on a long last
    axis and the guard of a possibly empty input are
    :class:`~lowerer.rules.hardmax_decomposition.HardmaxDecomposition`'s, unchanged: only
    :meth:`first_max` differs (so no ``ArgMax`` or ``TopK`` is left). Needs opset >= 9 (Where).
    """

    name = "hardmax-reduce"
    decomposition = "hardmax-reduce"

    def first_max(self, em: Emitter, v: str, axis: int, keepdims: int = 1) -> str:
        """The index of the first maximum of ``v`` along ``axis``: ReduceMax, Equal, Where, ReduceMin."""
        return extremum_index_reduce(em, v, axis, keepdims, largest=True)
