"""Hardmax (versions 1, 11, 13) decomposed into ArgMax and a one-hot.

Hardmax puts 1 at the *first* maximum and 0 elsewhere; ArgMax returns the index of the first
maximum, so the one-hot of that index is Hardmax. Versions 1 and 11 coerce the input to 2-D
at ``axis`` and pick one maximum per row of ``[d0*..*d(k-1), dk*..*d(r-1)]``; version 13 picks
one along the single dim ``axis``.

The one-hot is written as ``Equal(index, iota)`` → ``Cast``, which onnxruntime runs several
times faster than ``OneHot`` and which exists from opset 7 (two-way broadcasting). The iota
is a constant when the size along the axis is static, else ``Range`` over ``Shape``.

Along a long last axis, onnxruntime's ArgMax (about 1 ns per element, not vectorised) is far
slower than its Hardmax, so there the first maximum is found in two levels, with the axis
viewed as ``[blocks, block]``: ``ReduceMax`` over each block (fast, vectorised), ArgMax over
the few block maxima gives the first block holding the maximum, ArgMax within that block (one
gathered block per row) the first maximum in it. This is exact: a block's maximum equals the
row's maximum only if the block holds it, so the first such block holds the first maximum.
The one-hot is then the outer product (``And``) of the two small one-hots.

The values are taken in their own type; bfloat16 (no onnxruntime ArgMax) is widened to float32
first, which is exact and keeps the order. NaN inputs are outside the specification; the
decomposition then follows ArgMax (onnxruntime's own Hardmax zeroes a row whose maximum reads
as NaN). An input that may be empty at run time (a dynamic dim) goes through
``If(Size(x) == 0)``: the empty input itself, else the decomposition (ArgMax fails on empty).
"""

from __future__ import annotations

import math

import numpy as np
import onnx

from lowerer.rules.global_max_pool import reduce_max
from lowerer.rules.hardmax import read_axis_meaning
from lowerer.steps.emitter import Emitter, Rule, normalize_axis

__all__ = ["HardmaxDecomposition"]

BF16 = onnx.TensorProto.BFLOAT16
_INT32_MAX = np.iinfo(np.int32).max
#: From this static size along a last axis on, the first maximum is found in two levels.
TWO_LEVEL_MIN = 128
#: The block sizes the two-level search may use (a divisor of the size, the one nearest its root).
_BLOCK_RANGE = (8, 2048)
#: Up to this size an iota is a constant; above it (opset >= 11) a ``Range``, to keep models small.
IOTA_CONST_MAX = 1 << 16
#: Below opset 7 the one-hot is a Gather from an n x n identity table; the largest n allowed.
EYE_MAX = 1024
_NUMPY_TYPES: dict[int, type] = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.DOUBLE: np.float64,
}


