"""Version-step adapters for Constant and the indexing ops (Gather, GatherElements).

* ``Constant`` going down: the ``value_float(s)``/``value_int(s)``/``value_string(s)`` forms
  (12) become a ``value`` tensor; a ``sparse_value`` (11) becomes the dense tensor it stands
  for; a tensor type the older Constant lacks (Constant-1 holds float types only) becomes an
  initializer of the same name in a graph (inside a function it is refused).
* ``Gather``/``GatherElements`` 11 → below: negative indices became allowed at 11. Constant
  indices are made non-negative with the static size along the axis; run-time indices get the
  exact guard ``Where(indices < 0, indices + size, indices)``, ``size`` from ``Shape`` (below 9,
  with no Where and no integer Less: ``indices + size * Cast(Cast(indices, double) < 0)``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.facts.constants import constant_node_value
from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute, set_attribute
from lowerer.steps.changes import AttrAdded, NegativeValues, Semantics, Step, Types
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["constant_down", "gather_11_down", "one_hot_9_11", "one_hot_11_9"]

_VALUE_FORMS = ("value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings",
                "sparse_value")


def _dense(node: onnx.NodeProto) -> onnx.TensorProto | None:
    """The Constant's value as a dense TensorProto (None when it is held in external data)."""
    for a in node.attribute:
        if a.name == "value":
            tensor: onnx.TensorProto = a.t
            return tensor
        if a.name == "sparse_value":
            sparse = a.sparse_tensor
            if sparse.values.data_location == onnx.TensorProto.EXTERNAL or \
                    sparse.indices.data_location == onnx.TensorProto.EXTERNAL:
                return None
            values = numpy_helper.to_array(sparse.values)
            indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
            dense = np.zeros(list(sparse.dims), dtype=values.dtype)
            flat = dense.reshape(-1)
            if indices.ndim == 2:  # [NNZ, rank] coordinates
                flat[np.ravel_multi_index(tuple(indices.T), dense.shape)] = values
            else:  # linearized indices
                flat[indices] = values
            return numpy_helper.from_array(dense, "value")
    value = constant_node_value(node)
    if value is None:
        return None
    made: onnx.TensorProto = numpy_helper.from_array(value, "value")
    return made


@adapter("Constant", (9, 11, 12, 13, 19, 21, 23, 24, 25), DOWN)
def constant_down(em: Emitter, step: Step, direction: str) -> None:
    """The older Constant's form, or an initializer where its types fall short."""
    node = copy_of(em.node)
    if any(a.name in _VALUE_FORMS for a in node.attribute):
        tensor = _dense(node)
        if tensor is None:
            em.refuse("its value is in external data, which lowerer does not read")
        for name in _VALUE_FORMS:
            remove_attribute(node, name)
        remove_attribute(node, "value")
        node.attribute.append(onnx.helper.make_attribute("value", tensor))
    value = next(a.t for a in node.attribute if a.name == "value")
    schema = onnx.defs.get_schema("Constant", em.opset)
    allowed = {t for c in schema.type_constraints for t in c.allowed_type_strs}
    spelled = f"tensor({onnx.TensorProto.DataType.Name(value.data_type).lower()})"
    if spelled not in allowed:
        if em.scope.graph is None:
            kind = "a non-float constant" if value.data_type not in (1, 10, 11) else f"a {spelled} constant"
            em.refuse(f"{kind} is needed, and inside a function that needs a Constant that holds it "
                      f"(Constant-{schema.since_version} holds no {spelled}; functions have no initializers)")
        tensor = onnx.TensorProto()
        tensor.CopyFrom(value)
        tensor.name = node.output[0]
        em.constants.append(tensor)  # the same value, under the same name: no node left
        return
    generic.cross(em, step, direction, node, handled=(AttrAdded, Types))


