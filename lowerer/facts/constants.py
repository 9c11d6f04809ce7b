"""Constant values of a scope: what a conversion may bake into an attribute.

A value is constant when it is an initializer that is not also a graph input (a caller may
feed those, so their stored value is only a default), the output of a Constant node (any of its
``value*`` forms), or the output of a small shape computation whose inputs are all constant
(folded here: ``Shape`` of a statically shaped value, ``Gather``, ``Concat``, ``Unsqueeze`` ...).
Tensors in external data are never read, so they do not count as constants.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx

from lowerer.model_io.node_attributes import int_attribute
from lowerer.model_io.scopes import Scope
from lowerer.model_io.tensor_data import read_array

__all__ = ["MAX_FOLDED_ELEMENTS", "ConstantIndex", "ShapeEntry", "constant_node_value", "fold_made",
           "node_shape_entries"]

logger = logging.getLogger(__name__)

#: Larger results are not folded (shape arithmetic is small; weights are not recomputed here).
MAX_FOLDED_ELEMENTS = 4096

#: Ops whose outputs are folded when their inputs are constant (integer shape arithmetic mostly).
_FOLDABLE = frozenset({
    "Identity", "Cast", "Gather", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Slice", "Add", "Sub", "Mul",
    "Div", "Neg", "Abs", "Range", "ConstantOfShape", "Equal", "Where", "Expand", "Max", "Min", "ReduceProd",
    "ReduceSum", "ReduceMax", "ReduceMin", "Size", "Not", "Less", "Greater", "Flatten", "Transpose",
    "And", "Or", "Xor", "LessOrEqual", "GreaterOrEqual", "Mod", "Sign",
})


def _empty_input(scope: Scope, name: str) -> np.ndarray | None:
    """The value of a main-graph input whose stated dims are all static and hold a 0, else None.

    A tensor with no element has one value only, and onnxruntime refuses a feed whose static dims
    differ from the stated ones: an ``int64[0]`` input (onnx's reduction tests feed empty ``axes``
    so) is the empty tensor. Inputs of bodies are fed by their op, which states no dims.
    """
    if scope.parent is not None or scope.function is not None or scope.graph is None:
        return None
    info = next(vi for vi in scope.graph.input if vi.name == name)
    if info.type.WhichOneof("value") != "tensor_type" or not info.type.tensor_type.HasField("shape"):
        return None
    dims = info.type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims) or all(d.dim_value for d in dims):
        return None
    elem = info.type.tensor_type.elem_type
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
    except (KeyError, ValueError):
        return None
    if np.dtype(dtype).kind == "O" or elem in (onnx.TensorProto.STRING, onnx.TensorProto.UNDEFINED):
        return None
    return np.zeros([d.dim_value for d in dims], dtype=dtype)


def constant_node_value(node: onnx.NodeProto) -> np.ndarray | None:
    """The value a Constant node produces, for each of its forms (None for external or sparse data)."""
    for a in node.attribute:
        if a.name == "value":
            if a.t.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return read_array(a.t, f"node {node.name!r} (Constant) attribute 'value'")
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
        if a.name == "value_string":
            return np.array(a.s.decode("utf-8", "replace"), dtype=object)
        if a.name == "value_strings":
            return np.array([s.decode("utf-8", "replace") for s in a.strings], dtype=object)
    return None


class _ScopeConstants:
    """One scope's initializers, Constant nodes and producers, indexed on first use."""

    def __init__(self, scope: Scope, fed: frozenset[str]) -> None:
        self.tensors: dict[str, onnx.TensorProto] = {}
        self.nodes: dict[str, onnx.NodeProto] = {}
        graph = scope.graph
        if graph is not None:
            for t in graph.initializer:
                if t.name not in fed:
                    self.tensors[t.name] = t
        for node in scope.holder.node:
            for o in node.output:
                if o:
                    self.nodes[o] = node
        self.values: dict[str, np.ndarray | None] = {}


