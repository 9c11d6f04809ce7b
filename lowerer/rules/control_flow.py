"""Version-step adapters for control flow: If below 11, Scan's negative axes (11).

If and Loop changed nothing a valid model can observe at 11 (their bodies are converted as scopes
of their own by the pipeline before the node crosses its steps; Loop-1's need of one loop-carried
value is checked as the schema's input count).

* ``If`` 11 → 1: If-1 documents equal branch shapes, and onnx's shape inference for If-1 merges
  the branches' output shapes (a model whose branches yield different ones fails onnx's checker):
  relabelled when every output has the same shape in both branches, else refused. A shape is what
  the branch states, merged with what onnx infers for the branch on its own, its outer values typed
  (and small constant ones valued) from the If's scope (:mod:`lowerer.facts.body_shapes`); dims are equal
  when both are the same static size, or both the same named dim of the model (a name its outer
  values' shapes or the branches' stated outputs carry: equal at run time, as the model names them).

* ``Scan`` 11 → 9: negative ``scan_input_axes`` / ``scan_output_axes`` count from the back of each
  scan input / scan output (ranks differ per tensor): made non-negative with each tensor's rank.
"""

from __future__ import annotations

import onnx

from lowerer.facts.body_shapes import infer_outputs, same_shape, shape_text, stated_dims
from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, set_attribute
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["if_11_1", "scan_11_9"]


@adapter("If", 11, DOWN)
def if_11_1(em: Emitter, step: Step, direction: str) -> None:
    """Relabel when every output has the same shape in both branches (stated or inferred), else refuse."""
    branches = {a.name: a.g for a in em.node.attribute if a.type == onnx.AttributeProto.GRAPH}
    then_b, else_b = branches.get("then_branch"), branches.get("else_branch")
    if then_b is None or else_b is None or len(then_b.output) != len(else_b.output):
        em.refuse("the node lacks a branch, or its branches yield different numbers of outputs")
    stated = [(stated_dims(a.type), stated_dims(b.type)) for a, b in zip(then_b.output, else_b.output, strict=True)]
    if all(da is not None and da == db and all(isinstance(d, int) for d in da) for da, db in stated):
        generic.cross(em, step, direction)
        return
    facts = em.facts
    then_shapes, then_names = infer_outputs(then_b, {"": em.target}, facts.type_of, facts.symbols, facts.value)
    else_shapes, else_names = infer_outputs(else_b, {"": em.target}, facts.type_of, facts.symbols, facts.value)
    names = then_names | else_names
    for a, b, (_, da), (_, db) in zip(then_b.output, else_b.output, then_shapes, else_shapes, strict=True):
        if not same_shape(da, db, names):
            em.refuse(f"If-1 needs both branches to yield the same shape (onnx's inference merges them), and "
                      f"output {a.name!r} / {b.name!r} is neither stated nor inferred to (then: {shape_text(da)}, "
                      f"else: {shape_text(db)}); the lowest opset for this node is 11")
    generic.cross(em, step, direction)


@adapter("Scan", 11, DOWN)
def scan_11_9(em: Emitter, step: Step, direction: str) -> None:
    """Negative scan axes made non-negative with the rank of each scan input and output."""
    node = copy_of(em.node)
    scan_inputs = int(attribute_value(node, "num_scan_inputs") or 0)  # type: ignore[call-overload]
    states = len(node.input) - scan_inputs
    scanned = (("scan_input_axes", list(node.input)[states:]), ("scan_output_axes", list(node.output)[states:]))
    for attr, names in scanned:
        axes = attribute_value(node, attr)
        if not isinstance(axes, list) or all(a >= 0 for a in axes):
            continue
        fixed = []
        for k, a in enumerate(axes):
            if a >= 0:
                fixed.append(a)
                continue
            rank = em.rank(names[k]) if k < len(names) else None
            if rank is None:
                em.refuse(f"{attr}[{k}]={a} counts from the back of {names[k] if k < len(names) else '?'!r}, whose "
                          "rank is unknown; Scan-9 needs non-negative axes (add shape information)")
            fixed.append(a + rank)
        set_attribute(node, attr, fixed)
    generic.cross(em, step, direction, node, handled=(Semantics,))


adapter("Scan", 11, UP)(generic.meaning_kept)  # Scan-11 only accepts more (negative axes)
