"""Backend forms that find a first extremum with ``TopK(k=1)``, and Shape's ``start``/``end`` as a Slice.

Some backends break ArgMax/Hardmax ties wrongly (they may return a later maximum) or ignore
Shape-15's ``start``/``end``; a profile (``--for BACKEND``) then names one of these exact forms:

* :class:`ArgTopKForm` (``argmax-topk``): ArgMax/ArgMin → ``TopK(k=1)``'s indices (``Squeeze`` for
  ``keepdims=0``; ``select_last_index=1`` through the reversed axis, as ``argmax-flip`` does);
* :class:`HardmaxTopKForm` (``hardmax-topk``): Hardmax → the ``hardmax`` decomposition's one-hot, each
  first maximum found by ``TopK(k=1)`` instead of ``ArgMax``;
* :class:`ShapeSliceForm` (``shape-slice``): Shape (15+) with ``start``/``end`` → ``Shape`` + ``Slice``.

Why ``TopK(k=1)`` is the first extremum: ONNX says TopK returns "the lower index first" among
equal values. onnxruntime's CPU kernel does so: for ``k == 1``, ``FindTopKElements`` keeps the
first element and replaces it only on a strictly greater (``largest``) or strictly smaller value
(``CompareValueOnly`` is ``>``/``<``), so an equal value later never wins (microsoft/onnxruntime,
``onnxruntime/core/providers/cpu/math/top_k.cc``, commit 0606f7d6a37fb8dfc2cde779e3cf4dd02fe457ea;
measured the same with onnxruntime 1.32.0 on ties, all-equal rows and ±inf by
``tests/test_backend_topk_forms.py``). NaN is left open by ONNX for both ops: a NaN row's index
follows TopK (which keeps a leading NaN, and skips a later one), and verification records any NaN
difference without judging it.

Types: TopK-1/10 take float16/float/double, TopK-11 the integer types too, TopK-24 bfloat16.
What TopK at the target cannot take is widened exactly (bfloat16 → float32 with Cast-13;
int8/16/32 and uint8/16/32 → double below TopK-11, with Cast-6), or refused (int64/uint64 below
TopK-11: double cannot hold them all). ArgMin below TopK-11 (no ``largest``) takes the maximum
of ``Neg(x)``, exact on the float types (negation only flips the sign); below opset 6 it is refused
(onnxruntime has no Neg-1 kernel, so the form could not be verified).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx

from lowerer.model_io.node_attributes import int_attribute
from lowerer.rules.backend_forms import SelectLastIndexForm
from lowerer.rules.hardmax_decomposition import HardmaxDecomposition
from lowerer.steps.emitter import Emitter, Rule, normalize_axis
from lowerer.steps.signature import formal_types

__all__ = ["ArgTopKForm", "HardmaxTopKForm", "ShapeSliceForm", "first_extremum_topk"]

T = onnx.TensorProto
INT64_MAX = int(np.iinfo(np.int64).max)
#: Integer types a double holds exactly (every value, so order and ties are kept).
_IN_DOUBLE = frozenset({T.INT8, T.INT16, T.INT32, T.UINT8, T.UINT16, T.UINT32})


def _type_name(elem: int) -> str:
    return str(T.DataType.Name(elem)).lower()


@functools.lru_cache(maxsize=64)
def _takes(op: str, opset: int) -> frozenset[int]:
    """The element types ``op``'s first input takes at ``opset`` (from its schema)."""
    allowed = formal_types(op, opset)[0][0][0]
    return frozenset(v for v in T.DataType.values() if f"tensor({_type_name(v)})" in allowed)


def _widening(em: Emitter, v: str, elem: int | None) -> int | None:
    """The type ``v`` is widened to (exactly) for TopK at the target, or None when TopK takes it; else a refusal."""
    version = em.version_of("TopK")
    assert version is not None  # TopK exists from opset 1
    takes = _takes("TopK", em.opset)
    if elem is None:
        if _takes(em.node.op_type, em.opset) <= takes:
            return None
        elem = em.require_elem_type(v, f"TopK-{version} (opset {em.opset}) takes only "
                                       f"{', '.join(sorted(_type_name(t) for t in takes))}")
    if elem in takes:
        return None
    if elem == T.BFLOAT16 and em.opset >= 13:
        return T.FLOAT
    if elem in _IN_DOUBLE and em.opset >= 6:
        return T.DOUBLE
    what = "target opset >= 11 (TopK-11 takes the integer types)" if version < 11 else "a type TopK takes"
    em.refuse(f"the first extremum is found by TopK-{version} (opset {em.opset}), which takes "
              f"{', '.join(sorted(_type_name(t) for t in takes))}, not {_type_name(elem)}, and no exact "
              f"widening reaches one of them; {what}")


