"""A rewrite computed once per pattern: later nodes of the pattern get the recorded replacement, with their names.

The first node of a pattern goes through the engine as usual (resolve, emit, check), with its facts
read through a :class:`Recorder`: every read about the model (a type, rank or dims, a constant value,
a shape's entries, whether a value is used) is logged by the role of the value it is about (the
node's k-th input or output) with its answer. The key of a pattern is then

* what the node is without its names: op, domain, overload, attributes, doc string and metadata,
  which inputs are given and which of them are the same value, which outputs are given, whether it
  has a name, whether it is in a graph or a function, and the source and target opsets;
* the answers of those reads, asked again about the later node's own values (the element types,
  ranks and static dims, the constant inputs and the shape entries that the entry actually read).

A later node whose key matches gets the recorded replacement with its own names: its inputs, outputs
and name where the first node's were, and fresh names (from the same hints) for every name the
first conversion made. Nothing else can differ: the engine reads nothing about a node but its
fields and these facts. A conversion that reads anything about another value (a subgraph's outer
values, a producer's inputs named by a shape entry), or whose replacement names a value that is
none of these, is not recorded; nor are nodes with subgraphs, nor conversions with a backend picker.
``tests/test_stamping.py`` checks, on every pattern of the node cases and of the real fixtures,
that the stamp and a fresh emission are the same nodes (up to the names made).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

if TYPE_CHECKING:
    from lowerer.core.report import Crossing
    from lowerer.facts.constants import ConstantIndex, ShapeEntry
    from lowerer.facts.shapes import ShapeIndex
    from lowerer.facts.value_types import ValueType
    from lowerer.model_io.naming import NameGenerator
    from lowerer.model_io.scopes import Scope

__all__ = ["NamesMade", "Pattern", "Recorder", "canonical", "static_key"]

#: At most this many recorded patterns per static key (each later node tries them in turn).
MAX_PER_KEY = 8
_GRAPH_ATTRS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_UNCACHEABLE_ATTRS = (*_GRAPH_ATTRS, onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.SPARSE_TENSORS)
_Role = tuple[str, int]


def static_key(node: onnx.NodeProto, scope: Scope, source: int, target: int) -> tuple[object, ...] | None:
    """What a node is without its names (the first half of its pattern's key); None: never stamped."""
    attrs = []
    for a in node.attribute:
        if a.type in _UNCACHEABLE_ATTRS or a.ref_attr_name:
            return None
        attrs.append(a.SerializeToString())
    first: dict[str, int] = {}
    wiring = tuple(first.setdefault(n, i) if n else -1 for i, n in enumerate(node.input))
    outs = tuple(bool(o) for o in node.output)
    if len(set(filter(None, node.output))) != sum(outs) or set(first) & set(node.output):
        return None
    meta = tuple(m.SerializeToString() for m in node.metadata_props) if node.metadata_props else ()
    return (node.op_type, node.domain, node.overload, tuple(attrs), node.doc_string, meta, wiring, outs,
            bool(node.name), scope.graph is None, source, target)


def _roles(node: onnx.NodeProto) -> dict[str, _Role]:
    roles: dict[str, _Role] = {}
    for k, n in enumerate(node.input):
        if n:
            roles.setdefault(n, ("i", k))
    for k, n in enumerate(node.output):
        if n:
            roles.setdefault(n, ("o", k))
    return roles


def _name_of(node: onnx.NodeProto, role: _Role) -> str:
    return str(node.input[role[1]] if role[0] == "i" else node.output[role[1]])


class _UnknownError(Exception):
    """A read about a value that is not one of the node's own: the conversion is not recorded."""


def _answer(kind: str, result: object, roles: dict[str, _Role]) -> object:
    """A read's answer as a comparable value (names in it by role; _UnknownError for another value's name)."""
    if result is None or isinstance(result, (bool, str)):
        return result
    if kind in ("lookup", "refined"):
        assert isinstance(result, tuple)
        return result[0], None if result[1] is None else tuple(result[1])
    if kind == "symbols":
        assert isinstance(result, list)
        return tuple(result)
    if kind == "value":
        assert isinstance(result, np.ndarray)
        if result.dtype == object:
            raise _UnknownError
        return result.dtype.str, result.shape, result.tobytes()
    if kind == "shape_entries":
        out: list[object] = []
        for e in result:  # type: ignore[attr-defined]
            if isinstance(e, tuple):
                role = roles.get(e[0])
                if role is None:
                    raise _UnknownError
                out.append((role, e[1]))
            else:
                out.append(e)
        return tuple(out)
    raise _UnknownError


@dataclass
class _Read:
    kind: str
    role: _Role
    enough: Callable[[ValueType], bool] | None
    answer: object


class Recorder:
    """The model's facts (shapes, constants, used) for one node's conversion, each read logged by role.

    Passed to :class:`~lowerer.facts.Facts` in place of the ShapeIndex, the ConstantIndex and the
    ``used`` callback. :attr:`ok` turns False on a read the pattern key cannot hold.
    """

    def __init__(self, node: onnx.NodeProto, shapes: ShapeIndex, constants: ConstantIndex,
                 used: Callable[[str], bool]) -> None:
        self._shapes = shapes
        self._constants = constants
        self._used = used
        self._roles = _roles(node)
        self.reads: list[_Read] = []
        self.ok = True

    def _note(self, kind: str, name: str, enough: Callable[[ValueType], bool] | None, result: object) -> None:
        if not self.ok:
            return
        role = self._roles.get(name)
        if role is None:
            self.ok = False
            return
        try:
            self.reads.append(_Read(kind, role, enough, _answer(kind, result, self._roles)))
        except _UnknownError:
            self.ok = False

    # -- ShapeIndex ----------------------------------------------------------------------------
    def lookup(self, scope: Scope, name: str, enough: Callable[[ValueType], bool] = lambda vt: True
               ) -> ValueType | None:
        """As :meth:`ShapeIndex.lookup`, logged."""
        vt = self._shapes.lookup(scope, name, enough)
        self._note("lookup", name, enough, vt)
        return vt

    def refined(self, scope: Scope, name: str, value_of: Callable[[Scope, str], np.ndarray | None],
                enough: Callable[[ValueType], bool] = lambda vt: True) -> ValueType | None:
        """As :meth:`ShapeIndex.refined`, logged: the rule sees only the answer, asked again of a later node.

        The constants it reads on its way are read from the model (not logged as the node's reads):
        what counts is the answer for the node's own value, which :meth:`Pattern.matches` compares.
        """
        found = self._shapes.refined(scope, name, self._constants.value, enough)
        self._note("refined", name, enough, found)
        return found

    def symbols(self, scope: Scope, name: str) -> list[int | str | None] | None:
        """As :meth:`ShapeIndex.symbols`, logged."""
        found = self._shapes.symbols(scope, name)
        self._note("symbols", name, None, found)
        return found

    def type_str(self, scope: Scope, name: str) -> str | None:
        """As :meth:`ShapeIndex.type_str`, logged."""
        found = self._shapes.type_str(scope, name)
        self._note("type_str", name, None, found)
        return found

    # -- ConstantIndex -------------------------------------------------------------------------
    def value(self, scope: Scope, name: str, depth: int = 0) -> np.ndarray | None:
        """As :meth:`ConstantIndex.value`, logged."""
        found = self._constants.value(scope, name, depth)
        if name:
            self._note("value", name, None, found)
        return found

    def shape_entries(self, scope: Scope, name: str, depth: int = 0) -> list[ShapeEntry] | None:
        """As :meth:`ConstantIndex.shape_entries`, logged."""
        found = self._constants.shape_entries(scope, name, depth)
        self._note("shape_entries", name, None, found)
        return found

    def is_literal(self, scope: Scope, name: str) -> bool:
        """As :meth:`ConstantIndex.is_literal`, logged."""
        found = self._constants.is_literal(scope, name)
        self._note("is_literal", name, None, found)
        return found

    # -- used ----------------------------------------------------------------------------------
    def __call__(self, name: str) -> bool:
        """Whether ``name`` is used, logged."""
        found = self._used(name)
        self._note("used", name, None, found)
        return found


class NamesMade:
    """The engine's name generator during a recorded conversion: each name it makes, with its hint."""

    def __init__(self, names: NameGenerator) -> None:
        self.inner = names
        self.made: dict[str, str] = {}

    def fresh(self, hint: str) -> str:
        """A fresh name, noted with its hint."""
        name = self.inner.fresh(hint)
        self.made[name] = hint
        return name


@dataclass
class Pattern:
    """One recorded conversion: the reads its key holds, and the replacement to stamp (None: the node stays)."""

    node: onnx.NodeProto
    reads: list[_Read]
    nodes: list[onnx.NodeProto] | None
    constants: list[onnx.TensorProto] = field(default_factory=list)
    crossings: list[Crossing] = field(default_factory=list)
    first_version: int | None = None
    #: The names the conversion made, in order of first use, with their hints.
    made: list[tuple[str, str]] = field(default_factory=list)

    def matches(self, node: onnx.NodeProto, scope: Scope, shapes: ShapeIndex, constants: ConstantIndex,
                used: Callable[[str], bool]) -> bool:
        """Whether every read gives ``node``'s own values the answer it gave the first node's."""
        roles = _roles(node)
        for r in self.reads:
            name = _name_of(node, r.role)
            kind = r.kind
            if kind == "lookup":
                assert r.enough is not None
                result: object = shapes.lookup(scope, name, r.enough)
            elif kind == "refined":
                assert r.enough is not None
                result = shapes.refined(scope, name, constants.value, r.enough)
            elif kind == "symbols":
                result = shapes.symbols(scope, name)
            elif kind == "type_str":
                result = shapes.type_str(scope, name)
            elif kind == "value":
                result = constants.value(scope, name)
            elif kind == "shape_entries":
                result = constants.shape_entries(scope, name)
            elif kind == "is_literal":
                result = constants.is_literal(scope, name)
            else:
                result = used(name)
            try:
                if _answer(kind, result, roles) != r.answer:
                    return False
            except _UnknownError:
                return False
        return True

    def stamp(self, node: onnx.NodeProto, names: NameGenerator
              ) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]] | None:
        """The recorded replacement with ``node``'s names, and fresh ones for the names the first made."""
        if self.nodes is None:
            return None
        old = self.node
        values = {o: n for o, n in zip(old.input, node.input, strict=True) if o}
        values.update((o, n) for o, n in zip(old.output, node.output, strict=True) if o)
        made = {}
        swaps = [(b, a) for b, a in ((old.output[0] if old.output else "", node.output[0] if node.output else ""),
                                     (old.name, node.name)) if b]
        for name, hint in self.made:
            for before, after in swaps:
                if hint.startswith(before):
                    hint = after + hint[len(before):]
                    break
            made[name] = names.fresh(hint)
        renamer = _Renamer(values, {old.name: node.name} if old.name else {}, made)
        nodes = []
        for n in self.nodes:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            renamer.node(copy)
            nodes.append(copy)
        constants = []
        for t in self.constants:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(t)
            tensor.name = renamer.value(tensor.name)
            constants.append(tensor)
        return nodes, constants


