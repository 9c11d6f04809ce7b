"""The pass pipeline: one scan over every scope, rules for owned ops, onnx's converter for the rest."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import onnx

from lowerer.errors import ConversionError, InputError
from lowerer.foreign import ForeignConverter
from lowerer.naming import NameGenerator
from lowerer.opsets import (
    check_target_opset,
    choose_ir_version,
    default_opset,
    is_default_domain,
    since_version,
)
from lowerer.report import Report, Rewrite
from lowerer.rules import DECOMPOSITIONS, rule_for
from lowerer.rules.base import Emitter
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
                 verifier: Verifier | None) -> None:
        from lowerer.shapes import ShapeIndex

        self.model = model
        self.target = target
        self.decompose = decompose
        self.verifier = verifier
        self.names = NameGenerator(model)
        self.shapes = ShapeIndex(model)
        self.foreign = ForeignConverter(self.names, self.shapes)
        self.report = Report(target_opset=target, decompose=tuple(sorted(decompose)))
        self._wants: dict[tuple[str, int, int], bool] = {}

    def scope(self, scope: Scope) -> None:
        source = scope.opset
        target = self.target if self.target is not None else source
        nodes = scope.holder.node
        rebuilt: list[onnx.NodeProto] | None = None
        new_constants: list[onnx.TensorProto] = []
        for index, node in enumerate(nodes):
            replacement: list[onnx.NodeProto] | None = None
            if is_default_domain(node.domain):
                if node.op_type in _CONTROL_FLOW:
                    self.subgraphs(node, scope)
                if source is None:
                    raise InputError(f"node {node.name or node.op_type!r} in {scope.path} uses the default "
                                     "domain, which the model does not import")
                assert target is not None
                replacement = self.node(node, index, scope, source, target, new_constants)
            elif node.attribute:
                self.subgraphs(node, scope)
            if replacement is not None:
                if rebuilt is None:
                    rebuilt = list(nodes[:index])
                rebuilt.extend(replacement)
            elif rebuilt is not None:
                rebuilt.append(node)
        if rebuilt is not None:
            copies = []
            for n in rebuilt:
                c = onnx.NodeProto()
                c.CopyFrom(n)
                copies.append(c)
            del nodes[:]
            nodes.extend(copies)
        if new_constants:
            assert scope.graph is not None
            scope.graph.initializer.extend(new_constants)
            if self.model.ir_version < 4 and scope.graph is self.model.graph:
                scope.graph.input.extend(
                    onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_constants)

    def subgraphs(self, node: onnx.NodeProto, scope: Scope) -> None:
        for attr_name, graph in subgraphs_of(node):
            label = node.name or node.op_type
            self.scope(Scope(f"{scope.path}/{label}.{attr_name}", graph, scope.opset, scope.function))

    def node(self, node: onnx.NodeProto, index: int, scope: Scope, source: int, target: int,
             new_constants: list[onnx.TensorProto]) -> list[onnx.NodeProto] | None:
        rule = rule_for(node.op_type, self.decompose)
        if rule is None:
            if source == target:
                return None
            result = self.foreign.convert(node, scope, source, target)
            if result is None:
                return None
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
            input_types={name: self.shapes.lookup(scope, name) for name in node.input if name},
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
) -> Report:
    """Convert ``model`` in place to ``target_opset`` and apply the decompositions.

    Only owned nodes and nodes whose op changes version are touched. Returns the report.

    Raises:
        InputError: bad options or a model lowerer cannot read.
        ConversionError: a node cannot be converted exactly.
        VerificationError: a rewrite computed different numbers (raised by ``verifier``).
    """
    if target_opset is not None:
        check_target_opset(target_opset)
    names = normalize_decompose(decompose)
    run = _Run(model, target_opset, names, verifier)
    run.report.source_opset = default_opset(model.opset_import)
    if target_opset is None and not names:
        return run.report
    for scope in iter_scopes(model):
        run.scope(scope)
    if target_opset is not None:
        _set_default_opset(model.opset_import, target_opset, add=True)
        for function in model.functions:
            _set_default_opset(function.opset_import, target_opset, add=False)
    model.ir_version = choose_ir_version(model.ir_version, model.opset_import, bool(model.functions))
    run.report.notes.append(f"foreign-op probes run: {run.foreign.probes}")
    return run.report


def _set_default_opset(imports: object, target: int, add: bool) -> None:
    found = False
    for entry in imports:  # type: ignore[attr-defined]
        if is_default_domain(entry.domain):
            entry.version = target
            found = True
    if not found and add:
        imports.append(onnx.helper.make_opsetid("", target))  # type: ignore[attr-defined]