class HardmaxDecomposition(Rule):
    """``Hardmax`` (1, 11, 13) → ``ArgMax`` + one-hot, valid at the target opset.

    Cases:

    1. version 13 (one axis), opset >= 7: ``ArgMax(axis, keepdims=1)`` → ``Equal`` against an
       iota laid along the axis → ``Cast`` to the input type (``CastLike`` when the type is
       unknown, opset >= 15); a static size along the last axis of at least
       :data:`TWO_LEVEL_MIN` with a block size dividing it (opset >= 11) uses the two-level
       search: ``Reshape`` → ``ReduceMax`` → ``ArgMax`` → ``GatherND`` (``GatherElements`` at
       opset 11) → ``ArgMax`` → two small ``Equal`` → ``And`` → ``Reshape`` → ``Cast``;
    2. versions 1/11 (coerced to 2-D) at the last axis: as case 1 on that axis; at other axes:
       ``Flatten(axis)`` → case 1 on axis 1 → ``Reshape`` back to ``Shape(x)`` (the two-level
       search reshapes ``x`` itself, without ``Flatten``);
    3. dynamic size along the axis: the iota is ``Range(0, n)`` with ``n`` from ``Shape``
       (opset >= 11); at opsets 9-10, ``OneHot`` with the depth from ``Shape``; at 7-8 refused;
    4. opset < 7 (no broadcasting Equal): ``ArgMax`` → ``Gather`` of rows of a constant identity
       table (static size <= :data:`EYE_MAX`, known type; else refused), with a ``Transpose``
       (one axis) or a ``Reshape`` (static dims below opset 5) back;
    5. a static dim of size 0: ``Identity`` (the output is empty); a dynamic dim: the whole
       decomposition in the else branch of ``If(Size(x) == 0)``, whose then branch passes ``x``;
    6. bfloat16: widened to float32 before ArgMax; refused below opset 13;
    7. refused: an axis outside ``[-r, r-1]`` (onnxruntime rejects it too), a negative axis below
       opset 11 with unknown rank, an unknown type below opset 15.
    """

    name = "hardmax-decomposition"
    op_types = ("Hardmax",)
    versions = (1, 11, 13)
    decomposition = "hardmax"

    def rewrite(self, em: Emitter) -> None:
        """Emit the decomposition of ``em.node``."""
        node = em.node
        x, y = node.input[0], node.output[0]
        meaning = read_axis_meaning(node, em.source_version)
        elem = em.elem_type(x)
        if em.opset < 13 and (elem == BF16 or (elem is None and em.source_version >= 13)):
            em.refuse_bfloat16(x)
        dims = em.dims(x)
        rank = len(dims) if dims is not None else None
        axis = meaning.axis
        if rank is not None:
            if not -rank <= axis < rank:
                em.refuse(f"axis {axis} is out of range for input {x!r} of rank {rank} (allowed: "
                          f"[{-rank}, {rank - 1}]); onnxruntime rejects the node too")
            axis = normalize_axis(axis, rank)
            if dims is not None and 0 in dims:
                em.op("Identity", [x], [y])
                return
        if elem is None and em.opset < 15:
            em.refuse(f"the element type of input {x!r} is unknown, and casting the one-hot to it needs "
                      "CastLike (opset >= 15); add type information for it")
        start = len(em.nodes)
        self._emit(em, x, y, meaning.flatten, axis, dims, rank, elem)
        if em.opset >= 7 and em.may_be_empty(x):
            reduced = None if dims is None else (dims[axis:] if meaning.flatten else [dims[axis]])
            if reduced is None or not all(reduced) or not _empty_safe(em.nodes[start:]):
                # ArgMax fails on an empty reduced axis, Reshape-13 misreads zero dims, the two-level
                # search and OneHot are not proven on empty rows: an empty input, whose Hardmax is that
                # empty tensor, passes through. (Below opset 7 the size along the axis is static and
                # non-zero: see _legacy.) Otherwise (only other dims may be 0) the nodes stay unguarded:
                # onnxruntime places the guard's Size/Equal on the CPU on purpose, which a backend's
                # placement proof (``--for cuda``) must not meet.
                em.pass_through_if_empty(x, start)

    def first_max(self, em: Emitter, v: str, axis: int, keepdims: int = 1) -> str:
        """The int64 index of the first maximum of ``v`` along ``axis`` (``ArgMax``; a form may find it otherwise).

        Every index the decomposition uses comes from here, so a subclass that finds the first
        maximum another exact way (``hardmax-topk``: ``TopK``) shares the whole body.
        """
        return em.op("ArgMax", [v], axis=axis, keepdims=keepdims)

    def _emit(self, em: Emitter, x: str, y: str, flatten: bool, axis: int, dims: list[int | None] | None,
              rank: int | None, elem: int | None) -> None:
        if em.opset < 7:
            self._legacy(em, x, y, flatten, axis, dims, elem)
            return
        last = axis == -1 or (rank is not None and axis == rank - 1)
        if flatten and not last:
            if axis < 0 and em.opset < 11:
                axis = normalize_axis(axis, em.require_rank(x, "for Flatten below opset 11"))
            size = None
            if dims is not None and None not in dims[axis:]:
                size = math.prod(d for d in dims[axis:] if d is not None)
            block = _block_size(em, size)
            if block is not None:  # the two-level search reshapes x itself: no Flatten needed
                assert size is not None
                self._finish(em, self._two_level(em, x, size, block), elem, x, y, reshape=True)
                return
            flat = em.op("Flatten", [x], axis=axis)
            self._single_axis(em, flat, 1, 2, size, elem, x, y, reshape=True)
            return
        size = dims[axis] if dims is not None else None
        self._single_axis(em, x, -1 if last else axis, rank, size, elem, x, y, reshape=False)

    # -- opset >= 7 ----------------------------------------------------------------------------
    def _single_axis(self, em: Emitter, v: str, axis: int, rank: int | None, size: int | None,
                     elem: int | None, x: str, y: str, reshape: bool) -> None:
        """One-hot of the first maximum of ``v`` along ``axis``, written to ``y`` typed like ``x``.

        ``reshape`` asks for the result to be reshaped to ``Shape(x)`` (``v`` is then a 2-D view).
        """
        if elem == BF16:
            v = em.op("Cast", [v], to=onnx.TensorProto.FLOAT)
        last = axis == -1 or (rank is not None and axis == rank - 1)
        block = _block_size(em, size) if last else None
        if block is not None:
            assert size is not None
            self._finish(em, self._two_level(em, v, size, block), elem, x, y, reshape=True)
            return
        if axis < 0 and em.opset < 11:
            rank = rank if rank is not None else em.require_rank(x, "to make the negative axis non-negative")
            axis = normalize_axis(axis, rank)
        trailing = rank - 1 - axis if rank is not None and axis >= 0 else (-axis - 1 if axis < 0 else None)
        if trailing is None or (size is None and em.opset < 11):
            self._one_hot_op(em, v, axis, elem, x, y, reshape)
            return
        index = self.first_max(em, v, axis)
        if size is not None and size <= _INT32_MAX:
            # int32 halves what Equal reads; onnxruntime's Equal is about twice as fast on it.
            index = em.op("Cast", [index], to=onnx.TensorProto.INT32)
            iota = _iota(em, size, trailing)
        else:
            if size is not None:
                n = em.const(np.array(size, dtype=np.int64), "size")
            else:
                n = em.op("Gather", [em.op("Shape", [v]), em.const(np.array(axis, dtype=np.int64), "axis")], axis=0)
            iota = _range(em, n, np.int64)
            if trailing:
                iota = em.op("Reshape", [iota, em.const(np.array([-1] + [1] * trailing, dtype=np.int64), "shape")])
        mask = em.op("Equal", [index, iota])
        self._finish(em, mask, elem, x, y, reshape)

    def _two_level(self, em: Emitter, v: str, size: int, block: int) -> str:
        """The one-hot mask ``[R, size/block, block]`` of the first maximum along the last axis of ``v``.

        ``v`` is viewed as ``[R, blocks, block]``. The mask is the outer product (``And``) of the
        one-hot of the first block holding the maximum and the one-hot of the first maximum
        within that block: both small, so only ``And`` (and the final ``Cast``) see every element.
        """
        blocks = size // block
        view = em.op("Reshape", [v, em.const(np.array([-1, blocks, block], dtype=np.int64), "blocks")])
        block_max = reduce_max(em, view, [2], keepdims=1)
        first_block = self.first_max(em, block_max, 1)  # [R, 1, 1]
        if (em.version_of("GatherND") or 0) >= 12:  # batch_dims: each row picks its own block
            chosen = em.op("GatherND", [view, first_block], batch_dims=1)
        else:
            spread = em.op("Expand", [first_block, em.const(np.array([1, 1, block], dtype=np.int64), "spread")])
            chosen = em.op("GatherElements", [view, spread], axis=1)
        within = self.first_max(em, chosen, 2)  # [R, 1, 1]
        in_block = em.op("Equal", [first_block, em.const(np.arange(blocks).reshape(blocks, 1), "block_iota")])
        at = em.op("Equal", [within, em.const(np.arange(block), "iota")])
        return em.op("And", [in_block, at])

    def _one_hot_op(self, em: Emitter, v: str, axis: int, elem: int | None, x: str, y: str, reshape: bool) -> None:
        """``OneHot`` (opset >= 9) with the depth from ``Shape``.

        Used for a dynamic size below opset 11 (no ``Range``), and for an axis counted from the
        front of a tensor of unknown rank (no iota layout).
        """
        if em.version_of("OneHot") is None:
            em.refuse("the size along the axis is not static (or the rank is unknown), and below opset 9 "
                      "there is neither Range nor OneHot to build the one-hot; add shape information or "
                      "target opset >= 9")
        assert axis >= 0
        # keepdims=1 keeps the indices at least 1-D (OneHot needs that); the one-hot then has an
        # extra size-1 dim right after the axis, which the final Reshape to Shape(x) drops.
        index = self.first_max(em, v, axis)
        depth = em.op("Gather", [em.op("Shape", [v]), em.const(np.array([axis], dtype=np.int64), "axis")], axis=0)
        values = em.const(np.array([0, 1], dtype=np.float32), "values")
        one_hot = em.op("OneHot", [index, depth, values], axis=axis)
        self._finish(em, one_hot, elem, x, y, reshape=True, cast=elem != onnx.TensorProto.FLOAT)

    def _finish(self, em: Emitter, mask: str, elem: int | None, x: str, y: str, reshape: bool,
                cast: bool = True) -> None:
        """Cast ``mask`` (bool or float 0/1) to ``x``'s type into ``y``, reshaped to ``Shape(x)`` if asked.

        ``cast=False`` says ``mask`` already has the type.
        """
        if reshape:
            # Reshaped before the Cast: onnxruntime aliases an intermediate Reshape, but copies one that
            # writes a graph output. allowzero keeps zero-sized dims exact; Reshape-14 has it.
            dims = em.dims(x)
            if dims is not None and None not in dims:
                shape = em.const(np.array(dims, dtype=np.int64), "shape")
            else:
                shape = em.op("Shape", [x])
            allowzero = 1 if (em.version_of("Reshape") or 0) >= 14 else None
            if not cast:
                em.op("Reshape", [mask, shape], [y], allowzero=allowzero)
                return
            mask = em.op("Reshape", [mask, shape], allowzero=allowzero)
        if elem is None:
            em.op("CastLike", [mask, x], [y])
        else:
            em.op("Cast", [mask], [y], to=elem)

    # -- opset < 7 -----------------------------------------------------------------------------
    def _legacy(self, em: Emitter, x: str, y: str, flatten: bool, axis: int, dims: list[int | None] | None,
                elem: int | None) -> None:
        """Below opset 7: ``ArgMax`` → ``Gather`` from an identity table → ``Transpose``/``Reshape`` back."""
        if dims is None:
            em.refuse(f"the shape of input {x!r} is unknown, and below opset 7 the one-hot is a Gather from "
                      "a constant identity table of static size; add shape information or target opset >= 7")
        assert elem is not None
        rank = len(dims)
        size_dims = dims[axis:] if flatten else dims[axis:axis + 1]
        if None in size_dims:
            em.refuse("the size along the axis is dynamic, and below opset 7 the one-hot is a Gather from a "
                      "constant identity table of static size; target opset >= 7")
        size = math.prod(d for d in size_dims if d is not None)
        if size > EYE_MAX:
            em.refuse(f"below opset 7 the one-hot is a Gather from a {size}x{size} identity table, larger "
                      f"than the {EYE_MAX}x{EYE_MAX} allowed; target opset >= 7")
        eye = em.const(np.eye(size, dtype=_NUMPY_TYPES[elem]), "eye")
        if not flatten:
            index = self.first_max(em, x, axis, keepdims=0)
            if axis == rank - 1:
                em.op("Gather", [eye, index], [y], axis=0)
                return
            rows = em.op("Gather", [eye, index], axis=0)
            em.op("Transpose", [rows], [y], perm=[*range(axis), rank - 1, *range(axis, rank - 1)])
            return
        flat = em.op("Flatten", [x], axis=axis)
        index = self.first_max(em, flat, 1, keepdims=0)
        rows = em.op("Gather", [eye, index], axis=0)
        if (em.version_of("Reshape") or 0) >= 5:
            em.op("Reshape", [rows, em.op("Shape", [x])], [y])
            return
        if dims.count(None) > 1:
            em.refuse(f"input {x!r} has more than one dynamic dim, and Reshape below opset 5 takes a static "
                      "shape (one -1 at most); add shape information or target opset >= 5")
        em.op("Reshape", [rows], [y], shape=[-1 if d is None else d for d in dims])