class _Renamer:
    """Renames value, node and graph names in nodes, recursively; :attr:`stray` collects names it cannot place."""

    def __init__(self, values: dict[str, str], node_names: dict[str, str], made: dict[str, str]) -> None:
        self._values = values
        self._node_names = node_names
        self._made = made
        self.stray: set[str] = set()

    def value(self, name: str) -> str:
        if not name:
            return name
        found = self._values.get(name)
        if found is None:
            found = self._made.get(name)
        if found is None:
            self.stray.add(name)
            return name
        return found

    def node(self, node: onnx.NodeProto) -> None:
        node.input[:] = [self.value(n) for n in node.input]
        node.output[:] = [self.value(n) for n in node.output]
        if node.name:
            found = self._node_names.get(node.name)
            if found is None:
                found = self._made.get(node.name)
            if found is None:
                self.stray.add(node.name)
            else:
                node.name = found
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                self.graph(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    self.graph(g)
            elif a.type == onnx.AttributeProto.TENSOR:
                a.t.name = self._values.get(a.t.name) or self._made.get(a.t.name) or a.t.name
            elif a.type in _UNCACHEABLE_ATTRS:
                self.stray.add(f"<{a.name}>")

    def graph(self, graph: onnx.GraphProto) -> None:
        graph.name = self._made.get(graph.name, graph.name)
        for vi in (*graph.input, *graph.output, *graph.value_info):
            vi.name = self.value(vi.name)
        for t in graph.initializer:
            t.name = self.value(t.name)
        if graph.sparse_initializer:
            self.stray.add("<sparse initializer>")
        for n in graph.node:
            self.node(n)


def record(node: onnx.NodeProto, recorder: Recorder, names: NamesMade, nodes: list[onnx.NodeProto] | None,
           constants: list[onnx.TensorProto], crossings: Iterable[Crossing], first_version: int | None
           ) -> Pattern | None:
    """The pattern of a conversion just made (None when its key cannot hold it: see the module docstring)."""
    if not recorder.ok:
        return None
    crossings = list(crossings)
    own = [n for n in (*node.input, *node.output, node.name) if n]
    if any(name in c.why for c in crossings if c.why for name in own):
        return None  # a reason that names the node's values (the report says it of each node)
    kept = onnx.NodeProto()
    kept.CopyFrom(node)
    pattern = Pattern(kept, recorder.reads, None, crossings=crossings, first_version=first_version)
    if nodes is None:
        return pattern
    # Every name in the replacement must be the node's own or one the conversion made.
    order: dict[str, str] = {}
    probe = _Renamer({n: n for n in (*node.input, *node.output) if n}, {node.name: node.name} if node.name else {},
                     _Ordered(names.made, order))
    for n in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        probe.node(copy)
    for t in constants:
        probe.value(t.name)
    if probe.stray:
        return None
    pattern.nodes = [_copy(n) for n in nodes]
    pattern.constants = [_copy_tensor(t) for t in constants]
    pattern.made = list(order.items())
    return pattern


class _Ordered(dict[str, str]):
    """The names made, looked up; records each one used (with its hint) in order of first use."""

    def __init__(self, made: dict[str, str], order: dict[str, str]) -> None:
        super().__init__()
        self._source = made
        self._order = order

    def get(self, key: str, default: Any = None) -> Any:
        hint = self._source.get(key)
        if hint is None:
            return default
        self._order.setdefault(key, hint)
        return key


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    out = onnx.NodeProto()
    out.CopyFrom(node)
    return out


def _copy_tensor(tensor: onnx.TensorProto) -> onnx.TensorProto:
    out = onnx.TensorProto()
    out.CopyFrom(tensor)
    return out


def canonical(node: onnx.NodeProto, nodes: list[onnx.NodeProto] | None, constants: list[onnx.TensorProto]
              ) -> bytes | None:
    """A replacement with every name that is not ``node``'s own replaced by its order of first use (for tests)."""
    if nodes is None:
        return None
    order: dict[str, str] = {}

    class _All(dict[str, str]):
        def get(self, key: str, default: Any = None) -> Any:
            return order.setdefault(key, f"${len(order)}")

    values = {n: f"$in{k}" for k, n in enumerate(node.input) if n}
    values.update({n: f"$out{k}" for k, n in enumerate(node.output) if n})
    renamer = _Renamer(values, {node.name: "$name"} if node.name else {}, _All())
    graph = onnx.GraphProto()
    for n in nodes:
        copy = graph.node.add()
        copy.CopyFrom(n)
        renamer.node(copy)
    for t in constants:
        copy_t = graph.initializer.add()
        copy_t.CopyFrom(t)
        copy_t.name = renamer.value(copy_t.name)
    return bytes(graph.SerializeToString(deterministic=True))
