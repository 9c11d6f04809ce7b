"""Function bodies specialized at their call site: what the call fixes is folded before the body goes down.

onnx writes an op's function body for every call: it computes reduction axes from the input's rank
(``Range(axis + Size(Shape(X)), Size(Shape(X)))``), shapes from ``Shape(X)``, and guards with ``If``.
Older opsets need many of those values as attributes (ReduceMean's ``axes`` before 18, Unsqueeze's
before 13), so an unspecialized body cannot go down. At a call site the input ranks, static dims,
attribute values and constant inputs are known; :func:`fold` evaluates what they fix:

* ``Shape(X)`` of a value whose dims are all static is a constant; otherwise its length (the rank)
  and its static entries are known, so ``Size`` of it, ``Gather`` / ``Slice`` of its static entries
  and ``Concat`` of such pieces fold;
* a node whose inputs are all constants folds when its op is in :data:`FOLDED` (integer and boolean
  arithmetic, comparisons, data movement, casts, Neg/Abs/Sign/Max/Min) and the result is small:
  only exact operations are evaluated, never rounding float arithmetic, so the body computes bit
  for bit what it computed before;
* an ``If`` whose condition folded is replaced by the branch it takes (the other is dead code);
* a ``CastLike`` whose second input's element type is known becomes a ``Cast`` to it, and a
  ``Cast`` to its input's own type goes.

:func:`flatten_free_layer_norm` specializes LayerNormalization's body further: with the input's rank
known it reduces over the normalized axes in place instead of flattening the input to 2-D and
reshaping back, which removes the body's ``Reshape`` to a run-time shape (below Reshape-14 that
needs an empty-input guard, an ``If``). It computes the same sums over the same elements, and an
expansion is judged by the expansion's ulp budget anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lowerer.core.opsets import since_version
from lowerer.facts import reference
from lowerer.facts.body_shapes import body_input_types
from lowerer.facts.value_types import value_type
from lowerer.model_io.node_attributes import int_attribute
from lowerer.model_io.scopes import has_subgraphs, node_graphs
from lowerer.steps.emitter import Emitter

__all__ = ["FOLDED", "MadeRewrite", "flatten_free_layer_norm", "fold", "live", "reads_of"]

logger = logging.getLogger(__name__)

#: Rewrites ``node``, made by a function body valid at ``opset``, whose op the target lacks, as a node
#: the target has (returned, not emitted), its graph attribute ``body`` read at ``opset``:
#: ``rewrite(em, node, body, opset)``. :func:`lowerer.rules.scan.loop_from_scan` is Scan's.
MadeRewrite = Callable[[Emitter, onnx.NodeProto, onnx.GraphProto, int], onnx.NodeProto]

#: Ops evaluated when all their inputs are constants (exact whatever the element type: data movement,
#: casts, comparisons; arithmetic only on integers, see :data:`_INTEGER_ONLY`).
FOLDED = frozenset({
    "Constant", "Identity", "Cast", "CastLike", "Shape", "Size", "Gather", "Slice", "Concat", "Unsqueeze",
    "Squeeze", "Reshape", "Flatten", "Expand", "ConstantOfShape", "Range", "Where", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Xor", "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Max",
    "Min", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Mod", "Sign", "Transpose",
})
#: Of :data:`FOLDED`, the ops folded only when every input and output is an integer or boolean tensor (the
#: others are exact on floats too: data movement, casts, comparisons, Neg, Abs, Sign, Max, Min).
_INTEGER_ONLY = frozenset({"Add", "Sub", "Mul", "Div", "ReduceProd", "ReduceSum", "Mod", "Range"})
#: The largest constant a fold makes (elements).
_MAX_ELEMENTS = 4096
#: The largest integer constant input of the call a fold reads (weights stay inputs: never copied).
_MAX_OUTER_ELEMENTS = 64


@dataclass
class _State:
    """What the fold knows: constant values and partly known shape vectors, by value name."""

    em: Emitter
    opset: int
    values: dict[str, np.ndarray] = field(default_factory=dict)
    #: 1-D int64 values whose length is known and some entries are (None: not static).
    partial: dict[str, list[int | None]] = field(default_factory=dict)

    def value(self, name: str) -> np.ndarray | None:
        if not name:
            return None
        if name in self.values:
            return self.values[name]
        value = self.em.constant(name)
        # A constant the call passes in is read only when it is a small integer tensor (axes, shapes, indices):
        # a weight is never folded into a copy of itself.
        small = value is not None and value.dtype.kind in "biu" and value.size <= _MAX_OUTER_ELEMENTS
        return value if small else None

    def entries(self, name: str) -> list[int | None] | None:
        if name in self.partial:
            return self.partial[name]
        v = self.value(name)
        if v is not None and v.ndim == 1 and v.dtype.kind in "iu":
            return [int(x) for x in v]
        return None


def _shape_entries(state: _State, node: onnx.NodeProto) -> list[int | None] | None:
    dims = state.em.facts.symbols(node.input[0]) if node.input[0] else None
    if dims is None:
        return None
    entries: list[int | None] = [d if isinstance(d, int) else None for d in dims]
    start = int_attribute(node, "start", 0)
    end = int_attribute(node, "end", None)
    return entries[slice(start, end)]


def _partial(state: _State, node: onnx.NodeProto) -> list[int | None] | np.ndarray | None:
    """A shape-vector op on partly known vectors: its entries (or a constant), else None."""
    op = node.op_type
    if op == "Shape":
        return _shape_entries(state, node)
    if op == "Size" and node.input[0] in state.partial:
        return np.array(len(state.partial[node.input[0]]), dtype=np.int64)
    if op == "Concat" and all(state.entries(i) is not None for i in node.input):
        return [e for i in node.input for e in (state.entries(i) or [])]
    if op not in ("Gather", "Slice") or node.input[0] not in state.partial:
        return None
    vector = state.partial[node.input[0]]
    if op == "Gather":
        index = state.value(node.input[1])
        if index is None or index.ndim > 1 or not all(-len(vector) <= int(i) < len(vector) for i in index.reshape(-1)):
            return None
        picked = [vector[int(i)] for i in index.reshape(-1)]
        if None in picked:
            return None
        return np.array(picked if index.ndim == 1 else picked[0], dtype=np.int64)
    bounds = [state.value(i) if i else None for i in list(node.input[1:]) + [""] * (5 - len(node.input))]
    starts, ends, axes, steps = bounds[:4]
    if starts is None or ends is None or starts.size != 1 or (axes is not None and int(axes.reshape(-1)[0]) not in
                                                                (0, -1)):
        return None
    step = 1 if steps is None else int(steps.reshape(-1)[0])
    return vector[slice(int(starts.reshape(-1)[0]), int(ends.reshape(-1)[0]), step)]


def _is_exact(node: onnx.NodeProto, ins: list[np.ndarray | None]) -> bool:
    if node.op_type not in _INTEGER_ONLY:
        return True
    return all(v is None or v.dtype.kind in "biu" for v in ins)


def _evaluate(state: _State, node: onnx.NodeProto) -> list[np.ndarray] | None:
    """``node`` evaluated on constant inputs, or None when it is not folded."""
    if node.op_type not in FOLDED or node.domain not in ("", "ai.onnx") or has_subgraphs(node):
        return None
    ins = [state.value(i) if i else None for i in node.input]
    if any(v is None for v, name in zip(ins, node.input, strict=True) if name):
        return None
    if not _is_exact(node, ins):
        return None
    try:
        out = _run(node, ins, state.opset)
    except Exception as e:  # best effort: an unfolded node stays as it is
        logger.debug("folding %s failed: %s", node.op_type, e)
        return None
    if any(o.size > _MAX_ELEMENTS or o.dtype == object for o in out):
        return None
    if node.op_type in _INTEGER_ONLY and any(o.dtype.kind not in "biu" for o in out):
        return None
    return out


def _run(node: onnx.NodeProto, ins: list[np.ndarray | None], opset: int) -> list[np.ndarray]:
    values = {n: v for n, v in zip(node.input, ins, strict=True) if n and v is not None}
    outputs = [o for o in node.output if o]
    if reference.supports([node], opset) is None:
        return reference.evaluate([node], opset, values, outputs)
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(_single_node_model(node, values, opset))
    return [np.asarray(r) for r in evaluator.run(None, values)]


def _single_node_model(node: onnx.NodeProto, values: dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
              for n, v in values.items()]
    outputs = [helper.make_empty_tensor_value_info(o) for o in node.output if o]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _taken_branch(state: _State, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
    """The nodes of the branch an If with a folded condition takes, outputs renamed to the If's; else None."""
    if node.op_type != "If" or node.domain not in ("", "ai.onnx"):
        return None
    cond = state.value(node.input[0])
    if cond is None or cond.size != 1:
        return None
    name = "then_branch" if bool(cond.reshape(-1)[0]) else "else_branch"
    branch = next(a.g for a in node.attribute if a.name == name)
    inlined = [helper.make_node("Constant", [], [t.name], value=t) for t in branch.initializer]
    inlined.extend(branch.node)
    for inner, outer in zip(branch.output, node.output, strict=True):
        if outer:
            inlined.append(helper.make_node("Identity", [inner.name], [outer], name=f"{node.name}/{outer}"))
    return inlined


