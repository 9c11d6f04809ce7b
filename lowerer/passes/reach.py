"""The opsets a model reaches (``inspect --reach``), for about the price of one conversion.

A conversion is refused by a node: the step engine refusing it, the check of its replacement
(schema, strict inference and onnxruntime opening the rewrite alone), or a Scan whose body has outputs of no known
shape going below 14. So the search asks exactly that of the model's nodes, on one working
copy whose facts (types, constants) are gathered once, as a conversion gathers them: the lowest and
the highest opset are searched outwards from the model's own, one opset at a time, and stop at the
first refusal, as converting to each opset would. Per opset, the ops the engine leaves alone are
skipped without looking at a node (as in a conversion), and of the other nodes one per pattern is
converted: the op, its since-version, its attributes, its inputs' types and constant values and which
of its outputs are read; nodes alike in all of these are converted alike, and the refusal reported
is that of a node of the model. The whole-model validation is not run: it refuses only lowerer's
own gaps (see :mod:`lowerer.passes.checker_gate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import onnx

from lowerer.core.errors import ConversionError
from lowerer.core.opsets import MAX_OPSET, MIN_OPSET, default_opset
from lowerer.model_io.scopes import Scope, has_subgraphs, iter_scopes
from lowerer.passes.options import request_for
from lowerer.passes.runtime_gate import check_rewrite_opens
from lowerer.passes.scan_shapes import refuse_unshaped_scan_body
from lowerer.passes.walk import ConversionWalk

__all__ = ["NodeReach", "limit", "search_outwards"]

#: How a refusal names its node: ``node 'tri' (Trilu-14, in graph)`` (or ``<unnamed Op>``).
_NODE = re.compile(r"^node ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|<unnamed [^>]*>) \((\w+)-(\d+), in ([^)]*)\)")


def limit(opset: int, refusal: str) -> dict[str, Any]:
    """What stops a reach search at ``opset``: the refusal and the node it names (label, op, version, scope)."""
    found = _NODE.match(refusal)
    record: dict[str, Any] = {"opset": opset, "node": None, "op_type": None, "version": None, "scope": None,
                              "refusal": refusal}
    if found:
        record.update(node=found.group(1), op_type=found.group(2), version=int(found.group(3)), scope=found.group(4))
    return record



class NodeReach:
    """Whether each opset is reachable, judged on one node per pattern.

    Args:
        model: the model (only read: nothing is converted in it).
        names: the decomposition names asked for (as :func:`lowerer.passes.options.normalize_decompose` gives them).
    """

    def __init__(self, model: onnx.ModelProto, names: frozenset[str]) -> None:
        self.source = default_opset(model.opset_import)
        self._walk = ConversionWalk(model, None, request_for(names), None)
        #: Every default-domain node, in the order a conversion meets them (a node's subgraphs before it).
        self._nodes = [(scope, index, node) for root in iter_scopes(model) for scope, index, node in _in_order(root)
                       if node.domain in ("", "ai.onnx") and scope.opset is not None]
        #: Positions in that order of the nodes of each (scope opset, op).
        self._positions: dict[tuple[int, str], list[int]] = {}
        for position, (scope, _, node) in enumerate(self._nodes):
            assert scope.opset is not None
            self._positions.setdefault((scope.opset, node.op_type), []).append(position)
        self._patterns: dict[int, object] = {}
        self._refused: dict[int, str | None] = {}

    def _pattern(self, scope: Scope, node: onnx.NodeProto) -> object:
        """What the node's conversion depends on (computed once per node, when an op first needs it)."""
        key = id(node)
        found = self._patterns.get(key)
        if found is not None:
            return found
        if has_subgraphs(node):
            found = key  # a control-flow node: its bodies decide
        else:
            walk = self._walk
            types = tuple(walk.shapes.lookup(scope, n) if n else None for n in node.input)
            values = []
            for n in node.input:
                value = walk.constants.value(scope, n) if n else None
                values.append(None if value is None else (str(value.dtype), value.shape, value.tobytes()))
            found = (scope.opset, node.op_type, repr(types), tuple(values),
                     tuple(a.SerializeToString() for a in node.attribute),
                     tuple(bool(o) and walk.used(o) for o in node.output), len(node.input))
        self._patterns[key] = found
        return found

    def refusal(self, target: int) -> str | None:
        """Why converting the model to ``target`` is refused (a node's refusal), or None when it is not."""
        if target not in self._refused:
            self._refused[target] = self._first_refusal(target)
        return self._refused[target]

    def _first_refusal(self, target: int) -> str | None:
        """The first refusal in the order a conversion meets the nodes (one node tried per pattern)."""
        walk, engine = self._walk, self._walk.engine
        seen: set[object] = set()
        # Only the nodes of ops the engine does not leave alone at this target (decided once per op).
        positions = sorted(p for (opset, op), found in self._positions.items()
                           if op == "Scan" or not engine.leaves(self._nodes[found[0]][2], opset, target)
                           for p in found)
        for scope, index, node in (self._nodes[p] for p in positions):
            opset = scope.opset
            assert opset is not None
            scan = node.op_type == "Scan"
            pattern = self._pattern(scope, node)
            if pattern in seen:
                continue
            seen.add(pattern)
            try:
                if scan:
                    for child in scope.children(index, node):
                        refuse_unshaped_scan_body(node, scope, walk.shapes, child, opset, target, walk.constants)
                if not engine.leaves(node, opset, target) and \
                        walk.node(node, index, scope, opset, target, []) is not None:  # node gate, inference
                    check_rewrite_opens(walk.report.rewrites[-1], walk.report)  # onnxruntime opens it
            except ConversionError as e:
                return str(e)
        return None

    def search(self) -> dict[str, Any]:
        """The lowest and highest reachable opsets and what limits each (see :func:`search_outwards`)."""
        if self.source is None:
            raise ValueError("the model imports no default-domain opset")
        return search_outwards(self.source, self.refusal)


def search_outwards(source: int, refusal: Callable[[int], str | None]) -> dict[str, Any]:
    """The lowest and highest opsets from ``source`` outwards before ``refusal`` first names one.

    ``lowest_limit`` / ``highest_limit`` hold that refusal (see :func:`limit`), or None where the search
    ran out of opsets.
    """
    found: dict[str, Any] = {}
    for key, step, end in (("lowest", -1, MIN_OPSET), ("highest", 1, MAX_OPSET)):
        opset, stop = source, None
        while opset != end:
            refused = refusal(opset + step)
            if refused is not None:
                stop = limit(opset + step, refused)
                break
            opset += step
        found[key], found[f"{key}_limit"] = opset, stop
    return found


def _in_order(scope: Scope) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
    """The nodes of ``scope`` and below, each node's subgraphs first (as the conversion walk takes them)."""
    for index, node in enumerate(scope.holder.node):
        for child in scope.children(index, node):
            yield from _in_order(child)
        yield scope, index, node
