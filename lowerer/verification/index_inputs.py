"""Index-like graph inputs: those whose values reach an index input, and the range the data allows them.

An integer (or float) graph input that reaches an index input of Gather, GatherElements, GatherND,
ScatterElements, ScatterND, OneHot or RotaryEmbedding (its ``position_ids``, rows of ``cos_cache``),
directly or through ops that only move values (Cast, Reshape, Unsqueeze ...), is generated in
``0 .. size - 1`` of the indexed dim (:func:`index_range`) where that size is static or bound by the
generated shapes (:func:`find_index_uses` finds the uses).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from lowerer.model_io.node_attributes import int_attribute
from lowerer.model_io.scopes import node_graphs
from lowerer.verification.graph_inputs import InputSpec

__all__ = ["IndexUse", "find_index_uses", "index_range"]


@dataclass(frozen=True)
class IndexUse:
    """One place an input's values are used as indices: the node, and the size they index (None: unknown).

    ``size_from`` names a graph input and axis when the size is that input's (dynamic) dim.
    """

    node: str
    size: int | None
    size_from: tuple[str, int] | None = None


#: Ops whose index input (position) holds indices into another input (data position, attribute of the axis).
_INDEX_OPS: dict[str, tuple[int, int | None, str | int | None]] = {
    "Gather": (1, 0, "axis"),
    "GatherElements": (1, 0, "axis"),
    "ScatterElements": (1, 0, "axis"),
    "Scatter": (1, 0, "axis"),
    "GatherND": (1, 0, None),
    "ScatterND": (1, 0, None),
    "OneHot": (0, None, None),  # indices into ``depth`` (input 1), out-of-range ones give zeros
    "RotaryEmbedding": (3, 1, 0),  # position_ids: rows of cos_cache (axis 0, fixed)
}
#: Ops that pass values through unchanged (only reshaped, moved or selected): input positions that carry them.
_PASS_THROUGH: dict[str, tuple[int, ...] | None] = {
    "Cast": (0,), "CastLike": (0,), "Identity": (0,), "Reshape": (0,), "Unsqueeze": (0,), "Squeeze": (0,),
    "Flatten": (0,), "Expand": (0,), "Transpose": (0,), "Slice": (0,), "Tile": (0,), "Split": (0,),
    "Concat": None, "Gather": (0,), "GatherElements": (0,), "GatherND": (0,), "Where": (1, 2),
}


class _Walker:
    """Follows graph inputs forward to the index inputs they reach."""

    def __init__(self, model: onnx.ModelProto, static: Mapping[str, Sequence[int | None]],
                 graph_inputs: Iterable[str]) -> None:
        self.static = static
        self.graph_inputs = set(graph_inputs)
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.constants: dict[str, np.ndarray] = {}
        for t in model.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL and len(t.dims) <= 1:
                with contextlib.suppress(Exception):
                    self.constants[t.name] = onnx.numpy_helper.to_array(t)

    @staticmethod
    def consumers(nodes: Iterable[onnx.NodeProto]) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
        found: dict[str, list[tuple[onnx.NodeProto, int]]] = {}

        def add(node_list: Iterable[onnx.NodeProto]) -> None:
            for node in node_list:
                for k, name in enumerate(node.input):
                    if name:
                        found.setdefault(name, []).append((node, k))
                for g in node_graphs(node):
                    add(g.node)  # bodies read outer values by name

        add(nodes)
        return found

    def uses(self, start: str, nodes: Sequence[onnx.NodeProto], in_function: bool = False,
             depth: int = 0) -> Iterator[IndexUse]:
        table = self.consumers(nodes)
        seen = {start}
        todo = [start]
        while todo:
            value = todo.pop()
            for node, k in table.get(value, []):
                default = node.domain in ("", "ai.onnx")
                spec = _INDEX_OPS.get(node.op_type) if default else None
                if spec is not None and spec[0] == k:
                    yield self._use(node, spec, in_function)
                function = None if default else self.functions.get((node.domain, node.op_type))
                if function is not None:
                    if depth < 8 and k < len(function.input):
                        yield from self.uses(function.input[k], list(function.node), True, depth + 1)
                    continue
                positions = _PASS_THROUGH.get(node.op_type, ())
                if default and (positions is None or k in positions):
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            todo.append(out)

    def _use(self, node: onnx.NodeProto, spec: tuple[int, int | None, str | int | None], in_function: bool) -> IndexUse:
        label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        _, data_pos, axis_attr = spec
        if node.op_type == "OneHot":
            depth = None if in_function or len(node.input) < 2 else self.constants.get(node.input[1])
            size = int(depth.reshape(-1)[0]) if depth is not None and depth.size else None
            return IndexUse(label, size)
        assert data_pos is not None
        data = node.input[data_pos]
        dims = None if in_function else self.static.get(data)
        if dims is None:
            return IndexUse(label, None)
        if axis_attr is None:  # GatherND / ScatterND: the smallest of the dims the indices may address
            batch = int_attribute(node, "batch_dims", 0)
            addressed = list(dims[batch:])
            if not addressed or any(d is None for d in addressed):
                return IndexUse(label, None)
            return IndexUse(label, min(int(d) for d in addressed if d is not None))
        axis = axis_attr if isinstance(axis_attr, int) else int_attribute(node, axis_attr, 0)
        assert axis is not None
        if axis < 0:
            axis += len(dims)
        if not 0 <= axis < len(dims):
            return IndexUse(label, None)
        size = dims[axis]
        if size is not None:
            return IndexUse(label, int(size))
        return IndexUse(label, None, (data, axis)) if data in self.graph_inputs else IndexUse(label, None)


def find_index_uses(model: onnx.ModelProto, specs: Sequence[InputSpec]) -> dict[str, list[IndexUse]]:
    """For each graph input that is used as indices (directly or through ops that only move values): where.

    Sizes come from initializers, stated and inferred value types (onnx's shape inference on
    the model without its external data), and graph inputs' own dims. Shape inference runs only
    where a use's size is not known without it (it gives no size a stated type already gives).
    """
    static: dict[str, Sequence[int | None]] = {}
    for t in model.graph.initializer:
        static[t.name] = [int(d) for d in t.dims]
    _add_types(static, model.graph.value_info)
    graph_inputs: dict[str, Sequence[int | None]] = {}
    for s in specs:
        graph_inputs[s.name] = [d if isinstance(d, int) else None for d in s.dims]
    found = _uses(model, specs, {**static, **graph_inputs}, graph_inputs)
    if any(u.size is None and u.size_from is None for uses in found.values() for u in uses):
        with contextlib.suppress(Exception):  # shape inference is a help here, never a requirement
            if model.ByteSize() < (1 << 30):
                _add_types(static, onnx.shape_inference.infer_shapes(model).graph.value_info)
                found = _uses(model, specs, {**static, **graph_inputs}, graph_inputs)
    return found


def _add_types(static: dict[str, Sequence[int | None]], typed: Iterable[onnx.ValueInfoProto]) -> None:
    """The dims of ``typed`` values not in ``static`` yet."""
    for vi in typed:
        if vi.name not in static and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            static[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]


def _uses(model: onnx.ModelProto, specs: Sequence[InputSpec], static: Mapping[str, Sequence[int | None]],
          graph_inputs: Mapping[str, Sequence[int | None]]) -> dict[str, list[IndexUse]]:
    walker = _Walker(model, static, graph_inputs)
    found: dict[str, list[IndexUse]] = {}
    for s in specs:
        if np.dtype(s.dtype).kind not in "iuf":
            continue
        uses = list(walker.uses(s.name, list(model.graph.node)))
        if uses:
            found[s.name] = uses
    return found


def index_range(uses: Sequence[IndexUse], shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, int, str]:
    """The inclusive range indices may take at every use, and a word on where it comes from."""
    sizes: list[int] = []
    for use in uses:
        if use.size is not None:
            sizes.append(use.size)
        elif use.size_from is not None and use.size_from[0] in shapes:
            name, axis = use.size_from
            sizes.append(shapes[name][axis])
    if not sizes:
        return 0, 0, f"indices for {uses[0].node} into a dim of unknown size: set to 0 (give --val-range)"
    size = min(sizes)
    return 0, max(size - 1, 0), f"indices for {uses[0].node}: 0..{max(size - 1, 0)}"