class ConstantIndex:
    """Looks up the constant value of a value name as seen from a scope (None when not constant).

    Args:
        model: the model (its main graph's inputs are the values a caller may feed).
        dims_of: the static dims of a value in a scope (for folding ``Shape``), None when unknown.
    """

    def __init__(self, model: onnx.ModelProto, dims_of: Callable[[Scope, str], list[int | None] | None],
                 rank_of: Callable[[Scope, str], int | None] = lambda scope, name: None) -> None:
        self._fed = frozenset(vi.name for vi in model.graph.input)
        self._dims_of = dims_of
        self._rank_of = rank_of
        self._scopes: dict[int, _ScopeConstants] = {}

    def _table(self, scope: Scope) -> _ScopeConstants:
        key = id(scope.holder)
        table = self._scopes.get(key)
        if table is None:
            fed = self._fed if scope.parent is None and scope.function is None else frozenset()
            if scope.graph is not None and scope.parent is not None:
                fed = frozenset(vi.name for vi in scope.graph.input)  # a body's inputs are fed by its op
            table = self._scopes[key] = _ScopeConstants(scope, fed)
        return table

    def value(self, scope: Scope, name: str, depth: int = 0) -> np.ndarray | None:
        """The constant value of ``name`` in ``scope`` (or an enclosing one), or None.

        ``depth`` counts the folding recursion (a limit keeps long chains cheap).
        """
        if not name:
            return None
        s: Scope | None = scope
        while s is not None:
            table = self._table(s)
            if name in table.values:
                return table.values[name]
            if name in table.tensors or name in table.nodes:
                value = self._compute(s, table, name, depth)
                table.values[name] = value
                return value
            if s.graph is not None and any(vi.name == name for vi in s.graph.input):
                # A graph input (fed at run time), shadowing anything outside: constant only when empty.
                return _empty_input(s, name)
            s = s.parent
        return None

    def is_literal(self, scope: Scope, name: str) -> bool:
        """Whether ``name`` is a literal constant in ``scope``: an initializer no caller feeds, or a Constant's output.

        Backends that want an input constant (a shape, axes, a depth) take these as they are; a value
        :meth:`value` folds from a computation is constant too, but only once written as one.
        """
        s: Scope | None = scope
        while s is not None:
            table = self._table(s)
            if name in table.tensors:
                return True
            if name in table.nodes:
                node = table.nodes[name]
                return node.op_type == "Constant" and node.domain in ("", "ai.onnx")
            if s.graph is not None and any(vi.name == name for vi in s.graph.input):
                return False
            s = s.parent
        return False

    def _compute(self, scope: Scope, table: _ScopeConstants, name: str, depth: int) -> np.ndarray | None:
        tensor = table.tensors.get(name)
        if tensor is not None:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                return None
            return read_array(tensor, f"initializer {name!r}")
        node = table.nodes[name]
        if node.domain not in ("", "ai.onnx"):
            return None
        if node.op_type == "Constant":
            return constant_node_value(node)
        if depth > 16 or (node.op_type not in _FOLDABLE and node.op_type != "Shape"):
            return None
        if node.op_type == "Shape":
            dims = self._dims_of(scope, node.input[0])
            if dims is None or None in dims:
                return None
            full = np.array(dims, dtype=np.int64)
            start = int_attribute(node, "start", 0)
            end = int_attribute(node, "end", None)
            return full[slice(start, end)]
        inputs: list[np.ndarray | None] = []
        for i in node.input:
            if not i:
                inputs.append(None)
                continue
            v = self.value(scope, i, depth + 1)
            if v is None or v.size > MAX_FOLDED_ELEMENTS:
                return None
            inputs.append(v)
        return _fold(node, inputs, scope.opset, list(node.output).index(name))


    def shape_entries(self, scope: Scope, name: str, depth: int = 0) -> list[ShapeEntry] | None:
        """What each element of the shape value ``name`` is, when it is made of constants and dims.

        An element is an ``int``, or ``(tensor, index)`` for ``Shape(tensor)[index]``. Follows
        Shape (with start/end), Concat, Gather, Slice, Unsqueeze, Squeeze, Reshape, Cast and
        Identity, the ways exporters build the shape of a view; None for anything else.
        """
        value = self.value(scope, name)
        if value is not None:
            return [int(v) for v in value.reshape(-1)] if value.dtype.kind in "iu" and value.ndim <= 1 else None
        found = self._producer(scope, name)
        if found is None or depth > 12:
            return None
        home, node = found
        return node_shape_entries(node, lambda n: self._rank_of(home, n),
                                  lambda n: self.shape_entries(home, n, depth + 1), lambda n: self.value(home, n))

    def _producer(self, scope: Scope, name: str) -> tuple[Scope, onnx.NodeProto] | None:
        s: Scope | None = scope
        while s is not None:
            table = self._table(s)
            if name in table.nodes:
                return s, table.nodes[name]
            if name in table.tensors:
                return None
            s = s.parent
        return None


