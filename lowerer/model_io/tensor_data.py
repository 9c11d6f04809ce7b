"""The data of a TensorProto checked against its type and dims, and read as numpy only when it agrees.

A tensor's data is in ``raw_data`` (little-endian bytes: the element count times the item size,
or packed for 4-bit and 2-bit types), in the typed field its type uses (``float_data``,
``int32_data`` ...: one entry per element, two for complex numbers), or in external data (never
read here). :func:`tensor_problem` says what is wrong with a tensor in one phrase;
:func:`read_array` is ``numpy_helper.to_array`` that refuses a malformed tensor with an
:class:`~lowerer.core.errors.InputError` naming it, instead of numpy's or onnx's exception.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.core.errors import InputError

__all__ = ["RAW_DATA_CHECK_MAX_BYTES", "iter_owned_tensors", "read_array", "tensor_problem"]

T = onnx.TensorProto
#: Tensors whose ``raw_data`` is larger than this are not measured by :func:`tensor_problem` (protobuf
#: gives Python a copy of the bytes to measure; lowerer never reads such weights, onnxruntime checks them).
RAW_DATA_CHECK_MAX_BYTES = 64 << 20
_KNOWN_TYPES = frozenset(v for v in T.DataType.values() if v != T.UNDEFINED)
_PACKED_BITS = {getattr(T, name): bits for name, bits in
                (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)) if hasattr(T, name)}
#: The typed field of each type and how many entries an element takes there (others: int32_data, 1).
_TYPED_FIELD: dict[int, tuple[str, int]] = {
                T.FLOAT: ("float_data", 1), T.COMPLEX64: ("float_data", 2), T.DOUBLE: ("double_data", 1),
                T.COMPLEX128: ("double_data", 2), T.INT64: ("int64_data", 1), T.UINT32: ("uint64_data", 1),
                T.UINT64: ("uint64_data", 1), T.STRING: ("string_data", 1)}


def _type_name(data_type: int) -> str:
    try:
        return str(T.DataType.Name(data_type))
    except ValueError:
        return str(data_type)


def tensor_problem(tensor: onnx.TensorProto) -> str | None:
    """What is wrong with ``tensor``'s type, dims or data, in one phrase; None when they agree.

    External data is not looked at (see :func:`lowerer.model_io.external_data.check_external_data`); ``raw_data``
    over :data:`RAW_DATA_CHECK_MAX_BYTES` is not measured.
    """
    if tensor.data_type not in _KNOWN_TYPES:
        return f"has data type {tensor.data_type}, which is not an ONNX tensor type"
    if any(d < 0 for d in tensor.dims):
        return f"has negative dims {list(tensor.dims)}"
    if tensor.data_location == T.EXTERNAL:
        return None
    count = math.prod(tensor.dims)
    kind = _type_name(tensor.data_type)
    if tensor.HasField("raw_data"):
        return _raw_problem(tensor, count, kind)
    field, per = _TYPED_FIELD.get(int(tensor.data_type), ("int32_data", 1))
    if tensor.data_type in _PACKED_BITS:
        per_entry = 32 // _PACKED_BITS[tensor.data_type]
        expected = {count, -(-count // per_entry), -(-count // 2)}  # one or several elements per entry
    else:
        expected = {count * per}
    have = len(getattr(tensor, field))
    if have not in expected:
        return (f"of type {kind} and dims {list(tensor.dims)} ({count} elements) holds {have} entries in "
                f"{field}, not {min(expected)}")
    return None


def _raw_problem(tensor: onnx.TensorProto, count: int, kind: str) -> str | None:
    if tensor.data_type == T.STRING:
        return "of type STRING stores raw_data (strings go in string_data)"
    bits = _PACKED_BITS.get(tensor.data_type)
    if bits is not None:
        expected = -(-count * bits // 8)
    else:
        expected = count * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
    if expected > RAW_DATA_CHECK_MAX_BYTES:
        return None
    have = len(tensor.raw_data)
    if have != expected:
        return (f"of type {kind} and dims {list(tensor.dims)} ({count} elements) has {have} bytes of raw_data, "
                f"not {expected}")
    return None


def read_array(tensor: onnx.TensorProto, owner: str) -> np.ndarray:
    """``numpy_helper.to_array(tensor)``, refused with one line when the tensor is malformed.

    Args:
        tensor: the tensor (its data inline).
        owner: how to name it in messages (``initializer 'w'``, ``node 'c' (Constant)`` ...).

    Raises:
        InputError: the data disagrees with the type or dims, or onnx cannot read it.
    """
    problem = tensor_problem(tensor)
    if problem is None:
        try:
            return numpy_helper.to_array(tensor)
        except (ValueError, TypeError, KeyError, AssertionError, OverflowError) as e:
            problem = f"cannot be read ({' '.join(str(e).split())})"
    raise InputError(f"{owner}: the tensor {problem}")


#: Attribute types that hold tensors or graphs.
_HOLDERS = frozenset({onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.SPARSE_TENSOR,
                      onnx.AttributeProto.SPARSE_TENSORS, onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS})


def iter_owned_tensors(model: onnx.ModelProto, typed: bool = False) -> Iterator[tuple[onnx.TensorProto, str]]:
    """Every TensorProto in the model with a label naming where it is (for messages).

    Initializers, sparse initializers' values and indices, and tensor attributes of every node, in
    all graphs at any depth and in model-local functions. ``typed``: onnx's checker passed the model, so
    each attribute holds exactly the field its type names, and only tensor- and graph-typed attributes
    are looked into (else every attribute's fields are, whatever its stated type).
    """

    def from_graph(graph: onnx.GraphProto, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
        for t in graph.initializer:
            yield t, f"initializer {t.name!r} (in {where})"
        for s in graph.sparse_initializer:
            yield s.values, f"sparse initializer {s.values.name!r} values (in {where})"
            yield s.indices, f"sparse initializer {s.values.name!r} indices (in {where})"
        yield from from_nodes(graph.node, where)

    def from_nodes(nodes: object, where: str) -> Iterator[tuple[onnx.TensorProto, str]]:
        for node in nodes:  # type: ignore[attr-defined]
            if not node.attribute:
                continue
            for attr in node.attribute:
                if typed and attr.type not in _HOLDERS:
                    continue
                has_t, has_sparse, has_g = attr.HasField("t"), attr.HasField("sparse_tensor"), attr.HasField("g")
                if not (has_t or has_sparse or has_g or attr.tensors or attr.sparse_tensors or attr.graphs):
                    continue  # most attributes hold no tensor: no label is made for them
                label = f"node {node.name!r}" if node.name else f"a {node.op_type} node"
                at = f"{label} ({node.op_type}, in {where}) attribute {attr.name!r}"
                if has_t:
                    yield attr.t, at
                for t in attr.tensors:
                    yield t, at
                for s in (*([attr.sparse_tensor] if has_sparse else []), *attr.sparse_tensors):
                    yield s.values, f"{at} values"
                    yield s.indices, f"{at} indices"
                if has_g:
                    yield from from_graph(attr.g, f"{where}/{node.name or node.op_type}.{attr.name}")
                for g in attr.graphs:
                    yield from from_graph(g, f"{where}/{node.name or node.op_type}.{attr.name}")

    yield from from_graph(model.graph, "graph")
    for function in model.functions:
        yield from from_nodes(function.node, f"function {function.domain}.{function.name}")
