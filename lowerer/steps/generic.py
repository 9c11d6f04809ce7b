"""Crossing a version step from what the step table says changed, without an op-specific adapter.

:func:`cross` emits ``em.node`` on the far side of one step: a copy whose attributes and inputs
are adjusted change by change (see :mod:`lowerer.steps.changes`), plus the constants moved
attributes need. Every change is checked against the node; whatever the older (or newer)
version cannot express exactly is refused, naming the step and what would work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from lowerer.core.remedies import ADD_SHAPES, ADD_TYPES, MAKE_CONSTANT
from lowerer.facts.reference import np_dtype
from lowerer.model_io.naming import NameGenerator
from lowerer.model_io.node_attributes import attribute, attribute_value
from lowerer.steps.attributes import is_neutral, remove_attribute, set_attribute
from lowerer.steps.changes import (
    AttrAdded,
    AttrRemoved,
    AttrToInput,
    Broadcast,
    Change,
    DefaultChanged,
    InputAdded,
    NegativeValues,
    NewAttrValues,
    NoChange,
    OptionalInput,
    OutputAdded,
    Semantics,
    Step,
    Types,
)
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN
from lowerer.steps.signature import check_arity, check_types, op_schema

__all__ = ["PREDICATE_FUNCTIONS", "cross", "drop_input", "meaning_kept"]

#: Every name lowerer makes holds this marker.
NEW_NAME_MARK = NameGenerator.MARKER

_FLOAT8 = frozenset(
    getattr(onnx.TensorProto, name) for name in
    ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1")
    if hasattr(onnx.TensorProto, name))


def _output_type(em: Emitter, node: onnx.NodeProto) -> int | None:
    """The element type of output 0: Cast's ``to``, else what is known of the value."""
    to = attribute_value(node, "to")
    if isinstance(to, int):
        return to
    return em.elem_type(node.output[0]) if node.output and node.output[0] else None


def _present(node: onnx.NodeProto, index: int, outputs: bool = False) -> bool:
    names = node.output if outputs else node.input
    return len(names) > index and bool(names[index])


def _input_1_has_zero(em: Emitter, node: onnx.NodeProto) -> bool:
    shape = em.constant(node.input[1]) if _present(node, 1) else None
    return shape is None or bool(np.any(shape == 0))