def _range(em: Emitter, end: str, dtype: type) -> str:
    """``Range(0, end, 1)`` of ``dtype`` (int32 or int64, the type of ``end``)."""
    zero, one = em.const(np.array(0, dtype=dtype), "zero"), em.const(np.array(1, dtype=dtype), "one")
    return em.op("Range", [zero, end, one])


def _iota(em: Emitter, size: int, trailing: int) -> str:
    """``0..size-1`` as int32, shaped ``[size, 1 * trailing]``: a constant, or ``Range`` when large."""
    if size <= IOTA_CONST_MAX or em.opset < 11:
        return em.const(np.arange(size, dtype=np.int32).reshape([size] + [1] * trailing), "iota")
    iota = _range(em, em.const(np.array(size, dtype=np.int32), "size"), np.int32)
    if trailing:
        iota = em.op("Reshape", [iota, em.const(np.array([-1] + [1] * trailing, dtype=np.int64), "shape")])
    return iota


#: Ops that keep an empty input with non-empty reduced axes empty (checked by verification's empty binding;
#: TopK(k=1), which ``hardmax-topk`` uses for ArgMax, measured so in onnxruntime 1.32 at TopK-1, 10 and 11;
#: ReduceMax/ReduceMin/Where of ``hardmax-reduce`` keep an empty input empty along other axes, measured likewise).
_EMPTY_SAFE = frozenset({"ArgMax", "TopK", "Cast", "CastLike", "Equal", "Range", "Gather", "Shape", "Reshape",
                         "Flatten", "Constant", "ReduceMax", "ReduceMin", "Where", "Sub"})


