"""Version-step adapters for control flow: If below 11, Scan's negative axes (11).

If and Loop changed nothing a valid model can observe at 11 (their bodies are converted as scopes
of their own by the pipeline before the node crosses its steps; Loop-1's need of one loop-carried
value is checked as the schema's input count).

* ``If`` 11 → 1: If-1 documents equal branch shapes, and onnx's shape inference for If-1 merges
  the branches' output shapes (a model whose branches yield different ones fails onnx's checker):
  relabelled when every output has the same shape in both branches, else refused. A shape is what
  the branch states, merged with what onnx infers for the branch on its own, its outer values typed
  (and small constant ones valued) from the If's scope; dims are equal when both are the same
  static size, or both the same named dim of the model (a name its outer values' shapes or the
  branches' stated outputs carry: equal at run time, as the model names them; names inference makes
  up for unknown dims count as unknown).

* ``Scan`` 11 → 9: negative ``scan_input_axes`` / ``scan_output_axes`` count from the back of each
  scan input / scan output (ranks differ per tensor): made non-negative with each tensor's rank.
"""

from __future__ import annotations

import logging

import onnx
import onnx.shape_inference
from onnx import numpy_helper

from lowerer.scopes import node_graphs
from lowerer.steps import generic
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import attribute_value, set_attribute
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["branch_output_shapes", "if_11_1", "scan_11_9"]

logger = logging.getLogger(__name__)

#: Outer constants up to this many elements are given to the branch inference as values (shapes, axes).
_VALUED_MAX = 1 << 12

#: A dim: a static size, a name the model gives it, or None (unknown).
Dim = int | str | None


