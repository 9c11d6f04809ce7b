"""Version-step adapter for Upsample 1 ↔ 7, where per-axis ``scales`` replaced the 4-D height and width scales.

Upsample-1 (experimental) took an NCHW tensor, ``height_scale`` and ``width_scale`` (both required)
and ``mode`` ``nearest`` (default) or ``bilinear``; Upsample-7 takes ``scales``, one per dimension,
and ``mode`` ``nearest`` (default) or ``linear``. Both size each output dim ``floor(dim * scale)``.

* up (1 → 7): ``scales = [1, 1, height_scale, width_scale]``, ``bilinear`` → ``linear`` (a linear
  resize of the last two axes of an NCHW tensor is the bilinear one), as onnx's own converter does.
  Refused: a scale missing or below 1 (Upsample-7 takes scales of 1 or more), another mode, an input
  of a known rank other than 4.
* down (7 → 1): four scales whose first two are 1 → ``height_scale``, ``width_scale``; ``linear`` →
  ``bilinear``. Refused: other scales (Upsample-1 scales only H and W of a 4-D tensor), and element
  types Upsample-1 does not take (it takes bool, int32, int64, float16, float and double: the step's
  types).
"""

from __future__ import annotations

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute, set_attribute
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["upsample_1_7", "upsample_7_1"]

_UP_MODES = {"nearest": "nearest", "bilinear": "linear"}
_DOWN_MODES = {"nearest": "nearest", "linear": "bilinear"}


@adapter("Upsample", 7, UP)
def upsample_1_7(em: Emitter, step: Step, direction: str) -> None:
    """Upsample-1 (height_scale, width_scale) → Upsample-7 with scales = [1, 1, height_scale, width_scale]."""
    node = copy_of(em.node)
    height, width = attribute_value(node, "height_scale"), attribute_value(node, "width_scale")
    if not isinstance(height, float) or not isinstance(width, float):
        em.refuse(f"height_scale ({height}) and width_scale ({width}) must both be set (floats): Upsample-1 "
                  "requires them, and Upsample-7's scales are made of them")
    if height < 1 or width < 1:
        em.refuse(f"height_scale={height}, width_scale={width}: Upsample-7 takes scales of 1 or more only")
    mode = str(attribute_value(node, "mode") or "nearest")
    if mode not in _UP_MODES:
        em.refuse(f"mode={mode!r}; Upsample-1 has 'nearest' and 'bilinear' only")
    rank = em.rank(node.input[0])
    if rank is not None and rank != 4:
        em.refuse(f"input {node.input[0]!r} has rank {rank}; Upsample-1 scales height and width of a 4-D "
                  "(NCHW) tensor only")
    remove_attribute(node, "height_scale")
    remove_attribute(node, "width_scale")
    set_attribute(node, "scales", [1.0, 1.0, height, width])
    if mode != "nearest":
        set_attribute(node, "mode", _UP_MODES[mode])
    generic.cross(em, step, direction, node, handled=(Semantics,))


@adapter("Upsample", 7, DOWN)
def upsample_7_1(em: Emitter, step: Step, direction: str) -> None:
    """Upsample-7 with scales = [1, 1, h, w] → Upsample-1 with height_scale = h, width_scale = w."""
    node = copy_of(em.node)
    scales = attribute_value(node, "scales")
    if not isinstance(scales, list) or len(scales) != 4 or scales[0] != 1 or scales[1] != 1:
        em.refuse(f"scales={scales}; Upsample-1 scales the height and width of a 4-D tensor only (scales "
                  "[1, 1, h, w])")
    mode = str(attribute_value(node, "mode") or "nearest")
    if mode not in _DOWN_MODES:
        em.refuse(f"mode={mode!r}; Upsample-7 has 'nearest' and 'linear' only")
    remove_attribute(node, "scales")
    set_attribute(node, "height_scale", float(scales[2]))
    set_attribute(node, "width_scale", float(scales[3]))
    if mode != "nearest":
        set_attribute(node, "mode", _DOWN_MODES[mode])
    generic.cross(em, step, direction, node, handled=(Semantics,))
