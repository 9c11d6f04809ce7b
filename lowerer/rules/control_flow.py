"""Version-step adapters for control flow: If and Loop below version 11.

Their bodies are converted as scopes of their own by the pipeline before the node itself
crosses its steps; these adapters check what the older versions demand of the node.

* ``If`` 11 → 1: If-1 requires both branches to yield the same shape for each output: only
  when every output's shape is static and equal in both branches is the relabel exact.
* ``Loop`` 11 → 1: Loop-1 takes at least one loop-carried dependency (three inputs or more);
  otherwise the meaning is the same.
"""

from __future__ import annotations

import onnx

from lowerer.rules.base import Emitter
from lowerer.steps import generic
from lowerer.steps.changes import Step
from lowerer.steps.registry import DOWN, adapter

__all__ = ["if_11_1", "loop_11_1"]


def _static_shape(tp: onnx.TypeProto) -> tuple[int, ...] | None:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims = tp.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


@adapter("If", 11, DOWN)
def if_11_1(em: Emitter, step: Step, direction: str) -> None:
    """Relabel when every output has the same static shape in both branches, else refuse."""
    branches = {a.name: a.g for a in em.node.attribute if a.type == onnx.AttributeProto.GRAPH}
    then_b, else_b = branches.get("then_branch"), branches.get("else_branch")
    if then_b is None or else_b is None or len(then_b.output) != len(else_b.output):
        em.refuse("the node lacks a branch, or its branches yield different numbers of outputs")
    for a, b in zip(then_b.output, else_b.output, strict=True):
        sa, sb = _static_shape(a.type), _static_shape(b.type)
        if sa is None or sa != sb:
            em.refuse(f"If-1 needs both branches to yield the same shape, and output {a.name!r} / {b.name!r} is "
                      f"not known to (then: {sa}, else: {sb}); the lowest opset for this node is 11")
    generic.cross(em, step, direction)


@adapter("Loop", 11, DOWN)
def loop_11_1(em: Emitter, step: Step, direction: str) -> None:
    """Relabel when the loop has at least one loop-carried dependency, else refuse."""
    if len(em.node.input) < 3:
        em.refuse("Loop-1 needs at least one loop-carried dependency and this loop has none; "
                  "the lowest opset for this node is 11")
    generic.cross(em, step, direction)
