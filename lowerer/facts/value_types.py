"""Types of values as lowerer reads them from ``TypeProto``: (element type, dims), and schema spellings.

The vocabulary of the facts layer, below :mod:`lowerer.facts.shapes` (which indexes types by scope and
re-exports these names) and :mod:`lowerer.facts.body_shapes` (which infers a subgraph's types with them),
so that those two import one way (``shapes`` → ``body_shapes`` → ``value_types``).
"""

from __future__ import annotations

import onnx

__all__ = ["ValueType", "type_proto", "type_string", "value_type"]

#: (element type, dims) where dims is None for unknown rank, and a dim is None when not static.
ValueType = tuple[int, "list[int | None] | None"]


def value_type(tp: onnx.TypeProto) -> ValueType | None:
    """The (element type, dims) a TypeProto states, None when it is not a tensor type."""
    if not tp.HasField("tensor_type"):
        return None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return (tt.elem_type, None)
    # A non-zero dim_value is set; only a zero needs HasField to tell 0 from a symbolic dim.
    dims: list[int | None] = [v if (v := d.dim_value) or d.HasField("dim_value") else None for d in tt.shape.dim]
    return (tt.elem_type, dims)


def type_string(tp: onnx.TypeProto) -> str | None:
    """The schema spelling of a type (``tensor(float)``, ``seq(tensor(int64))`` ...), None if unknown."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        elem = tp.tensor_type.elem_type
        return None if elem == 0 else f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
    if kind == "sparse_tensor_type":
        elem = tp.sparse_tensor_type.elem_type
        return None if elem == 0 else f"sparse_tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
    if kind == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type)
        return None if inner is None else f"seq({inner})"
    if kind == "optional_type":
        inner = type_string(tp.optional_type.elem_type)
        return None if inner is None else f"optional({inner})"
    if kind == "map_type":
        value = type_string(tp.map_type.value_type)
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return None if value is None else f"map({key}, {value})"
    return None


def type_proto(spelled: str | None) -> onnx.TypeProto | None:
    """The TypeProto of a schema spelling (``tensor(float)``, ``seq(tensor(int64))``, ``optional(...)``), or None."""
    if spelled is None:
        return None
    if spelled.startswith("tensor(") and spelled.endswith(")"):
        name = spelled[len("tensor("):-1].upper()
        if name not in onnx.TensorProto.DataType.keys():  # noqa: SIM118 (a protobuf enum, not a dict)
            return None
        return onnx.helper.make_tensor_type_proto(onnx.TensorProto.DataType.Value(name), None)
    for prefix, make in (("seq(", onnx.helper.make_sequence_type_proto),
                         ("optional(", onnx.helper.make_optional_type_proto)):
        if spelled.startswith(prefix) and spelled.endswith(")"):
            inner = type_proto(spelled[len(prefix):-1])
            return None if inner is None else make(inner)
    return None
