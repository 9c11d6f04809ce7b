"""Fresh value and node names that never collide with a name anywhere in the model."""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from lowerer.model_io.scopes import model_graphs

__all__ = ["NameGenerator", "node_key", "node_label"]


class NameGenerator:
    """Makes names unused anywhere in the model (all graphs, subgraphs and functions).

    The model is scanned once, on the first request, so conversions that create no names
    pay nothing. Every generated name contains the marker ``__lw``; when the caller passes the
    model's serialization and the marker occurs nowhere in it, no name in the model can equal a
    generated one and the scan is skipped (names are stored verbatim in the serialization).
    """

    #: The marker every generated name contains.
    MARKER = "__lw"

    def __init__(self, model: onnx.ModelProto, serialized: bytes | None = None) -> None:
        self._model = model
        self._used: set[str] | None = None
        if serialized is not None and self.MARKER.encode() not in serialized:
            self._used = set()
        self._counter = 0

    def _scan(self) -> set[str]:
        used: set[str] = set()
        for g in model_graphs(self._model):
            used.update(v.name for v in g.input)
            used.update(v.name for v in g.output)
            used.update(v.name for v in g.value_info)
            used.update(t.name for t in g.initializer)
            used.update(s.values.name for s in g.sparse_initializer)
            _add_node_names(used, g.node)
        for f in self._model.functions:
            used.update(f.input)
            used.update(f.output)
            used.update(v.name for v in f.value_info)
            _add_node_names(used, f.node)
        return used

    def fresh(self, hint: str) -> str:
        """A new name based on ``hint``, reserved so that it is never handed out again."""
        if self._used is None:
            self._used = self._scan()
        base = (hint or "v").split("__lw")[0]
        while True:
            self._counter += 1
            name = f"{base}__lw{self._counter}"
            if name not in self._used:
                self._used.add(name)
                return name


def _add_node_names(used: set[str], nodes: Iterable[onnx.NodeProto]) -> None:
    """Add the names of ``nodes`` and of the values they read and write to ``used``."""
    add, update = used.add, used.update  # bound once: this runs for every node of the model
    for n in nodes:
        add(n.name)
        update(n.input)
        update(n.output)


def node_label(node: onnx.NodeProto) -> str:
    """How messages name a node: its name quoted, or ``<unnamed Op>`` when it has none."""
    return repr(node.name) if node.name else f"<unnamed {node.op_type}>"


def node_key(node: onnx.NodeProto, index: int) -> str:
    """How reports and findings key a node: its name, or ``Op#index`` (its place in its graph) when it has none."""
    return node.name or f"{node.op_type}#{index}"
