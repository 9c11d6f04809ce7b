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
            if old is None or old[1] is None or (vt[1] is not None and sum(d is None for d in vt[1]) < sum(d is None for d in old[1])):
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
            return table.get(name)
        if self._graph_types is None:
            self._graph_types = self._collect([self._model.graph])
        vt = self._graph_types.get(name)
        if (vt is None or not enough(vt)) and not self._inferred:
            self._infer()
            vt = self._graph_types.get(name)
        return vt