def _empty_safe(nodes: list[onnx.NodeProto]) -> bool:
    """Whether ``nodes`` compute an empty Hardmax right: safe ops, and each Reshape keeps zero dims.

    A Reshape keeps them with ``allowzero=1``, or when it reshapes the iota (a ``Range`` output).
    """
    ranges = {n.output[0] for n in nodes if n.op_type == "Range"}
    for n in nodes:
        if n.op_type not in _EMPTY_SAFE:
            return False
        if n.op_type == "Reshape" and n.input[0] not in ranges and \
                not any(a.name == "allowzero" and a.i == 1 for a in n.attribute):
            return False
    return True


def _block_size(em: Emitter, size: int | None) -> int | None:
    """The block size for the two-level search along a last axis of ``size``, or None for plain ArgMax.

    Two levels need a static size of at least :data:`TWO_LEVEL_MIN`, opset >= 11 (GatherElements)
    and a divisor of the size in :data:`_BLOCK_RANGE`; the one nearest ``sqrt(size)`` is taken.
    """
    if size is None or size < TWO_LEVEL_MIN or em.opset < 11:
        return None
    low, high = _BLOCK_RANGE
    candidates = [b for b in range(low, min(high, size // 2) + 1) if size % b == 0]
    if not candidates:
        return None
    root = math.sqrt(size)
    return min(candidates, key=lambda b: abs(math.log(b / root)))
