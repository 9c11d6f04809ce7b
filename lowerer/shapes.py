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
            return table.get(name)
        vt = self._graph_lookup(name)
        if (vt is None or not enough(vt)) and not self._inferred:
            self._infer()
            vt = self._graph_lookup(name)
        return vt
