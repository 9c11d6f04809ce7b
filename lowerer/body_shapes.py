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

from lowerer.scopes import node_graphs
from lowerer.shapes import ValueType

__all__ = ["Dim", "Typed", "free_names", "infer_outputs", "same_shape", "shape_text", "stated_dims"]

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
                  value_of: Callable[[str], np.ndarray | None]) -> tuple[list[Typed], set[str]]:
    """Each of ``graph``'s outputs' element type (0: unknown) and shape (None: no rank), and the model's dim names.

    ``graph``'s nodes are valid at ``opsets`` (domain → version). ``type_of``, ``symbols_of`` and
    ``value_of`` give what is known of a name as seen from the graph: its outer values, and its own
    inputs where they state no shape.
    """
    names: set[str] = set()
    body = onnx.GraphProto()
    body.CopyFrom(graph)
    inputs: list[onnx.ValueInfoProto] = []
    for given in graph.input:
        if stated_dims(given.type) is not None:
            names.update(d for d in stated_dims(given.type) or () if isinstance(d, str))
            inputs.append(given)
        else:
            inputs.append(_value_info(given.name, type_of(given.name), symbols_of(given.name), names))
    initializers: list[onnx.TensorProto] = []
    for name in free_names(graph):
        value = value_of(name)
        if value is not None and value.dtype != object and value.size <= VALUED_MAX:
            try:
                initializers.append(numpy_helper.from_array(value, name))
                continue
            except (TypeError, ValueError):
                pass
        inputs.append(_value_info(name, type_of(name), symbols_of(name), names))
    del body.input[:]
    body.input.extend(inputs)
    body.initializer.extend(initializers)
    stated = [_typed(o.type) for o in graph.output]
    names.update(d for _, dims in stated for d in dims or () if isinstance(d, str))
    versions = {"" if d == "ai.onnx" else d: v for d, v in opsets.items()}
    for domain in set(_domains(graph)):
        domain = "" if domain == "ai.onnx" else domain
        if domain not in versions:
            if domain in _schema_domains():  # a version is needed to read its nodes right: none known
                return stated, names
            versions[domain] = 1  # no schemas: its nodes' outputs stay unknown
    imports = [onnx.helper.make_opsetid(domain, version) for domain, version in versions.items()]
    try:
        model = onnx.helper.make_model(body, opset_imports=imports)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as e:  # inference is best effort: what the graph states stands
        logger.debug("inference of subgraph %s failed: %s", graph.name, e)
        return stated, names
    found = [_typed(o.type) for o in inferred.graph.output]
    return [(f[0] or s[0], f[1] if f[1] is not None else s[1]) for f, s in zip(found, stated, strict=True)], names


def _typed(tp: onnx.TypeProto) -> Typed:
    elem = tp.tensor_type.elem_type if tp.WhichOneof("value") == "tensor_type" else 0
    return (elem, stated_dims(tp))
