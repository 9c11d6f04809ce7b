"""The conversion walk: one scan over every scope, each node taken to the target by the version-step engine.

The walk is the ``convert`` pass of :mod:`lowerer.passes`: version steps, the decompositions asked
for and the backend forms a profile picks, all in one walk. Each rewrite becomes a
:class:`~lowerer.core.report.Rewrite` whose ``crossings`` say which registry entries made it.
"""

from __future__ import annotations

import gc
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from lowerer.core.errors import ConversionError, InputError
from lowerer.core.opsets import default_opset, is_default_domain, since_version
from lowerer.core.remedies import for_static_inputs, inputs_static
from lowerer.core.report import Report, Rewrite
from lowerer.facts import checked_type
from lowerer.facts.constants import ConstantIndex
from lowerer.facts.shapes import ShapeIndex
from lowerer.model_io.input_check import InputCheck
from lowerer.model_io.ir_version import choose as choose_ir
from lowerer.model_io.naming import NameGenerator, node_key
from lowerer.model_io.scopes import Scope, iter_scopes, subgraphs_of, used_names
from lowerer.passes.checker_gate import NodeGate, RewriteChecker
from lowerer.passes.relabels import RelabelCheck
from lowerer.passes.scan_shapes import refuse_unshaped_scan_body, scan_body_output_dims
from lowerer.rules import REGISTRY
from lowerer.steps.conversion import Conversion, Picker
from lowerer.steps.engine import StepEngine
from lowerer.steps.registry import NO_REQUEST, Request

__all__ = ["ConversionWalk", "Verifier", "run_walk"]

logger = logging.getLogger(__name__)

#: Called with each rewrite as it is made; sets its status or raises VerificationError.
Verifier = Callable[[Rewrite], None]

_CONTROL_FLOW = frozenset({"If", "Loop", "Scan", "SequenceMap"})
#: Not yet decided (per op, in the walk's per-op tables).
_UNKNOWN = object()
#: Constant inputs up to this many elements are fed to verification as they are (axes, shapes,
#: indices: their values matter); larger ones (weights) are generated like other inputs.
_FED_AS_IS_MAX = 1 << 16


