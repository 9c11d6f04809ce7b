"""The version-step engine: takes one node from its opset to a target opset, step by step.

A node of op X at opset ``at`` crosses the boundary of X's history nearest to ``at`` in the
target's direction (:mod:`lowerer.steps.registry` says what crosses it). What comes out is valid
at the far side of that step; each node of it then goes on to the target the same way, so an
adapter may emit any op that exists at the far side (``Shape`` + ``Slice`` for ``Shape-15``) and
the engine takes it the rest of the way. Ops lowerer owns (Hardmax family, ArgMax/ArgMin) are
converted by their rule in one go; decompositions the caller asked for replace their op first.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from lowerer.constants import ConstantIndex
from lowerer.errors import ConversionError
from lowerer.facts import Facts
from lowerer.naming import NameGenerator
from lowerer.opsets import since_version
from lowerer.rules.base import Emitter
from lowerer.rules.expansion import EXPANSION_RULE, expand, has_body
from lowerer.scopes import Scope
from lowerer.shapes import ShapeIndex
from lowerer.steps import generic
from lowerer.steps.changes import (
    AttrAdded,
    Broadcast,
    InputAdded,
    NegativeValues,
    NewAttrValues,
    NoChange,
    OptionalInput,
    OutputAdded,
    Step,
    Types,
)
from lowerer.steps.registry import DOWN, UP, adapter_for, adapter_name, span_rule
from lowerer.steps.table import step as table_step

__all__ = ["Conversion", "Pick", "Picker", "StepEngine", "first_version"]

logger = logging.getLogger(__name__)

#: Changes that need nothing of a node crossing them upward (types only widen where the schemas say so).
_UP_NEUTRAL = (AttrAdded, NegativeValues, Broadcast, OptionalInput, InputAdded, OutputAdded, NewAttrValues,
               NoChange, Types)


@dataclass
class Conversion:
    """What replaces one node: nodes valid at the target, new constants, and how it was done."""

    nodes: list[onnx.NodeProto]
    constants: list[onnx.TensorProto] = field(default_factory=list)
    #: One entry per step crossed or rule applied (``ReduceSum 13 → 11: generic``).
    how: list[str] = field(default_factory=list)
    #: The version and name of the node being converted (messages name the user's node by them).
    first_version: int | None = None
    first_name: str = ""
    #: Whether a function body was expanded (its arithmetic may round differently: judged by a budget).
    expanded: bool = False


@dataclass(frozen=True)
class Pick:
    """A form the caller picked for one node (``--for BACKEND``: see :mod:`lowerer.backends`).

    Attributes:
        rule: the rule to apply; None expands the node into its function body.
        at_source: the rule writes the node at its own opset; what it makes then goes on to the target.
        keep_if_refused: called with the refusal when the rule cannot make the node; True keeps the node
            as it is (a backend fallback the caller allowed), False lets the refusal stand.
    """

    rule: object | None
    at_source: bool = False
    keep_if_refused: Callable[[onnx.NodeProto, Scope, ConversionError], bool] | None = None


#: Given a default-domain node, its scope, its since-version and the facts, a :class:`Pick` or None.
Picker = Callable[[onnx.NodeProto, Scope, int, Facts], "Pick | None"]


@functools.lru_cache(maxsize=1024)
def first_version(op: str) -> int | None:
    """The version ``op`` was introduced at (None for an unknown op)."""
    for opset in range(1, onnx.defs.onnx_opset_version() + 1):
        v = since_version(op, opset)
        if v is not None:
            return v
    return None


@functools.lru_cache(maxsize=4096)
def _versions(op: str) -> tuple[int, ...]:
    found = {since_version(op, o) for o in range(1, onnx.defs.onnx_opset_version() + 1)}
    return tuple(sorted(v for v in found if v is not None))


def _next_step(op: str, version: int, direction: str) -> Step:
    """The step crossed leaving ``version`` in ``direction``."""
    versions = _versions(op)
    i = versions.index(version)
    return table_step(op, version if direction == DOWN else versions[i + 1])


def _types_only_widen(op: str, previous: int, version: int) -> bool:
    """Whether every formal parameter of ``op`` accepts at ``version`` all it accepted at ``previous``."""
    before = generic._formal_types(op, previous)
    after = generic._formal_types(op, version)
    for old, new in zip((*before[0], *before[1]), (*after[0], *after[1]), strict=False):
        if not old[0] <= new[0]:
            return False
    return len(before[0]) == len(after[0]) and len(before[1]) == len(after[1])


class StepEngine:
    """Converts nodes of one model, sharing its names, facts and caches.

    Args:
        names: fresh names for everything made.
        shapes: types and shapes of the model's values.
        constants: constant values of the model's values.
        decompose: names of the decompositions the caller asked for.
        used: whether a value is read anywhere (for outputs a step removes).
        expand: ops to expand into their function bodies.
        picker: picks a form per node of ``picked_ops`` (a backend profile), before anything else.
        picked_ops: the ops ``picker`` is asked about.
    """

    def __init__(self, names: NameGenerator, shapes: ShapeIndex, constants: ConstantIndex,
                 decompose: frozenset[str] = frozenset(), used: Callable[[str], bool] = lambda name: True,
                 expand: frozenset[str] = frozenset(), picker: Picker | None = None,
                 picked_ops: frozenset[str] = frozenset()) -> None:
        self.names = names
        self.shapes = shapes
        self.constants = constants
        self.decompose = decompose
        #: Ops the caller asked to expand into their function bodies (by op name).
        self.expand = expand
        #: Per-node forms a backend profile picks (``--for``), for nodes of ``picked_ops``.
        self.picker = picker
        self.picked_ops = picked_ops if picker is not None else frozenset()
        self._used = used
        self._untouched: dict[tuple[str, int, int], bool] = {}
        self._tables: dict[tuple[int, int], dict[str, bool]] = {}
        self._wants: dict[tuple[str, int, int], bool] = {}
        self._leaves: dict[tuple[str, int, int], bool] = {}

    # -- the quick answer ----------------------------------------------------------------------
    def untouched_table(self, source: int, target: int) -> dict[str, bool]:
        """The per-op answers of :meth:`untouched` for ``source`` → ``target``, as a dict the caller fills."""
        return self._tables.setdefault((source, target), {})

    def untouched(self, op: str, source: int, target: int) -> bool:
        """Whether every ``op`` node stays exactly as it is going from ``source`` to ``target`` (no node looked at)."""
        key = (op, source, target)
        known = self._untouched.get(key)
        if known is None:
            known = self._untouched[key] = self._decide_untouched(op, source, target)
        return known

    def leaves(self, node: onnx.NodeProto, source: int, target: int) -> bool:
        """Whether ``node`` surely stays as it is (decided once per op and opsets: no node is looked into)."""
        key = (node.op_type, source, target)
        known = self._leaves.get(key)
        if known is None:
            known = self._leaves[key] = self._decide_leaves(node, source, target)
        return known

    def _decide_leaves(self, node: onnx.NodeProto, source: int, target: int) -> bool:
        op = node.op_type
        if self.untouched(op, source, target):
            return True
        if op in self.picked_ops:
            return False
        rule = span_rule(op)
        if rule is None or rule.decomposition is not None or self._decomposition(op) is not None:
            return False
        sv = since_version(op, source)
        if sv is None:
            return False
        key = (op, sv, target)
        wants = self._wants.get(key)
        if wants is None:
            wants = self._wants[key] = rule.wants(node, sv, target, self.decompose)
        return not wants

    def _decide_untouched(self, op: str, source: int, target: int) -> bool:
        if span_rule(op) is not None or self._decomposition(op) is not None or op in self.expand or \
                op in self.picked_ops:
            return False
        sv, tv = since_version(op, source), since_version(op, target)
        if sv is None or tv is None:
            return False
        if sv == tv:
            return True
        direction = DOWN if tv < sv else UP
        v = sv
        while v != tv:
            step = _next_step(op, v, direction)
            if adapter_for(op, step.version, direction) is not None:
                return False
            if direction == DOWN:
                if not all(isinstance(c, NoChange) for c in step.changes):
                    return False
            else:
                if not all(isinstance(c, _UP_NEUTRAL) for c in step.changes):
                    return False
                if any(isinstance(c, Types) for c in step.changes) and \
                        not _types_only_widen(op, step.previous, step.version):
                    return False
            v = step.previous if direction == DOWN else step.version
        return True

    def _decomposition(self, op: str) -> object | None:
        from lowerer.rules import DECOMPOSITIONS

        for name in self.decompose:
            rule = DECOMPOSITIONS[name]
            if op in rule.op_types:
                return rule
        return None

    # -- converting ----------------------------------------------------------------------------
    def convert(self, node: onnx.NodeProto, scope: Scope, source: int, target: int) -> Conversion | None:
        """The nodes that replace ``node`` (at opset ``source``) at opset ``target``; None when it stays as is.

        Raises:
            ConversionError: no exact conversion exists (the message names node, op, versions and why).
        """
        facts = Facts(scope, self.shapes, self.constants, self._used)
        conversion = Conversion([], first_name=node.name)
        try:
            nodes = self._to(node, scope, source, target, facts, conversion)
        except ConversionError as e:
            blamed = e.node
            if not isinstance(blamed, onnx.NodeProto) or blamed.name == node.name:
                raise
            # A node made on the way (an adapter's Shape, Slice, Constant ...) cannot go further: name
            # the node the user has, and say which part of its replacement is stuck.
            inner = str(e).split(": ", 1)[1] if ": " in str(e) else str(e)
            sv = since_version(node.op_type, source)
            raise ConversionError(
                f"node {_label(node)} ({node.op_type}-{sv}, in {scope.path}) cannot be converted to opset {target}: "
                f"it is rewritten ({_first_step(conversion)}) into {'an' if blamed.op_type[0] in 'AEIOU' else 'a'} "
                f"{blamed.op_type} that cannot be taken there: "
                f"{inner}", node=node, scope=scope.path) from None
        if nodes is None:
            return None
        if len(nodes) == 1 and not conversion.constants and nodes[0] == node:
            return None  # crossed the steps without any change: a relabel
        conversion.nodes = nodes
        return conversion

    def _to(self, node: onnx.NodeProto, scope: Scope, at: int, target: int, facts: Facts,
            conversion: Conversion) -> list[onnx.NodeProto] | None:
        """``node`` (valid at ``at``) as nodes valid at ``target``; None when it is valid there as it is."""
        if node.domain not in ("", "ai.onnx"):
            return None
        op = node.op_type
        sv = since_version(op, at)
        if sv is None:
            raise ConversionError(f"node {_label(node)} ({op}, in {scope.path}): default-domain opset {at} has "
                                  f"no op {op!r}", node=node, scope=scope.path)
        if op in self.picked_ops:
            assert self.picker is not None
            pick = self.picker(node, scope, sv, facts)
            if pick is not None:
                picked = self._apply_pick(pick, node, scope, at, sv, target, facts, conversion)
                if picked is not None:
                    return picked
        decomposition = self._decomposition(op)
        if decomposition is not None:
            return self._apply_rule(decomposition, node, scope, sv, target, facts, conversion)
        if op in self.expand:
            return self._expand(node, scope, sv, target, facts, conversion, "asked for")
        rule = span_rule(op)
        if rule is not None:
            key = (op, sv, target)
            wants = self._wants.get(key)
            if wants is None:
                wants = self._wants[key] = rule.wants(node, sv, target, self.decompose)
            if not wants:
                return None
            return self._apply_rule(rule, node, scope, sv, target, facts, conversion)
        tv = since_version(op, target)
        if tv == sv:
            return None
        if tv is None:
            if has_body(op, sv):
                return self._expand(node, scope, sv, target, facts, conversion, f"no {op} at opset {target}")
            raise self._missing(node, scope, sv, target)
        direction = DOWN if tv < sv else UP
        step = _next_step(op, sv, direction)
        if any(a.ref_attr_name for a in node.attribute) and \
                not all(isinstance(c, (Types, NoChange)) for c in step.changes):
            from lowerer.pipeline import refuse_attribute_references

            refuse_attribute_references(node, scope, f"{op}-{sv}", target)
        far = step.version - 1 if direction == DOWN else step.version
        em = Emitter(node, scope, sv, far, self.names, facts, self.decompose)
        em.target = target
        if conversion.first_version is None:
            conversion.first_version = sv
        elif node.name == conversion.first_name:
            em.shown_version = conversion.first_version
        adapter = adapter_for(op, step.version, direction)
        try:
            if adapter is not None:
                adapter(em, step, direction)
                how = adapter_name(op, step.version, direction)
            else:
                generic.cross(em, step, direction)
                how = "generic"
        except ConversionError as refused:
            # A step with no exact crossing: the op's function body (the spec's own definition) may still
            # take the node there, e.g. GroupNormalization-21 below 21.
            if direction == DOWN and has_body(op, sv) and node.name == conversion.first_name:
                return self._expand(node, scope, sv, target, facts, conversion,
                                    f"the step {step.describe()} has no exact crossing ({refused})")
            raise
        conversion.constants.extend(em.constants)
        conversion.how.append(f"{op} {step.previous if direction == UP else step.version} → "
                              f"{step.version if direction == UP else step.previous}: {how}")
        out: list[onnx.NodeProto] = []
        for made in em.nodes:
            if made.op_type != op:  # a node the adapter built: its subgraphs are new too
                self._subgraphs_to(made, scope, far, target, facts, conversion)
            further = self._to(made, scope, far, target, facts, conversion)
            out.extend([made] if further is None else further)
        return out

    def _subgraphs_to(self, node: onnx.NodeProto, scope: Scope, at: int, target: int, facts: Facts,
                      conversion: Conversion) -> None:
        """Take the nodes inside ``node``'s subgraphs (built at opset ``at``) to ``target``, in place."""
        for attr in node.attribute:
            graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
            for graph in graphs:
                for inner in graph.node:
                    facts.add_node(inner, at)
                converted: list[onnx.NodeProto] = []
                for inner in graph.node:
                    self._subgraphs_to(inner, scope, at, target, facts, conversion)
                    further = self._to(inner, scope, at, target, facts, conversion)
                    converted.extend([inner] if further is None else further)
                del graph.node[:]
                graph.node.extend(converted)

    def _expand(self, node: onnx.NodeProto, scope: Scope, sv: int, target: int, facts: Facts,
                conversion: Conversion, why: str) -> list[onnx.NodeProto]:
        """``node`` replaced by its function body, whose nodes then go on to ``target``."""
        from lowerer.pipeline import refuse_attribute_references

        refuse_attribute_references(node, scope, f"{node.op_type}-{sv}", target)
        em = Emitter(node, scope, sv, target, self.names, facts, self.decompose)
        em.target = target
        opset = expand(em)
        conversion.constants.extend(em.constants)
        conversion.how.append(f"{node.op_type}-{sv} → its function body at opset {opset} ({why}): "
                              f"rule {EXPANSION_RULE}")
        conversion.expanded = True
        out: list[onnx.NodeProto] = []
        for made in em.nodes:
            self._subgraphs_to(made, scope, opset, target, facts, conversion)
            further = self._to(made, scope, opset, target, facts, conversion)
            out.extend([made] if further is None else further)
        return out

    def _apply_pick(self, pick: Pick, node: onnx.NodeProto, scope: Scope, at: int, sv: int, target: int,
                    facts: Facts, conversion: Conversion) -> list[onnx.NodeProto] | None:
        """``node`` made by the picked form; None when the form refused and the caller keeps the node as is."""
        kept_constants, kept_how = len(conversion.constants), len(conversion.how)
        try:
            if pick.rule is None:
                if not has_body(node.op_type, sv):
                    raise ConversionError(
                        f"node {_label(node)} ({node.op_type}-{sv}, in {scope.path}) cannot be expanded: "
                        f"{node.op_type}-{sv} has no function body in onnx's schemas", node=node, scope=scope.path)
                return self._expand(node, scope, sv, target, facts, conversion, "the backend profile names it")
            if not pick.at_source:
                return self._apply_rule(pick.rule, node, scope, sv, target, facts, conversion)
            made = self._apply_rule(pick.rule, node, scope, sv, at, facts, conversion)
            out: list[onnx.NodeProto] = []
            for n in made:
                self._subgraphs_to(n, scope, at, target, facts, conversion)
                further = self._to(n, scope, at, target, facts, conversion)
                out.extend([n] if further is None else further)
            return out
        except ConversionError as refused:
            if pick.keep_if_refused is None or not pick.keep_if_refused(node, scope, refused):
                raise
            del conversion.constants[kept_constants:]
            del conversion.how[kept_how:]
            return None

    def _apply_rule(self, rule: object, node: onnx.NodeProto, scope: Scope, sv: int, target: int, facts: Facts,
                    conversion: Conversion) -> list[onnx.NodeProto]:
        from lowerer.pipeline import refuse_attribute_references
        from lowerer.rules.base import Rule

        assert isinstance(rule, Rule)
        refuse_attribute_references(node, scope, f"{node.op_type}-{sv}", target)
        em = Emitter(node, scope, sv, target, self.names, facts, self.decompose)
        rule.rewrite(em)
        conversion.constants.extend(em.constants)
        conversion.how.append(f"{node.op_type}-{sv} → opset {target}: rule {rule.name}")
        return em.nodes

    def _missing(self, node: onnx.NodeProto, scope: Scope, sv: int, target: int) -> ConversionError:
        op = node.op_type
        first = first_version(op)
        if first is not None and target < first:
            why = (f"{op} does not exist there (it was introduced at opset {first}); the lowest opset this node "
                   f"can be taken to is {first}")
        else:
            why = f"{op} does not exist at opset {target}"
        return ConversionError(f"node {_label(node)} ({op}-{sv}, in {scope.path}) cannot be converted to opset "
                               f"{target}: {why}", node=node, scope=scope.path)


def _first_step(conversion: Conversion) -> str:
    """How the conversion began, shortly (``LayerNormalization-17 → its function body at opset 17``)."""
    if not conversion.how:
        return "by a rule"
    first = conversion.how[0]
    return first.split(" (", 1)[0] if " (" in first else first


def _label(node: onnx.NodeProto) -> str:
    return repr(node.name) if node.name else f"<unnamed {node.op_type}>"
