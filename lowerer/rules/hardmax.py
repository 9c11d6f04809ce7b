"""Hardmax, Softmax and LogSoftmax across opsets 1, 11 and 13, both directions.

The three ops share one history. Up to version 11 they *coerce the input to 2-D* at
``axis`` (default 1): the op runs over the flattened block of dims ``axis..rank-1``. From
version 13 they run over the single dim ``axis`` (default -1). Version 11 added negative
axes; version 13 added bfloat16.

``onnx.version_converter`` relabels Hardmax 11→13 without adapting it and relabels
Softmax/LogSoftmax 13→11 the same way, so it computes something else whenever ``axis`` is
not the last axis; lowerer owns all three ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter, Rule, normalize_axis

__all__ = ["AxisMeaning", "CoercedAxisRule", "read_axis_meaning"]


@dataclass(frozen=True)
class AxisMeaning:
    """What a Hardmax/Softmax/LogSoftmax node computes.

    Attributes:
        flatten: True for the coerce-to-2-D meaning (versions 1 and 11), False for one axis.
        axis: the attribute value, default filled in (may be negative).
    """

    flatten: bool
    axis: int


def read_axis_meaning(node: onnx.NodeProto, source_version: int) -> AxisMeaning:
    """The meaning of ``node`` at its source since-version."""
    flatten = source_version < 13
    axis = int_attribute(node, "axis", 1 if flatten else -1)
    assert axis is not None
    return AxisMeaning(flatten, axis)


class CoercedAxisRule(Rule):
    """``Hardmax``/``Softmax``/``LogSoftmax`` at any version → the same meaning at the target.

    Cases:

    1. flatten meaning → version 13, ``axis`` the last axis (``-1``, or ``rank-1`` when the
       rank is known): a relabel with ``axis=-1``;
    2. flatten meaning → version 13, other axes: ``Flatten(axis)`` → op(``axis=-1``) →
       ``Reshape`` back to ``Shape(x)`` (dynamic dims work; the rank is not needed). At opset 13
       exactly (Reshape-13 has no ``allowzero``) a possibly empty ``x`` goes through
       ``If(Size(x) == 0)``: ``x`` itself, else the Reshape; a statically empty one is ``Identity``;
    3. flatten meaning → version 1/11: a relabel; a negative axis below 11 is made
       non-negative with the rank;
    4. one-axis meaning → version 1/11, last axis: op(``axis=-1``) at 11, op(``axis=rank-1``)
       at 1; other axes: ``Transpose`` moving the axis last → op → inverse ``Transpose``
       (needs the rank, else refused);
    5. bfloat16 input below 13: refused.

    ``axis`` is always written explicitly: its default changed at 13.
    """

    name = "coerced-axis"
    op_types = ("Hardmax", "Softmax", "LogSoftmax")
    versions = (1, 11, 13)
    #: 1 → 11 only allowed negative axes: the same node means the same.
    same_meaning = frozenset({(1, 11)})

    def rewrite(self, em: Emitter) -> None:
        """Emit the node for the target opset."""
        node = em.node
        x = node.input[0]
        meaning = read_axis_meaning(node, em.source_version)
        target = em.version_of(node.op_type)
        assert target is not None
        if target < 13 <= em.source_version:
            em.refuse_bfloat16(x)
        if meaning.flatten:
            self._from_flatten(em, x, meaning.axis, target)
        else:
            self._from_single_axis(em, x, meaning.axis, target)

    def _from_flatten(self, em: Emitter, x: str, axis: int, target: int) -> None:
        if target < 13:
            if axis < 0 and target < 11:
                axis = normalize_axis(axis, em.require_rank(x, "to make the negative axis non-negative"))
            em.copy_node(axis=axis)
            return
        rank = em.rank(x)
        if axis == -1 or (rank is not None and normalize_axis(axis, rank) == rank - 1):
            em.copy_node(axis=-1)
            return
        reshape_v = em.version_of("Reshape") or 0
        if reshape_v < 14 and any(d == 0 for d in em.dims(x) or ()):
            # Statically empty: the op of an empty tensor is that tensor (see _reshape_13).
            em.op("Identity", [x], list(em.node.output))
            return
        shape = em.op("Shape", [x])
        flat = em.op("Flatten", [x], axis=axis)
        inner = em.fresh(f"{em.node.output[0]}_2d")
        node = em.copy_node(axis=-1)
        node.input[0] = flat
        node.output[0] = inner
        if reshape_v >= 14:
            # allowzero keeps zero-sized dims exact.
            em.op("Reshape", [inner, shape], list(em.node.output), allowzero=1)
            return
        self._reshape_13(em, x, inner, shape, axis)

    @staticmethod
    def _reshape_13(em: Emitter, x: str, inner: str, shape: str, axis: int | None = None) -> None:
        """Reshape ``inner`` (``Flatten(x, axis)``'s 2-D view) back to ``Shape(x)`` with Reshape-13, exactly.

        Reshape-13 reads a 0 in the shape as "copy the input's dim": with an empty ``x`` it would
        fail or, worse, give another shape ([0, 0, 5, 2] at axis 2 came out [0, 10, 5, 2]). The op
        of an empty tensor is that same empty tensor, so unless the dims are statically non-zero,
        ``If(Size(x) == 0)`` passes ``x`` through and otherwise reshapes. No ``If`` either when
        only ``x``'s first dim may be 0 and ``axis`` is at least 1: a 0 there copies the view's first
        dim, the product of the dims before ``axis``, which is then 0 too (a dynamic batch; some
        backends, OpenVINO's provider, refuse graphs holding an If).
        """
        start = len(em.nodes)
        em.op("Reshape", [inner, shape], list(em.node.output))
        if em.may_be_empty(x) and not _only_first_dim_may_be_zero(em, x, axis):
            em.pass_through_if_empty(x, start)

    def _from_single_axis(self, em: Emitter, x: str, axis: int, target: int) -> None:
        if target >= 13:
            em.copy_node(axis=axis)
            return
        if axis == -1 and target >= 11:
            em.copy_node(axis=-1)
            return
        rank = em.require_rank(x, f"to move axis {axis} last for {em.node.op_type}-{target}")
        axis = normalize_axis(axis, rank)
        if axis == rank - 1:
            em.copy_node(axis=axis)
            return
        perm = [d for d in range(rank) if d != axis] + [axis]
        inverse = [perm.index(d) for d in range(rank)]
        moved = em.op("Transpose", [x], perm=perm)
        inner = em.fresh(f"{em.node.output[0]}_last")
        node = em.copy_node(axis=rank - 1)
        node.input[0] = moved
        node.output[0] = inner
        em.op("Transpose", [inner], list(em.node.output), perm=inverse)


def _only_first_dim_may_be_zero(em: Emitter, x: str, axis: int | None) -> bool:
    """Whether ``Flatten(x, axis)`` keeps a 0 of ``Shape(x)`` exact under Reshape-13 (see ``_reshape_13``)."""
    dims = em.dims(x)
    if axis is None or not dims:
        return False
    flat_axis = axis + len(dims) if axis < 0 else axis
    return flat_axis >= 1 and all(d is not None and d > 0 for d in dims[1:])

