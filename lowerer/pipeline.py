"""The pass pipeline: one scan over every scope, rules for owned ops, onnx's converter for the rest."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterable

import onnx

from lowerer.errors import ConversionError, InputError
from lowerer.foreign import ForeignConverter, ForeignResult
from lowerer.naming import NameGenerator
from lowerer.opsets import (
    check_target_opset,
    choose_ir_version,
    default_opset,
    is_default_domain,
    since_version,
)
from lowerer.relabel import relabel_always, relabel_opset
from lowerer.report import Report, Rewrite
from lowerer.rules import DECOMPOSITIONS, rule_for
from lowerer.rules.base import Emitter, Rule
from lowerer.scopes import Scope, iter_scopes, subgraphs_of

__all__ = ["Verifier", "normalize_decompose", "run_pipeline"]

logger = logging.getLogger(__name__)

#: Called with each rewrite as it is made; sets its status or raises VerificationError.
Verifier = Callable[[Rewrite], None]

_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def normalize_decompose(decompose: Iterable[str] | str | None) -> frozenset[str]:
    """Validate decomposition names (``all`` means every one); raises InputError listing valid names."""
    if decompose is None:
        return frozenset()
    items = [decompose] if isinstance(decompose, str) else list(decompose)
    names: set[str] = set()
    for item in items:
        for part in str(item).split(","):
            part = part.strip().lower()
            if not part:
                continue
            if part == "all":
                names.update(DECOMPOSITIONS)
            elif part in DECOMPOSITIONS:
                names.add(part)
            else:
                valid = ", ".join([*sorted(DECOMPOSITIONS), "all"])
                raise InputError(f"unknown decomposition {part!r}; valid names: {valid}")
    return frozenset(names)


class _Run:
    def __init__(self, model: onnx.ModelProto, target: int | None, decompose: frozenset[str],
                 verifier: Verifier | None, serialized: bytes | None = None) -> None:
        from lowerer.shapes import ShapeIndex

        self.model = model
        self.target = target
        self.decompose = decompose
        self.verifier = verifier
        self.names = NameGenerator(model, serialized)
        self.shapes = ShapeIndex(model, serialized)
        #: Per (source, target): default-domain op -> whether its nodes are left exactly as they are.
        self._untouched: dict[tuple[int, int], dict[str, bool]] = {}
        self._rules: dict[str, Rule | None] = {}
        self.foreign = ForeignConverter(self.names, self.shapes)
        self.report = Report(target_opset=target, decompose=tuple(sorted(decompose)))
        self._wants: dict[tuple[str, int, int], bool] = {}

    def scope(self, scope: Scope) -> None:
        source = scope.opset
        target = self.target if self.target is not None else source
        nodes = scope.holder.node
        # The nodes from the first replaced one on, rebuilt; the ones before stay where they are.
        rebuilt: list[onnx.NodeProto] | None = None
        first = 0
        new_constants: list[onnx.TensorProto] = []
        untouched = self._untouched.setdefault((source, target), {}) if source is not None and target is not None \
            else {}
        for index, node in enumerate(nodes):
            replacement: list[onnx.NodeProto] | None = None
            domain = node.domain
            if domain == "" or domain == "ai.onnx":  # is_default_domain, inlined: this runs for every node
                op_type = node.op_type
                if op_type in _CONTROL_FLOW:
                    self.subgraphs(node, scope)
                if source is None:
                    raise InputError(f"node {node.name or node.op_type!r} in {scope.path} uses the default "
                                     "domain, which the model does not import")
                assert target is not None
                skip = untouched.get(op_type)
                if skip is None:
                    skip = untouched[op_type] = self._untouched_op(op_type, source, target)
                if not skip:
                    replacement = self.node(node, index, scope, source, target, new_constants)
            elif node.attribute:
                self.subgraphs(node, scope)
            if replacement is not None:
                if rebuilt is None:
                    rebuilt, first = [], index
                rebuilt.extend(replacement)
            elif rebuilt is not None:
                rebuilt.append(node)
        if rebuilt is not None:
            # Dropping the tail and appending the kept nodes back copies each once (extend copies); the
            # dropped messages stay valid (upb frees nothing of a live model's arena), so ``rebuilt``
            # may hold them until then.
            del nodes[first:]
            nodes.extend(rebuilt)
        if new_constants:
            assert scope.graph is not None
            scope.graph.initializer.extend(new_constants)
            if self.model.ir_version < 4 and scope.graph is self.model.graph:
                scope.graph.input.extend(
                    onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_constants)
            elif self.model.ir_version < 4:
                # Below IR 4 every initializer must be a graph input, and a subgraph's inputs are fixed
                # by its op (If branches have none): IR 4 lifts that and means the same otherwise.
                self.model.ir_version = 4

    def _elem_type(self, scope: Scope, name: str) -> int | None:
        vt = self.shapes.lookup(scope, name, lambda vt: vt[0] != 0)
        return vt[0] if vt is not None and vt[0] != 0 else None

    def _input_types(self, node: onnx.NodeProto, scope: Scope) -> dict[str, object]:
        """The types of ``node``'s inputs for its Rewrite record (the verifier's inputs).

        Without a verifier nothing reads them during the run: then only what is known without
        running shape inference (which would be run for this alone).
        """
        if self.verifier is None:
            return {name: self.shapes.known(scope, name) for name in node.input if name}
        return {name: self.shapes.lookup(scope, name) for name in node.input if name}

    def _foreign(self, node: onnx.NodeProto, scope: Scope, source: int, target: int) -> ForeignResult | None:
        """Convert a node lowerer has no rule for: relabels where only types changed, else onnx's converter.

        Downward, onnx's converter lacks the adapters of most type-only steps (ReduceMax 13 → 12),
        and this module's relabels cannot do a step that changed structure (ReduceMax 18 → 13:
        ``axes`` input to attribute). When a path needs both, the converter takes only the node's
        own first step and each node it makes goes on from there, the same way.
        """
        # Type-only version steps are relabels (onnx's converter lacks most down adapters for them).
        mid = relabel_opset(node, source, target, lambda name: self._elem_type(scope, name))
        if mid == target:
            return None
        _refuse_attribute_references(node, scope, node.op_type, target)
        try:
            return self.foreign.convert(node, scope, mid, target)
        except ConversionError as whole:
            step = (since_version(node.op_type, mid) or 0) - 1  # just below the node's version at ``mid``
            if target >= mid or step <= target:
                raise
            try:
                first = self.foreign.convert(node, scope, mid, step)
            except ConversionError:
                raise whole from None
        if first is None:  # onnx's converter relabels that step: go on from there
            return self._foreign(node, scope, step, target)
        nodes: list[onnx.NodeProto] = []
        constants = list(first.constants)
        for made in first.nodes:
            rest = self._foreign(made, scope, step, target) if is_default_domain(made.domain) else None
            if rest is None:
                nodes.append(made)
            else:
                nodes.extend(rest.nodes)
                constants.extend(rest.constants)
        return ForeignResult(nodes, constants, rule=first.rule)

    def _untouched_op(self, op_type: str, source: int, target: int) -> bool:
        """Whether every default-domain ``op_type`` node is left as it is (no rule, same schema version).

        Exactly the cases where :meth:`node` returns None without looking at the node.
        """
        if self._rule(op_type) is not None:
            return False
        if source == target or relabel_always(op_type, source, target):
            return True
        src_v = since_version(op_type, source)
        return src_v is not None and src_v == since_version(op_type, target)

    def _rule(self, op_type: str) -> Rule | None:
        try:
            return self._rules[op_type]
        except KeyError:
            rule = self._rules[op_type] = rule_for(op_type, self.decompose)
            return rule

    def subgraphs(self, node: onnx.NodeProto, scope: Scope) -> None:
        for attr_name, graph in subgraphs_of(node):
            label = node.name or node.op_type
            self.scope(Scope(f"{scope.path}/{label}.{attr_name}", graph, scope.opset, scope.function))

    def node(self, node: onnx.NodeProto, index: int, scope: Scope, source: int, target: int,
             new_constants: list[onnx.TensorProto]) -> list[onnx.NodeProto] | None:
        rule = self._rule(node.op_type)
        if rule is None:
            if source == target:
                return None
            result = self._foreign(node, scope, source, target)
            if result is None:
                return None
            self.report.rewrites.append(Rewrite(
                node=node.name or f"{node.op_type}#{index}",
                op_type=node.op_type,
                scope=scope.path,
                from_version=since_version(node.op_type, source) or 0,
                to_opset=target,
                rule=result.rule,
                emitted=[n.op_type for n in result.nodes] or ["initializer"],
                from_opset=source,
                reason=f"a non-owned op, converted by {result.rule}; per-rewrite verification covers the "
                       "rules for owned ops: use --verify-model to run the whole models",
            ))
            new_constants.extend(result.constants)
            return result.nodes
        src_v = since_version(node.op_type, source)
        if src_v is None or src_v not in rule.versions:
            raise ConversionError(f"node {node.name or node.op_type!r} ({node.op_type}, in {scope.path}): "
                                  f"opset {source} has no version of {node.op_type} lowerer knows")
        key = (node.op_type, src_v, target)
        wants = self._wants.get(key) if rule.decomposition is None else None
        if wants is None:
            wants = rule.wants(node, src_v, target, self.decompose)
            if rule.decomposition is None:
                self._wants[key] = wants
        if not wants:
            return None
        _refuse_attribute_references(node, scope, f"{node.op_type}-{src_v}", target)
        em = Emitter(node, scope, src_v, target, self.names, self.shapes, self.decompose)
        rule.rewrite(em)
        original = onnx.NodeProto()
        original.CopyFrom(node)
        rewrite = Rewrite(
            node=node.name or f"{node.op_type}#{index}",
            op_type=node.op_type,
            scope=scope.path,
            from_version=src_v,
            to_opset=target,
            rule=rule.name,
            emitted=[n.op_type for n in em.nodes],
            original=original,
            replacement=em.nodes,
            constants=em.constants,
            from_opset=source,
            input_types=self._input_types(node, scope),
        )
        self.report.rewrites.append(rewrite)
        logger.debug("rewrote %s (%s-%d) in %s into %s", rewrite.node, node.op_type, src_v, scope.path,
                     rewrite.emitted)
        if self.verifier is not None:
            self.verifier(rewrite)
        new_constants.extend(em.constants)
        return em.nodes


def run_pipeline(
    model: onnx.ModelProto,
    *,
    target_opset: int | None = None,
    decompose: Iterable[str] | str | None = None,
    verifier: Verifier | None = None,
    serialized: bytes | None = None,
) -> Report:
    """Convert ``model`` in place to ``target_opset`` and apply the decompositions.

    Only owned nodes and nodes whose op changes version are touched. Returns the report.
    ``serialized``, when the caller has it (the bytes the model was parsed from), saves work: no
    scan for name collisions when no name can collide, no subgraph walk when no attribute holds a
    graph, and shape inference (when a rule needs it) runs on those bytes without serializing.

    Raises:
        InputError: bad options or a model lowerer cannot read.
        ConversionError: a node cannot be converted exactly.
        VerificationError: a rewrite computed different numbers (raised by ``verifier``).
    """
    if target_opset is not None:
        check_target_opset(target_opset)
    names = normalize_decompose(decompose)
    run = _Run(model, target_opset, names, verifier, serialized)
    run.report.source_opset = default_opset(model.opset_import)
    if target_opset is None and not names:
        return run.report
    # The scan makes many small objects and no reference cycles: the cyclic collector's full passes
    # over them cost time that grows faster than the model (about 12% at 200k nodes). Off meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for scope in iter_scopes(model):
            run.scope(scope)
    finally:
        if collecting:
            gc.enable()
    if target_opset is not None:
        _set_default_opset(model.opset_import, target_opset, add=True)
        for function in model.functions:
            _set_default_opset(function.opset_import, target_opset, add=False)
    model.ir_version = choose_ir_version(model.ir_version, model.opset_import, bool(model.functions))
    run.report.notes.append(f"foreign-op probes run: {run.foreign.probes}")
    return run.report


def _refuse_attribute_references(node: onnx.NodeProto, scope: Scope, op: str, target: int) -> None:
    """Refuse to rewrite a node (in a function) whose attributes refer to the function's attributes.

    Such an attribute (``ref_attr_name``) has its value per call site, not in the node: a rule
    or onnx's converter would read it as absent (axis 0 ...) and compute something else.
    """
    refs = [(a.name, a.ref_attr_name) for a in node.attribute if a.ref_attr_name]
    if refs:
        label = repr(node.name) if node.name else f"<unnamed {node.op_type}>"
        listed = ", ".join(f"{name}=@{ref}" for name, ref in refs)
        raise ConversionError(
            f"node {label} ({op}, in {scope.path}) cannot be converted to opset {target}: its attribute(s) "
            f"{listed} refer to the function's attributes, whose values come from each call; lowerer "
            "converts only nodes with literal attribute values (inline the function or give literal values)")


def _set_default_opset(imports: object, target: int, add: bool) -> None:
    found = False
    for entry in imports:  # type: ignore[attr-defined]
        if is_default_domain(entry.domain):
            entry.version = target
            found = True
    if not found and add:
        imports.append(onnx.helper.make_opsetid("", target))  # type: ignore[attr-defined]
