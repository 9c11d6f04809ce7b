"""A rewrite in canonical form: value names made canonical, node names dropped, the key of identical checks.

Identical rewrites (same op, version, attributes, input types and shapes, same replacement
structure and constants) share one key and are checked once (:mod:`lowerer.verification.check`).
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.core.report import Rewrite
from lowerer.model_io.scopes import node_graphs

__all__ = ["Canon", "canon_of"]


class Canon:
    """A rewrite with value names made canonical (``in0``, ``out0``, ``t3``) and node names dropped.

    The key is computed without copying nodes; the canonical copies are made only on a cache miss.
    """

    def __init__(self, rewrite: Rewrite) -> None:
        assert rewrite.original is not None
        self._rewrite = rewrite
        names: dict[str, str] = {}
        self.inputs: list[tuple[str, str]] = []  # (canonical, original name): generated inputs
        #: Constant inputs of the original: (canonical, original name, value), fed as they are.
        self.fixed: list[tuple[str, str, np.ndarray]] = []
        #: Shape inputs computed from the other inputs' dims: (canonical, original name, recipe).
        self.derived: list[tuple[str, str, list[int | tuple[str, int]]]] = []
        self.outputs: list[tuple[str, str]] = []
        for i, n in enumerate(rewrite.original.input):
            if n and n not in names:
                names[n] = f"in{i}"
                value = rewrite.input_values.get(n)
                recipe = rewrite.derived_inputs.get(n)
                if value is not None:
                    self.fixed.append((names[n], n, np.asarray(value)))
                elif recipe is not None:
                    self.derived.append((names[n], n, recipe))
                else:
                    self.inputs.append((names[n], n))
        for i, n in enumerate(rewrite.original.output):
            if n:
                names.setdefault(n, f"out{i}")
                self.outputs.append((names[n], n))
        self._names = names
        types = []
        for _, orig_name in self.inputs:
            vt = rewrite.input_types.get(orig_name)
            types.append(None if vt is None else (int(vt[0]), None if vt[1] is None else tuple(vt[1])))
        parts: list[object] = [rewrite.from_opset, rewrite.from_version, rewrite.to_opset, tuple(types)]
        parts += [(c, str(v.dtype), v.shape, v.tobytes()) for c, _, v in self.fixed]
        parts += [(c, tuple(e if isinstance(e, int) else (names.get(e[0], e[0]), e[1]) for e in r))
                  for c, _, r in self.derived]
        parts += [self._node_key(n) for n in (rewrite.original, *rewrite.replacement)]
        parts += [self._tensor(t).SerializeToString(deterministic=True) for t in rewrite.constants]
        #: Hashable; equal for rewrites that are the same check.
        self.key: tuple[object, ...] = tuple(parts)

    @functools.cached_property
    def fixed_tensors(self) -> list[onnx.TensorProto]:
        """The constant inputs as initializers, canonical names."""
        return [numpy_helper.from_array(v, c) for c, _, v in self.fixed if v.dtype != object]

    def rename(self, n: str) -> str:
        """The canonical name of value ``n``."""
        if not n:
            return ""
        if n not in self._names:
            self._names[n] = f"t{len(self._names)}"
        return self._names[n]

    def _node_key(self, node: onnx.NodeProto) -> tuple[object, ...]:
        attrs: list[object] = []
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                attrs.append((a.name, self._graph_key(a.g)))
                continue
            if a.type == onnx.AttributeProto.GRAPHS:
                attrs.append((a.name, tuple(self._graph_key(g) for g in a.graphs)))
                continue
            if a.type == onnx.AttributeProto.TENSOR:
                c = onnx.AttributeProto()
                c.CopyFrom(a)
                c.t.name = ""
                a = c
            attrs.append(a.SerializeToString())
        return (node.op_type, node.domain, tuple(self.rename(n) for n in node.input),
                tuple(self.rename(n) for n in node.output), tuple(attrs))

    def _graph_key(self, g: onnx.GraphProto) -> tuple[object, ...]:
        """A subgraph's key: its values renamed like the outer ones (bodies read outer values by name)."""
        return (tuple((self.rename(v.name), v.type.SerializeToString()) for v in g.input),
                tuple(self._node_key(n) for n in g.node),
                tuple((self.rename(v.name), v.type.SerializeToString()) for v in g.output),
                tuple(self._tensor(t).SerializeToString() for t in g.initializer))

    def _rename_in_place(self, node: onnx.NodeProto) -> None:
        node.name = ""
        node.doc_string = ""
        for i, n in enumerate(node.input):
            node.input[i] = self.rename(n)
        for i, n in enumerate(node.output):
            node.output[i] = self.rename(n)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                a.t.name = ""
        for g in node_graphs(node):
            g.name = "body"
            for v in (*g.input, *g.output, *g.value_info):
                v.name = self.rename(v.name)
            for t in g.initializer:
                t.name = self.rename(t.name)
            for n in g.node:
                self._rename_in_place(n)

    def _tensor(self, t: onnx.TensorProto) -> onnx.TensorProto:
        c = onnx.TensorProto()
        c.CopyFrom(t)
        c.name = self.rename(t.name)
        return c

    def _node(self, node: onnx.NodeProto) -> onnx.NodeProto:
        c = onnx.NodeProto()
        c.CopyFrom(node)
        self._rename_in_place(c)
        return c

    @functools.cached_property
    def original(self) -> onnx.NodeProto:
        """The original node, canonical names."""
        assert self._rewrite.original is not None
        return self._node(self._rewrite.original)

    @functools.cached_property
    def replacement(self) -> list[onnx.NodeProto]:
        """The replacement nodes, canonical names."""
        return [self._node(n) for n in self._rewrite.replacement]

    @functools.cached_property
    def constants(self) -> list[onnx.TensorProto]:
        """The replacement's constants, canonical names."""
        return [self._tensor(t) for t in self._rewrite.constants]


def canon_of(rewrite: Rewrite) -> Canon:
    """The canonical form of ``rewrite``, made once per record (the strict checker and the verifier share it)."""
    made = rewrite.__dict__.get("_canon")
    if made is None:
        made = rewrite.__dict__["_canon"] = Canon(rewrite)
    return made