def first_extremum_topk(em: Emitter, v: str, axis: int, keepdims: int | None, largest: bool,
                        outputs: list[str] | None = None, pad: bool = False) -> str:
    """The int64 index of the first maximum (``largest``) or minimum of ``v`` along ``axis``, as ArgMax/ArgMin.

    ``TopK(k=1)``'s indices (size 1 along ``axis``), squeezed when ``keepdims`` is 0; written to
    ``outputs`` when given. TopK-1 takes ``k`` as an attribute, TopK-10 as an input, TopK-11 also
    ``largest`` (below it a minimum is the maximum of ``Neg(v)``, float types only). ``pad`` first
    appends one least element along the axis (see :func:`_pad_least`), for an axis that may be empty.
    """
    version = em.version_of("TopK")
    assert version is not None
    wide = _widening(em, v, em.elem_type(v))
    if wide is not None:
        v = em.op("Cast", [v], to=wide)
    if not largest and version < 11:
        if em.opset < 6:
            em.refuse(f"the first minimum is TopK-{version}'s maximum of Neg(x) (TopK has no 'largest' below "
                      "version 11), and Neg below opset 6 (Neg-1) has no onnxruntime kernel to verify it; "
                      "target opset >= 6")
        v = em.op("Neg", [v])
        largest = True
    padded_nan = pad and onnx.helper.tensor_dtype_to_np_dtype(
        em.require_elem_type(v, "the value appended along a possibly empty axis is written in it")).kind == "f"
    size = _axis_size(em, v, axis) if padded_nan else None
    if pad:
        v = _pad_least(em, v, axis, largest)
    squeeze = keepdims == 0
    base = em.node.output[0] if em.node.output else "topk"
    values = em.fresh(f"{base}_topk_values")
    index = outputs[0] if outputs and not squeeze and size is None else em.fresh(f"{base}_topk_index")
    if version < 10:
        em.op("TopK", [v], [values, index], axis=axis, k=1)
    else:
        k = em.const(np.array([1], dtype=np.int64), "k")
        em.op("TopK", [v, k], [values, index], axis=axis, largest=(None if version < 11 else int(largest)))
    if size is not None:  # a row all NaN: TopK may pick the appended element (index n); onnxruntime gives 0
        chosen = em.op("Cast", [em.op("Equal", [index, size])], to=onnx.TensorProto.INT64)
        kept = em.op("Sub", [em.const(np.array(1, dtype=np.int64), "one"), chosen])
        index = em.op("Mul", [index, kept], outputs if outputs and not squeeze else None)
    if not squeeze:
        return index
    squeeze_version = em.version_of("Squeeze") or 1
    if axis < 0 and squeeze_version < 11:
        axis = normalize_axis(axis, em.require_rank(v, "to squeeze the axis with Squeeze below opset 11"))
    if squeeze_version >= 13:
        return em.op("Squeeze", [index, em.const(np.array([axis], dtype=np.int64), "axes")], outputs)
    return em.op("Squeeze", [index], outputs, axes=[axis])


def _axis_size(em: Emitter, v: str, axis: int) -> str:
    """The run-time size of ``v`` along ``axis`` (a 0-d int64), from opset 7 (Equal on int64 broadcast)."""
    if em.opset < 7:
        em.refuse("the axis may be empty, so one least element is appended before TopK, and a row all NaN "
                  "would then give the index past its end; mapping it back needs Equal-7 on int64: target opset >= 7")
    rank = em.require_rank(v, "to read the possibly empty axis's size") if axis < 0 else None
    where = normalize_axis(axis, rank) if rank is not None else axis
    return em.op("Gather", [em.op("Shape", [v]), em.const(np.array(where, dtype=np.int64), "axis_index")])


def _pad_least(em: Emitter, v: str, axis: int, largest: bool) -> str:
    """``v`` with one element appended along ``axis`` that never is the first extremum of a non-empty axis.

    ArgMax of an input with an empty axis and another empty dim is an empty tensor in onnxruntime,
    where TopK(k=1) fails (k is larger than the axis). The appended element is the least value
    (-inf, or the type's minimum; the greatest for a minimum): it is never strictly better than
    what comes before it, and among equals TopK keeps the lower index, so a non-empty axis gives
    the same index; an empty one gives TopK something to read, and the (empty) result its shape.
    No ``If``: some backends (OpenVINO's provider) refuse graphs holding one.
    """
    elem = em.require_elem_type(v, "the value appended along a possibly empty axis is written in it")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    least = (-np.inf if largest else np.inf) if dtype.kind == "f" else \
        (np.iinfo(dtype).min if largest else np.iinfo(dtype).max)
    version = em.version_of("Pad") or 1
    if version >= 18:
        return em.op("Pad", [v, em.const(np.array([0, 1], dtype=np.int64), "pads"),
                             em.const(np.array(least, dtype=dtype), "least"),
                             em.const(np.array([axis], dtype=np.int64), "axes")])
    rank = em.require_rank(v, "to pad one element along the possibly empty axis (Pad below opset 18)")
    pads = [0] * (2 * rank)
    pads[rank + normalize_axis(axis, rank)] = 1
    if version >= 11:
        return em.op("Pad", [v, em.const(np.array(pads, dtype=np.int64), "pads"),
                             em.const(np.array(least, dtype=dtype), "least")])
    if version >= 2:
        return em.op("Pad", [v], pads=pads, value=float(least))
    return em.op("Pad", [v], paddings=pads, value=float(least))


