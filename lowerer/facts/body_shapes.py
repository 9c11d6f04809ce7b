"""The shapes of a subgraph's outputs, inferred with the facts of the scope around it.

onnx's inference of a whole model looks into If branches and Loop/Scan bodies, but without the values
of outer constants (a body's ``Unsqueeze(x, axes)`` with ``axes`` an outer initializer gets no rank)
and, for a node the conversion made, not at all. :func:`infer_outputs` infers one subgraph on its own:
its outer values (and its own inputs where they state no shape) become graph inputs typed as the
caller knows them, named dims by name, and small constant ones initializers with their values (data
propagation then folds shapes and axes). What the subgraph states stays and is merged with what is
inferred, as onnx merges them.

Named dims say two dims are equal only for names the model gave (its outer values' shapes, what the
subgraph states): the names inference makes up for unknown dims here are new and count as unknown.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping

import numpy as np
import onnx
import onnx.defs
import onnx.shape_inference
from onnx import numpy_helper

from lowerer.core.opsets import since_version
from lowerer.facts.value_types import ValueType
from lowerer.model_io.scopes import node_graphs

__all__ = ["Dim", "Typed", "body_input_types", "free_names", "infer_graph", "infer_outputs", "same_shape", "shape_text",
           "stated_dims"]

logger = logging.getLogger(__name__)

#: A dim: a static size, a name the model gives it, or None (unknown).
Dim = int | str | None

#: An element type (0: unknown) and dims (None: rank unknown).
Typed = tuple[int, "list[Dim] | None"]

#: Outer constants up to this many elements are given to the inference as values (shapes, axes).
VALUED_MAX = 1 << 12


def stated_dims(tp: onnx.TypeProto) -> list[Dim] | None:
    """The dims a type states (named ones by name), or None without a tensor shape."""
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tp.tensor_type.shape.dim]


def shape_text(dims: list[Dim] | None) -> str:
    """A shape for a message: ``[2, batch, ?]`` (``?``: unknown), or ``no shape``."""
    return "no shape" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def same_shape(a: list[Dim] | None, b: list[Dim] | None, names: set[str]) -> bool:
    """Whether two shapes are known equal: the same rank, each dim the same size or the same one of ``names``."""
    return a is not None and b is not None and len(a) == len(b) and all(
        x == y and (isinstance(x, int) or x in names) for x, y in zip(a, b, strict=True))


def free_names(graph: onnx.GraphProto) -> list[str]:
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


@functools.cache
def _schema_domains() -> frozenset[str]:
    """The domains onnx has schemas for (their versions matter to inference)."""
    return frozenset(s.domain for s in onnx.defs.get_all_schemas_with_history())


def _domains(graph: onnx.GraphProto) -> Iterator[str]:
    for n in graph.node:
        yield n.domain
        for sub in node_graphs(n):
            yield from _domains(sub)


def _value_info(name: str, vt: ValueType | None, symbols: list[int | str | None] | None,
                names: set[str]) -> onnx.ValueInfoProto:
    if vt is None or vt[0] == 0:
        return onnx.ValueInfoProto(name=name)
    dims: list[int | str | None] | None = None if vt[1] is None else list(vt[1])
    if dims is not None and symbols is not None and len(symbols) == len(dims):
        dims = [d if d is not None else s for d, s in zip(dims, symbols, strict=True)]
    names.update(d for d in dims or () if isinstance(d, str))
    return onnx.helper.make_tensor_value_info(name, vt[0], dims)


def infer_outputs(graph: onnx.GraphProto, opsets: Mapping[str, int],
                  type_of: Callable[[str], ValueType | None],
                  symbols_of: Callable[[str], list[int | str | None] | None],
                  value_of: Callable[[str], np.ndarray | None],
                  inputs: Mapping[str, Typed] | None = None) -> tuple[list[Typed], set[str]]:
    """Each of ``graph``'s outputs' element type (0: unknown) and shape (None: no rank), and the model's dim names.

    ``graph``'s nodes are valid at ``opsets`` (domain → version). ``type_of``, ``symbols_of`` and
    ``value_of`` give what is known of a name as seen from the graph: its outer values, and its own
    inputs where they state no shape. ``inputs`` gives some of the graph's inputs a type in place of
    what they state (a hypothesis about a body's inputs, see :func:`body_input_types`).
    """
    stated = [_typed(o.type) for o in graph.output]
    inferred, names = infer_graph(graph, opsets, type_of, symbols_of, value_of, inputs)
    names.update(d for _, dims in stated for d in dims or () if isinstance(d, str))
    if inferred is None:
        return stated, names
    found = [_typed(o.type) for o in inferred.output]
    return [(f[0] or s[0], f[1] if f[1] is not None else s[1]) for f, s in zip(found, stated, strict=True)], names


def infer_graph(graph: onnx.GraphProto, opsets: Mapping[str, int],
                type_of: Callable[[str], ValueType | None],
                symbols_of: Callable[[str], list[int | str | None] | None],
                value_of: Callable[[str], np.ndarray | None],
                inputs: Mapping[str, Typed] | None = None) -> tuple[onnx.GraphProto | None, set[str]]:
    """``graph`` inferred on its own (see :func:`infer_outputs`): a copy with value_info, or None; the dim names.

    The copy's inputs are ``graph``'s own followed by its outer values that are not valued (those are
    initializers); its value_info holds what onnx inferred for the values inside.
    """
    names: set[str] = set()
    body = onnx.GraphProto()
    body.CopyFrom(graph)
    given: list[onnx.ValueInfoProto] = []
    for formal in graph.input:
        if inputs is not None and formal.name in inputs:
            elem, dims = inputs[formal.name]
            names.update(d for d in dims or () if isinstance(d, str))
            given.append(onnx.helper.make_tensor_value_info(formal.name, elem, dims) if elem
                         else onnx.ValueInfoProto(name=formal.name))
        elif stated_dims(formal.type) is not None:
            names.update(d for d in stated_dims(formal.type) or () if isinstance(d, str))
            given.append(formal)
        else:
            given.append(_value_info(formal.name, type_of(formal.name), symbols_of(formal.name), names))
    initializers: list[onnx.TensorProto] = []
    for name in free_names(graph):
        value = value_of(name)
        if value is not None and value.dtype != object and value.size <= VALUED_MAX:
            try:
                initializers.append(numpy_helper.from_array(value, name))
                continue
            except (TypeError, ValueError):
                pass
        given.append(_value_info(name, type_of(name), symbols_of(name), names))
    del body.input[:]
    body.input.extend(given)
    body.initializer.extend(initializers)
    del body.value_info[:]  # what inference writes; a statement inside stays on the nodes' outputs it names
    body.value_info.extend(v for v in graph.value_info if v.type.WhichOneof("value"))
    versions = {"" if d == "ai.onnx" else d: v for d, v in opsets.items()}
    for domain in set(_domains(graph)):
        domain = "" if domain == "ai.onnx" else domain
        if domain not in versions:
            if domain in _schema_domains():  # a version is needed to read its nodes right: none known
                return None, names
            versions[domain] = 1  # no schemas: its nodes' outputs stay unknown
    imports = [onnx.helper.make_opsetid(domain, version) for domain, version in versions.items()]
    try:
        model = onnx.helper.make_model(body, opset_imports=imports)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:  # inference is best effort: what the graph states stands
        logger.debug("inference of subgraph %s failed: %s", graph.name, e)
        return None, names
    return inferred.graph, names


#: How many times :func:`body_input_types` re-infers a body while weakening its hypothesis.
_FIXED_POINT_ROUNDS = 4


def body_input_types(node: onnx.NodeProto, opset: int, type_of: Callable[[str], ValueType | None],
                     symbols_of: Callable[[str], list[int | str | None] | None],
                     value_of: Callable[[str], np.ndarray | None],
                     opsets: Mapping[str, int] | None = None) -> dict[str, Typed]:
    """The types a Scan's or Loop's body inputs provably have in every iteration, by name (``node`` valid at ``opset``).

    A scanned input's slice: the outer input's dims without the scan axis (Scan-8: without the batch
    and sequence axes), the same in every iteration. A state (Scan) or loop-carried value (Loop): the
    initial value's type is a hypothesis, kept only where the body, given it, provably returns it
    again (the same rank, each dim the same size or the same model-named dim); a dim it does not is
    made unknown and the body inferred again, until nothing changes (then, by induction, every
    iteration's input has the type). A Loop's iteration count is int64 and its condition bool (no
    shape stated). Inputs the node gives no type for are left out.
    """
    body = next((a.g for a in node.attribute if a.name == "body" and a.type == onnx.AttributeProto.GRAPH), None)
    if body is None or node.domain not in ("", "ai.onnx") or node.op_type not in ("Scan", "Loop"):
        return {}
    formals = [i.name for i in body.input]
    outer = functools.partial(_outer_typed, type_of=type_of, symbols_of=symbols_of)
    initial = _loop_initial(node, formals, outer) if node.op_type == "Loop" else \
        _scan_initial(node, formals, opset, outer)
    if initial is None:
        return {}
    out, carried = initial
    versions = dict(opsets) if opsets is not None else {"": opset}
    return _fixed_point(body, versions, type_of, symbols_of, value_of, out, carried)


def _outer_typed(name: str, type_of: Callable[[str], ValueType | None],
                 symbols_of: Callable[[str], list[int | str | None] | None]) -> Typed | None:
    """The type of outer value ``name`` with its unknown dims named where the model names them, or None."""
    vt = type_of(name) if name else None
    if vt is None or vt[0] == 0:
        return None
    dims: list[Dim] | None = None if vt[1] is None else list(vt[1])
    symbols = symbols_of(name)
    if dims is not None and symbols is not None and len(symbols) == len(dims):
        dims = [d if d is not None else s for d, s in zip(dims, symbols, strict=True)]
    return (vt[0], dims)


#: A body's input types by name, and the carried ones as (body input, body output index).
_Initial = tuple[dict[str, Typed], list[tuple[str, int]]]


def _loop_initial(node: onnx.NodeProto, formals: list[str], outer: Callable[[str], Typed | None]) -> _Initial:
    """A Loop body's input types before the fixed point: count and condition, carried values' initial types."""
    out: dict[str, Typed] = {}
    carried: list[tuple[str, int]] = []
    if len(formals) >= 2:
        out[formals[0]] = (onnx.TensorProto.INT64, None)
        out[formals[1]] = (onnx.TensorProto.BOOL, None)
    for k, formal in enumerate(formals[2:]):
        initial = outer(node.input[2 + k]) if 2 + k < len(node.input) else None
        if initial is not None:
            out[formal] = initial
            carried.append((formal, 1 + k))
    return out, carried


def _scan_initial(node: onnx.NodeProto, formals: list[str], opset: int, outer: Callable[[str], Typed | None]
                  ) -> _Initial | None:
    """A Scan body's input types before the fixed point (states' initial types, slices), None if malformed."""
    attrs = {a.name: a for a in node.attribute}
    n_scan = attrs["num_scan_inputs"].i if "num_scan_inputs" in attrs else 0
    old = since_version("Scan", opset) == 8
    actual = list(node.input)[1:] if old else list(node.input)
    n_state = len(actual) - n_scan
    if n_state < 0 or len(formals) != len(actual):
        return None
    axes = list(attrs["scan_input_axes"].ints) if "scan_input_axes" in attrs else [0] * n_scan
    out: dict[str, Typed] = {}
    carried: list[tuple[str, int]] = []
    for k, (formal, name) in enumerate(zip(formals, actual, strict=True)):
        initial = outer(name)
        if initial is None:
            continue
        elem, dims = initial
        if k < n_state:
            out[formal] = (elem, None if dims is None or (old and not dims) else dims[1:] if old else dims)
            carried.append((formal, k))
        else:
            out[formal] = (elem, _slice_dims(dims, old, axes[k - n_state] if k - n_state < len(axes) else 0))
    return out, carried


def _slice_dims(dims: list[Dim] | None, old: bool, axis: int) -> list[Dim] | None:
    """The dims of one slice of a scanned input of ``dims`` along ``axis`` (Scan-8, ``old``: batch and sequence)."""
    if dims is None:
        return None
    if old:
        return dims[2:] if len(dims) >= 2 else None
    axis = axis + len(dims) if axis < 0 else axis
    return dims[:axis] + dims[axis + 1:] if 0 <= axis < len(dims) else None


def _fixed_point(body: onnx.GraphProto, versions: Mapping[str, int], type_of: Callable[[str], ValueType | None],
                 symbols_of: Callable[[str], list[int | str | None] | None],
                 value_of: Callable[[str], np.ndarray | None], out: dict[str, Typed],
                 carried: list[tuple[str, int]]) -> dict[str, Typed]:
    """``out``, each carried input's hypothesis weakened until the body returns it (:func:`body_input_types`)."""
    carried = [(f, j) for f, j in carried if out[f][1] is not None]
    for _ in range(_FIXED_POINT_ROUNDS):
        if not carried:
            return out
        returned, names = infer_outputs(body, versions, type_of, symbols_of, value_of, out)
        changed = False
        for formal, j in carried:
            elem, dims = out[formal]
            got_elem, got = returned[j] if j < len(returned) else (0, None)
            assert dims is not None
            if got is None or len(got) != len(dims) or (got_elem and got_elem != elem):
                out[formal], changed = (elem, None), True
                continue
            kept = [d if d == g and (isinstance(d, int) or d in names) else None
                    for d, g in zip(dims, got, strict=True)]
            if kept != dims:
                out[formal], changed = (elem, kept), True
        carried = [(f, j) for f, j in carried if out[f][1] is not None]
        if not changed:
            return out
    for formal, _ in carried:  # no fixed point in time: nothing proven about these
        out[formal] = (out[formal][0], None)
    return out


def _typed(tp: onnx.TypeProto) -> Typed:
    elem = tp.tensor_type.elem_type if tp.WhichOneof("value") == "tensor_type" else 0
    return (elem, stated_dims(tp))