class ConversionWalk:
    """One conversion walk's context (names, facts, engine, report) and the walk itself."""

    def __init__(self, model: onnx.ModelProto, target: int | None, request: Request,
                 verifier: Verifier | None, serialized: bytes | None = None, picker: Picker | None = None,
                 picked_ops: frozenset[str] = frozenset(), input_check: InputCheck | None = None) -> None:
        self.model = model
        self.target = target
        self.verifier = verifier
        self.names = NameGenerator(model, serialized)
        self.shapes = ShapeIndex(model, serialized)
        if input_check is not None:
            self.shapes.inference = input_check.inferred
        self.shapes.snapshot()
        self.constants = ConstantIndex(model, lambda scope, name: _static_dims(self.shapes, scope, name),
                                       lambda scope, name: _rank(self.shapes, scope, name))
        self._used: set[str] | None = None
        self._narrowing: dict[tuple[int, int], dict[str, object]] = {}
        self.engine = StepEngine(REGISTRY, self.names, self.shapes, self.constants, request, self.used,
                                 picker, picked_ops)  # picker: --for BACKEND (lowerer.backends)
        self._gates: dict[int, NodeGate] = {}
        #: The nodes that cannot be converted, in the order met (see :meth:`refusal`).
        self.refused: list[tuple[ConversionError, dict[str, Any]]] = []
        self.strict = RewriteChecker()
        self.relabels = None if verifier is None else RelabelCheck(
            verifier, self._described, self.shapes.known,
            lambda scope, name: checked_type(self.shapes, self.constants, scope, name))
        self.report = Report(target_opset=target,
                             decompose=tuple(sorted({*request.decompose, *(o.lower() for o in request.expand)})))

    def used(self, name: str) -> bool:
        """Whether any node anywhere reads ``name``, or it is a graph or function output."""
        if self._used is None:
            self._used = used_names(self.model)
        return name in self._used

    def scope(self, scope: Scope) -> None:
        """Take every node of ``scope`` (and of the subgraphs below it) to the target, in place."""
        source = scope.opset
        target = self.target if self.target is not None else source
        nodes = scope.holder.node
        # The nodes from the first replaced one on, rebuilt; the ones before stay where they are.
        rebuilt: list[onnx.NodeProto] | None = None
        first = 0
        new_constants: list[onnx.TensorProto] = []
        engine = self.engine
        # Per op: True when every node of it is left alone (decided once per op and opsets).
        untouched = engine.untouched_table(source, target) if source is not None and target is not None else {}
        # Per op left as it is: onnxruntime's kernel types at the target where they narrowed (else None).
        narrowing = self._narrowing.setdefault((source or 0, target or 0), {})
        for index, node in enumerate(nodes):
            replacement: list[onnx.NodeProto] | None = None
            domain = node.domain
            if domain == "" or domain == "ai.onnx":  # is_default_domain, inlined: this runs for every node
                op_type = node.op_type
                if op_type in _CONTROL_FLOW:
                    self.subgraphs(node, index, scope)
                if source is None:
                    raise InputError(f"node {node.name or node.op_type!r} in {scope.path} uses the default "
                                     "domain, which the model does not import")
                assert target is not None
                skip = untouched.get(op_type)
                if skip is None:  # per op: every node of it stays as it is (see StepEngine.leaves)
                    skip = untouched[op_type] = engine.leaves(node, source, target)
                if not skip:
                    try:
                        replacement = self.node(node, index, scope, source, target, new_constants)
                    except ConversionError as e:  # noted; the walk goes on to find every node that refuses
                        self._refused(e, node, index, scope, source)
                if replacement is None and source != target:  # relabeled: does onnxruntime still take its types?
                    self._relabeled(node, index, scope, source, target, narrowing)
            elif node.attribute:
                self.subgraphs(node, index, scope)
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

    def _refused(self, e: ConversionError, node: onnx.NodeProto, index: int, scope: Scope, source: int) -> None:
        """Note a node that cannot be converted; verification stops (the conversion is refused anyway).

        The walk goes on, the node left as it is, so that the refusal can name every node that refuses
        (:meth:`refusal`).
        """
        self.verifier = None
        self.refused.append((e, {"node": node_key(node, index), "op_type": node.op_type,
                                 "version": since_version(node.op_type, source), "scope": scope.path,
                                 "refusal": str(e)}))

    def refusal(self) -> ConversionError | None:
        """The walk's refusal: the first node's, the others counted by op (each is in ``refused``); None if none."""
        if not self.refused:
            return None
        first = self.refused[0][0]
        more = [r for _, r in self.refused[1:]]
        message = str(first)
        if inputs_static(self.model.graph):  # advice to make the input shapes static does not fit this model
            message = for_static_inputs(message)
            for _, record in self.refused:
                record["refusal"] = for_static_inputs(record["refusal"])
        if more:
            by_op = Counter(f"{r['op_type']}-{r['version']}" for r in more)
            ops = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in by_op.most_common())
            message += f" (and {len(more)} more node{'s' if len(more) > 1 else ''} that cannot be converted: {ops})"
        error = ConversionError(message, node=first.node, scope=first.scope)
        error.refused = [r for _, r in self.refused]
        return error

    def _relabeled(self, node: onnx.NodeProto, index: int, scope: Scope, source: int, target: int,
                   narrowing: dict[str, object]) -> None:
        """A node taken to ``target`` as it is: record a type onnxruntime's kernel there no longer takes.

        With verification, the first node of each pattern is run at both opsets (:mod:`lowerer.passes.relabels`).
        """
        if self.relabels is not None and self.verifier is not None:
            self.relabels(node, index, scope, source, target)
        narrowed = narrowing.get(node.op_type, _UNKNOWN)
        if narrowed is _UNKNOWN:
            narrowed = narrowing[node.op_type] = self._narrowed(node.op_type, source, target)
        if narrowed is not None:
            self._kernel_types(node, scope, target, narrowed)

    @staticmethod
    def _narrowed(op: str, source: int, target: int) -> dict[str, frozenset[str]] | None:
        """The kernel types of onnxruntime for ``op`` at ``target`` where they miss some it took at ``source``."""
        from lowerer.passes.runtime_gate import narrowed_kernel_types
        from lowerer.verification.ort_support import MIN_ORT_OPSET

        if min(source, target) < MIN_ORT_OPSET:
            return None  # onnxruntime opens neither side, or not one of them: nothing to compare
        sv, tv = since_version(op, source), since_version(op, target)
        return None if sv is None or tv is None else narrowed_kernel_types(op, sv, tv)

    def _kernel_types(self, node: onnx.NodeProto, scope: Scope, target: int, kernel: object) -> None:
        """Record when onnxruntime's kernel at ``target`` lacks the type of an input of ``node`` (kept as it is)."""
        from lowerer.passes.runtime_gate import kernel_type_gaps, note_kernel_type_gap

        assert isinstance(kernel, dict)
        version = since_version(node.op_type, target)
        assert version is not None

        def elem(name: str) -> int | None:
            vt = self.shapes.lookup(scope, name)
            return vt[0] if vt is not None and vt[0] else None

        gap = kernel_type_gaps(node, version, target, kernel, elem)
        if gap is not None:
            note_kernel_type_gap(self.report, node.op_type, version, gap)

    def subgraphs(self, node: onnx.NodeProto, index: int, scope: Scope) -> None:
        """Walk ``node``'s subgraphs (a Scan's body then states the shapes onnxruntime's older Scan needs)."""
        for attr_name, position, graph in subgraphs_of(node):
            child = scope.child(index, node, attr_name, position, graph)
            self.scope(child)
            if node.op_type == "Scan" and self.target is not None and self.target != scope.opset:
                self._state_body_output_shapes(child, graph)
                refuse_unshaped_scan_body(node, scope, self.shapes, child, scope.opset, self.target)

    def _state_body_output_shapes(self, scope: Scope, graph: onnx.GraphProto) -> None:
        """Write into a Scan body's outputs the shapes onnx infers where the body states none.

        onnxruntime's Scan kernels up to version 16 refuse a body output without a shape (newer ones
        infer it); the shape inference knows them, and stating them changes no meaning. Where the
        model's inference does not (an outer constant's value needed), the body inferred on its own
        with the outer scope's facts (:func:`scan_body_output_dims`).
        """
        opsets = {e.domain: e.version for e in self.model.opset_import}
        opsets[""] = self.target if self.target is not None else opsets.get("", 0)
        alone: list[tuple[int, list[int | None] | None]] | None = None
        for k, out in enumerate(graph.output):
            kind = out.type.WhichOneof("value")
            if kind not in ("tensor_type", None) or (kind and out.type.tensor_type.HasField("shape")):
                continue
            vt = self.shapes.lookup(scope, out.name, lambda vt: vt[1] is not None)
            elem, dims = (0, None) if vt is None else vt
            if dims is None or not elem:
                if alone is None:
                    alone = scan_body_output_dims(self.shapes, self.constants, scope, opsets)
                elem, dims = elem or alone[k][0], dims if dims is not None else alone[k][1]
            if dims is None or not (elem or out.type.tensor_type.elem_type):
                continue
            tt = out.type.tensor_type
            shape = tt.shape
            for d in dims:
                dim = shape.dim.add()
                if d is not None:
                    dim.dim_value = d
            if tt.elem_type == 0 and elem:
                tt.elem_type = elem

    def node(self, node: onnx.NodeProto, index: int, scope: Scope, source: int, target: int,
             new_constants: list[onnx.TensorProto]) -> list[onnx.NodeProto] | None:
        """The nodes replacing ``node`` at ``target`` (None: it stays), recorded, checked and verified."""
        conversion = self.engine.convert(node, scope, source, target)
        if conversion is None:
            return None
        if scope.graph is None:
            conversion = _constants_as_nodes(conversion)
        original = onnx.NodeProto()
        original.CopyFrom(node)
        produced = {o for n in conversion.nodes for o in n.output} | {t.name for t in conversion.constants}
        for i, out in enumerate(original.output):
            if out and out not in produced and not self.used(out):
                original.output[i] = ""  # an output nothing reads, which the older version does not make
        while original.output and not original.output[-1]:
            original.output.pop()
        rewrite = Rewrite(
            node=node_key(node, index),
            op_type=node.op_type,
            scope=scope.path,
            from_version=since_version(node.op_type, source) or 0,
            to_opset=target,
            rule=_rule_name(conversion),
            crossings=list(conversion.crossings),
            emitted=[n.op_type for n in conversion.nodes] or ["initializer"],
            original=original,
            replacement=conversion.nodes,
            constants=conversion.constants,
            from_opset=source,
            input_types=self._input_types(node, scope),
            input_values=self._input_values(node, scope),
            derived_inputs=self._derived_inputs(node, scope),
        )
        # The first rewrite of each pattern: every node it emits checked against its schema at the target,
        # then (after verification, which names a wrong rewrite better) onnx's strict inference of it.
        first = self.strict.first(rewrite)
        if first:
            gate = self._gates.get(target)
            if gate is None:
                imports = {e.domain: e.version for e in self.model.opset_import}
                imports[""] = target
                gate = self._gates[target] = NodeGate(imports, max(self.model.ir_version, 8))
            for made in conversion.nodes:
                gate.check(made, node, scope.path, target)
        self.report.rewrites.append(rewrite)
        logger.debug("rewrote %s (%s-%d) in %s into %s", rewrite.node, node.op_type, rewrite.from_version,
                     scope.path, rewrite.emitted)
        if self.verifier is not None:
            self.verifier(rewrite)
        if first:
            self.strict(rewrite)
        new_constants.extend(conversion.constants)
        return conversion.nodes

    def _described(self, node: onnx.NodeProto, scope: Scope) -> dict[str, Any]:
        """The facts about ``node``'s inputs a relabel's check feeds (:class:`~lowerer.passes.relabels.RelabelCheck`).

        Types as known without running shape inference where they are, else as facts give them.
        """
        types = {name: self.shapes.known(scope, name) for name in node.input if name}
        types = {name: vt if vt and vt[0] else checked_type(self.shapes, self.constants, scope, name)
                 for name, vt in types.items()}
        return {"input_types": types,
                "input_values": self._input_values(node, scope), "derived_inputs": self._derived_inputs(node, scope)}

    def _input_types(self, node: onnx.NodeProto, scope: Scope) -> dict[str, object]:
        """The types of ``node``'s inputs for its Rewrite record (the verifier's inputs).

        Without a verifier nothing reads them during the run: then only what is known without
        running shape inference (which would be run for this alone).
        """
        if self.verifier is None:
            return {name: self.shapes.known(scope, name) for name in node.input if name}
        return {name: checked_type(self.shapes, self.constants, scope, name) for name in node.input if name}

    def _input_values(self, node: onnx.NodeProto, scope: Scope) -> dict[str, np.ndarray]:
        """The constant inputs of ``node`` (the verifier feeds them as they are, not generated)."""
        if self.verifier is None:
            return {}
        out = {}
        for name in node.input:
            if name and name not in out:
                value = self.constants.value(scope, name)
                if value is not None and value.size <= _FED_AS_IS_MAX and value.dtype != object:
                    out[name] = value
        return out


    def _derived_inputs(self, node: onnx.NodeProto, scope: Scope) -> dict[str, list[int | tuple[str, int]]]:
        """Shape inputs made of dims of the node's other inputs (and constants): a recipe per input.

        A view's shape is usually ``Concat(Shape(x)[0:1], [12, 64])``: random values would never
        fit the data, so verification computes them from the shapes it generates instead.
        """
        if self.verifier is None:
            return {}
        out: dict[str, list[int | tuple[str, int]]] = {}
        others = [n for n in node.input if n]
        for name in others:
            if self.constants.value(scope, name) is not None:
                continue
            vt = self.shapes.known(scope, name)
            if vt is None or vt[0] != onnx.TensorProto.INT64 or vt[1] is None or len(vt[1]) != 1:
                continue
            entries = self.constants.shape_entries(scope, name)
            if entries is None:
                continue
            recipe = [self._recipe_entry(scope, e, [o for o in others if o != name]) for e in entries]
            if all(r is not None for r in recipe):
                out[name] = recipe  # type: ignore[assignment]
        return out

    def _recipe_entry(self, scope: Scope, entry: object, inputs: list[str]) -> int | tuple[str, int] | None:
        if isinstance(entry, int):
            return entry
        assert isinstance(entry, tuple)
        source, index = entry
        if source in inputs:
            return (source, index)
        dims = self.shapes.symbols(scope, source)
        dim = dims[index] if dims is not None and 0 <= index < len(dims) else None
        if isinstance(dim, int):
            return dim
        if isinstance(dim, str):  # the same named dim of one of the node's inputs
            for other in inputs:
                theirs = self.shapes.symbols(scope, other) or []
                if dim in theirs:
                    return (other, theirs.index(dim))
        return None


