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

_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS
#: How ``AttributeProto.type`` = GRAPH / GRAPHS is encoded (field 20, varint: tag 0xA0 0x01, then 5 / 10).
#: Where neither byte string occurs in a serialized model, no attribute in it holds a graph.
_GRAPH_TYPE_BYTES = (b"\xa0\x01\x05", b"\xa0\x01\x0a")


def _value_type(tp: onnx.TypeProto) -> ValueType | None:
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    # A non-zero dim_value is set; only a zero needs HasField to tell 0 from a symbolic dim.
    dims: list[int | None] = [v if (v := d.dim_value) or d.HasField("dim_value") else None for d in tt.shape.dim]
    return (tt.elem_type, dims)


def _better_stated(old: ValueType | None, vt: ValueType) -> bool:
    """Whether a later statement ``vt`` replaces ``old`` while collecting what a model states."""
    return old is None or (old[1] is None and vt[1] is not None)


def _better_inferred(old: ValueType | None, vt: ValueType) -> bool:
    """Whether an inferred ``vt`` replaces what the model states (``old``)."""
    return old is None or old[1] is None or (
        vt[1] is not None and sum(d is None for d in vt[1]) < sum(d is None for d in old[1]))


class _Level:
    """What one graph itself states (initializers, inputs, outputs, value_info), read on demand.

    :meth:`apply` gives exactly what collecting the statements in order would (an initializer
    sets the type; then the first statement with a rank wins, else the first one), without
    converting every value_info of a large graph up front.
    """

    def __init__(self, g: onnx.GraphProto) -> None:
        self._inits = g.initializer
        names = [t.name for t in self._inits]
        self._init_index = dict(zip(names, range(len(names)), strict=True))  # the last one wins, as in order
        self._io: dict[str, ValueType] = {}
        for vi in (*g.input, *g.output):
            vt = _value_type(vi.type)
            if vt is not None and _better_stated(self._io.get(vi.name), vt):
                self._io[vi.name] = vt
        self._infos = g.value_info
        names = [vi.name for vi in self._infos]
        self._info_index = dict(zip(names, range(len(names)), strict=True))
        self._info_folded: dict[str, ValueType] | None = None
        if len(self._info_index) != len(names):  # a name stated twice: fold them all now
            self._info_folded = {}
            for vi in self._infos:
                vt = _value_type(vi.type)
                if vt is not None and _better_stated(self._info_folded.get(vi.name), vt):
                    self._info_folded[vi.name] = vt

    def apply(self, name: str, vt: ValueType | None) -> ValueType | None:
        """``vt`` (what earlier graphs stated about ``name``) updated with this graph's statements."""
        i = self._init_index.get(name)
        if i is not None:
            t = self._inits[i]
            vt = (t.data_type, list(t.dims))
        stated = self._io.get(name)
        if stated is not None and _better_stated(vt, stated):
            vt = stated
        if self._info_folded is not None:
            stated = self._info_folded.get(name)
        else:
            i = self._info_index.get(name)
            stated = None if i is None else _value_type(self._infos[i].type)
        if stated is not None and _better_stated(vt, stated):
            vt = stated
        return vt


