"""Facts: what is known about values while one node is converted: types, shapes and constant values.

The package owns the model-wide indexes (:mod:`.shapes` and :mod:`.body_shapes`: types and shapes in
every scope, :mod:`.made_shapes`, :mod:`.value_types`; :mod:`.constants`: values proven constant) and
lowerer's numpy reference of the ops it owns (:mod:`.reference`); this module's :class:`Facts` is what
one node sees of them. Imports :mod:`lowerer.model_io` and :mod:`lowerer.core` only.

The model's own values are looked up through the run's :class:`~lowerer.facts.shapes.ShapeIndex` and
:class:`~lowerer.facts.constants.ConstantIndex`, as seen from the node's scope. Values the conversion
itself creates (the outputs of emitted nodes, new constants) are known here: their types are
inferred from the emitting node with onnx's per-node inference, on demand.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import onnx
import onnx.shape_inference

from lowerer.core.opsets import since_version
from lowerer.facts.constants import ConstantIndex, ShapeEntry, fold_made, node_shape_entries
from lowerer.facts.made_shapes import made_symbols
from lowerer.facts.shapes import ShapeIndex
from lowerer.facts.value_types import ValueType, type_proto, type_string, value_type
from lowerer.model_io.scopes import Scope, has_subgraphs

__all__ = ["Facts", "checked_type"]

logger = logging.getLogger(__name__)

#: The model's constants up to this many elements are given to per-node inference as values.
_VALUED_MAX = 1 << 12


class Facts:
    """Types, dims and constant values of values as seen from ``scope``, including new ones."""

    def __init__(self, scope: Scope, shapes: ShapeIndex, constants: ConstantIndex,
                 used: Callable[[str], bool] = lambda name: True) -> None:
        self.scope = scope
        self._used = used
        self._shapes = shapes
        self._constants = constants
        self._types: dict[str, ValueType] = {}
        self._values: dict[str, np.ndarray] = {}
        self._producers: dict[str, tuple[onnx.NodeProto, int]] = {}
        self._spelled: dict[str, str] = {}
        self._non_negative: set[str] = set()
        #: Values of made nodes' outputs folded from constant inputs (None: not constant), and the folding depth.
        self._folded: dict[str, np.ndarray | None] = {}
        self._depth = 0

    # -- new values --------------------------------------------------------------------------
    def add_constant(self, name: str, value: np.ndarray, elem_type: int) -> None:
        """Record a constant the conversion made."""
        self._values[name] = value
        self._types[name] = (elem_type, list(value.shape))

    def add_node(self, node: onnx.NodeProto, opset: int) -> None:
        """Record a node the conversion made (valid at ``opset``): its outputs' types are inferred on demand."""
        for o in node.output:
            if o:
                self._producers[o] = (node, opset)
                self._folded.pop(o, None)

    def add_type(self, name: str, value_type: ValueType) -> None:
        """Record the type of a value the conversion made known (a body input a call site types)."""
        self._types[name] = value_type

    def mark_non_negative(self, name: str) -> None:
        """Record that the conversion made ``name`` non-negative by construction (an index ``arange + k * n``)."""
        self._non_negative.add(name)

    def is_non_negative(self, name: str) -> bool:
        """Whether ``name`` is known non-negative: a constant with no negative entry, or marked so when made."""
        if name in self._non_negative:
            return True
        value = self.value(name)
        return value is not None and value.dtype.kind in "iuf" and not bool((value < 0).any())

    def is_new(self, name: str) -> bool:
        """Whether the conversion made ``name``."""
        return name in self._values or name in self._producers

    # -- lookups -----------------------------------------------------------------------------
    def type_of(self, name: str, enough: Callable[[ValueType], bool] = lambda vt: True) -> ValueType | None:
        """(element type, dims) of ``name``, or None when unknown."""
        vt = self._types.get(name)
        if vt is not None:
            return vt
        made = self._producers.get(name)
        if made is not None:
            return self._infer(name, *made)
        # Where the model's inference is not enough: what lowerer's facts prove (ShapeIndex.refined).
        return self._shapes.refined(self.scope, name, self._constants.value, enough)

    def elem_type(self, name: str) -> int | None:
        """The element type of ``name`` (None when unknown)."""
        vt = self.type_of(name, lambda vt: vt[0] != 0)
        return vt[0] if vt is not None and vt[0] != 0 else None

    def rank(self, name: str) -> int | None:
        """The rank of ``name`` (None when unknown)."""
        vt = self.type_of(name, lambda vt: vt[1] is not None)
        return None if vt is None or vt[1] is None else len(vt[1])

    def dims(self, name: str) -> list[int | None] | None:
        """The dims of ``name`` (None for a dynamic dim), or None when the rank is unknown.

        For a value the conversion made, static dims onnx's per-node inference cannot see (a Reshape
        to a shape built from static dims at run time) come from :meth:`symbols`.
        """
        dims = self._inferred_dims(name)
        if (dims is None or None in dims) and name in self._producers:
            named = self.symbols(name)
            if named is not None and (dims is None or len(named) == len(dims)):
                return [d if isinstance(d, int) else None for d in named]
        return dims

    def _inferred_dims(self, name: str) -> list[int | None] | None:
        vt = self.type_of(name, lambda vt: vt[1] is not None and None not in vt[1])
        return None if vt is None or vt[1] is None else list(vt[1])

    def shape_entries(self, name: str, depth: int = 0) -> list[ShapeEntry] | None:
        """What each element of the shape value ``name`` is (see :meth:`ConstantIndex.shape_entries`).

        Values the conversion made are followed through their producers the same way (a function
        body's ``Concat(Shape(X)[0:1], [G, -1])``).
        """
        if not self.is_new(name):
            return self._constants.shape_entries(self.scope, name)
        value = self._values.get(name)
        if value is not None:
            return [int(v) for v in value.reshape(-1)] if value.dtype.kind in "iu" and value.ndim <= 1 else None
        made = self._producers.get(name)
        if made is None or depth > 12:
            return None
        return node_shape_entries(made[0], self.rank, lambda n: self.shape_entries(n, depth + 1), self.value)

    def symbols(self, name: str, depth: int = 0) -> list[int | str | None] | None:
        """The dims of ``name``, symbolic ones by name (see :meth:`ShapeIndex.symbols`).

        For a value the conversion made, a dynamic dim gets the name of the dim it provably equals:
        through a Reshape to a shape of known entries, and elementwise ops (see :func:`made_symbols`).
        """
        if not self.is_new(name):
            return self._shapes.symbols(self.scope, name)
        dims = self._inferred_dims(name)
        made = self._producers.get(name)
        if dims is None and made is not None and made[0].op_type == "Reshape" and depth <= 12:
            # onnx's per-node inference gives no rank for a run-time shape; its entries give the rank.
            entries = self.shape_entries(made[0].input[1], depth + 1) if len(made[0].input) > 1 else None
            dims = None if entries is None else [e if isinstance(e, int) and e > 0 else None for e in entries]
        if dims is None or made is None or depth > 12 or None not in dims:
            return None if dims is None else list(dims)
        return made_symbols(made[0], dims, lambda n: self.symbols(n, depth + 1),
                            lambda n: self.shape_entries(n, depth + 1))

    def given_subgraph(self, node: onnx.NodeProto, attr_name: str) -> onnx.GraphProto | None:
        """``node``'s subgraph ``attr_name`` as the model gave it (before any conversion), or None.

        None for a node the conversion made, one in a model-local function, or where the model's
        bytes were not kept.
        """
        given_graph = getattr(self._shapes, "given_graph", None)
        if given_graph is None or self.scope.function is not None:
            return None
        holder = self.scope.holder
        index = next((i for i, n in enumerate(holder.node)
                      if n.op_type == node.op_type and list(n.output) == list(node.output)), None)
        if index is None:
            return None
        parent = given_graph(self.scope.locator)
        if parent is None or index >= len(parent.node) or list(parent.node[index].output) != list(node.output):
            return None
        found: onnx.GraphProto | None = given_graph((*self.scope.locator, (index, attr_name, 0)))
        return found

    def value(self, name: str) -> np.ndarray | None:
        """The constant value of ``name`` (None when it is not a constant)."""
        if not name:
            return None
        if name in self._values:
            return self._values[name]
        if name in self._producers:
            return self._made_value(name)
        return self._constants.value(self.scope, name)

    def _made_value(self, name: str) -> np.ndarray | None:
        """A made node's output folded from its constant inputs (as :class:`ConstantIndex` folds), or None."""
        if name in self._folded:
            return self._folded[name]
        if self._depth > 16:
            return None
        node, opset = self._producers[name]
        self._depth += 1
        try:
            found = fold_made(node, opset, name, self.value)
        finally:
            self._depth -= 1
        self._folded[name] = found
        return found

    def is_literal(self, name: str) -> bool:
        """Whether ``name`` is a literal constant (:meth:`ConstantIndex.is_literal`); constants made here count."""
        if not name:
            return False
        if self.is_new(name):
            made = self._producers.get(name)
            return name in self._values or (made is not None and made[0].op_type == "Constant")
        return self._constants.is_literal(self.scope, name)

    def type_str(self, name: str) -> str | None:
        """The schema spelling of ``name``'s type (``tensor(float)``, ``seq(tensor(int64))``), or None."""
        if name in self._types or name in self._producers:
            vt = self.type_of(name)
            if vt is not None and vt[0] != 0:
                return f"tensor({onnx.TensorProto.DataType.Name(vt[0]).lower()})"
            return self._spelled.get(name)
        spelled = self._shapes.type_str(self.scope, name)
        if spelled is None:  # a tensor type lowerer's facts prove (ShapeIndex.refined)
            vt = self.type_of(name, lambda vt: vt[0] != 0)
            if vt is not None and vt[0] != 0:
                return f"tensor({onnx.TensorProto.DataType.Name(vt[0]).lower()})"
        return spelled

    def is_used(self, name: str) -> bool:
        """Whether anything reads value ``name`` (a node anywhere, or a graph or function output)."""
        return self._used(name)

    def _infer(self, name: str, node: onnx.NodeProto, opset: int) -> ValueType | None:
        found = self._infer_node(name, node, opset)
        if found is None and has_subgraphs(node):
            inner = _body_output(node, name)
            elem = None if inner is None else inner.type.tensor_type.elem_type or self.elem_type(inner.name)
            if elem:
                found = self._types[name] = (elem, None)
        return found

    def _infer_node(self, name: str, node: onnx.NodeProto, opset: int) -> ValueType | None:
        inputs: dict[str, onnx.TypeProto] = {}
        for i in node.input:
            if not i or i in inputs:
                continue
            vt = self.type_of(i)
            if vt is None or vt[0] == 0:
                proto = type_proto(self.type_str(i))  # a sequence or optional: its element type
                if proto is None or proto.HasField("tensor_type"):
                    return None
                inputs[i] = proto
                continue
            inputs[i] = onnx.helper.make_tensor_type_proto(vt[0], None if vt[1] is None else list(vt[1]))
        data = {}
        for i in node.input:
            # The conversion's own constants, and the model's small ones (a Reshape to an outer shape).
            v = self._values.get(i) if i else None
            if v is None and i and not self.is_new(i):
                v = self.value(i)
                v = v if v is not None and v.size <= _VALUED_MAX else None
            if v is not None and v.dtype != object:
                data[i] = onnx.numpy_helper.from_array(v, i)
        version = since_version(node.op_type, opset, node.domain)
        if version is None:
            return None
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
            out = onnx.shape_inference.infer_node_outputs(
                schema, node, inputs, data, opset_imports=[onnx.helper.make_opsetid(node.domain, opset)])
        except Exception as e:  # best effort
            logger.debug("per-node inference of %s failed: %s", node.op_type, e)
            return None
        for o, tp in out.items():
            vt = value_type(tp)
            if vt is not None:
                self._types[o] = vt
            elif (spelled := type_string(tp)) is not None:
                self._spelled[o] = spelled
        return self._types.get(name)