def _rule_name(conversion: Conversion) -> str:
    """The report's rule name: the first rule, decomposition, form, expansion or lowering; else adapters; else steps."""
    for c in conversion.crossings:
        if c.kind in ("rule", "decomposition", "form", "expansion", "lowering"):
            return c.entry
    adapters = sorted({c.entry for c in conversion.crossings if c.kind == "adapter"})
    return "+".join(adapters) if adapters else "version-steps"


def _constants_as_nodes(conversion: Conversion) -> Conversion:
    """In a function (no initializers), constants become Constant nodes at the front."""
    if not conversion.constants:
        return conversion
    made = [onnx.helper.make_node("Constant", [], [t.name], value=t) for t in conversion.constants]
    return Conversion(made + conversion.nodes, [], conversion.crossings)


def _static_dims(shapes: ShapeIndex, scope: Scope, name: str) -> list[int | None] | None:
    vt = shapes.lookup(scope, name, lambda vt: vt[1] is not None and None not in vt[1])
    return None if vt is None or vt[1] is None else list(vt[1])


def _rank(shapes: ShapeIndex, scope: Scope, name: str) -> int | None:
    vt = shapes.lookup(scope, name, lambda vt: vt[1] is not None)
    return None if vt is None or vt[1] is None else len(vt[1])


