"""Where nodes live: the main graph, subgraphs (If/Loop/Scan bodies, nested) and local functions.

A :class:`Scope` knows its enclosing scope and how to reach its graph from the root of its tree
(the main graph, or a model-local function's body): the same path finds the matching graph in
a shape-inferred copy of the model, so that a value's facts come from the scope that defines it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import onnx

from lowerer.core.opsets import default_opset

__all__ = [
    "MAIN_GRAPH",
    "Locator",
    "Scope",
    "find_graph",
    "function_key",
    "has_subgraphs",
    "iter_scopes",
    "model_graphs",
    "node_graphs",
    "subgraphs_of",
    "used_names",
    "used_names_of",
    "walk_graphs",
    "walk_nodes",
]

#: The path of the main graph's scope (:attr:`Scope.path`).
MAIN_GRAPH = "graph"

_GRAPH = onnx.AttributeProto.GRAPH
_GRAPHS = onnx.AttributeProto.GRAPHS

#: How to reach a subgraph from its root: (node index, attribute name, graph index) per level.
Locator = tuple[tuple[int, str, int], ...]


@dataclass
class Scope:
    """A list of nodes that lowerer rewrites in place.

    Attributes:
        path: a readable location, e.g. ``graph``, ``graph/loop_1.body``, ``function:pkg.F``.
        holder: the GraphProto or FunctionProto that owns ``holder.node``.
        opset: the default-domain opset in force for these nodes (before conversion).
        function: the enclosing model-local function, if any (values there have no global types).
        parent: the enclosing scope (None for the main graph and function bodies).
        locator: the way from the root of this scope's tree to ``holder`` (empty at a root).
    """

    path: str
    holder: onnx.GraphProto | onnx.FunctionProto
    opset: int | None
    function: onnx.FunctionProto | None = None
    parent: Scope | None = None
    locator: Locator = ()

    @property
    def graph(self) -> onnx.GraphProto | None:
        """The graph, when the scope is one (functions have no initializers)."""
        return self.holder if isinstance(self.holder, onnx.GraphProto) else None

    def child(self, index: int, node: onnx.NodeProto, attr_name: str, position: int,
              graph: onnx.GraphProto) -> Scope:
        """The scope of ``graph``, held by attribute ``attr_name`` of ``node`` (at ``index`` in this scope)."""
        label = node.name or node.op_type
        shown = attr_name if position < 0 else f"{attr_name}[{position}]"
        return Scope(f"{self.path}/{label}.{shown}", graph, self.opset, self.function, self,
                     (*self.locator, (index, attr_name, max(position, 0))))

    def children(self, index: int, node: onnx.NodeProto) -> Iterator[Scope]:
        """The scopes of ``node``'s subgraphs (``node`` at ``index`` in this scope)."""
        if node.attribute:
            for attr_name, position, graph in subgraphs_of(node):
                yield self.child(index, node, attr_name, position, graph)

    def scopes(self) -> Iterator[Scope]:
        """This scope and every subgraph scope below it, at any depth."""
        yield self
        for index, node in enumerate(self.holder.node):
            for child in self.children(index, node):
                yield from child.scopes()

    def walk(self) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
        """Every node of this scope and of the subgraphs below it, at any depth, with its scope and index."""
        for index, node in enumerate(self.holder.node):
            yield self, index, node
            for child in self.children(index, node):
                yield from child.walk()


def function_key(function: onnx.FunctionProto) -> str:
    """How a model-local function is named in messages and reports."""
    overload = f":{function.overload}" if function.overload else ""
    return f"{function.domain}.{function.name}{overload}"


def subgraphs_of(node: onnx.NodeProto) -> Iterator[tuple[str, int, onnx.GraphProto]]:
    """The (attribute name, position, graph) triples of a node's graph-valued attributes.

    ``position`` is -1 for a GRAPH attribute and the index within a GRAPHS attribute.
    """
    for attr in node.attribute:
        if attr.type == _GRAPH:
            yield attr.name, -1, attr.g
        elif attr.type == _GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield attr.name, i, g


def node_graphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    """Each subgraph ``node`` holds (its GRAPH and GRAPHS attributes), in attribute order; not nested ones."""
    for attr in node.attribute:
        kind = attr.type
        if kind == _GRAPH:
            yield attr.g
        elif kind == _GRAPHS:
            yield from attr.graphs


def has_subgraphs(node: onnx.NodeProto) -> bool:
    """Whether ``node`` holds a graph (a GRAPH or GRAPHS attribute)."""
    return bool(node.attribute) and any(a.type == _GRAPH or a.type == _GRAPHS for a in node.attribute)


def walk_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph``, then every graph nested in its nodes at any depth, depth first in document order.

    Iterative (no recursion limit on deeply nested models); the only cost per node is one look
    at the types of its attributes. A graph is yielded before its nodes are searched, so the
    caller may read it while the walk goes on (it must not add or remove subgraphs meanwhile).
    """
    stack = [graph]
    while stack:
        current = stack.pop()
        yield current
        found: list[onnx.GraphProto] = []
        for node in current.node:
            attributes = node.attribute
            if not attributes:  # most nodes: skipped without starting a loop
                continue
            for attr in attributes:
                kind = attr.type
                if kind == _GRAPH:
                    found.append(attr.g)
                elif kind == _GRAPHS:
                    found.extend(attr.graphs)
        if found:
            found.reverse()
            stack.extend(found)


def model_graphs(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """Every graph of ``model``: the main graph and its nested graphs, then those nested in local functions."""
    yield from walk_graphs(model.graph)
    for function in model.functions:
        for node in function.node:
            for sub in node_graphs(node):
                yield from walk_graphs(sub)


def walk_nodes(model: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``model``: those of each graph of :func:`model_graphs`, then each local function's own."""
    for graph in model_graphs(model):
        yield from graph.node
    for function in model.functions:
        yield from function.node


def find_graph(root: onnx.GraphProto, locator: Locator) -> onnx.GraphProto | None:
    """The graph at ``locator`` below ``root`` (None when the structure does not match)."""
    graph = root
    for index, attr_name, position in locator:
        if index >= len(graph.node):
            return None
        found = None
        for attr in graph.node[index].attribute:
            if attr.name != attr_name:
                continue
            if attr.type == _GRAPH:
                found = attr.g
            elif attr.type == _GRAPHS and position < len(attr.graphs):
                found = attr.graphs[position]
        if found is None:
            return None
        graph = found
    return graph


def iter_scopes(model: onnx.ModelProto) -> Iterator[Scope]:
    """The main graph's scope, then each model-local function's (subgraphs are found while walking)."""
    yield Scope(MAIN_GRAPH, model.graph, default_opset(model.opset_import))
    for function in model.functions:
        opset = default_opset(function.opset_import)
        if opset is None:
            opset = default_opset(model.opset_import)
        yield Scope(f"function:{function_key(function)}", function, opset, function)


def used_names(model: onnx.ModelProto) -> set[str]:
    """Every name any node anywhere reads, and every graph and function output."""
    used = used_names_of(model.graph.node)
    used.update(o.name for o in model.graph.output)
    for f in model.functions:
        used.update(f.output)
        used |= used_names_of(f.node)
    used.discard("")
    return used


def used_names_of(nodes: Iterable[onnx.NodeProto]) -> set[str]:
    """Every name ``nodes`` read, their subgraphs' nodes and outputs included."""
    used: set[str] = set()
    read = used.update
    for n in nodes:
        read(n.input)
        if n.attribute:
            for g in node_graphs(n):
                read(o.name for o in g.output)
                used |= used_names_of(g.node)
    return used
