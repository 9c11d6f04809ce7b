"""GlobalMaxPool (versions 1 and 22) decomposed into ReduceMax over the spatial axes.

``GlobalMaxPool(x)`` is ``ReduceMax(x, axes=[2, ..., rank-1], keepdims=1)``: the max of each
(batch, channel) plane, kept as size-1 dims. ``ReduceMax`` takes ``axes`` as an attribute below
opset 18 and as an int64 input from 18 on. Version 22 of GlobalMaxPool added bfloat16, which
ReduceMax accepts from opset 13 (onnxruntime's CPU ReduceMax does not run it, so bfloat16 is
reduced in float32 and cast back, which is exact: the max is one of the inputs).

Of unknown rank below opset 18 (a GlobalMaxPool inside a Loop body), where ReduceMax's axes must be an
attribute, the spatial dims are flattened instead: ``x`` is reshaped to ``[N, C, D1*...*Dk]`` (the
product read from ``Flatten(x, 2)``'s shape), ``ReduceMax(axes=[2], keepdims=1)`` takes each plane's max,
and a Reshape to ``Concat(Shape(x)[:2], ones(rank - 2))`` restores the rank (the ones are ``Cast(Equal(d, d))`` of the
spatial dims ``d``, valid from opset 6). Exact: the max is one of the inputs, and the order of a max does
not matter. N = 0 gives the same empty ``[0, C, 1, ...]`` output as the original, whatever else is 0.
A zero C or spatial dim with N > 0 is an input the original rejects at run time (onnxruntime: "Only N
can be zero"; the spec's reference raises); there the rank-free form gives the empty ``[N, 0, 1, ...]``
(C = 0), ReduceMax's empty max -inf (D1 = 0, as the known-rank form does) or fails in its first Reshape
(another Di = 0): nothing an input the original accepts can reach.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from lowerer.steps.emitter import Emitter, Rule

__all__ = ["GlobalMaxPoolDecomposition", "rank_free_max", "reduce_max"]


def reduce_max(em: Emitter, x: str, axes: Sequence[int] | str, keepdims: int,
               outputs: Sequence[str] | None = None) -> str:
    """Emit ``ReduceMax`` over ``axes`` in the form the target opset has.

    Args:
        em: the emitter.
        x: the value to reduce.
        axes: the axes as ints, or the name of an int64 1-D value (only from opset 18).
        keepdims: the ``keepdims`` attribute.
        outputs: output names (a fresh one when None).

    Returns:
        The name of the reduced value.
    """
    version = em.version_of("ReduceMax")
    assert version is not None  # ReduceMax exists from opset 1
    if version >= 18:
        axes_name = axes if isinstance(axes, str) else em.const(np.array(list(axes), dtype=np.int64), "axes")
        # noop_with_empty_axes=1: an empty axes list (rank 2) reduces nothing instead of everything.
        return em.op("ReduceMax", [x, axes_name], outputs, keepdims=keepdims, noop_with_empty_axes=1)
    assert not isinstance(axes, str), "axes as an input needs ReduceMax-18"
    return em.op("ReduceMax", [x], outputs, axes=list(axes), keepdims=keepdims)


def rank_free_max(em: Emitter, x: str, outputs: Sequence[str] | None = None) -> str:
    """``GlobalMaxPool(x)`` for ``x`` of any rank >= 3, with ReduceMax's axes as a constant attribute.

    ``Reshape(x, [N, C, P])`` (``P = D1*...*Dk``, read from ``Flatten(x, 2)``'s shape) →
    ``ReduceMax(axes=[2], keepdims=1)`` → ``Reshape`` to ``Concat(Shape(x)[:2], ones)``, ``ones`` being
    ``Cast(Equal(d, d))`` of the spatial dims ``d = Shape(x)[2:]``. No ``-1`` (ambiguous when ``N*C`` is 0),
    and a 0 in either shape (Reshape below 14 copies the input's dim there) only ever copies N, C or a
    size that is itself 0.
    """
    int64 = onnx.TensorProto.INT64
    shape = em.op("Shape", [x])
    lead = em.op("Gather", [shape, em.const(np.array([0, 1], dtype=np.int64), "lead")], axis=0)
    plane = em.op("Gather", [em.op("Shape", [em.op("Flatten", [x], axis=2)]),
                             em.const(np.array([1], dtype=np.int64), "plane")], axis=0)
    planes = em.op("Reshape", [x, em.op("Concat", [lead, plane], axis=0)])
    reduced = reduce_max(em, planes, [2], keepdims=1)
    big = np.iinfo(np.int64).max
    if (em.version_of("Slice") or 0) >= 10:
        spatial = em.op("Slice", [shape, em.const(np.array([2], dtype=np.int64), "start"),
                                  em.const(np.array([big], dtype=np.int64), "end")])
    else:
        spatial = em.op("Slice", [shape], axes=[0], starts=[2], ends=[int(big)])
    ones = em.op("Cast", [em.op("Equal", [spatial, spatial])], to=int64)
    return em.op("Reshape", [reduced, em.op("Concat", [lead, ones], axis=0)], outputs)


class GlobalMaxPoolDecomposition(Rule):
    """``GlobalMaxPool`` (1, 22) → ``ReduceMax`` over axes ``2..rank-1`` with ``keepdims=1``.

    Cases:

    1. known rank >= 3: ``ReduceMax`` with constant axes (an attribute below opset 18, an int64
       input from 18 on);
    2. known rank below 3: refused (no spatial dims; onnxruntime rejects the node too);
    3. unknown rank, opset >= 18: axes computed as ``Range(2, Size(Shape(x)))``, with
       ``noop_with_empty_axes=1`` so that an empty range never means "reduce everything";
    4. unknown rank below opset 18: ``Reshape`` to ``[N, C, D1*...*Dk]`` → ``ReduceMax(axes=[2])`` → ``Reshape`` to
       ``Concat(Shape(x)[:2], ones(rank - 2))`` (opset >= 6; refused below, where Cast takes a string);
    5. bfloat16 (version 22): ``Cast`` to float → ``ReduceMax`` → ``Cast`` back at opset >= 13
       (exact; no onnxruntime CPU kernel reduces bfloat16); refused below 13, where nothing takes
       bfloat16 (also when the type is unknown there).
    """

    name = "globalmaxpool-decomposition"
    op_types = ("GlobalMaxPool",)
    versions = (1, 22)
    decomposition = "globalmaxpool"

    def rewrite(self, em: Emitter) -> None:
        """Emit ``ReduceMax`` for ``em.node``."""
        node = em.node
        x, y = node.input[0], node.output[0]
        bf16 = False
        if em.source_version >= 22:
            if em.opset < 13:
                em.refuse_bfloat16(x)
            else:
                # An unknown type gets a plain ReduceMax: exact for every type, only not runnable
                # in onnxruntime for bfloat16 (like the original).
                bf16 = em.elem_type(x) == onnx.TensorProto.BFLOAT16
        rank = em.rank(x)
        if rank is not None and rank < 3:
            em.refuse(f"input {x!r} has rank {rank}; GlobalMaxPool needs (N, C, D1, ...), rank >= 3 "
                      "(onnxruntime rejects a lower rank too)")
        axes: list[int] | str | None = None  # None: the rank-free form
        if rank is not None:
            axes = list(range(2, rank))
        elif (em.version_of("ReduceMax") or 0) >= 18:
            size = em.op("Size", [em.op("Shape", [x])])
            axes = em.op("Range", [em.const(np.array(2, dtype=np.int64), "two"), size,
                                   em.const(np.array(1, dtype=np.int64), "one")])
        elif em.opset < 6:
            em.refuse(f"the rank of input {x!r} is unknown, and ReduceMax below opset 18 takes its axes as an "
                      "attribute; the rank-free form (Flatten, ReduceMax, Reshape) needs Cast-6 (opset >= 6); "
                      "add shape information or target opset >= 6")
        source = em.op("Cast", [x], to=onnx.TensorProto.FLOAT) if bf16 else x
        out = None if bf16 else [y]
        reduced = rank_free_max(em, source, out) if axes is None else reduce_max(em, source, axes, 1, out)
        if bf16:
            em.op("Cast", [reduced], [y], to=onnx.TensorProto.BFLOAT16)
