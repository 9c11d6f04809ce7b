"""The version-step engine: takes one node from its opset to a target opset, entry by entry.

For each node the engine asks :meth:`~lowerer.steps.registry.Registry.resolve` what happens next
(the dispatch order is written there, once) and applies that entry: a backend form, a
decomposition, an expansion, an owned rule, or the crossing of the next version step by its
adapter or the generic handling. What the entry emits is valid at its far side; each emitted node
then goes on to the target the same way, so an adapter may emit any op that exists at the far side
(``Shape`` + ``Slice`` for ``Shape-15``) and the engine takes it the rest of the way. Each entry
applied is recorded as a :class:`~lowerer.core.report.Crossing`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import onnx

from lowerer.core import remedies
from lowerer.core.errors import ConversionError
from lowerer.core.opsets import since_version
from lowerer.core.report import Crossing
from lowerer.facts import Facts
from lowerer.facts.constants import ConstantIndex
from lowerer.facts.shapes import ShapeIndex
from lowerer.model_io.naming import NameGenerator, node_label
from lowerer.model_io.scopes import Scope, node_graphs, used_names_of
from lowerer.steps import generic
from lowerer.steps.changes import (
    AttrAdded,
    Broadcast,
    DefaultChanged,
    InputAdded,
    NegativeValues,
    NewAttrValues,
    NoChange,
    OptionalInput,
    OutputAdded,
    Semantics,
    Types,
)
from lowerer.steps.conversion import Conversion, Pick, Picker, first_version, refuse_attribute_references
from lowerer.steps.emitter import Emitter, Rule
from lowerer.steps.expansion import expand, has_body
from lowerer.steps.registry import (
    DOWN,
    NO_REQUEST,
    UP,
    Registry,
    RegistryEntry,
    Request,
    Resolution,
    next_step,
    step_ends,
)
from lowerer.steps.signature import formal_types
from lowerer.steps.stamping import MAX_PER_KEY, NamesMade, Pattern, Recorder, record, static_key
from lowerer.steps.table import steps_between

__all__ = ["StepEngine"]

logger = logging.getLogger(__name__)

#: Changes that need nothing of a node crossing them upward (types only widen where the schemas say so).
_UP_NEUTRAL = (AttrAdded, NegativeValues, Broadcast, OptionalInput, InputAdded, OutputAdded, NewAttrValues,
               NoChange, Types)
#: How deep forms may make nodes that are picked again (a form never needs more than one more).
_MAX_PICK_DEPTH = 4


def _types_only_widen(op: str, previous: int, version: int) -> bool:
    """Whether every formal parameter of ``op`` accepts at ``version`` all it accepted at ``previous``."""
    before = formal_types(op, previous)
    after = formal_types(op, version)
    for old, new in zip((*before[0], *before[1]), (*after[0], *after[1]), strict=False):
        if not old[0] <= new[0]:
            return False
    return len(before[0]) == len(after[0]) and len(before[1]) == len(after[1])


class StepEngine:
    """Converts nodes of one model, sharing its names, facts and caches.

    A node's conversion is computed once per pattern and stamped onto later nodes of the pattern
    (:mod:`lowerer.steps.stamping`).

    Args:
        registry: the registry whose :meth:`~lowerer.steps.registry.Registry.resolve` decides each entry.
        names: fresh names for everything made.
        shapes: types and shapes of the model's values.
        constants: constant values of the model's values.
        request: the decompositions and expansions the caller asked for.
        used: whether a value is read anywhere (for outputs a step removes).
        picker: picks a backend form per node of ``picked_ops`` once it is at the target, or where the target
            lacks the op (OpenVINO 2023.0's Gelu-20 at opset 17: its form instead of its body) (``--for``).
        picked_ops: the ops ``picker`` is asked about.
    """

    #: Tests: set to a callable to check every stamp against a fresh emission (see ``check_stamps``).
    check_all_stamps: Callable[[onnx.NodeProto, Conversion | None, Conversion | None], None] | None = None

    def __init__(self, registry: Registry, names: NameGenerator, shapes: ShapeIndex, constants: ConstantIndex,
                 request: Request = NO_REQUEST, used: Callable[[str], bool] = lambda name: True,
                 picker: Picker | None = None, picked_ops: frozenset[str] = frozenset()) -> None:
        self.registry = registry
        self.names = names
        self.shapes = shapes
        self.constants = constants
        self.request = request
        self.picker = picker
        self.picked_ops = picked_ops if picker is not None else frozenset()
        self._used = used
        self._untouched: dict[tuple[str, int, int], bool] = {}
        self._meaning: dict[tuple[str, int, int], bool] = {}
        self._tables: dict[tuple[int, int], dict[str, bool]] = {}
        self._forms: dict[tuple[str, str, tuple[object, ...]], Rule] = {}
        self._own_ops = frozenset(op for name in request.decompose for op in registry.decompositions[name].op_types)
        #: Recorded conversions by static key (see :mod:`lowerer.steps.stamping`).
        self._patterns: dict[tuple[object, ...], list[Pattern]] = {}
        #: How many conversions were stamped from a recorded pattern.
        self.stamped = 0
        #: Tests: called with (node, stamped conversion, fresh conversion) on every stamp.
        self.check_stamps: Callable[[onnx.NodeProto, Conversion | None, Conversion | None], None] | None = \
            StepEngine.check_all_stamps

    # -- the quick answer ----------------------------------------------------------------------
    def untouched_table(self, source: int, target: int) -> dict[str, bool]:
        """The per-op answers of :meth:`leaves` for ``source`` → ``target``, as a dict the caller fills."""
        return self._tables.setdefault((source, target), {})

    def leaves(self, node: onnx.NodeProto, source: int, target: int) -> bool:
        """Whether every ``node.op_type`` node surely stays as it is (decided per op and opsets, no node read)."""
        op = node.op_type
        key = (op, source, target)
        known = self._untouched.get(key)
        if known is None:
            known = self._untouched[key] = self._decide_leaves(op, source, target)
        return known

    def _decide_leaves(self, op: str, source: int, target: int) -> bool:
        if op in self._own_ops or op in self.request.expand or op in self.picked_ops:
            return False
        sv, tv = since_version(op, source), since_version(op, target)
        if sv is None or tv is None:
            return False
        if self.registry.span_rule(op) is not None:
            resolution = self.registry.resolve(op, sv, target, self.request)
            return resolution is None or resolution.entry.kind == "same-meaning"
        direction = DOWN if tv < sv else UP
        v = sv
        while v != tv:
            step = next_step(op, v, direction)
            if self.registry.step_entry(op, *step_ends(step, direction)) is not None:
                return False
            if direction == DOWN and not all(isinstance(c, NoChange) for c in step.changes):
                return False
            if direction == UP and (not all(isinstance(c, _UP_NEUTRAL) for c in step.changes) or (
                    any(isinstance(c, Types) for c in step.changes)
                    and not _types_only_widen(op, step.previous, step.version))):
                return False
            v = step.previous if direction == DOWN else step.version
        return True

    # -- converting ----------------------------------------------------------------------------
    def convert(self, node: onnx.NodeProto, scope: Scope, source: int, target: int) -> Conversion | None:
        """The nodes that replace ``node`` (at opset ``source``) at opset ``target``; None when it stays as is.

        Raises:
            ConversionError: no exact conversion exists (the message names node, op, versions and why).
        """
        key = None if self.picker is not None else static_key(node, scope, source, target)
        if key is None:
            before = node.SerializeToString()
            return self._untouched_input(node, scope, source, target, before, self._convert(
                node, scope, source, target, self.shapes, self.constants, self._used))
        patterns = self._patterns.setdefault(key, [])
        for pattern in patterns:
            if pattern.matches(node, scope, self.shapes, self.constants, self._used):
                self.stamped += 1
                return self._stamp(pattern, node, scope, source, target)
        recorder = Recorder(node, self.shapes, self.constants, self._used)
        names, self.names = self.names, NamesMade(self.names)  # type: ignore[assignment]
        # The rules run on this node: it must come out as it went in (the rewrite's original is taken
        # from it). Once per pattern, stamps run no rule.
        before = node.SerializeToString()
        try:
            conversion = self._untouched_input(node, scope, source, target, before, self._convert(
                node, scope, source, target, recorder, recorder, recorder))
            made = self.names
        finally:
            self.names = names
        assert isinstance(made, NamesMade)
        if len(patterns) < MAX_PER_KEY:
            recorded = record(node, recorder, made, conversion.nodes if conversion is not None else None,
                             conversion.constants if conversion is not None else [],
                             conversion.crossings if conversion is not None else [],
                             conversion.first_version if conversion is not None else None)
            if recorded is not None:
                patterns.append(recorded)
        return conversion

    @staticmethod
    def _untouched_input(node: onnx.NodeProto, scope: Scope, source: int, target: int, before: bytes,
                         conversion: Conversion | None) -> Conversion | None:
        """``conversion``, after checking that no rule changed ``node`` (serialized as ``before``) in place.

        Raises:
            ConversionError: a rule changed its input node (a bug in that rule: its rewrite would be
                compared with the changed node, not the user's); the node is restored first.
        """
        if node.SerializeToString() == before:
            return conversion
        node.Clear()
        node.MergeFromString(before)
        entries = ", ".join(dict.fromkeys(f"{c.kind} {c.entry!r}" for c in conversion.crossings)) \
            if conversion is not None and conversion.crossings else "a rule"
        raise ConversionError(
            f"node {node_label(node)} ({node.op_type}-{since_version(node.op_type, source)}, in {scope.path}) cannot "
            f"be converted to opset {target}: internal error: {entries} changed the node it was given in place, so "
            "its rewrite cannot be checked against the original; this is a bug in lowerer (please report it)",
            node=node, scope=scope.path)

    def _stamp(self, pattern: Pattern, node: onnx.NodeProto, scope: Scope, source: int, target: int
               ) -> Conversion | None:
        """``pattern``'s replacement stamped with ``node``'s names (checked against a fresh emission in tests)."""
        stamped = pattern.stamp(node, self.names)
        if stamped is None:
            conversion = None
        else:
            conversion = Conversion(stamped[0], stamped[1], list(pattern.crossings), pattern.first_version,
                                    node.name)
        if self.check_stamps is not None:
            fresh = self._convert(node, scope, source, target, self.shapes, self.constants, self._used)
            self.check_stamps(node, conversion, fresh)
        return conversion

    def _convert(self, node: onnx.NodeProto, scope: Scope, source: int, target: int, shapes: Any, constants: Any,
                 used: Callable[[str], bool]) -> Conversion | None:
        facts = Facts(scope, shapes, constants, used)
        conversion = Conversion([], first_name=node.name)
        try:
            nodes = self._to(node, scope, source, target, facts, conversion, 0)
        except ConversionError as e:
            blamed = self._blame_user_node(e, node, scope, source, target, conversion)
            raise self._with_remedy(blamed, node, scope, source, target) from None
        if nodes is not None and conversion.constants:  # a constant one step made, a later step folded away
            read = used_names_of(nodes).union(node.output)  # a constant may be the node's own output
            conversion.constants = [c for c in conversion.constants if c.name in read]
        if nodes is None:
            return None  # stays
        if len(nodes) == 1 and not conversion.constants and nodes[0] == node:
            # Crossed the steps without any change: a relabel, unless a step crossed changed the meaning;
            # then the same bytes are a claim (the axis still means the same) and are checked like any rewrite.
            if not conversion.crossings or not self._meaning_changes(node, source, target):
                return None
            same = onnx.NodeProto()
            same.CopyFrom(node)
            nodes = [same]
        conversion.nodes = nodes
        return conversion

    def _meaning_changes(self, node: onnx.NodeProto, source: int, target: int) -> bool:
        """Whether a step ``node`` crosses from ``source`` to ``target`` changed the op's meaning or a default."""
        if node.domain not in ("", "ai.onnx"):
            return False
        key = (node.op_type, source, target)
        known = self._meaning.get(key)
        if known is None:
            try:
                crossed = steps_between(node.op_type, source, target)
            except KeyError:
                crossed = []
            known = self._meaning[key] = any(isinstance(c, (Semantics, DefaultChanged))
                                             for s in crossed for c in s.changes)
        return known

    def _with_remedy(self, e: ConversionError, node: onnx.NodeProto, scope: Scope, source: int,
                     target: int) -> ConversionError:
        """``e`` ending with the opset closest to ``target`` that ``node`` converts to (see :mod:`.remedies`)."""
        if source == target or node.domain not in ("", "ai.onnx") or since_version(node.op_type, source) is None:
            return e  # not a node of the default domain at its own opset: no opset helps
        reached = self.reach(node, scope, source, target)
        message = remedies.with_reach(str(e), source, target, reached)
        return e if message == str(e) else ConversionError(message, node=e.node, scope=e.scope)

    def reach(self, node: onnx.NodeProto, scope: Scope, source: int, target: int) -> int:
        """The opset closest to ``target`` that ``node`` (at ``source``) converts to, on its own.

        Each opset from ``target`` towards ``source`` is tried with a copy of the node, the first that
        converts wins; ``source`` when none does. Used after a refusal, to say what would work.
        """
        way = 1 if target < source else -1
        for opset in range(target + way, source, way):
            trial = onnx.NodeProto()
            trial.CopyFrom(node)
            facts = Facts(scope, self.shapes, self.constants, self._used)
            try:
                self._to(trial, scope, source, opset, facts, Conversion([], first_name=node.name), 0)
            except ConversionError:
                continue
            except Exception as e:  # an advisory search: a failure here must not hide the refusal
                logger.debug("trying %s at opset %d failed: %s", node.op_type, opset, e)
                continue
            return opset
        return source

    @staticmethod
    def _blame_user_node(e: ConversionError, node: onnx.NodeProto, scope: Scope, source: int, target: int,
                         conversion: Conversion) -> ConversionError:
        """``e``, or, when a node made on the way is stuck, the same said of the node the user has."""
        blamed = e.node
        if not isinstance(blamed, onnx.NodeProto) or blamed.name == node.name:
            return e
        inner = str(e).split(": ", 1)[1] if ": " in str(e) else str(e)
        sv = since_version(node.op_type, source)
        first = conversion.crossings[0].describe().split(" (", 1)[0] if conversion.crossings else "by a rule"
        article = "an" if blamed.op_type[0] in "AEIOU" else "a"
        return ConversionError(
            f"node {node_label(node)} ({node.op_type}-{sv}, in {scope.path}) cannot be converted to opset "
            f"{target}: it is rewritten ({first}) into {article} {blamed.op_type} that cannot be taken there: "
            f"{inner}", node=node, scope=scope.path)

    def _to(self, node: onnx.NodeProto, scope: Scope, at: int, target: int, facts: Facts,
            conversion: Conversion, depth: int) -> list[onnx.NodeProto] | None:
        """``node`` (valid at ``at``) as nodes valid at ``target``; None when it is valid there as it is."""
        if node.domain not in ("", "ai.onnx"):
            return None
        op = node.op_type
        sv = since_version(op, at)
        if sv is None:
            raise ConversionError(f"node {node_label(node)} ({op}, in {scope.path}): default-domain opset {at} "
                                  f"has no op {op!r}", node=node, scope=scope.path)
        pick = None
        if op in self.picked_ops and depth <= _MAX_PICK_DEPTH and since_version(op, target) in (sv, None):
            assert self.picker is not None
            pick = self.picker(node, scope, sv, facts)
        resolution = self.registry.resolve(op, sv, target, self.request, pick.form if pick else None)
        if resolution is None:
            return None
        if pick is None:
            return self._apply(resolution, node, scope, sv, target, facts, conversion, depth)
        kept_constants, kept_crossings = len(conversion.constants), len(conversion.crossings)
        try:
            return self._apply(resolution, node, scope, sv, target, facts, conversion, depth, pick)
        except ConversionError as refused:
            if pick.keep_if_refused is None or not pick.keep_if_refused(node, scope, refused):
                if pick.remedy is None or remedies.ends_with_remedy(str(refused)):
                    raise
                raise ConversionError(f"{refused}; {pick.remedy}", node=refused.node, scope=refused.scope) from None
            del conversion.constants[kept_constants:]
            del conversion.crossings[kept_crossings:]
            return None

    def _apply(self, resolution: Resolution, node: onnx.NodeProto, scope: Scope, sv: int, target: int,
               facts: Facts, conversion: Conversion, depth: int, pick: Pick | None = None
               ) -> list[onnx.NodeProto] | None:
        """Apply ``resolution``'s entry to ``node``; what it emits goes on to ``target``."""
        entry = resolution.entry
        if conversion.first_version is None:
            conversion.first_version = sv
        if entry.kind == "same-meaning":
            if pick is None and node.op_type in self.picked_ops and depth <= _MAX_PICK_DEPTH:
                # A relabel: the node is, as it is, the op at the target's version, where a profile may pick a form.
                return self._to(node, scope, target, target, facts, conversion, depth)
            return None
        if entry.kind == "expansion":
            return self._expand(node, scope, sv, target, facts, conversion, resolution.why, depth)
        if entry.kind == "lowering":
            return self._lower(entry, node, scope, sv, target, facts, conversion, resolution.why, depth)
        if entry.kind in ("rule", "decomposition", "form"):
            rule = self._rule_of(entry.handler, entry.name, pick)
            made, at = self._apply_rule(rule, entry.kind, node, scope, sv, target, facts, conversion, resolution.why)
            if not self.picked_ops and at == target:
                return made
            return self._onwards(made, scope, at, target, facts, conversion, depth + 1, lambda n: False)
        if resolution.step is None:  # an op the target lacks, with no body
            raise self._missing(node, scope, sv, target)
        return self._cross(resolution, node, scope, sv, target, facts, conversion, depth)

    def _rule_of(self, handler: object, name: str, pick: Pick | None) -> Rule:
        if isinstance(handler, Rule):
            return handler
        params = pick.params if pick is not None else ()
        key = (name, str(id(handler)), params)
        rule = self._forms.get(key)
        if rule is None:
            assert callable(handler)
            rule = self._forms[key] = handler(*params)
        return rule

    def _cross(self, resolution: Resolution, node: onnx.NodeProto, scope: Scope, sv: int, target: int,
               facts: Facts, conversion: Conversion, depth: int) -> list[onnx.NodeProto]:
        """``node`` across the resolution's version step, then on to ``target``."""
        entry, step, direction = resolution.entry, resolution.step, resolution.direction
        assert step is not None and direction is not None and resolution.far is not None
        op = node.op_type
        if any(a.ref_attr_name for a in node.attribute) and \
                not all(isinstance(c, (Types, NoChange)) for c in step.changes):
            refuse_attribute_references(node, scope, f"{op}-{sv}", target)
        far = resolution.far
        em = Emitter(node, scope, sv, far, self.names, facts, self.request.decompose)
        em.target, em.no_loops = target, self.request.no_loops
        em.loops_refused_by = self.request.loops_refused_by
        em.fold_dequantize = self.request.fold_dequantize
        if node.name == conversion.first_name:
            em.shown_version = conversion.first_version or sv
        try:
            if entry.kind == "adapter":
                entry.handler(em, step, direction)
            elif entry.kind == "refusal":
                em.refuse(f"{op} changed meaning at version {step.version}, and this step has no exact crossing "
                          f"{direction}: {entry.why}")
            else:
                generic.cross(em, step, direction)
        except ConversionError as refused:
            # A step with no exact crossing: the op's function body (the spec's own definition) may still
            # take the node there, e.g. GroupNormalization-21 below 21.
            if resolution.fallback is not None and node.name == conversion.first_name:
                why = f"the step {step.describe()} has no exact crossing ({refused})"
                if resolution.fallback.kind == "lowering":
                    try:
                        return self._lower(resolution.fallback, node, scope, sv, target, facts, conversion, why,
                                           depth)
                    except ConversionError:  # the last try failed too: the step's own reason is the one to give
                        raise refused from None
                return self._expand(node, scope, sv, target, facts, conversion, why, depth)
            raise
        conversion.constants.extend(em.constants)
        start, end = step_ends(step, direction)
        if em.looped and not entry.loop_form:
            raise RuntimeError(f"{entry.name} wrote a loop over the node's data but is registered with no loop_form")
        conversion.crossings.append(Crossing(entry.kind, entry.name, op, start, end, far, loop=entry.loop_form
                                             if em.looped else "", trips=em.loop_trips))
        # A node the adapter built under another op has new subgraphs too; the node itself keeps its own.
        return self._onwards(em.nodes, scope, far, target, facts, conversion, depth, lambda made: made.op_type != op)

    def _onwards(self, made: list[onnx.NodeProto], scope: Scope, at: int, target: int, facts: Facts,
                 conversion: Conversion, depth: int,
                 new_subgraphs: Callable[[onnx.NodeProto], bool] = lambda n: True) -> list[onnx.NodeProto]:
        """Each of ``made`` (valid at ``at``) taken on to ``target`` (first its subgraphs, where ``new_subgraphs``)."""
        out: list[onnx.NodeProto] = []
        for n in made:
            if new_subgraphs(n):
                self._subgraphs_to(n, scope, at, target, facts, conversion, depth)
            further = self._to(n, scope, at, target, facts, conversion, depth)
            out.extend([n] if further is None else further)
        return out

    def _subgraphs_to(self, node: onnx.NodeProto, scope: Scope, at: int, target: int, facts: Facts,
                      conversion: Conversion, depth: int) -> None:
        """Take the nodes inside ``node``'s subgraphs (built at opset ``at``) to ``target``, in place."""
        for graph in node_graphs(node):
            for inner in graph.node:
                facts.add_node(inner, at)
            converted = self._onwards(list(graph.node), scope, at, target, facts, conversion, depth)
            del graph.node[:]
            graph.node.extend(converted)

    def _expand(self, node: onnx.NodeProto, scope: Scope, sv: int, target: int, facts: Facts,
                conversion: Conversion, why: str, depth: int) -> list[onnx.NodeProto]:
        """``node`` replaced by its function body, whose nodes then go on to ``target``."""
        if not has_body(node.op_type, sv):
            raise ConversionError(
                f"node {node_label(node)} ({node.op_type}-{sv}, in {scope.path}) cannot be expanded: "
                f"{node.op_type}-{sv} has no function body in onnx's schemas", node=node, scope=scope.path)
        refuse_attribute_references(node, scope, f"{node.op_type}-{sv}", target)
        em = Emitter(node, scope, sv, target, self.names, facts, self.request.decompose)
        em.target = target
        opset = expand(em, self.registry.made_rewrites)
        conversion.constants.extend(em.constants)
        conversion.crossings.append(Crossing("expansion", "function-expansion", node.op_type, sv, None, opset, why))
        return self._onwards(em.nodes, scope, opset, target, facts, conversion, depth)

    def _lower(self, entry: RegistryEntry, node: onnx.NodeProto, scope: Scope, sv: int, target: int, facts: Facts,
               conversion: Conversion, why: str, depth: int) -> list[onnx.NodeProto]:
        """``node`` written by its registered lowering at its own since-version, then taken on to ``target``."""
        refuse_attribute_references(node, scope, f"{node.op_type}-{sv}", target)
        em = Emitter(node, scope, sv, sv, self.names, facts, self.request.decompose)
        em.target = target
        if node.name == conversion.first_name:
            em.shown_version = conversion.first_version or sv
        entry.handler(em)
        conversion.constants.extend(em.constants)
        conversion.crossings.append(Crossing("lowering", entry.name, node.op_type, sv, None, sv, why,
                                             budgeted=entry.budgeted))
        return self._onwards(em.nodes, scope, sv, target, facts, conversion, depth)

    def _apply_rule(self, rule: Rule, kind: str, node: onnx.NodeProto, scope: Scope, sv: int, target: int,
                    facts: Facts, conversion: Conversion, why: str) -> tuple[list[onnx.NodeProto], int]:
        """What ``rule`` writes for ``node``, and the opset that is valid at (``target``, else the ``emitted_at``)."""
        refuse_attribute_references(node, scope, f"{node.op_type}-{sv}", target)
        em = Emitter(node, scope, sv, target, self.names, facts, self.request.decompose)
        rule.rewrite(em)
        at = target if em.emitted_at is None else em.emitted_at
        conversion.constants.extend(em.constants)
        conversion.crossings.append(Crossing(kind, rule.name, node.op_type, sv, None, at, why,
                                             budgeted=rule.budgeted))
        return em.nodes, at

    def _missing(self, node: onnx.NodeProto, scope: Scope, sv: int, target: int) -> ConversionError:
        op = node.op_type
        first = first_version(op)
        if first is not None and target < first:
            why = f"{op} does not exist there (it was introduced at opset {first})"
        else:
            why = f"{op} does not exist at opset {target}"
        return ConversionError(f"node {node_label(node)} ({op}-{sv}, in {scope.path}) cannot be converted to opset "
                               f"{target}: {why}", node=node, scope=scope.path)
