"""ArgMax and ArgMin across opsets 1, 11, 12 and 13, both directions.

What changed between the versions (the ops are otherwise identical):

* 11: ``axis`` may be negative (counted from the back);
* 12: ``select_last_index`` picks the last maximum (minimum) instead of the first;
* 13: bfloat16 inputs.

Upgrading is a relabel. Downgrading needs work only when the node uses a newer feature:
a negative axis below 11 is normalized with the rank; ``select_last_index=1`` below 12 is
emulated exactly by reversing the axis, taking the first extremum and mapping the index
back (``n - 1 - i``); bfloat16 below 13 is refused (no op, not even Cast, takes bfloat16
there).
"""

from __future__ import annotations

import numpy as np

from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter, Rule, normalize_axis

__all__ = ["ArgExtremumRule"]

INT64_MIN = np.iinfo(np.int64).min


class ArgExtremumRule(Rule):
    """``ArgMax``/``ArgMin`` at any version → the same op at the target version.

    Cases, for a target version below the source's:

    1. ``select_last_index=1`` below 12, static size along ``axis``: ``Gather`` with reversed
       indices, the op with the first extremum, then ``Gather`` of the index into the reversed
       index table (any opset);
    2. the same with a dynamic size: ``Slice`` with step -1 (opset >= 10), the op, then
       ``(n - 1) - i`` with ``n`` from ``Shape``; below opset 10: refused;
    3. negative ``axis`` below 11: made non-negative (needs the rank, else refused);
    4. bfloat16 input below 13: refused;
    5. anything else downward: a relabel (dropping ``select_last_index=0``).

    Upward the node stays as it is: no rewrite (see :attr:`same_meaning`).
    """

    name = "argmax"
    op_types = ("ArgMax", "ArgMin")
    versions = (1, 11, 12, 13)
    #: Upward every version reads the same attributes the same way (new ones default to the old meaning).
    same_meaning = frozenset({(1, 11), (1, 12), (1, 13), (11, 12), (11, 13), (12, 13)})

    def rewrite(self, em: Emitter) -> None:
        """Emit the node for the target opset."""
        node = em.node
        x = node.input[0]
        axis = int_attribute(node, "axis", 0)
        assert axis is not None
        keepdims = int_attribute(node, "keepdims", 1)
        select_last = int_attribute(node, "select_last_index", 0) if em.source_version >= 12 else 0
        target = em.version_of(node.op_type)
        assert target is not None  # ArgMax exists from opset 1
        if target < 13 <= em.source_version:
            em.refuse_bfloat16(x)
        if axis < 0 and target < 11:
            axis = normalize_axis(axis, em.require_rank(x, "to make the negative axis non-negative"))
        if not select_last or target >= 12:
            em.copy_node(axis=axis, select_last_index=(select_last if target >= 12 else None))
            return
        self._emulate_select_last(em, x, axis, keepdims)

    def _first_extremum(self, em: Emitter, v: str, axis: int, keepdims: int | None,
                        outputs: list[str] | None = None) -> str:
        """The index of the first extremum of ``v`` along ``axis``: the node's own op (forms emit another)."""
        return em.op(em.node.op_type, [v], outputs, axis=axis, keepdims=keepdims)

    def _emulate_select_last(self, em: Emitter, x: str, axis: int, keepdims: int | None) -> None:
        node = em.node
        dims = em.dims(x)
        if dims is not None:
            axis = normalize_axis(axis, len(dims))
        size = dims[axis] if dims is not None and 0 <= axis < len(dims) else None
        if size is not None and size > 0:
            # Reverse with a constant index table, then map the index through the same table.
            table = em.const(np.arange(size - 1, -1, -1, dtype=np.int64), "reversed")
            reversed_x = em.op("Gather", [x, table], axis=axis)
            index = self._first_extremum(em, reversed_x, axis, keepdims)
            em.op("Gather", [table, index], list(node.output), axis=0)
            return
        if em.opset < 10:
            em.refuse("select_last_index=1 needs the size along the axis (unknown here) below "
                      "opset 10, where Slice has no steps; add shape information or target >= 10")
        if axis < 0 and em.opset < 11:
            axis = normalize_axis(axis, em.require_rank(x, "to reverse the axis with Slice-10"))
        starts = em.const(np.array([-1], dtype=np.int64), "starts")
        ends = em.const(np.array([INT64_MIN], dtype=np.int64), "ends")
        axes = em.const(np.array([axis], dtype=np.int64), "axes")
        steps = em.const(np.array([-1], dtype=np.int64), "steps")
        reversed_x = em.op("Slice", [x, starts, ends, axes, steps])
        index = self._first_extremum(em, reversed_x, axis, keepdims)
        shape = em.op("Shape", [x])
        size_name = em.op("Gather", [shape, em.const(np.array(axis, dtype=np.int64), "axis")], axis=0)
        last = em.op("Sub", [size_name, em.const(np.array(1, dtype=np.int64), "one")])
        em.op("Sub", [last, index], list(node.output))
