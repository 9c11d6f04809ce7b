"""Version-step adapters for the reductions (``ReduceSum`` 13, the other ``Reduce*`` 18).

At those steps ``axes`` moved from an attribute to an input (the generic handling moves it back
when it is constant) and ``noop_with_empty_axes`` appeared. That attribute matters only when the
axes are absent or empty: then 1 means "reduce nothing", which the older versions write as the
input itself (``Identity``); with axes given (or 0) it is dropped.
"""

from __future__ import annotations

from lowerer.steps import generic
from lowerer.steps.changes import AttrAdded, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import attribute_value, remove_attribute
from lowerer.steps.registry import DOWN, adapter

__all__ = ["reduce_axes_input_down"]

REDUCTIONS_18 = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                 "ReduceLogSumExp", "ReduceSumSquare")


@adapter("ReduceSum", 13, DOWN)
@adapter(REDUCTIONS_18, 18, DOWN)
def reduce_axes_input_down(em: Emitter, step: Step, direction: str) -> None:
    """``noop_with_empty_axes=1`` with no axes → ``Identity``; otherwise drop it and move the axes back."""
    node = generic.copy_of(em.node)
    noop = attribute_value(node, "noop_with_empty_axes")
    remove_attribute(node, "noop_with_empty_axes")
    axes_name = node.input[1] if len(node.input) > 1 else ""
    axes = em.constant(axes_name) if axes_name else None
    if noop:
        if not axes_name or (axes is not None and axes.size == 0):
            em.op("Identity", [node.input[0]], list(node.output))
            return
        if axes is None:
            em.refuse(f"noop_with_empty_axes=1 with run-time axes {axes_name!r}: whether it reduces anything "
                      f"depends on them, and {step.op}-{step.previous} takes constant axes only")
    if axes is not None and axes.size == 0:  # no axes given: reduce all, which an absent attribute says
        del node.input[1:]
    generic.cross(em, step, direction, node, handled=(AttrAdded,))
