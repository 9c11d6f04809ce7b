"""Version-step adapter for GridSample 16 ↔ 20, where only the names of ``mode`` values changed.

GridSample-20 renamed ``bilinear`` → ``linear`` (the new default) and ``bicubic`` → ``cubic``
(``nearest`` kept), and accepts X of any rank >= 3 where GridSample-16 took 4-D X only. Up: rename
(an absent ``mode`` means the default on both sides). Down: rename back; X must be 4-D.
"""

from __future__ import annotations

from lowerer.steps import generic
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import attribute_value, set_attribute
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["grid_sample_20"]

#: GridSample-16 mode → GridSample-20 mode.
_UP_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}
_DOWN_MODES = {new: old for old, new in _UP_MODES.items()}


@adapter("GridSample", 20, DOWN, UP)
def grid_sample_20(em: Emitter, step: Step, direction: str) -> None:
    """Rename ``mode`` across the step; going down, X must be 4-D (GridSample-16's only form)."""
    node = generic.copy_of(em.node)
    renames = _DOWN_MODES if direction == DOWN else _UP_MODES
    mode = attribute_value(node, "mode")
    if mode is not None:
        if mode not in renames:
            em.refuse(f"mode={mode!r} has no GridSample-{step.previous if direction == DOWN else step.version} "
                      f"name (those are {sorted(renames.values())})")
        set_attribute(node, "mode", renames[str(mode)])
    if direction == DOWN:
        rank = em.require_rank(node.input[0], "(GridSample-16 takes 4-D X only)")
        if rank != 4:
            em.refuse(f"X is {rank}-D and GridSample-16 takes 4-D X only (N, C, H, W); "
                      "choose a target opset >= 20")
    generic.cross(em, step, direction, node, handled=(Semantics,))