def _complete(vt: ValueType) -> bool:
    return vt[0] != 0 and vt[1] is not None and None not in vt[1]


def _typed(vt: ValueType) -> bool:
    return vt[0] != 0 and vt[1] is not None


def checked_type(shapes: ShapeIndex, constants: ConstantIndex, scope: Scope, name: str) -> ValueType | None:
    """The type the per-rewrite check feeds for ``name``: what the rules were given to build on.

    What the model states or onnx infers (:meth:`ShapeIndex.lookup`); where that leaves the element
    type, rank or (inside a body) a static dim unknown, what lowerer's facts prove
    (:meth:`ShapeIndex.refined`, as :meth:`Facts.type_of` reads it): a Loop's carried value that stays
    float32[3,5] is checked on float32[3,5], not on the generated shapes of an unknown rank. In the
    main graph only a missing element type or rank is refined (dynamic dims stay dynamic there).
    """
    vt = shapes.lookup(scope, name)
    enough = _complete if scope.parent is not None else _typed
    if vt is not None and enough(vt):
        return vt
    return shapes.refined(scope, name, constants.value, enough)


def _body_output(node: onnx.NodeProto, name: str) -> onnx.ValueInfoProto | None:
    """The body output an If, Loop or Scan output ``name`` comes from (its element type is the output's).

    If: the then-branch's output at the same place. Loop: body outputs after the condition (carried
    values, then scan outputs). Scan: the body's outputs in order. Per-node inference cannot look into
    a body without its outer values; the body's stated (or inferred) element type is the output's.
    """
    index = list(node.output).index(name)
    graphs = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    body = graphs.get("then_branch" if node.op_type == "If" else "body")
    if body is None or node.domain not in ("", "ai.onnx"):
        return None
    outputs = list(body.output)[1:] if node.op_type == "Loop" else list(body.output)
    if index >= len(outputs):
        return None
    stated = outputs[index].type
    return outputs[index] if stated.HasField("tensor_type") or not stated.ByteSize() else None