def fold(nodes: list[onnx.NodeProto], em: Emitter, opset: int, keep: set[str],
         made: Mapping[str, MadeRewrite] | None = None) -> list[onnx.NodeProto]:
    """``nodes`` (a body instantiated at ``opset``) with what the call site fixes folded into constants.

    Folded values that a remaining node reads, or that are in ``keep`` (the node's outputs), become
    constants of ``em`` (recorded in ``em.facts``); the nodes that computed them are dropped. Nodes
    that stay are recorded in ``em.facts`` as they are seen, so later ones see their inferred types.
    ``made``: by op, how a node of an op the target lacks is rewritten where the body makes it (the
    registry's :meth:`~lowerer.steps.registry.Registry.made_rewrites`, passed in by the engine: Scan
    as a Loop); a node of an op not in it goes on as it is.
    """
    state = _State(em, opset)
    pending = list(reversed(nodes))
    kept: list[onnx.NodeProto] = []
    while pending:
        node = pending.pop()
        _type_body_inputs(node, em, opset)  # the nodes before it are known by now
        node = _made_rewritten(node, em, opset, made or {})
        inlined = _taken_branch(state, node)
        if inlined is not None:
            pending.extend(reversed(inlined))
            continue
        if node.op_type == "CastLike" and node.domain in ("", "ai.onnx") and em.facts.elem_type(node.input[1]):
            # Only the second input's element type matters, and the call site knows it: a Cast.
            node = helper.make_node("Cast", [node.input[0]], [node.output[0]], name=node.name,
                                    to=em.facts.elem_type(node.input[1]),
                                    **{a.name: a.i for a in node.attribute if a.name == "saturate"})
        if node.op_type == "Cast" and node.domain in ("", "ai.onnx") and state.value(node.input[0]) is None \
                and em.facts.elem_type(node.input[0]) == int_attribute(node, "to", -1):
            node = helper.make_node("Identity", [node.input[0]], [node.output[0]], name=node.name)  # a no-op Cast
        partial = _partial(state, node)
        if isinstance(partial, list) and None in partial:
            state.partial[node.output[0]] = partial
            kept.append(node)
            em.facts.add_node(node, opset)
            continue
        out = [np.array(partial, dtype=np.int64)] if isinstance(partial, list) else \
            [partial] if partial is not None else _evaluate(state, node)
        if out is None:
            kept.append(node)
            em.facts.add_node(node, opset)
            continue
        for name, value in zip(node.output, out, strict=False):
            if name:
                state.values[name] = value
                # Known at once: the nodes after it see its type and value (a Reshape to it has a rank).
                em.facts.add_constant(name, value, helper.np_dtype_to_tensor_dtype(value.dtype))
    return _without_identities(_materialize(state, live(kept, keep), keep), keep)


