"""Ops lowerer does not own: converted by ``onnx.version_converter``, one node pattern at a time.

Running onnx's converter over a whole model is slow (it rebuilds the graph in C++), drops
model-local functions, and is wrong on the ops lowerer owns. So lowerer calls it only on
tiny probe models: one node, its inputs typed, its subgraphs replaced by stubs. When the
converter merely relabels the probe's node, every node with the same pattern (op, versions,
attributes, input types) is left as it is and only the opset import changes; the answer is
cached. When the converter does more, that node is converted on its own, with its constant
inputs, and the result is spliced in under fresh names.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

import onnx
from onnx import helper

from lowerer.errors import ConversionError
from lowerer.naming import NameGenerator
from lowerer.opsets import since_version
from lowerer.scopes import Scope
from lowerer.shapes import ShapeIndex

__all__ = ["ForeignConverter", "ForeignResult"]

logger = logging.getLogger(__name__)

_STUB_DOMAIN = "lowerer.stub"


class ForeignResult:
    """A node converted by onnx's converter into something other than a relabel."""

    def __init__(self, nodes: list[onnx.NodeProto], constants: list[onnx.TensorProto]) -> None:
        self.nodes = nodes
        self.constants = constants


class ForeignConverter:
    """Converts default-domain nodes that lowerer has no rule for, with a per-pattern cache."""

    def __init__(self, names: NameGenerator, shapes: ShapeIndex) -> None:
        self._names = names
        self._shapes = shapes
        self._relabel: dict[Hashable, bool] = {}
        self._initializers: dict[int, dict[str, onnx.TensorProto]] = {}
        #: How many probes were run (for reports and benchmarks).
        self.probes = 0

    def convert(self, node: onnx.NodeProto, scope: Scope, source: int, target: int) -> ForeignResult | None:
        """None when ``node`` stays as it is at ``target``, else its replacement.

        Raises:
            ConversionError: onnx's converter cannot convert the node, or the op does not exist.
        """
        src_v = since_version(node.op_type, source)
        if src_v is None:
            raise ConversionError(f"node {_label(node)} ({node.op_type}, in {scope.path}): "
                                  f"no op {node.op_type!r} exists in default-domain opset {source}")
        dst_v = since_version(node.op_type, target)
        if dst_v == src_v:
            return None
        if dst_v is None:
            raise ConversionError(f"node {_label(node)} ({node.op_type}-{src_v}, in {scope.path}) cannot be "
                                  f"converted to opset {target}: {node.op_type} does not exist there")
        types = self._input_types(node, scope, precise=target < source or source < 7)
        key = (node.op_type, source, target, _attribute_key(node), tuple(bool(i) for i in node.input),
               len(node.output), types)
        relabel = self._relabel.get(key)
        if relabel is None:
            relabel = self._probe(node, source, target, types, scope, src_v)
            self._relabel[key] = relabel
        if relabel:
            return None
        return self._convert_alone(node, scope, source, target, types, src_v)

    # -- probes --------------------------------------------------------------------------------
    def _input_types(self, node: onnx.NodeProto, scope: Scope, precise: bool) -> tuple[Hashable, ...]:
        out: list[Hashable] = []
        for name in node.input:
            if not name:
                out.append(None)
                continue
            vt = self._shapes.lookup(scope, name, lambda vt: vt[0] != 0) if precise else None
            if vt is None:
                out.append(None)
            elif precise:
                out.append((vt[0], None if vt[1] is None else tuple(vt[1])))
            else:
                out.append((vt[0], None))
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
        converted = self._run_converter(probe, source, target, types, {}, scope, src_v)
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
        constants = self._scope_initializers(scope)
        known = {name: constants[name] for name in node.input if name in constants}
        converted = self._run_converter(node, source, target, types, known, scope, src_v)
        keep = set(node.input) | set(node.output)
        renames: dict[str, str] = {}
        new_constants: list[onnx.TensorProto] = []
        for t in converted.graph.initializer:
            if t.name in keep:
                continue
            renames[t.name] = self._names.fresh(t.name)
            tensor = onnx.TensorProto()
            tensor.CopyFrom(t)
            tensor.name = renames[t.name]
            new_constants.append(tensor)
        nodes: list[onnx.NodeProto] = []
        for n in converted.graph.node:
            for out in n.output:
                if out and out not in keep and out not in renames:
                    renames[out] = self._names.fresh(out)
        for n in converted.graph.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            for i, name in enumerate(copy.input):
                copy.input[i] = renames.get(name, name)
            for i, name in enumerate(copy.output):
                copy.output[i] = renames.get(name, name)
            if not copy.name or copy.name != node.name:
                copy.name = self._names.fresh(f"{node.name or node.op_type}/{copy.op_type}")
            nodes.append(copy)
        if scope.graph is None and new_constants:
            # Functions have no initializers: turn them into Constant nodes.
            nodes = [helper.make_node("Constant", [], [t.name], value=t) for t in new_constants] + nodes
            new_constants = []
        return ForeignResult(nodes, new_constants)

    def _run_converter(self, node: onnx.NodeProto, source: int, target: int, types: tuple[Hashable, ...],
                       constants: dict[str, onnx.TensorProto], scope: Scope, src_v: int) -> onnx.ModelProto:
        from onnx import version_converter

        inputs = []
        seen: set[str] = set()
        for name, t in zip(node.input, types, strict=False):
            if not name or name in seen or name in constants:
                continue
            seen.add(name)
            if t is None:
                t = self._shapes.lookup(scope, name, lambda vt: vt[0] != 0)
            elem, dims = (t if t is not None else (onnx.TensorProto.FLOAT, None))  # type: ignore[misc]
            inputs.append(helper.make_tensor_value_info(name, elem or onnx.TensorProto.FLOAT,
                                                        None if dims is None else list(dims)))
        outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
        graph = helper.make_graph([node], "probe", inputs, outputs, initializer=list(constants.values()))
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
        if scope.graph is None:
            return {}
        table = self._initializers.get(id(scope.graph))
        if table is None:
            table = {t.name: t for t in scope.graph.initializer}
            self._initializers[id(scope.graph)] = table
        return table


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
