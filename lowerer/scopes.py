"""Where nodes live: the main graph, subgraphs (If/Loop/Scan bodies, nested) and local functions."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import onnx

from lowerer.opsets import default_opset

__all__ = ["Scope", "function_key", "iter_scopes", "subgraphs_of"]


@dataclass
class Scope:
    """A list of nodes that lowerer rewrites in place.

    Attributes:
        path: a readable location, e.g. ``graph``, ``graph/loop_1.body``, ``function:pkg.F``.
        holder: the GraphProto or FunctionProto that owns ``holder.node``.
        opset: the default-domain opset in force for these nodes (before conversion).
        function: the enclosing model-local function, if any (values there have no global types).
    """

    path: str
    holder: onnx.GraphProto | onnx.FunctionProto
    opset: int | None
    function: onnx.FunctionProto | None = None

    @property
    def graph(self) -> onnx.GraphProto | None:
        """The graph, when the scope is one (functions have no initializers)."""
        return self.holder if isinstance(self.holder, onnx.GraphProto) else None


def function_key(function: onnx.FunctionProto) -> str:
    """How a model-local function is named in messages and reports."""
    overload = f":{function.overload}" if function.overload else ""
    return f"{function.domain}.{function.name}{overload}"


def subgraphs_of(node: onnx.NodeProto) -> Iterator[tuple[str, onnx.GraphProto]]:
    """The (attribute name, graph) pairs of a node's graph-valued attributes."""
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            yield attr.name, attr.g
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for i, g in enumerate(attr.graphs):
                yield f"{attr.name}[{i}]", g


def iter_scopes(model: onnx.ModelProto) -> Iterator[Scope]:
    """The main graph's scope, then each model-local function's (subgraphs are found while walking)."""
    yield Scope("graph", model.graph, default_opset(model.opset_import))
    for function in model.functions:
        opset = default_opset(function.opset_import)
        if opset is None:
            opset = default_opset(model.opset_import)
        yield Scope(f"function:{function_key(function)}", function, opset, function)
