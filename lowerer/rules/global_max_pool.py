"""GlobalMaxPool (versions 1 and 22) decomposed into ReduceMax over the spatial axes.

``GlobalMaxPool(x)`` is ``ReduceMax(x, axes=[2, ..., rank-1], keepdims=1)``: the max of each
(batch, channel) plane, kept as size-1 dims. ``ReduceMax`` takes ``axes`` as an attribute below
opset 18 and as an int64 input from 18 on. Version 22 of GlobalMaxPool added bfloat16, which
ReduceMax accepts from opset 13 (onnxruntime's CPU ReduceMax does not run it, so bfloat16 is
reduced in float32 and cast back, which is exact: the max is one of the inputs).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from lowerer.steps.emitter import Emitter, Rule

__all__ = ["GlobalMaxPoolDecomposition", "reduce_max"]


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


class GlobalMaxPoolDecomposition(Rule):
    """``GlobalMaxPool`` (1, 22) → ``ReduceMax`` over axes ``2..rank-1`` with ``keepdims=1``.

    Cases:

    1. known rank >= 3: ``ReduceMax`` with constant axes (an attribute below opset 18, an int64
       input from 18 on);
    2. known rank below 3: refused (no spatial dims; onnxruntime rejects the node too);
    3. unknown rank, opset >= 18: axes computed as ``Range(2, Size(Shape(x)))``, with
       ``noop_with_empty_axes=1`` so that an empty range never means "reduce everything";
    4. unknown rank below opset 18: refused (the axes attribute needs the rank);
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
        axes: list[int] | str
        if rank is not None:
            axes = list(range(2, rank))
        elif (em.version_of("ReduceMax") or 0) >= 18:
            size = em.op("Size", [em.op("Shape", [x])])
            axes = em.op("Range", [em.const(np.array(2, dtype=np.int64), "two"), size,
                                   em.const(np.array(1, dtype=np.int64), "one")])
        else:
            em.refuse(f"the rank of input {x!r} is unknown, and ReduceMax below opset 18 takes its axes as "
                      "an attribute; add shape information or target opset >= 18")
        if bf16:
            wide = em.op("Cast", [x], to=onnx.TensorProto.FLOAT)
            reduced = reduce_max(em, wide, axes, keepdims=1)
            em.op("Cast", [reduced], [y], to=onnx.TensorProto.BFLOAT16)
            return
        reduce_max(em, x, axes, keepdims=1, outputs=[y])
