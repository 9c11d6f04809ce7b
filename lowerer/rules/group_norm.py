"""Version-step adapter for GroupNormalization 18 → 21, whose scale and bias went per channel.

GroupNormalization-18 takes ``scale`` and ``bias`` per group (``num_groups`` values), -21 per
channel (C values); -21 also added ``stash_type`` (default 1: the first stage in float32, where -18
computes in X's own type). Up: each group's value is repeated C / num_groups times (a constant, or
Reshape-Expand-Reshape of a run-time value), which needs C static; for an X that is not float32,
``stash_type`` is set to X's own type so that the first stage rounds as at 18.

Down is left to the engine's fallback, the op's function body: GroupNormalization-18 is deprecated
(onnx.checker rejects it at opsets 18 to 20), so no model should be given one.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, set_attribute
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import UP, adapter

__all__ = ["group_normalization_18_21"]


def _per_channel(em: Emitter, name: str, groups: int, channels: int) -> str:
    """``name`` (one value per group) with each value repeated ``channels // groups`` times."""
    value = em.constant(name)
    if value is not None:
        return em.const(np.repeat(value.reshape(-1), channels // groups), "per_channel")
    column = em.op("Reshape", [name, em.const(np.array([groups, 1], np.int64), "groups")])
    block = em.op("Expand", [column, em.const(np.array([groups, channels // groups], np.int64), "block")])
    return em.op("Reshape", [block, em.const(np.array([channels], np.int64), "channels")])


@adapter("GroupNormalization", 21, UP)
def group_normalization_18_21(em: Emitter, step: Step, direction: str) -> None:
    """Per-group scale and bias repeated per channel; stash_type kept at X's own type."""
    node = copy_of(em.node)
    groups = attribute_value(node, "num_groups")
    dims = em.dims(node.input[0])
    channels = dims[1] if dims is not None and len(dims) > 1 else None
    if not isinstance(groups, int) or groups <= 0 or channels is None or channels % groups:
        shown = "not static" if channels is None else str(channels)
        em.refuse(f"the channel count C (axis 1 of {node.input[0]!r}) is {shown} with num_groups={groups}; "
                  "GroupNormalization-21 takes scale and bias per channel, and repeating each group's value "
                  "needs a static C that num_groups divides (add shape information)")
    elem = em.elem_type(node.input[0])
    if elem is None:
        em.refuse(f"the element type of {node.input[0]!r} is unknown, and GroupNormalization-21's stash_type "
                  "must be set to it to keep -18's precision (add type information)")
    if elem != onnx.TensorProto.FLOAT:
        set_attribute(node, "stash_type", elem)
    for index in (1, 2):
        node.input[index] = _per_channel(em, node.input[index], groups, channels)
    generic.cross(em, step, direction, node, handled=(Semantics,))
