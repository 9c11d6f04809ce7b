"""Ops lowerer does not own: converted by ``onnx.version_converter``, one node pattern at a time.

Running onnx's converter over a whole model is slow (it rebuilds the graph in C++), drops
model-local functions, and is wrong on the ops lowerer owns. So lowerer calls it only on
tiny probe models: one node, its inputs typed, its subgraphs replaced by stubs. When the
converter merely relabels the probe's node, every node with the same pattern (op, versions,
attributes, input types) is left as it is and only the opset import changes; the answer is
cached. When the converter does more, the node is converted with its constant inputs and the
result is spliced in under fresh names. That conversion is made once per pattern (op, versions,
attributes, resolved input types, constant inputs' contents, which inputs and outputs repeat
or are absent), on a probe whose values have canonical names, and the result is reused as a
template for every node of the pattern: the converter calls grow with the number of distinct
patterns, not with the number of nodes.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import cast

import onnx
from onnx import helper

from lowerer.errors import ConversionError
from lowerer.naming import NameGenerator
from lowerer.opsets import since_version
from lowerer.scopes import Scope
from lowerer.shapes import ShapeIndex, ValueType

__all__ = ["ForeignConverter", "ForeignResult"]

logger = logging.getLogger(__name__)

_STUB_DOMAIN = "lowerer.stub"
#: Canonical names in template probes (they never reach the model: every one is mapped back).
_TEMPLATE_NODE = "lowerer.template.node"
_TEMPLATE_IN = "lowerer.template.in"
_TEMPLATE_OUT = "lowerer.template.out"


class ForeignResult:
    """A node replaced by something other than a relabel (by onnx's converter, or a Constant made an initializer)."""

    def __init__(self, nodes: list[onnx.NodeProto], constants: list[onnx.TensorProto],
                 rule: str = "onnx.version_converter") -> None:
        self.nodes = nodes
        self.constants = constants
        #: What made the conversion, for the report.
        self.rule = rule


class ForeignConverter:
    """Converts default-domain nodes that lowerer has no rule for, with a per-pattern cache."""

    def __init__(self, names: NameGenerator, shapes: ShapeIndex) -> None:
        self._names = names
        self._shapes = shapes
        self._relabel: dict[Hashable, bool] = {}
        self._templates: dict[Hashable, onnx.GraphProto] = {}
        self._versions: dict[tuple[str, int, int], tuple[int | None, int | None]] = {}
        self._initializers: dict[int, dict[str, onnx.TensorProto]] = {}
        #: How many probes were run (for reports and benchmarks).
        self.probes = 0
        #: How many structural conversions were made on template probes (one per pattern).
        self.templates = 0

    def convert(self, node: onnx.NodeProto, scope: Scope, source: int, target: int) -> ForeignResult | None:
        """None when ``node`` stays as it is at ``target``, else its replacement.

        Raises:
            ConversionError: onnx's converter cannot convert the node, or the op does not exist.
        """
        op_type = node.op_type
        versions = self._versions.get((op_type, source, target))
        if versions is None:
            versions = (since_version(op_type, source), since_version(op_type, target))
            self._versions[(op_type, source, target)] = versions
        src_v, dst_v = versions
        if src_v is None:
            raise ConversionError(f"node {_label(node)} ({op_type}, in {scope.path}): "
                                  f"no op {op_type!r} exists in default-domain opset {source}")
        if dst_v == src_v:
            return None
        if dst_v is None:
            raise ConversionError(f"node {_label(node)} ({op_type}-{src_v}, in {scope.path}) cannot be "
                                  f"converted to opset {target}: {op_type} does not exist there")
        if op_type == "Constant" and scope.graph is not None and target < source:
            tensor = _constant_tensor(node)
            if tensor is not None:
                # A Constant the target's Constant cannot hold (Constant-1 has float types only):
                # the same tensor as an initializer of the same name means exactly the same.
                return ForeignResult([], [tensor], rule="constant-to-initializer")
        inputs = node.input
        # Without precision _input_types gives one None per input: skip its per-input work.
        precise = target < source or source < 7
        types = self._input_types(node, scope) if precise else (None,) * len(inputs)
        key = (op_type, source, target, _attribute_key(node) if node.attribute else (), tuple(map(bool, inputs)),
               len(node.output), types)
        relabel = self._relabel.get(key)
        if relabel is None:
            relabel = self._probe(node, source, target, types, scope, src_v)
            self._relabel[key] = relabel
        if relabel:
            return None
        return self._convert_alone(node, scope, source, target, types, src_v)

    # -- probes --------------------------------------------------------------------------------
    def _input_types(self, node: onnx.NodeProto, scope: Scope) -> tuple[Hashable, ...]:
        out: list[Hashable] = []
        for name in node.input:
            vt = self._shapes.lookup(scope, name, lambda vt: vt[0] != 0) if name else None
            out.append(None if vt is None else (vt[0], None if vt[1] is None else tuple(vt[1])))
        return tuple(out)

    def _probe(self, node: onnx.NodeProto, source: int, target: int, types: tuple[Hashable, ...],
               scope: Scope, src_v: int) -> bool:
        self.probes += 1
        probe = onnx.NodeProto()
        probe.CopyFrom(node)
        for a in probe.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                a.g.CopyFrom(_stub_graph(a.g))
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    g.CopyFrom(_stub_graph(g))
        try:
            converted = self._run_converter(probe, source, target, types, scope, src_v)
        except ConversionError:
            # The probe has no constant inputs, and adapters that need them (axes input → attribute
            # at 13→12) fail on it: convert the node with its constants instead (that raises if it fails).
            constants = self._scope_initializers(scope)
            has_graphs = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)
            if not has_graphs and any(name in constants for name in node.input if name):
                return False
            raise
        nodes = list(converted.graph.node)
        if len(nodes) != 1:
            return False
        new = nodes[0]
        return (new.op_type == node.op_type and new.domain == node.domain
                and list(new.input) == list(node.input) and list(new.output) == list(node.output)
                and _attribute_key(new) == _attribute_key(probe))

    def _convert_alone(self, node: onnx.NodeProto, scope: Scope, source: int, target: int,
                       types: tuple[Hashable, ...], src_v: int) -> ForeignResult:
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            raise ConversionError(
                f"node {_label(node)} ({node.op_type}-{src_v}, in {scope.path}) cannot be converted to opset "
                f"{target}: onnx.version_converter changes this op's structure and lowerer does not "
                "convert ops with subgraphs that way")
        template, names = self._template(node, scope, source, target, types, src_v)
        # ``names`` maps the template's canonical input/output names to the node's own.
        renames: dict[str, str] = {}
        new_constants: list[onnx.TensorProto] = []
        for t in template.initializer:
            if t.name in names:
                continue
            renames[t.name] = self._names.fresh(t.name)
            tensor = onnx.TensorProto()
            tensor.CopyFrom(t)
            tensor.name = renames[t.name]
            new_constants.append(tensor)
        for n in template.node:
            for out in n.output:
                if out and out not in names and out not in renames:
                    renames[out] = self._names.fresh(out)
        renames.update(names)
        nodes: list[onnx.NodeProto] = []
        for n in template.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            for i, name in enumerate(copy.input):
                copy.input[i] = renames.get(name, name)
            for i, name in enumerate(copy.output):
                copy.output[i] = renames.get(name, name)
            if copy.name == _TEMPLATE_NODE and node.name:
                copy.name = node.name
            else:
                copy.name = self._names.fresh(f"{node.name or node.op_type}/{copy.op_type}")
            nodes.append(copy)
        if scope.graph is None and new_constants:
            # Functions have no initializers: turn them into Constant nodes.
            nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in new_constants] + nodes
            new_constants = []
        return ForeignResult(nodes, new_constants)

    def _template(self, node: onnx.NodeProto, scope: Scope, source: int, target: int,
                  types: tuple[Hashable, ...], src_v: int) -> tuple[onnx.GraphProto, dict[str, str]]:
        """The converted graph of ``node``'s pattern, and the map from its canonical names to the node's.

        The pattern is everything the converter's answer can depend on: op, versions, attributes,
        the resolved type of each distinct input (as the probe declares it), the contents of
        constant inputs, and which inputs and outputs are absent or repeated.
        """
        constants = self._scope_initializers(scope)
        names: dict[str, str] = {}
        canonical: dict[str, str] = {}
        pattern: list[Hashable] = []
        value_inputs: list[tuple[str, int, list[int | None] | None]] = []
        known: list[onnx.TensorProto] = []
        for i, (name, t) in enumerate(zip(node.input, types, strict=False)):
            if not name:
                pattern.append(None)
                continue
            if name in canonical:
                pattern.append(("same", canonical[name]))
                continue
            canonical[name] = f"{_TEMPLATE_IN}{i}"
            names[canonical[name]] = name
            if name in constants:
                tensor = onnx.TensorProto()
                tensor.CopyFrom(constants[name])
                tensor.name = canonical[name]
                known.append(tensor)
                pattern.append(("const", tensor.SerializeToString(deterministic=True)))
                continue
            if t is None:
                t = self._shapes.lookup(scope, name, lambda vt: vt[0] != 0)
            elem, dims = cast("ValueType", t if t is not None else (onnx.TensorProto.FLOAT, None))
            elem = elem or onnx.TensorProto.FLOAT
            dims = None if dims is None else list(dims)
            value_inputs.append((canonical[name], elem, dims))
            pattern.append(("value", elem, None if dims is None else tuple(dims)))
        # Inputs beyond the types tuple (none in practice) keep the probe's old behaviour: not declared.
        outputs: list[str] = []
        for j, out in enumerate(node.output):
            if out:
                outputs.append(f"{_TEMPLATE_OUT}{j}")
                names[outputs[-1]] = out
        key = (node.op_type, node.domain, source, target, _attribute_key(node), tuple(pattern),
               tuple(bool(o) for o in node.output))
        template = self._templates.get(key)
        if template is None:
            probe = onnx.NodeProto()
            probe.CopyFrom(node)
            probe.name = _TEMPLATE_NODE
            for i, name in enumerate(node.input):
                if name:
                    probe.input[i] = canonical[name]
            for j, out in enumerate(node.output):
                if out:
                    probe.output[j] = f"{_TEMPLATE_OUT}{j}"
            graph = helper.make_graph(
                [probe], "probe",
                [helper.make_tensor_value_info(n, e, d) for n, e, d in value_inputs],
                [helper.make_empty_tensor_value_info(o) for o in outputs], initializer=known)
            self.templates += 1
            template = self._convert_graph(graph, node, source, target, scope, src_v).graph
            self._templates[key] = template
        return template, names

    def _run_converter(self, node: onnx.NodeProto, source: int, target: int, types: tuple[Hashable, ...],
                       scope: Scope, src_v: int) -> onnx.ModelProto:
        inputs = []
        seen: set[str] = set()
        for name, t in zip(node.input, types, strict=False):
            if not name or name in seen:
                continue
            seen.add(name)
            if t is None:
                t = self._shapes.lookup(scope, name, lambda vt: vt[0] != 0)
            elem, dims = cast("ValueType", t if t is not None else (onnx.TensorProto.FLOAT, None))
            inputs.append(helper.make_tensor_value_info(name, elem or onnx.TensorProto.FLOAT,
                                                        None if dims is None else list(dims)))
        outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], "probe", inputs, outputs)
        return self._convert_graph(graph, node, source, target, scope, src_v)

    def _convert_graph(self, graph: onnx.GraphProto, node: onnx.NodeProto, source: int, target: int, scope: Scope,
                       src_v: int) -> onnx.ModelProto:
        from onnx import version_converter

        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", source),
                                                        helper.make_opsetid(_STUB_DOMAIN, 1)], ir_version=8)
        try:
            return version_converter.convert_version(model, target)
        except Exception as e:  # the converter raises RuntimeError/ConvertError with C++ text
            reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise ConversionError(
                f"node {_label(node)} ({node.op_type}-{src_v}, in {scope.path}) cannot be converted to opset "
                f"{target}: onnx.version_converter failed ({reason})") from None

    def _scope_initializers(self, scope: Scope) -> dict[str, onnx.TensorProto]:
        """The constant values of a scope by name: its initializers and its Constant nodes' tensors."""
        table = self._initializers.get(id(scope.holder))
        if table is None:
            # Tensors in external data have no value here (lowerer never reads weights): onnx's
            # converter would read them as empty (an Unsqueeze with axes=[]), so they count as values.
            table = {}
            if scope.graph is not None:
                table = {t.name: t for t in scope.graph.initializer
                         if t.data_location != onnx.TensorProto.EXTERNAL}
            for node in scope.holder.node:  # e.g. the axes onnx's converter itself put in a Constant
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    tensor = _constant_tensor(node)
                    if tensor is not None and tensor.data_location != onnx.TensorProto.EXTERNAL:
                        table[tensor.name] = tensor
            self._initializers[id(scope.holder)] = table
        return table


def _constant_tensor(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """A Constant node's ``value`` tensor, named as the node's output (None for other forms)."""
    value = next((a.t for a in node.attribute if a.name == "value" and a.HasField("t")), None)
    if value is None or len(node.output) != 1:
        return None
    tensor = onnx.TensorProto()
    tensor.CopyFrom(value)
    tensor.name = node.output[0]
    return tensor


def _label(node: onnx.NodeProto) -> str:
    return repr(node.name) if node.name else f"<unnamed {node.op_type}>"


def _attribute_key(node: onnx.NodeProto) -> Hashable:
    items = []
    for a in sorted(node.attribute, key=lambda a: a.name):
        if a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            items.append((a.name, a.type))
        else:
            items.append((a.name, a.SerializeToString(deterministic=True)))
    return tuple(items)


def _stub_graph(graph: onnx.GraphProto) -> onnx.GraphProto:
    """A graph with the same interface whose body is one opaque node the converter leaves alone."""
    stub = onnx.GraphProto()
    stub.name = graph.name
    stub.input.extend(graph.input)
    stub.output.extend(graph.output)
    stub.node.append(helper.make_node("Body", [i.name for i in graph.input], [o.name for o in graph.output],
                                      domain=_STUB_DOMAIN))
    return stub
