"""Relabels run once per pattern: the step table's "same meaning" is itself executed, not only believed.

A node that crosses versions unchanged, every step between saying the meaning stayed (no
``Semantics``/``DefaultChanged`` change: those relabels are verified as rewrites by the engine), is
a relabel: the engine writes nothing for it and the report lists no rewrite. The table could be wrong
about a step; so one node of each pattern is checked like a rewrite whose replacement is the node
itself, at the source opset and at the target opset (issue 31, Build item 2). A pattern is what can
change the meaning (issue 36): op, the two since-versions, attributes, which inputs are given, and per
input its element type, rank and which dims are static. A Softmax(axis=1) relabel right on a 2-D input
is checked again on a 3-D one. The types are those known without running shape inference (stated, or
inferred already); where an input's rank is not known that way, shape inference runs (once per model)
to give it. Elementwise ops (:data:`~lowerer.facts.made_shapes.ELEMENTWISE`: each output element a
function of the input elements broadcast to its position, the broadcast the same at every rank since
opset 7) are keyed without their input types: no rank or static dim can change what they compute.
Every other node of a pattern checked costs a dict lookup (and one per input where its op is not
elementwise), so a model of 50,000 relabelled nodes costs a handful of checks.

A relabel check is not a rewrite of the report; a failed one raises like a failed rewrite (exit 1),
naming the node and ``same-meaning``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx

from lowerer.core.opsets import since_version
from lowerer.core.report import Rewrite
from lowerer.facts.made_shapes import ELEMENTWISE
from lowerer.facts.value_types import ValueType
from lowerer.model_io.naming import node_key
from lowerer.model_io.scopes import Scope

__all__ = ["RULE", "RelabelCheck"]

#: The rule name a relabel's check carries.
RULE = "same-meaning"
_SUBGRAPHS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)

#: What the pipeline knows of a node's inputs for a check: ``input_types``, ``input_values``, ``derived_inputs``.
Describe = Callable[[onnx.NodeProto, Scope], dict[str, Any]]
#: A value's type as seen from a scope (None: unknown).
Types = Callable[[Scope, str], ValueType | None]
#: What an input contributes to a pattern: (element type, rank) when every dim is static, (element type,
#: which dims are static) otherwise, (element type, None) for an unknown rank; ``()`` for an input not given.
_Part = tuple[object, ...]


def _part(vt: ValueType | None) -> _Part | None:
    """An input's part of a pattern (None: its rank is not known)."""
    if vt is None or (dims := vt[1]) is None:
        return None
    return (vt[0], tuple([d is not None for d in dims]) if None in dims else len(dims))


class RelabelCheck:
    """Checks the first relabelled node of each pattern with ``verifier`` (raises as it does).

    Args:
        verifier: verifies one :class:`~lowerer.core.report.Rewrite` (sets its status, or raises).
        describe: the facts about a node's inputs the check feeds (types, constant and derived inputs).
        known: a value's type where known without inference (the pattern's input types).
        inferred: a value's type, running shape inference where ``known`` does not give its rank
            (default: ``known``).
    """

    def __init__(self, verifier: Callable[[Rewrite], None], describe: Describe, known: Types,
                 inferred: Types | None = None) -> None:
        self.verifier = verifier
        self.describe = describe
        self.known = known
        self.inferred = inferred if inferred is not None else known
        self._seen: set[tuple[object, ...]] = set()
        self._versions: dict[tuple[str, int, int], tuple[int, int]] = {}
        #: Per op without attributes (this many inputs, all given; from this opset): the input parts checked.
        self._plain: dict[str, tuple[tuple[int, int], set[tuple[_Part, ...]]]] = {}
        #: The relabels checked (one per pattern) and their statuses.
        self.checked: list[Rewrite] = []

    def key(self, node: onnx.NodeProto, versions: tuple[int, int]) -> tuple[object, ...] | None:
        """The node's pattern without its input types: op, versions, attributes, inputs given, outputs.

        None: a node with a subgraph, not checked (its body is checked node by node).
        """
        attrs: tuple[bytes, ...] = ()
        if node.attribute:
            if any(a.type in _SUBGRAPHS or a.ref_attr_name for a in node.attribute):
                return None  # its body is checked node by node; a function's attribute reference has no value
            attrs = tuple(a.SerializeToString() for a in node.attribute)
        return (node.op_type, versions, attrs, tuple(bool(i) for i in node.input), len(node.output))

    def parts(self, node: onnx.NodeProto, scope: Scope) -> tuple[_Part, ...]:
        """Per input: element type, rank and which dims are static (``()``: not given); inferred where not known.

        Nothing for an elementwise op (its meaning is the same at every rank).
        """
        if node.op_type in ELEMENTWISE:
            return ()
        out: list[_Part] = []
        for name in node.input:
            if not name:
                out.append(())
                continue
            part = _part(self.known(scope, name))
            if part is None:  # not stated: shape inference runs (once per model) for its rank
                vt = self.inferred(scope, name)
                part = _part(vt) or (vt[0] if vt else 0, None)
            out.append(part)
        return tuple(out)

    def __call__(self, node: onnx.NodeProto, index: int, scope: Scope, source: int, target: int) -> None:
        """Check ``node``, relabelled from opset ``source`` to ``target``, if it is the first of its pattern."""
        plain = None if node.attribute else self._plain.get(node.op_type)
        if plain is not None and plain[0] == (len(node.input), source):
            parts = self.parts(node, scope)
            if parts in plain[1]:
                return  # the common case: a node without attributes of a pattern checked already
        else:
            parts = None
        if node.domain not in ("", "ai.onnx") or source == target:
            return
        crossed = (node.op_type, source, target)
        versions = self._versions.get(crossed)
        if versions is None:
            versions = self._versions[crossed] = (since_version(node.op_type, source) or 0,
                                                  since_version(node.op_type, target) or 0)
        if not versions[0] or not versions[1] or versions[0] == versions[1]:
            return  # no version crossed
        key = self.key(node, versions)
        if key is None:
            return
        if parts is None:
            parts = self.parts(node, scope)
        if (key, parts) in self._seen:
            return
        self._seen.add((key, parts))
        if not node.attribute and all(node.input):
            self._plain.setdefault(node.op_type, ((len(node.input), source), set()))[1].add(parts)
        self._check(node, index, scope, versions, source, target)

    def _check(self, node: onnx.NodeProto, index: int, scope: Scope, versions: tuple[int, int],
               source: int, target: int) -> None:
        """Run ``node`` as its own replacement through the verifier (a :class:`Rewrite` of rule ``same-meaning``)."""
        original, same = onnx.NodeProto(), onnx.NodeProto()
        original.CopyFrom(node)
        same.CopyFrom(node)
        rewrite = Rewrite(node=node_key(node, index), op_type=node.op_type, scope=scope.path,
                          from_version=versions[0], to_opset=target, rule=RULE, emitted=[node.op_type],
                          original=original, replacement=[same], from_opset=source, **self.describe(node, scope))
        self.checked.append(rewrite)
        self.verifier(rewrite)
