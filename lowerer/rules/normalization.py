"""Version-step adapters for BatchNormalization and Dropout, whose training behaviour changed form.

lowerer converts inference graphs: these adapters keep a node in inference mode and refuse one
that trains (whose extra outputs are used, or whose mode cannot be proven off).

* ``BatchNormalization`` 14 → 9: ``training_mode`` absent or 0 and no running-statistics output
  used; 9 → 14 likewise (BatchNormalization-9's extra outputs are training outputs).
* ``Dropout`` 12 → 10: ``training_mode`` absent or a constant false; ``ratio`` moves back to an
  attribute where it is a constant, and goes where it is computed at run time (in inference mode the
  output does not depend on it); a used mask output is Dropout-12's
  inference mask, all true: a constant of the input's static dims, or ``ConstantOfShape(Shape(x))``.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute, set_attribute
from lowerer.steps.changes import AttrAdded, AttrToInput, InputAdded, OutputAdded, Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["batch_normalization_7", "batch_normalization_14", "dropout_12_10"]


@adapter("BatchNormalization", 14, DOWN, UP)
def batch_normalization_14(em: Emitter, step: Step, direction: str) -> None:
    """Inference-mode BatchNormalization means the same at 9 and 14."""
    node = copy_of(em.node)
    if direction == DOWN:
        if attribute_value(node, "training_mode"):
            em.refuse("training_mode=1 (BatchNormalization-9 has no such mode); lowerer converts inference graphs")
        remove_attribute(node, "training_mode")
    used = [o for o in node.output[1:] if o and em.facts.is_used(o)]
    if used:
        em.refuse(f"its running-statistics outputs {used} are used (training); lowerer converts inference graphs")
    del node.output[1:]
    generic.cross(em, step, direction, node, handled=(Semantics, AttrAdded, OutputAdded))


@adapter("Dropout", 12, DOWN)
def dropout_12_10(em: Emitter, step: Step, direction: str) -> None:
    """Inference Dropout: ``training_mode`` must be off; ``ratio`` back to an attribute."""
    node = copy_of(em.node)
    mask = node.output[1] if len(node.output) > 1 and node.output[1] and em.facts.is_used(node.output[1]) else ""
    del node.output[1:]
    if len(node.input) > 2 and node.input[2]:
        mode = em.constant(node.input[2])
        if mode is None or bool(np.any(mode)):
            em.refuse(f"training_mode ({node.input[2]!r}) is not a constant false; Dropout-10 has no such input "
                      "and lowerer converts inference graphs")
        del node.input[2:]
    if attribute_value(node, "seed") is not None:
        remove_attribute(node, "seed")  # only matters in training
    if len(node.input) > 1 and node.input[1]:
        ratio = em.constant(node.input[1])
        if ratio is not None:
            set_attribute(node, "ratio", float(np.asarray(ratio, dtype=np.float32).reshape(-1)[0]))
        # A run-time ratio: the output does not depend on it in inference mode (proven off above), and
        # Dropout-10's default ratio stands in.
        del node.input[1:]
    if mask:
        _inference_mask(em, node.input[0], mask)
    generic.cross(em, step, direction, node, handled=(AttrAdded, AttrToInput, InputAdded, Semantics))


def _inference_mask(em: Emitter, x: str, mask: str) -> None:
    """Dropout-12's mask in inference mode, all true and shaped like ``x``: a constant, or ConstantOfShape (9)."""
    dims = em.dims(x)
    if dims is not None and None not in dims:
        em.op("Identity", [em.const(np.ones([int(d or 0) for d in dims], dtype=np.bool_), "mask")], [mask])
        return
    if em.target < 9:
        em.refuse(f"its mask output {mask!r} is used; Dropout-12 defines it in inference mode (all true, shaped "
                  f"like {x!r}), Dropout-10 does not, and the dims of {x!r} are not static, which an all-true "
                  "mask below ConstantOfShape-9 needs; the lowest opset this node can be taken to is 9")
    true = onnx.helper.make_tensor("true", onnx.TensorProto.BOOL, [1], [True])
    em.op("ConstantOfShape", [em.op("Shape", [x])], [mask], value=true)




@adapter("BatchNormalization", 7, DOWN, UP)
def batch_normalization_7(em: Emitter, step: Step, direction: str) -> None:
    """Inference BatchNormalization (only Y used): ``is_test=1`` at 6; the statistics outputs mean training."""
    node = copy_of(em.node)
    used = [o for o in node.output[1:] if o and em.facts.is_used(o)]
    if used:
        em.refuse(f"its statistics outputs {used} are used (training mode); lowerer converts inference graphs")
    del node.output[1:]
    if direction == UP and attribute_value(node, "is_test") != 1:
        em.refuse("is_test is not 1 (BatchNormalization-6 then normalizes with the batch's own statistics), "
                  "which BatchNormalization-7 with only Y cannot express")
    generic.cross(em, step, direction, node, handled=(Semantics,))