def _made_rewritten(node: onnx.NodeProto, em: Emitter, opset: int, made: Mapping[str, MadeRewrite]
                    ) -> onnx.NodeProto:
    """``node`` rewritten by ``made``'s entry for its op when the target lacks the op, else ``node``.

    Made here, where the node's body is still at the body's opset: the engine takes the rewritten node's
    body down from there (a Scan reaching the engine has its body taken down first).
    """
    rewrite = made.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if rewrite is None or since_version(node.op_type, em.target) is not None \
            or since_version(node.op_type, opset) is None:
        return node
    body = next(a.g for a in node.attribute if a.name == "body")
    return rewrite(em, node, body, opset)


def _type_body_inputs(node: onnx.NodeProto, em: Emitter, opset: int) -> None:
    """Give a Scan or Loop body's inputs the types the call provably passes them (onnx's bodies state none).

    Element types: Scan's state inputs take the initial states' types, scan inputs their sequences'
    element types; Loop's iteration count is int64, its condition bool, carried values the initial
    values' types. Dims, where provable (:func:`lowerer.facts.body_shapes.body_input_types`): a scanned
    slice's are the sequence's without the scan axis; a state's or carried value's are the initial
    value's where the body returns them unchanged. The element type is written on the body input;
    the dims are facts of the conversion (a negative Unsqueeze axis inside then has a rank).
    """
    if node.op_type not in ("Scan", "Loop") or node.domain not in ("", "ai.onnx"):
        return
    body = next((a.g for a in node.attribute if a.name == "body"), None)
    if body is None:
        return
    facts = em.facts
    found = body_input_types(node, opset, facts.type_of, facts.symbols, facts.value)
    for formal in body.input:
        if formal.type.WhichOneof("value") not in (None, "tensor_type"):
            continue
        stated = value_type(formal.type) if formal.type.HasField("tensor_type") else None
        elem, dims = found.get(formal.name, (0, None))
        if stated is not None and stated[0] and elem and stated[0] != elem:
            continue  # the body states another type than the call passes: left to the checks that follow
        if stated is not None and stated[1] is not None:  # what the body states stands
            dims = list(stated[1]) if dims is None or len(dims) != len(stated[1]) else \
                [s if s is not None else d for s, d in zip(stated[1], dims, strict=True)]
        elem = elem or (stated[0] if stated is not None else 0)
        if not elem:
            continue
        formal.type.tensor_type.elem_type = elem
        facts.add_type(formal.name, (elem, None if dims is None else [d if isinstance(d, int) else None
                                                                      for d in dims]))