def _input_0_half_float(em: Emitter, node: onnx.NodeProto) -> bool:
    elem = em.elem_type(node.input[0]) if _present(node, 0) else None
    return elem is None or elem in (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def _output_float8(em: Emitter, node: onnx.NodeProto) -> bool:
    elem = _output_type(em, node)
    return elem is None or elem in _FLOAT8


def _output_float8e8m0(em: Emitter, node: onnx.NodeProto) -> bool:
    elem = _output_type(em, node)
    return elem is None or elem == getattr(onnx.TensorProto, "FLOAT8E8M0", -1)


#: The predicates an :class:`AttrAdded` change may name in ``irrelevant_unless`` (described in
#: :data:`lowerer.steps.table.PREDICATES`): True when the attribute matters for this node (then only
#: its neutral values may be dropped). Unknown facts count as "matters".
PREDICATE_FUNCTIONS: dict[str, Callable[[Emitter, onnx.NodeProto], bool]] = {
    "output_float8": _output_float8,
    "output_float8e8m0": _output_float8e8m0,
    "output_1_present": lambda em, node: _present(node, 1, outputs=True),
    "input_0_half_float": _input_0_half_float,
    "input_1_has_zero": _input_1_has_zero,
    "input_2_absent": lambda em, node: not _present(node, 2),
    "input_2_present": lambda em, node: _present(node, 2),
    "input_3_present": lambda em, node: _present(node, 3),
}


# -- crossing -----------------------------------------------------------------------------------
def cross(em: Emitter, step: Step, direction: str, node: onnx.NodeProto | None = None,
          handled: tuple[type[Change], ...] = ()) -> onnx.NodeProto:
    """Emit ``em.node`` across ``step`` in ``direction`` (``em.opset`` is the far side), or refuse.

    Adapters that handle some changes themselves pass the node as they have adjusted it (a copy)
    and the change classes they took care of in ``handled``; the rest is crossed here. Returns
    the node emitted (the last of ``em.nodes``).
    """
    if node is None:
        node = onnx.NodeProto()
        node.CopyFrom(em.node)
    down = direction == DOWN
    moved = [c for c in step.changes if isinstance(c, AttrToInput) and AttrToInput not in handled]
    # Defaults first: an attribute absent on one side is written out with that side's default,
    # which the other changes (an added attribute's neutral values ...) then judge.
    ordered = sorted(step.changes, key=lambda c: not isinstance(c, DefaultChanged))
    for change in ordered:
        if not isinstance(change, (AttrToInput, *handled)):
            _HANDLERS[type(change)](em, node, step, change, down)
    if moved:
        (_inputs_to_attributes if down else _attributes_to_inputs)(em, node, step, moved)
    if any((o and em.facts.is_new(o)) or NEW_NAME_MARK in o for o in node.output):
        em.facts.add_node(node, em.opset)  # an adapter renamed an output: its type comes from this node
    check_arity(em, node, em.opset)
    if any(isinstance(c, Types) for c in step.changes) or moved:
        check_types(em, node, em.opset, f"{step.op} changed its types at version {step.version}")
    em.nodes.append(node)
    return node


def meaning_kept(em: Emitter, step: Step, direction: str) -> None:
    """Adapter for a :class:`Semantics` step whose change a node crossing in ``direction`` cannot observe.

    Registered per step and direction where the table says so (e.g. ``Unsqueeze`` 1 → 11 up: the
    newer version only accepts more); the step's other changes are crossed as usual.
    """
    cross(em, step, direction, handled=(Semantics,))


def _label(step: Step, down: bool) -> str:
    return f"{step.op}-{step.previous if down else step.version}"


def _types(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    """Checked once every change is applied (see :func:`cross`)."""


def _attr_added(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, AttrAdded)
    if not down:
        return
    value = attribute_value(node, change.name)
    if value is None:
        return
    matters = change.irrelevant_unless is None or PREDICATE_FUNCTIONS[change.irrelevant_unless](em, node)
    if is_neutral(value, change.neutral) or not matters:
        remove_attribute(node, change.name)
        return
    em.refuse(f"{step.op} gained attribute {change.name!r} at version {step.version}, and this node sets "
              f"{change.name}={value!r}, which {_label(step, down)} cannot express")


def _attr_removed(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, AttrRemoved)
    value = attribute_value(node, change.name)
    if down:
        if value is None and change.down_value is not None:
            set_attribute(node, change.name, change.down_value)
        return
    if change.any_value or (value is None and None in change.neutral) or \
            (value is not None and is_neutral(value, change.neutral)):
        remove_attribute(node, change.name)
        return
    shown = "leaves it at its default" if value is None else f"sets {change.name}={value!r}"
    em.refuse(f"{step.op} lost attribute {change.name!r} at version {step.version}, and this node {shown}, "
              f"which {_label(step, down)} cannot express")


def _default_changed(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, DefaultChanged)
    if attribute(node, change.name) is not None:
        return
    value = change.new if down else change.old
    if value is not None:
        set_attribute(node, change.name, value)


def _negative_values(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, NegativeValues)
    if not down:
        return
    if change.attr is not None:
        value = attribute_value(node, change.attr)
        if value is None:
            return
        values = [int(v) for v in value] if isinstance(value, list) else [int(value)]  # type: ignore[call-overload]
        if all(v >= 0 for v in values):
            return
        fixed = _normalized(em, node, step, change, np.array(values, dtype=np.int64), change.attr)
        set_attribute(node, change.attr, [int(v) for v in fixed] if isinstance(value, list) else int(fixed[0]))
        return
    assert change.input is not None
    if change.input >= len(node.input) or not node.input[change.input]:
        return
    name = node.input[change.input]
    constant = em.constant(name)
    if constant is None:
        em.refuse(f"{step.op} allows negative {change.kind} values in input {change.input} from version "
                  f"{step.version}, and input {name!r} is not a constant, so they cannot be ruled out; {MAKE_CONSTANT}")
    if constant.size == 0 or bool(np.all(constant >= 0)):
        return
    fixed = _normalized(em, node, step, change, constant.astype(np.int64), f"input {name!r}")
    node.input[change.input] = em.const(fixed.astype(constant.dtype).reshape(constant.shape), "nonneg")


def _normalized(em: Emitter, node: onnx.NodeProto, step: Step, change: NegativeValues, values: np.ndarray,
                where: str) -> np.ndarray:
    """``values`` with negative entries counted from the back made non-negative (or a refusal)."""
    of = node.input[change.of] if change.of < len(node.input) else ""
    if change.kind == "axis":
        rank = em.rank(of) if of else None
        if rank is None:
            em.refuse(f"{where} holds negative axes, which {_label(step, True)} does not accept, and the rank of "
                      f"{of!r} is unknown; {ADD_SHAPES}")
        return np.where(values < 0, values + rank, values)
    # Indices: counted from the size along the node's axis.
    dims = em.dims(of) if of else None
    axis_value = attribute_value(node, "axis")
    axis = axis_value if isinstance(axis_value, int) else 0
    if dims is not None and axis < 0:
        axis += len(dims)
    size = dims[axis] if dims is not None and 0 <= axis < len(dims) else None
    if size is None:
        em.refuse(f"{where} holds negative indices, which {_label(step, True)} does not accept, and the size of "
                  f"{of!r} along axis {axis} is not static; {ADD_SHAPES}")
    return np.where(values < 0, values + size, values)


def _broadcast(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, Broadcast)
    if not down:
        return
    names = [n for n in node.input if n]
    if len(set(names)) <= 1:
        return
    shapes = [em.dims(n) for n in names]
    if all(s is not None and None not in s for s in shapes) and all(s == shapes[0] for s in shapes):
        return
    if change.legacy == "attribute" and len(names) == 2:
        a, b = shapes
        if a is not None and b is not None and len(b) <= len(a) and None not in b:
            suffix = a[len(a) - len(b):]
            if b == suffix or all(d == 1 for d in b):
                set_attribute(node, "broadcast", 1)
                return
    em.refuse(f"{step.op} broadcasts numpy-style from version {step.version}; {_label(step, True)} "
              + ("broadcasts only a second input whose static shape is a suffix of the first's"
                 if change.legacy == "attribute" else "needs inputs of the same static shape")
              + f", which this node's inputs are not known to have; {ADD_SHAPES}")


def _optional_input(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, OptionalInput)
    if down and (change.index >= len(node.input) or not node.input[change.index]):
        em.refuse(f"input {change.index} of {step.op} became optional at version {step.version}; "
                  f"{_label(step, True)} needs it and this node omits it")


def _input_added(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, InputAdded)
    if not down or change.index >= len(node.input):
        return
    if node.input[change.index]:
        em.refuse(f"{step.op} gained input {change.index} at version {step.version}, and this node gives it "
                  f"({node.input[change.index]!r}); {_label(step, True)} cannot take it")
    _strip_trailing_inputs(node)


def _output_added(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, OutputAdded)
    if not down or change.index >= len(node.output) or not node.output[change.index]:
        return
    name = node.output[change.index]
    if em.facts.is_used(name):
        em.refuse(f"{step.op} gained output {change.index} at version {step.version}, and this node's "
                  f"output {name!r} is used; {_label(step, True)} does not produce it")
    node.output[change.index] = ""
    while node.output and not node.output[-1]:
        node.output.pop()


def _new_values(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, NewAttrValues)
    value = attribute_value(node, change.name)
    if down and value is not None and is_neutral(value, change.values):
        em.refuse(f"{step.op} accepts {change.name}={value!r} from version {step.version} only; "
                  f"{_label(step, True)} has no such {change.name}")


def _semantics(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    assert isinstance(change, Semantics)
    em.refuse(f"{step.op} changed meaning at version {step.version} ({change.what}), and lowerer has no exact "
              f"adapter for this step {'down' if down else 'up'}")


def _no_change(em: Emitter, node: onnx.NodeProto, step: Step, change: Change, down: bool) -> None:
    """Nothing to do."""


_Handler = Callable[[Emitter, onnx.NodeProto, Step, Change, bool], None]
_HANDLERS: dict[type[Change], _Handler] = {
    Types: _types,
    AttrAdded: _attr_added,
    AttrRemoved: _attr_removed,
    DefaultChanged: _default_changed,
    NegativeValues: _negative_values,
    Broadcast: _broadcast,
    OptionalInput: _optional_input,
    InputAdded: _input_added,
    OutputAdded: _output_added,
    NewAttrValues: _new_values,
    Semantics: _semantics,
    NoChange: _no_change,
}


def drop_input(node: onnx.NodeProto, index: int) -> None:
    """Leave input ``index`` of ``node`` empty, dropping the empty inputs at the end."""
    node.input[index] = ""
    _strip_trailing_inputs(node)


def _strip_trailing_inputs(node: onnx.NodeProto) -> None:
    while node.input and not node.input[-1]:
        node.input.pop()


def _inputs_to_attributes(em: Emitter, node: onnx.NodeProto, step: Step, moved: list[AttrToInput]) -> None:
    """Down: each moved input, a constant, becomes the older version's attribute again."""
    old = op_schema(step.op, step.previous)
    for change in sorted(moved, key=lambda c: -c.input):
        if change.input >= len(node.input) or not node.input[change.input]:
            continue
        name = node.input[change.input]
        value = em.constant(name)
        if value is None:
            em.refuse(f"{step.op} takes {change.attr!r} as input {change.input} from version {step.version}; "
                      f"{_label(step, True)} needs it as an attribute, and input {name!r} is not a constant "
                      "(an initializer that is not a graph input, a Constant, or a foldable shape computation); "
                      + MAKE_CONSTANT)
        attr_type = onnx.defs.OpSchema.AttrType
        kind = old.attributes[change.attr].type if change.attr in old.attributes else None
        flat = value.reshape(-1)
        if flat.size == 0:
            em.refuse(f"input {change.input} ({name!r}) is an empty constant, and an empty {change.attr!r} "
                      f"attribute of {_label(step, True)} would read as absent, which may mean something else; "
                      "give the node non-empty values or keep an opset >= "
                      f"{step.version}")
        if kind in (attr_type.INTS, attr_type.INT) and value.dtype.kind not in "iub":
            em.refuse(f"{change.attr!r} is an integer attribute in {_label(step, True)}, and input {name!r} "
                      f"holds {value.dtype}")
        if kind == attr_type.INTS:
            set_attribute(node, change.attr, [int(v) for v in flat])
        elif kind == attr_type.INT:
            set_attribute(node, change.attr, int(flat[0]))
        elif kind == attr_type.FLOATS:
            set_attribute(node, change.attr, [float(v) for v in flat])
        elif kind == attr_type.FLOAT:
            if value.dtype.kind != "f" and value.dtype.name != "bfloat16":
                em.refuse(f"{change.attr!r} is a float attribute in {_label(step, True)}, and input {name!r} "
                          f"holds {value.dtype}")
            as_float = float(np.float32(flat[0]))
            if np.float32(flat[0]) != flat[0]:
                em.refuse(f"the value of {name!r} ({flat[0]!r}) is not exactly a float32, which "
                          f"{_label(step, True)}'s {change.attr!r} attribute is")
            set_attribute(node, change.attr, as_float)
        else:
            em.refuse(f"no rule to turn input {change.input} into attribute {change.attr!r}")
        node.input[change.input] = ""
    _strip_trailing_inputs(node)


def _attributes_to_inputs(em: Emitter, node: onnx.NodeProto, step: Step, moved: list[AttrToInput]) -> None:
    """Up: each moved attribute becomes a constant input."""
    for change in sorted(moved, key=lambda c: c.input):
        value = attribute_value(node, change.attr)
        if value is None:
            continue
        remove_attribute(node, change.attr)
        dtype: np.dtype[Any]
        if change.dtype == "int64":
            dtype = np.dtype(np.int64)
        elif change.dtype == "float32":
            dtype = np.dtype(np.float32)
        else:
            elem = em.elem_type(node.input[0])
            if elem is None:
                em.refuse(f"{change.attr!r} becomes an input typed like input {node.input[0]!r} at "
                          f"{step.op}-{step.version}, and that type is unknown; {ADD_TYPES}")
            dtype = np_dtype(elem)
        array = np.array(value, dtype=dtype)
        if array.ndim == 0 and not change.scalar:
            array = array.reshape(1)
        if dtype.kind in "iu" and isinstance(value, float) and not float(value).is_integer():
            em.refuse(f"{change.attr}={value!r} is not exactly representable as {dtype}")
        if dtype.kind == "f" and np.any(array.astype(np.float64) != np.array(value, dtype=np.float64)):
            # e.g. Clip's float attribute min=-3.4e38 on a float16 input: saturates differently.
            em.refuse(f"{change.attr}={value!r} is not exactly representable as {dtype}, the type of its input "
                      f"at {step.op}-{step.version}")
        name = em.const(array, change.attr)
        while len(node.input) <= change.input:
            node.input.append("")
        node.input[change.input] = name