def _dims(tp: onnx.TypeProto) -> list[Dim] | None:
    """The dims a type states (named ones by name), or None without a tensor shape."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]


def _shape_text(dims: list[Dim] | None) -> str:
    """A shape for a message: ``[2, batch, ?]`` (``?``: unknown), or ``no shape``."""
    return "no shape" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _free_names(graph: onnx.GraphProto) -> list[str]:
    """The names ``graph`` (its subgraphs included) reads from outer scopes, in order of first use."""
    defined: set[str] = set()
    used: list[str] = []

    def walk(g: onnx.GraphProto) -> None:
        defined.update(i.name for i in g.input)
        defined.update(t.name for t in g.initializer)
        defined.update(t.values.name for t in g.sparse_initializer)
        for n in g.node:
            used.extend(i for i in n.input if i)
            for sub in node_graphs(n):
                walk(sub)
            defined.update(o for o in n.output if o)
        used.extend(o.name for o in g.output)

    walk(graph)
    return [u for u in dict.fromkeys(used) if u not in defined]


def branch_output_shapes(em: Emitter, graph: onnx.GraphProto, opset: int) -> tuple[list[list[Dim] | None], set[str]]:
    """The shapes of ``graph``'s outputs: stated, merged with onnx's inference of the graph on its own.

    The graph's outer values are its inputs there, typed as the If's scope knows them (named dims by
    name), small constant ones given as initializers (their values feed data propagation). Returns the
    shapes (None: no rank known) and the dim names that mean the model's dims (the outer values' and
    the stated outputs'): only those say two dims are equal.
    """
    names: set[str] = set()
    inputs: list[onnx.ValueInfoProto] = []
    initializers: list[onnx.TensorProto] = []
    for name in _free_names(graph):
        vt = em.facts.type_of(name)
        value = em.constant(name)
        if value is not None and value.dtype != object and value.size <= _VALUED_MAX:
            try:
                initializers.append(numpy_helper.from_array(value, name))
                continue
            except (TypeError, ValueError):
                pass
        if vt is None or vt[0] == 0:
            inputs.append(onnx.ValueInfoProto(name=name))
            continue
        symbols = em.facts.symbols(name) if vt[1] is not None else None
        dims = vt[1] if symbols is None or vt[1] is None or len(symbols) != len(vt[1]) else symbols
        names.update(d for d in dims or () if isinstance(d, str))
        inputs.append(onnx.helper.make_tensor_value_info(name, vt[0], dims))
    stated = [_dims(o.type) for o in graph.output]
    names.update(d for dims in stated for d in dims or () if isinstance(d, str))
    body = onnx.GraphProto()
    body.CopyFrom(graph)
    del body.input[:]
    body.input.extend(inputs)
    body.initializer.extend(initializers)
    shapes: list[list[Dim] | None] = list(stated)
    try:
        model = onnx.helper.make_model(body, opset_imports=[onnx.helper.make_opsetid("", opset)])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
        shapes = [_dims(o.type) for o in inferred.graph.output]
    except Exception as e:  # inference is best effort: what the branch states stands
        logger.debug("inference of branch %s failed: %s", graph.name, e)
    return [s if s is not None else t for s, t in zip(shapes, stated, strict=True)], names


def _same(a: list[Dim] | None, b: list[Dim] | None, names: set[str]) -> bool:
    """Whether two shapes are known equal: the same rank, each dim the same size or the same model name."""
    return a is not None and b is not None and len(a) == len(b) and all(
        x == y and (isinstance(x, int) or x in names) for x, y in zip(a, b, strict=True))


@adapter("If", 11, DOWN)
def if_11_1(em: Emitter, step: Step, direction: str) -> None:
    """Relabel when every output has the same shape in both branches (stated or inferred), else refuse."""
    branches = {a.name: a.g for a in em.node.attribute if a.type == onnx.AttributeProto.GRAPH}
    then_b, else_b = branches.get("then_branch"), branches.get("else_branch")
    if then_b is None or else_b is None or len(then_b.output) != len(else_b.output):
        em.refuse("the node lacks a branch, or its branches yield different numbers of outputs")
    stated = [(_dims(a.type), _dims(b.type)) for a, b in zip(then_b.output, else_b.output, strict=True)]
    if all(da is not None and da == db and all(isinstance(d, int) for d in da) for da, db in stated):
        generic.cross(em, step, direction)
        return
    then_shapes, then_names = branch_output_shapes(em, then_b, em.target)
    else_shapes, else_names = branch_output_shapes(em, else_b, em.target)
    names = then_names | else_names
    for a, b, da, db in zip(then_b.output, else_b.output, then_shapes, else_shapes, strict=True):
        if not _same(da, db, names):
            em.refuse(f"If-1 needs both branches to yield the same shape (onnx's inference merges them), and "
                      f"output {a.name!r} / {b.name!r} is neither stated nor inferred to (then: {_shape_text(da)}, "
                      f"else: {_shape_text(db)}); the lowest opset for this node is 11")
    generic.cross(em, step, direction)


@adapter("Scan", 11, DOWN)
def scan_11_9(em: Emitter, step: Step, direction: str) -> None:
    """Negative scan axes made non-negative with the rank of each scan input and output."""
    node = generic.copy_of(em.node)
    scan_inputs = int(attribute_value(node, "num_scan_inputs") or 0)  # type: ignore[call-overload]
    states = len(node.input) - scan_inputs
    scanned = (("scan_input_axes", list(node.input)[states:]), ("scan_output_axes", list(node.output)[states:]))
    for attr, names in scanned:
        axes = attribute_value(node, attr)
        if not isinstance(axes, list) or all(a >= 0 for a in axes):
            continue
        fixed = []
        for k, a in enumerate(axes):
            if a >= 0:
                fixed.append(a)
                continue
            rank = em.rank(names[k]) if k < len(names) else None
            if rank is None:
                em.refuse(f"{attr}[{k}]={a} counts from the back of {names[k] if k < len(names) else '?'!r}, whose "
                          "rank is unknown; Scan-9 needs non-negative axes (add shape information)")
            fixed.append(a + rank)
        set_attribute(node, attr, fixed)
    generic.cross(em, step, direction, node, handled=(Semantics,))


adapter("Scan", 11, UP)(generic.meaning_kept)  # Scan-11 only accepts more (negative axes)
