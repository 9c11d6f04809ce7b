"""Relabels run once per pattern: the step table's "same meaning" is itself executed, not only believed.

A node that crosses versions unchanged, every step between saying the meaning stayed (no
``Semantics``/``DefaultChanged`` change: those relabels are verified as rewrites by the engine), is
a relabel: the engine writes nothing for it and the report lists no rewrite. The table could be wrong
about a step; so one node of each pattern (op, the two since-versions, attributes, which inputs are
given) is checked like a rewrite whose replacement is the node itself, at the source opset and at the
target opset (issue 31, Build item 2): the first whose input types are known without running shape
inference (a whole-model inference would cost more than the checks), else the :data:`MAX_TRIES`-th
(then inferred).
Every other node of the pattern costs a dict lookup, so a model of 50,000 relabelled nodes costs a
handful of checks.

A relabel check is not a rewrite of the report; a failed one raises like a failed rewrite (exit 1),
naming the node and ``same-meaning``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx

from lowerer.core.opsets import since_version
from lowerer.core.report import Rewrite
from lowerer.facts.value_types import ValueType
from lowerer.model_io.scopes import Scope

__all__ = ["RULE", "RelabelCheck"]

#: The rule name a relabel's check carries.
RULE = "same-meaning"
#: Nodes of one pattern looked at for one whose input types are known without inference (then the last is
#: checked on the types facts give, running shape inference once if need be).
MAX_TRIES = 16
_SUBGRAPHS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)

#: What the pipeline knows of a node's inputs for a check: ``input_types``, ``input_values``, ``derived_inputs``.
Describe = Callable[[onnx.NodeProto, Scope], dict[str, Any]]


class RelabelCheck:
    """Checks the first relabelled node of each pattern with ``verifier`` (raises as it does).

    Args:
        verifier: verifies one :class:`~lowerer.core.report.Rewrite` (sets its status, or raises).
        describe: the facts about a node's inputs the check feeds (types, constant and derived inputs).
        known: a value's type where known without inference (the pattern's key).
    """

    def __init__(self, verifier: Callable[[Rewrite], None], describe: Describe,
                 known: Callable[[Scope, str], ValueType | None]) -> None:
        self.verifier = verifier
        self.describe = describe
        self.known = known
        self._seen: set[tuple[object, ...]] = set()
        self._versions: dict[tuple[str, int, int], tuple[int, int]] = {}
        self._tried: dict[tuple[object, ...], int] = {}
        #: Ops whose pattern without attributes (this many inputs, all given; from this opset) is checked.
        self._plain: dict[str, tuple[int, int]] = {}
        #: The relabels checked (one per pattern) and their statuses.
        self.checked: list[Rewrite] = []

    def key(self, node: onnx.NodeProto, versions: tuple[int, int]) -> tuple[object, ...] | None:
        """The node's pattern: op, versions, attributes, inputs given (None: a node with a subgraph, not checked).

        Cheap (no names, no types: the first node of a pattern whose input types are known gives them).
        """
        attrs: tuple[bytes, ...] = ()
        if node.attribute:
            if any(a.type in _SUBGRAPHS or a.ref_attr_name for a in node.attribute):
                return None  # its body is checked node by node; a function's attribute reference has no value
            attrs = tuple(a.SerializeToString() for a in node.attribute)
        return (node.op_type, versions, attrs, tuple(bool(i) for i in node.input), len(node.output))

    def __call__(self, node: onnx.NodeProto, index: int, scope: Scope, source: int, target: int) -> None:
        """Check ``node``, relabelled from opset ``source`` to ``target``, if it is the first of its pattern."""
        if self._plain.get(node.op_type) == (len(node.input), source) and not node.attribute:
            return  # the common case: a node without attributes of an op whose one such pattern is done
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
        if key is None or key in self._seen:
            return
        tried = self._tried[key] = self._tried.get(key, 0) + 1
        if tried < MAX_TRIES and any(not (vt := self.known(scope, i)) or not vt[0] for i in node.input if i):
            return  # an input's type is not known without inference: a later node of the pattern may give it
        self._seen.add(key)
        if not node.attribute and all(node.input):
            self._plain[node.op_type] = (len(node.input), source)
        original, same = onnx.NodeProto(), onnx.NodeProto()
        original.CopyFrom(node)
        same.CopyFrom(node)
        rewrite = Rewrite(node=node.name or f"{node.op_type}#{index}", op_type=node.op_type, scope=scope.path,
                          from_version=versions[0], to_opset=target, rule=RULE, emitted=[node.op_type],
                          original=original, replacement=[same], from_opset=source, **self.describe(node, scope))
        self.checked.append(rewrite)
        self.verifier(rewrite)
