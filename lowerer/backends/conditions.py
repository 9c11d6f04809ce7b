"""The conditions a backend profile's entry may put on a node (its ``when``), and how each is checked and said.

A condition reads the node, its since-version and the conversion's :class:`~lowerer.facts.Facts` (attribute
values, input element types, constant inputs, rank and dims, an Einsum equation, the graph around it); see
:mod:`lowerer.backends.profile` for the entries that use them. Unknown facts count as matching where the
condition is about a limitation (an unknown rank is refused rather than guessed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

if TYPE_CHECKING:
    from lowerer.facts import Facts

__all__ = ["CHECKS", "describe_condition"]

_AXIS_OPS = frozenset({"Hardmax", "Softmax", "LogSoftmax"})


def _attr_value(node: onnx.NodeProto, name: str) -> Any:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return None


def _attribute_or_default(node: onnx.NodeProto, version: int, name: str) -> Any:
    """The attribute's value (its schema default when absent; strings decoded, as a profile writes them)."""
    got = _attr_value(node, name)
    if got is None:
        spec = onnx.defs.get_schema(node.op_type, version).attributes.get(name)
        default = spec.default_value if spec is not None else None
        got = onnx.helper.get_attribute_value(default) if default is not None and default.type else None
    return got.decode("utf-8", "replace") if isinstance(got, bytes) else got


