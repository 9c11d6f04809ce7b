"""Types and shapes of values, from what the model states and, only when needed, shape inference."""

from __future__ import annotations

import logging
from collections.abc import Callable

import onnx
import onnx.shape_inference

from lowerer.scopes import Scope, function_key

__all__ = ["ShapeIndex", "ValueType"]

logger = logging.getLogger(__name__)

#: (element type, dims) where dims is None for unknown rank, and a dim is None when not static.
ValueType = tuple[int, "list[int | None] | None"]


def _value_type(tp: onnx.TypeProto) -> ValueType | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    dims: list[int | None] = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return (tt.elem_type, dims)


class ShapeIndex:
    """Looks up the element type and dims of a value by name within a scope.

    Main-graph and subgraph values share one index (names are unique across them). Values in
    model-local functions are looked up in the function's own ``value_info``. Shape inference
    runs at most once, and only when a rule asks for a value the model does not describe.
    """

    def __init__(self, model: onnx.ModelProto) -> None:
        self._model = model
        self._graph_types: dict[str, ValueType] | None = None
        self._function_types: dict[str, dict[str, ValueType]] = {}
        self._inferred = False
        self._function_inferred: set[str] = set()

    def _collect(self, graphs: list[onnx.GraphProto]) -> dict[str, ValueType]:
        out: dict[str, ValueType] = {}
        stack = list(graphs)
        while stack:
            g = stack.pop()
            for t in g.initializer:
                out[t.name] = (t.data_type, list(t.dims))
            for vi in (*g.input, *g.output, *g.value_info):
                vt = _value_type(vi.type)
                if vt is not None:
                    old = out.get(vi.name)
                    if old is None or (old[1] is None and vt[1] is not None):
                        out[vi.name] = vt
            for n in g.node:
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.GRAPH:
                        stack.append(a.g)
                    elif a.type == onnx.AttributeProto.GRAPHS:
                        stack.extend(a.graphs)
        return out

    def _infer(self) -> None:
        self._inferred = True
        logger.debug("running shape inference: a rule needs a type or shape the model does not state")
        try:
            inferred = onnx.shape_inference.infer_shapes(self._model, strict_mode=False, data_prop=True)
        except Exception as e:  # inference is best effort: rules refuse when still unknown
            logger.debug("shape inference failed: %s", e)
            return
        extra = self._collect([inferred.graph])
        assert self._graph_types is not None
        for name, vt in extra.items():
            old = self._graph_types.get(name)
            if old is None or old[1] is None or (vt[1] is not None and _unknown(vt) < _unknown(old)):
                self._graph_types[name] = vt

    def lookup(
        self, scope: Scope, name: str, enough: Callable[[ValueType], bool] = lambda vt: True
    ) -> ValueType | None:
        """The (elem_type, dims) of ``name`` as seen from ``scope``, or None when unknown.

        Shape inference runs (once per model) when what the model states is not ``enough``.
        """
        if scope.function is not None:
            key = function_key(scope.function)
            table = self._function_types.get(key)
            if table is None:
                table = {}
                for vi in scope.function.value_info:
                    vt = _value_type(vi.type)
                    if vt is not None:
                        table[vi.name] = vt
                self._function_types[key] = table
            vt = table.get(name)
            if (vt is None or not enough(vt)) and key not in self._function_inferred:
                self._function_inferred.add(key)
                for inner, inferred_vt in self._infer_function(scope.function).items():
                    old = table.get(inner)
                    if old is None or old[1] is None:
                        table[inner] = inferred_vt
                vt = table.get(name)
            return vt
        if self._graph_types is None:
            self._graph_types = self._collect([self._model.graph])
        vt = self._graph_types.get(name)
        if (vt is None or not enough(vt)) and not self._inferred:
            self._infer()
            vt = self._graph_types.get(name)
        return vt

    def _call_site_types(self, function: onnx.FunctionProto) -> list[ValueType | None] | None:
        """The input types of ``function`` merged over all its call sites (None if never called)."""
        merged: list[ValueType | None] | None = None
        callers: list[tuple[Scope, onnx.NodeProto]] = []

        def walk(scope: Scope) -> None:
            for node in scope.holder.node:
                if node.op_type == function.name and node.domain == function.domain \
                        and node.overload == function.overload:
                    callers.append((scope, node))
                for attr in node.attribute:
                    graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
                    for g in graphs:
                        walk(Scope(scope.path, g, scope.opset, scope.function))

        from lowerer.scopes import iter_scopes

        for scope in iter_scopes(self._model):
            if scope.function is not function:
                walk(scope)
        for scope, node in callers:
            types = [self.lookup(scope, i, lambda vt: vt[1] is not None) if i else None for i in node.input]
            merged = types if merged is None else [_merge(a, b) for a, b in zip(merged, types, strict=False)]
        return merged

    def _infer_function(self, function: onnx.FunctionProto) -> dict[str, ValueType]:
        """Types of a function's values, inferred from the types its call sites pass in."""
        inputs = self._call_site_types(function)
        if not inputs or any(t is None for t in inputs[: len(function.input)]):
            return {}
        graph_inputs = []
        for name, vt in zip(function.input, inputs, strict=False):
            assert vt is not None
            elem, dims = vt
            shape = None if dims is None else [d if d is not None else f"__d{i}" for i, d in enumerate(dims)]
            graph_inputs.append(onnx.helper.make_tensor_value_info(name, elem, shape))
        graph = onnx.helper.make_graph(list(function.node), "f", graph_inputs,
                                       [onnx.helper.ValueInfoProto(name=o) for o in function.output])
        model = onnx.helper.make_model(graph, opset_imports=list(function.opset_import) or
                                       list(self._model.opset_import), ir_version=self._model.ir_version or 8)
        model.functions.extend(f for f in self._model.functions if f is not function)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception as e:  # attribute references and the like: best effort only
            logger.debug("shape inference of function %s failed: %s", function.name, e)
            return {}
        out = self._collect([inferred.graph])
        for name in function.input:
            out.pop(name, None)
        out.update({vi.name: vt for vi in graph_inputs if (vt := _value_type(vi.type)) is not None})
        return out


def _merge(a: ValueType | None, b: ValueType | None) -> ValueType | None:
    if a is None or b is None or a[0] != b[0]:
        return None
    if a[1] is None or b[1] is None or len(a[1]) != len(b[1]):
        return (a[0], None)
    return (a[0], [x if x == y else None for x, y in zip(a[1], b[1], strict=True)])


def _unknown(vt: ValueType) -> int:
    return len([d for d in vt[1] or () if d is None])