def run_walk(
    model: onnx.ModelProto,
    *,
    target_opset: int | None = None,
    request: Request = NO_REQUEST,
    verifier: Verifier | None = None,
    serialized: bytes | None = None,
    picker: Picker | None = None,
    picked_ops: frozenset[str] = frozenset(),
    ir_version: int | None = None,
    input_check: InputCheck | None = None,
) -> Report:
    """Convert ``model`` in place to ``target_opset``, with the decompositions and backend forms, in one walk.

    The options are checked already (:class:`lowerer.passes.options.ConvertOptions`). Only nodes whose op
    changes version, is decomposed or is picked by the backend profile are touched. Returns the report.
    ``serialized``, when the caller has it (the bytes the model was parsed from), saves work: no
    scan for name collisions when no name can collide, and shape inference (when a step needs
    it) runs on those bytes without serializing. ``picker`` picks a form per node of ``picked_ops``
    once the node is at the target (a backend profile, :mod:`lowerer.backends`). ``ir_version``: the
    IR version asked for (None: the lowest the target and the model's features allow, see
    :mod:`lowerer.model_io.ir_version`). ``input_check``: the input's checks running beside the walk (their
    strict inference gives the facts rules need; joined at the end: :class:`lowerer.model_io.input_check.InputCheck`).

    Raises:
        InputError: a model lowerer cannot read.
        ConversionError: a node cannot be converted exactly.
        VerificationError: a rewrite computed different numbers (raised by ``verifier``).
    """
    source_opset = default_opset(model.opset_import)
    if target_opset is None and not request.decompose and not request.expand and picker is None and ir_version is None:
        report = Report(target_opset=None, decompose=())
        report.source_opset = source_opset
        return report
    run = ConversionWalk(model, target_opset, request, verifier, serialized, picker, picked_ops, input_check)
    run.report.source_opset = source_opset
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
    refused = run.refusal()
    if refused is not None:
        raise refused
    if target_opset is not None:
        _set_default_opset(model.opset_import, target_opset, add=True)
        for function in model.functions:
            _set_default_opset(function.opset_import, target_opset, add=False)
    source_ir = model.ir_version
    choice = choose_ir(model, source_ir=source_ir, target_opset=target_opset, asked=ir_version)
    model.ir_version = choice.version
    run.report.notes.append(f"IR version {source_ir} -> {choice.version}: {choice.reason}"
                            if choice.version != source_ir else f"IR version {source_ir} kept: {choice.reason}")
    if input_check is not None:  # joined: an input failing its checks raises InputError here
        run.shapes.input_strict = input_check.finish()
    run.report.strictly_checked = bool(run.shapes.input_strict) and run.strict.complete
    return run.report


def _set_default_opset(imports: object, target: int, add: bool) -> None:
    found = False
    for entry in imports:  # type: ignore[attr-defined]
        if is_default_domain(entry.domain):
            entry.version = target
            found = True
    if not found and add:
        imports.append(onnx.helper.make_opsetid("", target))  # type: ignore[attr-defined]
