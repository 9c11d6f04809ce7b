"""Version-step adapters for BatchNormalization and Dropout, whose training behaviour changed form.

lowerer converts inference graphs: these adapters keep a node in inference mode and refuse one
that trains (whose extra outputs are used, or whose mode cannot be proven off).

* ``BatchNormalization`` 14 → 9: ``training_mode`` absent or 0 and no running-statistics output
  used; 9 → 14 likewise (BatchNormalization-9's extra outputs are training outputs).
* ``Dropout`` 12 → 10: ``training_mode`` absent or a constant false, ``ratio`` constant (it moves
  back to an attribute, where it is irrelevant in inference anyway).
"""

from __future__ import annotations

import numpy as np

from lowerer.steps import generic
from lowerer.steps.changes import AttrAdded, AttrToInput, InputAdded, OutputAdded, Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import attribute_value, remove_attribute, set_attribute
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["batch_normalization_7", "batch_normalization_14", "dropout_12_10"]


@adapter("BatchNormalization", 14, DOWN, UP)
def batch_normalization_14(em: Emitter, step: Step, direction: str) -> None:
    """Inference-mode BatchNormalization means the same at 9 and 14."""
    node = generic.copy_of(em.node)
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
    node = generic.copy_of(em.node)
    if len(node.output) > 1 and node.output[1] and em.facts.is_used(node.output[1]):
        em.refuse(f"its mask output {node.output[1]!r} is used; Dropout-12 defines the mask in inference mode "
                  "(all true), Dropout-10 does not")
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
        if ratio is None:
            em.refuse(f"ratio ({node.input[1]!r}) is not a constant; Dropout-10 takes it as an attribute")
        set_attribute(node, "ratio", float(np.asarray(ratio, dtype=np.float32).reshape(-1)[0]))
        del node.input[1:]
    generic.cross(em, step, direction, node, handled=(AttrAdded, AttrToInput, InputAdded, Semantics))




@adapter("BatchNormalization", 7, DOWN, UP)
def batch_normalization_7(em: Emitter, step: Step, direction: str) -> None:
    """Inference BatchNormalization (only Y used): ``is_test=1`` at 6; the statistics outputs mean training."""
    node = generic.copy_of(em.node)
    used = [o for o in node.output[1:] if o and em.facts.is_used(o)]
    if used:
        em.refuse(f"its statistics outputs {used} are used (training mode); lowerer converts inference graphs")
    del node.output[1:]
    if direction == UP and attribute_value(node, "is_test") != 1:
        em.refuse("is_test is not 1 (BatchNormalization-6 then normalizes with the batch's own statistics), "
                  "which BatchNormalization-7 with only Y cannot express")
    generic.cross(em, step, direction, node, handled=(Semantics,))