def _check_attribute(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Every named attribute has the value given (an absent one has its schema default)."""
    return all(_attribute_or_default(node, version, name) == wanted for name, wanted in dict(value).items())


def _check_attribute_in(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Every named attribute's value is one of those listed (ScatterND's ``reduction`` in add, mul, max, min)."""
    return all(_attribute_or_default(node, version, name) in list(wanted) for name, wanted in dict(value).items())


def _check_attributes_present(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Some listed attribute is written on the node (whatever its value: Shape's ``start``/``end``)."""
    return any(a.name in set(value) for a in node.attribute)


def _type_name(facts: Facts, name: str) -> str | None:
    elem = facts.elem_type(name) if name else None
    return None if elem is None else onnx.TensorProto.DataType.Name(elem).lower()


def _check_attributes_absent(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """No listed attribute is written on the node (its schema default holds: ConstantOfShape's ``value``)."""
    return not any(a.name in set(value) for a in node.attribute)


def _check_inputs_at_least(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The node has at least ``value`` inputs given (Einsum's operands)."""
    return sum(1 for name in node.input if name) >= int(value)


def _check_dtypes(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The first input's element type is one of those listed (unknown: no)."""
    return _type_name(facts, node.input[0] if node.input else "") in set(value)


def _check_input_dtypes(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Every input named by position is given, its element type one of those listed (or not known: a limitation).

    ``{"3": ["bool"]}``: Attention's attn_mask is bool.
    """
    for position, wanted in dict(value).items():
        at = int(position)
        if at >= len(node.input) or not node.input[at]:
            return False
        found = _type_name(facts, node.input[at])
        if found is not None and found not in set(wanted):
            return False
    return True


def _check_not_dtypes(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The first input's element type is known and none of those listed."""
    found = _type_name(facts, node.input[0] if node.input else "")
    return found is not None and found not in set(value)


def _check_literal_inputs(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Some listed input is present and not a literal constant (an initializer or a Constant node's output)."""
    for index in value:
        if index < len(node.input) and node.input[index] and not facts.is_literal(node.input[index]):
            return True
    return False


def _check_input_values_outside(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Some listed input is present and holds a value outside those listed, or is not provably constant.

    ``{"1": [2, 3]}`` names TopK-10+ whose ``k`` (input 1) is 1, 4 or computed at run time (unknown counts as
    matching: refused when unsure), and not one whose ``k`` is a constant 2. The value is the one
    :meth:`lowerer.facts.Facts.value` proves (a literal, or folded from constants).
    """
    for index, allowed in dict(value).items():
        position = int(index)
        if position >= len(node.input) or not node.input[position]:
            continue
        known = facts.value(node.input[position])
        if known is None or np.asarray(known).dtype == object:
            return True
        if any(v not in allowed for v in np.asarray(known).ravel().tolist()):
            return True
    return False


def _check_constant_inputs(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Whether every listed input present is provably constant (a literal, or folded), as ``value`` says.

    ``{"inputs": [0], "constant": true}``: input 0 is provably constant; ``"min_rank": 1`` with ``true``: and
    each such constant has a rank of at least 1.
    """
    found = True
    for index in value["inputs"]:
        if index < len(node.input) and node.input[index]:
            known = facts.value(node.input[index])
            found = found and known is not None and np.asarray(known).dtype != object and \
                np.asarray(known).ndim >= int(value.get("min_rank", 0))
    return found == bool(value["constant"])


def _check_rank_not(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The first input's rank is not the one given (unknown: yes)."""
    rank = facts.rank(node.input[0]) if node.input else None
    return rank is None or rank != int(value)


def _axis_and_rank(node: onnx.NodeProto, version: int, facts: Facts) -> tuple[int, int | None]:
    axis = _attr_value(node, "axis")
    if axis is None:
        axis = 1 if version < 13 else -1
    return int(axis), facts.rank(node.input[0])


def _check_axis_not_last(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Hardmax/Softmax/LogSoftmax whose axis is not the last one (unknown rank: yes unless axis is -1)."""
    if node.op_type not in _AXIS_OPS:
        return False
    axis, rank = _axis_and_rank(node, version, facts)
    if axis == -1:
        return not value
    if rank is None:
        return bool(value)
    return (axis % max(rank, 1) != rank - 1) == bool(value)


def _check_dynamic_shape(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The first input's shape is not fully static (unknown: yes)."""
    dims = facts.dims(node.input[0]) if node.input else None
    return (dims is None or None in dims) == bool(value)


def _check_axis_size_dynamic(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The size the op reduces over is not static (the axis' dim; from the axis on below version 13)."""
    if node.op_type not in _AXIS_OPS:
        return False
    axis, _ = _axis_and_rank(node, version, facts)
    dims = facts.dims(node.input[0])
    if dims is None or not -len(dims) <= axis < len(dims):
        return bool(value)
    axis %= len(dims)
    span = dims[axis:] if version < 13 else dims[axis:axis + 1]
    return (None in span) == bool(value)


def _check_innermost_size_at_least(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """The op finds its extremum along the innermost axis, over ``value`` elements or more (unknown: yes).

    ArgMax/ArgMin (axis default 0) and Hardmax/Softmax/LogSoftmax from 13 reduce one axis: the innermost
    when it is the last one; before 13 the three reduce the coerced rows ``dims[axis:]``, always innermost,
    their size the product.
    """
    if node.op_type in ("ArgMax", "ArgMin"):
        axis = int(_attr_value(node, "axis") or 0)
    elif node.op_type in _AXIS_OPS:
        axis, _ = _axis_and_rank(node, version, facts)
    else:
        return False
    dims = facts.dims(node.input[0]) if node.input else None
    if dims is None or not -len(dims) <= axis < len(dims):
        return True
    axis %= len(dims)
    coerced = node.op_type in _AXIS_OPS and version < 13
    if not coerced and axis != len(dims) - 1:
        return False
    span = dims[axis:] if coerced else dims[axis:axis + 1]
    return None in span or int(np.prod([int(d) for d in span if d is not None], dtype=np.int64)) >= int(value)


def _check_shape_input_empty(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Whether the shape input (input 0: ConstantOfShape's) is empty, a 0-d output, as ``value`` (unknown: yes)."""
    dims = facts.dims(node.input[0]) if node.input else None
    if dims is None or len(dims) != 1 or dims[0] is None:
        return True
    return (dims[0] == 0) == bool(value)


def _check_repeated_letters(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Whether Einsum's equation repeats a letter within one operand (a diagonal or trace: ``ii->``), as ``value``."""
    equation = _attribute_or_default(node, version, "equation")
    terms = str(equation or "").replace(" ", "").partition("->")[0].replace("...", "").split(",")
    return any(len(set(t)) != len(t) for t in terms) == bool(value)


def _check_empty_guard(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Whether an If is an empty-input guard, as ``value``: its then-branch only passes an outer value through.

    The shape of lowerer's ``If(Size(x) == 0)`` (:meth:`lowerer.steps.emitter.Emitter.pass_through_if_empty`):
    then-branch one Identity of a value the branch does not make, its output the branch's one output.
    """
    if node.op_type != "If":
        return False
    then = next((a.g for a in node.attribute if a.name == "then_branch"), None)
    guard = then is not None and len(then.node) == 1 and then.node[0].op_type == "Identity" and \
        len(then.output) == 1 and list(then.node[0].output) == [then.output[0].name] and \
        not then.input and not then.initializer
    return guard == bool(value)


def _check_sole_node(node: onnx.NodeProto, version: int, facts: Facts, value: Any) -> bool:
    """Whether the node is the only node of its model's main graph (Constant nodes aside), as ``value``.

    Constant nodes aside: onnxruntime makes them initializers when it loads a model. onnxruntime-openvino's
    provider takes no node of a model of one to three nodes whose first node is one of the ops it keeps for
    larger models (GridSample among them): such a model runs on onnxruntime's CPU provider. One node is the
    case lowerer knows for sure (the order of two or three is onnxruntime's).
    """
    scope = facts.scope
    sole = scope.parent is None and scope.function is None and isinstance(scope.holder, onnx.GraphProto) and \
        [n for n in scope.holder.node if n.op_type != "Constant" or n.domain not in ("", "ai.onnx")] == [node]
    return sole == bool(value)


#: Each condition a profile entry's ``when`` may hold, and its check.
CHECKS: dict[str, Callable[[onnx.NodeProto, int, Facts, Any], bool]] = {
    "attribute": _check_attribute,
    "attribute_in": _check_attribute_in,
    "attributes_present": _check_attributes_present,
    "attributes_absent": _check_attributes_absent,
    "inputs_at_least": _check_inputs_at_least,
    "dtypes": _check_dtypes,
    "input_dtypes": _check_input_dtypes,
    "not_dtypes": _check_not_dtypes,
    "literal_inputs": _check_literal_inputs,
    "input_values_outside": _check_input_values_outside,
    "rank_not": _check_rank_not,
    "axis_not_last": _check_axis_not_last,
    "dynamic_shape": _check_dynamic_shape,
    "axis_size_dynamic": _check_axis_size_dynamic,
    "innermost_size_at_least": _check_innermost_size_at_least,
    "shape_input_empty": _check_shape_input_empty,
    "repeated_letters": _check_repeated_letters,
    "empty_guard": _check_empty_guard,
    "constant_inputs": _check_constant_inputs,
    "sole_node": _check_sole_node,
}


def _said_pairs(value: Any, joiner: str) -> str:
    return ", ".join(joiner.format(k=k, v=v) for k, v in dict(value).items())


#: The words each condition gives, from its value ("" when it says nothing).
_SAID: dict[str, Callable[[Any], str]] = {
    "attribute": lambda v: "with " + _said_pairs(v, "{k}={v}"),
    "attribute_in": lambda v: "with " + ", ".join(f"{k} in {'/'.join(map(str, x))}" for k, x in dict(v).items()),
    "attributes_present": lambda v: "with " + " or ".join(v) + " set",
    "attributes_absent": lambda v: "without " + " or ".join(v),
    "inputs_at_least": lambda v: f"of {v} inputs or more",
    "dtypes": lambda v: "on " + "/".join(v),
    "input_dtypes": lambda v: "with " + ", ".join(f"input {k} {'/'.join(x)}" for k, x in dict(v).items()),
    "not_dtypes": lambda v: "on types other than " + "/".join(v),
    "literal_inputs": lambda v: f"with input(s) {', '.join(map(str, v))} not a constant",
    "input_values_outside": lambda v: "with " + _said_pairs(v, "input {k} not a constant among {v}"),
    "rank_not": lambda v: f"of rank other than {v}",
    "axis_not_last": lambda v: "on a non-last axis" if v else "on the last axis",
    "dynamic_shape": lambda v: "with a dynamic input shape" if v else "with a static input shape",
    "repeated_letters": lambda v: "with a letter repeated within an operand (a diagonal)" if v else "",
    "axis_size_dynamic": lambda v: "with a dynamic size along the axis" if v else "",
    "innermost_size_at_least": lambda v: f"along the innermost axis, over {v} elements or more (or a size not known)",
    "shape_input_empty": lambda v: "with an empty shape (a 0-d output)" if v else "with a non-empty shape",
    "empty_guard": lambda v: "an empty-input guard" if v else "other than an empty-input guard",
    "constant_inputs": lambda v: f"with input(s) {', '.join(map(str, v['inputs']))} "
                                 f"{'provably constant' if v['constant'] else 'computed at run time'}",
    "sole_node": lambda v: "as the model's only node" if v else "in a model of more than one node",
}


def describe_condition(name: str, value: Any) -> str:
    """The words ``inspect`` and refusals give for condition ``name`` with ``value`` ("" when it says nothing)."""
    said = _SAID.get(name)
    return said(value) if said is not None else ""