class ArgTopKForm(SelectLastIndexForm):
    """``ArgMax``/``ArgMin`` (1, 11, 12, 13) → ``TopK(k=1)``'s indices, exactly.

    Cases:

    1. ``TopK(k=1, axis)`` (``largest=0`` for ArgMin from TopK-11; below it ``Neg`` first), its
       int64 indices the result; ``Squeeze(axis)`` for ``keepdims=0``;
    2. ``select_last_index=1``: the axis reversed (``Gather`` with a reversed table for a static size,
       ``Slice`` with step -1 otherwise), case 1, the index mapped back, as ``argmax-flip`` does;
    3. an axis whose size may be 0 in an input that may be empty: one least element appended first
       (``Pad``, no ``If``; see :func:`_pad_least`);
    4. an element type TopK at the target cannot take: widened exactly (see the module), else
       refused naming the type and the TopK version; a negative axis below opset 11 made
       non-negative (needs the rank).
    """

    name = "argmax-topk"
    decomposition = "argmax-topk"

    def rewrite(self, em: Emitter) -> None:
        """Emit the TopK form of ``em.node``."""
        node = em.node
        x = node.input[0]
        axis = int_attribute(node, "axis", 0)
        assert axis is not None
        keepdims = int_attribute(node, "keepdims", 1)
        select_last = int_attribute(node, "select_last_index", 0) if em.source_version >= 12 else 0
        if axis < 0 and em.opset < 11:
            axis = normalize_axis(axis, em.require_rank(x, "to make the negative axis non-negative"))
        _widening(em, x, em.elem_type(x))  # refuse before emitting anything
        if select_last:
            self._emulate_select_last(em, x, axis, keepdims)
            return
        self._first_extremum(em, x, axis, keepdims, list(node.output))

    def _first_extremum(self, em: Emitter, v: str, axis: int, keepdims: int | None,
                        outputs: list[str] | None = None) -> str:
        x = em.node.input[0]
        dims = em.dims(x)
        size = dims[normalize_axis(axis, len(dims))] if dims is not None else None
        pad = (size is None or size == 0) and em.may_be_empty(x)
        return first_extremum_topk(em, v, axis, keepdims, em.node.op_type == "ArgMax", outputs, pad)


class HardmaxTopKForm(HardmaxDecomposition):
    """``Hardmax`` (1, 11, 13) → the ``hardmax`` decomposition with each first maximum from ``TopK(k=1)``.

    The one-hot, the coerced-to-2-D meaning of versions 1/11 (``Flatten`` → one-hot → ``Reshape``
    back), the two-level search on a long last axis, bfloat16's widening and the guard of a
    possibly empty input are :class:`~lowerer.rules.hardmax_decomposition.HardmaxDecomposition`'s,
    unchanged: only :meth:`first_max` differs.
    """

    name = "hardmax-topk"
    decomposition = "hardmax-topk"

    def first_max(self, em: Emitter, v: str, axis: int, keepdims: int = 1) -> str:
        """The index of the first maximum of ``v`` along ``axis``: ``TopK(k=1)``'s indices."""
        return first_extremum_topk(em, v, axis, keepdims, largest=True)


class ShapeSliceForm(Rule):
    """``Shape`` (15+) with ``start``/``end`` → ``Shape`` without them + ``Slice`` on axis 0, exactly.

    Shape clamps ``start``/``end`` (negative: counted from the back) to ``[0, rank]`` and gives an
    empty result when ``start >= end``; Slice-13 clamps its constant ``starts``/``ends`` the same
    way (an absent ``end`` is ``INT64_MAX``). A Shape with neither stays as it is; ``start=0`` alone (the whole
    shape, as torch's exporter writes it) is dropped, so no bound is left for a backend to misread.
    """

    name = "shape-slice"
    op_types = ("Shape",)
    versions = (15, 19, 21, 23, 24, 25)
    decomposition = "shape-slice"

    def rewrite(self, em: Emitter) -> None:
        """Emit ``Shape`` + ``Slice`` for ``em.node``."""
        node = em.node
        start = int_attribute(node, "start")
        end = int_attribute(node, "end")
        if start in (None, 0) and end is None:
            em.copy_node(start=None)
            return
        whole = em.fresh(f"{node.output[0]}_whole")
        copy = em.copy_node(start=None, end=None)
        copy.output[0] = whole
        em.op("Slice", [whole, em.const(np.array([start or 0], dtype=np.int64), "starts"),
                        em.const(np.array([INT64_MAX if end is None else end], dtype=np.int64), "ends"),
                        em.const(np.array([0], dtype=np.int64), "axes")], list(node.output))