def _materialize(state: _State, kept: list[onnx.NodeProto], keep: set[str]) -> list[onnx.NodeProto]:
    """``kept`` preceded by a constant for each folded value something still reads."""
    read = {i for n in kept for i in reads_of(n)} | keep
    made: list[onnx.NodeProto] = []
    for name, value in state.values.items():
        if name not in read:
            continue
        tensor = numpy_helper.from_array(value, name)
        state.em.facts.add_constant(name, value, tensor.data_type)
        if state.em.scope.graph is not None and name not in keep:
            state.em.constants.append(tensor)
            continue
        constant = helper.make_node("Constant", [], [name], name=state.em.fresh(f"{name}/const"), value=tensor)
        made.append(constant)
    return made + kept


def _without_identities(nodes: list[onnx.NodeProto], keep: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` without their top-level Identities: readers read the source; an output renames its producer."""
    source: dict[str, str] = {}
    for n in nodes:
        if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and n.input[0] and n.input[0] not in keep \
                and n.output[0] not in keep:
            source[n.output[0]] = source.get(n.input[0], n.input[0])
    read_by = _read_counts(nodes)
    produced = {o for n in nodes for o in n.output if o}
    renamed: dict[str, str] = {}
    for n in nodes:
        root = source.get(n.input[0], n.input[0]) if n.input else ""
        if n.op_type == "Identity" and n.output[0] in keep and root in produced and root not in keep \
                and root not in renamed and read_by.get(root, 0) == 1:
            renamed[root] = n.output[0]
    out = []
    for n in nodes:
        if n.op_type == "Identity" and n.domain in ("", "ai.onnx") and \
                (n.output[0] in source or source.get(n.input[0], n.input[0]) in renamed):
            continue
        _substitute(n, {**source, **{k: renamed.get(v, v) for k, v in source.items()}, **renamed})
        out.append(n)
    return out


def _read_counts(nodes: list[onnx.NodeProto]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in nodes:
        for i in reads_of(n):
            counts[i] = counts.get(i, 0) + 1
    return counts


def _substitute(node: onnx.NodeProto, names: dict[str, str]) -> None:
    """Rename, in ``node`` (its subgraphs included), every read and write of a value in ``names``."""
    for i, name in enumerate(node.input):
        node.input[i] = names.get(name, name)
    for i, name in enumerate(node.output):
        node.output[i] = names.get(name, name)
    for g in node_graphs(node):
        for inner in g.node:
            _substitute(inner, names)


def reads_of(node: onnx.NodeProto) -> set[str]:
    """The values ``node`` reads, its subgraphs' reads of outer values included."""
    found = set(node.input)
    for g in node_graphs(node):
        for inner in g.node:
            found |= reads_of(inner)
    return found


def live(nodes: list[onnx.NodeProto], wanted: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` without those whose outputs nothing reads (the computation of unused optional outputs)."""
    needed = set(wanted)
    kept: list[onnx.NodeProto] = []
    for node in reversed(nodes):
        if any(o and o in needed for o in node.output):
            kept.append(node)
            needed |= reads_of(node)
    return kept[::-1]


def flatten_free_layer_norm(body: onnx.FunctionProto, em: Emitter) -> None:
    """LayerNormalization's body with the normalized axes reduced in place (no Flatten, no Reshape back).

    Applied when the input's rank is known and Scale and B are laid out like the normalized dims
    (their static dims equal X's trailing dims, or a single element); otherwise the body is left
    as it is. Works on onnx's body by its value names and leaves it untouched if they differ.
    """
    node = em.node
    names = {n.output[0]: n for n in body.node if n.output}
    wanted = ("X2D", "Scale2D", "Y", "Mean2D", "MeanOfSquare")
    rank = em.rank(node.input[0])
    if rank is None or not all(w in names for w in wanted) or names["X2D"].op_type != "Flatten" \
            or names["Y"].op_type != "Reshape":
        return
    axis = int_attribute(node, "axis", -1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or not _laid_out_like(em, list(node.input[1:3]), rank - axis):
        return
    axes = np.arange(axis, rank, dtype=np.int64)
    reductions = [names["Mean2D"], names["MeanOfSquare"]]
    if any(r.op_type != "ReduceMean" for r in reductions):
        return
    aliases = {"X2D": "X", "Scale2D": "Scale", "B2D": "B", "Y": "Biased", "Mean": "Mean2D",
               "InvStdDev": "InvStdDev2D"}
    rebuilt: list[onnx.NodeProto] = []
    for n in body.node:
        out = n.output[0] if n.output else ""
        if out == "Axes_1":
            n = helper.make_node("Constant", [], ["Axes_1"], value=numpy_helper.from_array(axes, "Axes_1"))
        elif out in aliases and n.op_type in ("Flatten", "Reshape"):
            n = helper.make_node("Identity", [aliases[out]], [out])
        elif n in reductions and any(a.name == "axes" for a in n.attribute):  # ReduceMean-17: axes attribute
            n = helper.make_node("ReduceMean", list(n.input), list(n.output), axes=[int(a) for a in axes])
        rebuilt.append(n)
    del body.node[:]
    body.node.extend(rebuilt)


def _laid_out_like(em: Emitter, params: list[str], trailing: int) -> bool:
    """Whether each of ``params`` broadcasts onto X's ``trailing`` dims as its flattened form does."""
    x_dims = em.dims(em.node.input[0])
    for name in params:
        if not name:
            continue
        dims = em.dims(name)
        if dims is None or None in dims:
            return False
        if all(d == 1 for d in dims) and len(dims) <= trailing:
            continue
        if x_dims is None or len(dims) > trailing or list(dims) != x_dims[len(x_dims) - len(dims):] \
                or len(dims) != trailing:
            return False
    return True