#: One element of a shape built at run time: a constant, or dim ``index`` of the named tensor.
ShapeEntry = int | tuple[str, int]


def node_shape_entries(node: onnx.NodeProto, rank_of: Callable[[str], int | None],
                       entries_of: Callable[[str], list[ShapeEntry] | None],
                       value_of: Callable[[str], np.ndarray | None]) -> list[ShapeEntry] | None:
    """What each element of ``node``'s output is, given its inputs' ranks, entries and constant values.

    Follows Shape (with start/end), Concat, Gather, Slice, Unsqueeze, Squeeze, Reshape, Cast and
    Identity, the ways exporters (and function bodies) build the shape of a view; None for anything else.
    """
    op = node.op_type
    if op == "Shape":
        rank = rank_of(node.input[0])
        if rank is None:
            return None
        start = int_attribute(node, "start", 0)
        end = int_attribute(node, "end", rank)
        dims: list[ShapeEntry] = [(str(node.input[0]), i) for i in range(rank)]
        return dims[slice(start, end)]
    if op in ("Identity", "Cast", "Unsqueeze", "Squeeze", "Reshape"):
        return entries_of(node.input[0])
    if op == "Concat":
        parts = [entries_of(i) for i in node.input]
        return None if any(p is None for p in parts) else [e for p in parts for e in p]  # type: ignore[union-attr]
    if op not in ("Gather", "Slice"):
        return None
    data = entries_of(node.input[0])
    if data is None:
        return None
    if op == "Gather":
        idx = value_of(node.input[1])
        if idx is None or any(a.name == "axis" and a.i != 0 for a in node.attribute):
            return None
        return [data[int(i)] for i in idx.reshape(-1)] if all(-len(data) <= i < len(data)
                                                             for i in idx.reshape(-1)) else None
    attrs = {a.name: list(a.ints) for a in node.attribute if a.name in ("starts", "ends", "axes")}
    if "starts" in attrs and "ends" in attrs:  # Slice-1: the bounds are attributes
        if attrs.get("axes", [0]) != [0] or len(attrs["starts"]) != 1 or len(attrs["ends"]) != 1:
            return None
        return data[attrs["starts"][0]:attrs["ends"][0]]
    bounds = [value_of(i) if i else None for i in node.input[1:]]
    if len(bounds) < 2 or bounds[0] is None or bounds[1] is None or \
            any(b is not None and (b.size != 1 or (k >= 2 and int(b.reshape(-1)[0]) not in ((0, 1)[k - 2],)))
                for k, b in enumerate(bounds)):
        return None
    return data[int(bounds[0].reshape(-1)[0]):int(bounds[1].reshape(-1)[0])]


def fold_made(node: onnx.NodeProto, opset: int, name: str,
              value_of: Callable[[str], np.ndarray | None]) -> np.ndarray | None:
    """The value of output ``name`` of a node the conversion made, when its op folds and its inputs are constant.

    The same ops and size limit as :class:`ConstantIndex` (``Shape`` aside: its dims are the caller's); None
    otherwise.
    """
    if node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Constant":
        return constant_node_value(node)
    if node.op_type not in _FOLDABLE:
        return None
    inputs: list[np.ndarray | None] = []
    for i in node.input:
        v = value_of(i) if i else None
        if i and (v is None or v.size > MAX_FOLDED_ELEMENTS):
            return None
        inputs.append(v)
    return _fold(node, inputs, opset, list(node.output).index(name))


def _fold(node: onnx.NodeProto, inputs: list[np.ndarray | None], opset: int | None, index: int) -> np.ndarray | None:
    """Evaluate one node on constant inputs with onnx's reference evaluator (None when that fails)."""
    if opset is None or any(v is not None and v.dtype == object for v in inputs):
        return None
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    probe = helper.make_node(node.op_type, names, [f"o{k}" for k in range(len(node.output))])
    probe.attribute.extend(node.attribute)
    graph = helper.make_graph(
        [probe], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
         for n, v in zip(names, inputs, strict=True) if v is not None],
        [onnx.ValueInfoProto(name=f"o{k}") for k in range(len(node.output))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        out = ReferenceEvaluator(model).run(None, {n: v for n, v in zip(names, inputs, strict=True) if v is not None})
    except Exception as e:  # folding is best effort: not constant then
        logger.debug("could not fold %s: %s", node.op_type, e)
        return None
    result = np.asarray(list(out)[index])
    return result if result.size <= MAX_FOLDED_ELEMENTS else None