def _subgraphs(g: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The graphs held by ``g``'s nodes' attributes (one level down), in node order."""
    found: list[onnx.GraphProto] = []
    for n in g.node:
        for a in n.attribute:
            t = a.type
            if t == _GRAPH:
                found.append(a.g)
            elif t == _GRAPHS:
                found.extend(a.graphs)
    return found


def _levels(main: onnx.GraphProto, walk: bool) -> list[_Level]:
    """The graph and (with ``walk``) every graph below it, in the order their statements are read."""
    levels = [_Level(main)]
    if walk:
        stack = _subgraphs(main)
        while stack:  # depth first, last first
            g = stack.pop()
            levels.append(_Level(g))
            stack.extend(_subgraphs(g))
    return levels


def _fold(levels: list[_Level], name: str) -> ValueType | None:
    vt: ValueType | None = None
    for level in levels:
        vt = level.apply(name, vt)
    return vt


class ShapeIndex:
    """Looks up the element type and dims of a value by name within a scope.

    Main-graph and subgraph values share one index (names are unique across them). Values in
    model-local functions are looked up in the function's own ``value_info``. Shape inference
    runs at most once, and only when a rule asks for a value the model does not describe; it
    infers the model as it was given (``serialized``, when the caller has its bytes).

    Statements are read lazily, one value at a time (a large graph's value_info is not converted
    up front), and the subgraphs are walked only when the model may have some: with
    ``serialized`` at hand, a byte search tells when no attribute holds a graph.
    """

    def __init__(self, model: onnx.ModelProto, serialized: bytes | None = None) -> None:
        self._model = model
        self._serialized = serialized
        #: False when the serialization shows that no attribute holds a graph: no subgraph walk then.
        self._maybe_subgraphs = serialized is None or any(b in serialized for b in _GRAPH_TYPE_BYTES)
        self._stated: list[_Level] | None = None
        self._has_subgraphs = False
        self._function_types: dict[str, dict[str, ValueType]] = {}
        self._function_inferred: set[str] = set()
        self._inferred = False
        self._extra: list[_Level] | None = None
        self._cache: dict[str, ValueType | None] = {}

    def _infer(self) -> None:
        self._inferred = True
        logger.debug("running shape inference: a rule needs a type or shape the model does not state")
        try:
            data = self._serialized if self._serialized is not None else self._model
            inferred = onnx.shape_inference.infer_shapes(data, strict_mode=False, data_prop=True)
        except Exception as e:  # inference is best effort: rules refuse when still unknown
            logger.debug("shape inference failed: %s", e)
            return
        finally:
            self._serialized = None
        self._extra = _levels(inferred.graph, self._has_subgraphs)
        self._cache.clear()

    def _graph_lookup(self, name: str) -> ValueType | None:
        try:
            return self._cache[name]
        except KeyError:
            pass
        if self._stated is None:
            self._stated = _levels(self._model.graph, self._maybe_subgraphs)
            self._has_subgraphs = len(self._stated) > 1
        vt = _fold(self._stated, name)
        if self._extra is not None:
            new = _fold(self._extra, name)
            if new is not None and _better_inferred(vt, new):
                vt = new
        self._cache[name] = vt
        return vt

    def known(self, scope: Scope, name: str) -> ValueType | None:
        """What :meth:`lookup` would give without running shape inference (stated, or already inferred)."""
        if scope.function is not None:
            return self.lookup(scope, name)
        return self._graph_lookup(name)

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
                # Not stated in the function: infer its body from the types its call sites pass in.
                self._function_inferred.add(key)
                for inner, inferred_vt in self._infer_function(scope.function).items():
                    old = table.get(inner)
                    if old is None or old[1] is None:
                        table[inner] = inferred_vt
                vt = table.get(name)
            return vt
        vt = self._graph_lookup(name)
        if (vt is None or not enough(vt)) and not self._inferred:
            self._infer()
            vt = self._graph_lookup(name)
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
        for k, (name, vt) in enumerate(zip(function.input, inputs, strict=False)):
            assert vt is not None
            elem, dims = vt
            shape = None if dims is None else [d if d is not None else f"__in{k}_d{i}" for i, d in enumerate(dims)]
            graph_inputs.append(onnx.helper.make_tensor_value_info(name, elem, shape))
        graph = onnx.helper.make_graph(list(function.node), "f", graph_inputs,
                                       [onnx.ValueInfoProto(name=o) for o in function.output])
        opsets = {e.domain: e for e in self._model.opset_import}
        opsets.update({e.domain: e for e in function.opset_import})
        model = onnx.helper.make_model(graph, opset_imports=list(opsets.values()),
                                       ir_version=self._model.ir_version or 8)
        model.functions.extend(f for f in self._model.functions if f is not function)
        try:
            inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
        except Exception as e:  # attribute references and the like: best effort only
            logger.debug("shape inference of function %s failed: %s", function.name, e)
            return {}
        out: dict[str, ValueType] = {}
        for vi in (*inferred.graph.value_info, *inferred.graph.output):
            if (vt := _value_type(vi.type)) is not None:
                out[vi.name] = vt
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