def _index_guard(em: Emitter, node: onnx.NodeProto, data: str, indices: str, axis: int) -> str:
    """``indices`` with negative entries counted from the back of ``data``'s ``axis`` (exact for valid ones)."""
    elem = em.elem_type(indices)
    if elem not in (onnx.TensorProto.INT32, onnx.TensorProto.INT64):
        em.refuse(f"negative indices became valid at {node.op_type}-11; guarding run-time indices needs their "
                  "type (int32 or int64), which is unknown")
    if axis < 0:
        rank = em.require_rank(data, "to guard negative indices")
        axis += rank
    shape = em.op("Shape", [data])
    size = em.op("Gather", [shape, em.const(np.array(axis, dtype=np.int64), "axis")], axis=0)
    if elem == onnx.TensorProto.INT32:
        size = em.op("Cast", [size], to=onnx.TensorProto.INT32)
    if em.target < 9:
        # No Where and no integer Less below 9: ``indices + size * (indices < 0)``, the sign read from the
        # indices cast to double (monotone, and no integer but 0 rounds to 0: the test is exact).
        negative = em.op("Less", [em.op("Cast", [indices], to=onnx.TensorProto.DOUBLE),
                                  em.const(np.array(0.0, dtype=np.float64), "zero")])
        shift = em.op("Mul", [size, em.op("Cast", [negative], to=elem)])
        return em.op("Add", [indices, shift])
    zero = em.const(np.array(0, dtype=np.int32 if elem == onnx.TensorProto.INT32 else np.int64), "zero")
    negative = em.op("Less", [indices, zero])
    return em.op("Where", [negative, em.op("Add", [indices, size]), indices])


@adapter("Gather", 11, DOWN)
def gather_11_down(em: Emitter, step: Step, direction: str) -> None:
    """Negative indices: constant ones normalized (generic), run-time ones guarded."""
    node = copy_of(em.node)
    data, indices = node.input[0], node.input[1]
    axis_value = attribute_value(node, "axis")
    axis = 0 if axis_value is None else int(axis_value)  # type: ignore[call-overload]
    if em.constant(indices) is None:
        if not em.facts.is_non_negative(indices):  # else non-negative by construction (a lowering's arange)
            node.input[1] = _index_guard(em, node, data, indices, axis)
        # The indices are guarded: what is left of the step is the rest (the axis, types).
        rest = tuple(c for c in step.changes if not (isinstance(c, NegativeValues) and c.input == 1))
        step = Step(step.op, step.previous, step.version, rest)
    generic.cross(em, step, direction, node)


@adapter("OneHot", 11, DOWN)
def one_hot_11_9(em: Emitter, step: Step, direction: str) -> None:
    """Negative indices count from the back at 11: add ``depth`` to them (constants, or a run-time guard)."""
    node = copy_of(em.node)
    indices, depth = node.input[0], node.input[1]
    axis = attribute_value(node, "axis")
    if isinstance(axis, int) and axis < 0:
        set_attribute(node, "axis", axis + em.require_rank(indices, "to make the negative axis non-negative") + 1)
    values, depth_value = em.constant(indices), em.constant(depth)
    if values is not None and not np.any(values < 0):
        pass
    elif values is not None and depth_value is not None:
        d = depth_value.reshape(-1)[0]
        shifted = np.where(values < 0, values + d, values)
        node.input[0] = em.const(np.where(shifted < 0, d, shifted).astype(values.dtype), "indices")
    else:
        if em.target < 9:
            em.refuse("negative indices count from the back from OneHot-11; the exact guard needs Where (opset 9)")
        elem = em.elem_type(indices)
        if elem is None:
            em.refuse("guarding negative indices needs their type, which is unknown (add type information)")
        scalar_depth = em.op("Reshape", [depth, em.const(np.zeros([0], dtype=np.int64), "scalar")])
        typed_depth = em.op("Cast", [scalar_depth], to=elem)
        zero = em.const(np.zeros([], dtype=np_dtype(elem)), "zero")
        negative = em.op("Less", [indices, zero])
        counted = em.op("Where", [negative, em.op("Add", [indices, typed_depth]), indices])
        # Below -depth an index is out of range at 11 (an all-off row): make it depth, out of range at 9 too
        # (onnxruntime's OneHot-9 would count a negative index from the back).
        node.input[0] = em.op("Where", [em.op("Less", [counted, zero]), typed_depth, counted])
    generic.cross(em, step, direction, node, handled=(Semantics,))


@adapter("OneHot", 11, UP)
def one_hot_9_11(em: Emitter, step: Step, direction: str) -> None:
    """At 9 a negative index gave an all-off row; at 11 it counts from the back: indices must be provably >= 0."""
    values = em.constant(em.node.input[0])
    if values is None or np.any(values < 0):
        em.refuse("OneHot-9 gives an all-off row for a negative index where OneHot-11 counts it from the back, "
                  "and this node's indices are not provably non-negative (a constant)")
    generic.cross(em, step, direction, handled=(Semantics,))
