"""Version changes that only widen or narrow the types an op accepts: relabels, when the types fit.

``onnx.version_converter`` has no down adapters for most of the version bumps that only added
types: bfloat16 at 13 (Add, Relu, Concat, Identity, Sigmoid...), small ints at 14 (Add, Relu),
and If/Loop (16→13, 13→11, 11→1), Scan 11→9. So without this module a model could not go below
opset 13 at all. Between those versions the ops mean the same thing, so the change is a relabel
exactly when every type the node uses is allowed at the target version, and the node sets no
attribute the target version lacks.

Control flow has two more details, handled here: If-1 needs both branches to produce the same
(static) shapes, and Scan-9 has no negative axes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import onnx
import onnx.defs

from lowerer.opsets import since_version

__all__ = ["TYPE_ONLY", "is_relabel", "relabel_always", "relabel_opset"]

_TAIL = {19: (), 21: (), 23: (), 24: (), 25: ()}

#: op -> {since-version v: attributes new at v}: the step into v from the op's previous version
#: only added types (and those optional attributes, whose absence keeps the old meaning).
#: Curated from the operator changelog; steps that changed meaning or signature are not here.
TYPE_ONLY: dict[str, dict[int, tuple[str, ...]]] = {
    **{op: {13: (), 14: ()} for op in ("Add", "Sub", "Mul", "Div", "Relu")},
    **{op: {13: ()} for op in ("Abs", "Neg", "Floor", "Ceil", "Sqrt", "Exp", "Log", "Reciprocal", "Sigmoid",
                               "Tanh", "Concat", "Gather", "MatMul", "Gemm", "Slice", "Cast")},
    # Constant: 9 added types, 11 ``sparse_value``, 12 the ``value_*`` shorthands, later ones types.
    "Constant": {9: (), 11: ("sparse_value",), 12: ("value_float", "value_floats", "value_int", "value_ints",
                                                   "value_string", "value_strings"), 13: (), **_TAIL},
    "Identity": {13: (), 14: (), 16: (), **_TAIL},
    "Size": {13: (), **_TAIL},
    "Equal": {11: (), 13: (), 19: ()},
    "Conv": {22: ()},
    # Reductions: 12 added int8/uint8 (Max/Min), 13 bfloat16 (the others keep ``axes`` as an
    # attribute until 18), 20 bool (Max/Min); ReduceSum-13 and the others' 18 moved ``axes``.
    **{op: {12: (), 13: (), 20: ()} for op in ("ReduceMax", "ReduceMin")},
    **{op: {13: ()} for op in ("ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                               "ReduceLogSumExp", "ReduceSumSquare")},
    "Transpose": {13: (), **_TAIL},
    "Flatten": {13: (), **_TAIL},
    "Reshape": {13: (), 14: ("allowzero",), **_TAIL},
    "Shape": {13: (), 15: ("start", "end"), **_TAIL},
    "Split": {18: ("num_outputs",)},  # needs its ``split`` input (checked below)
    "Squeeze": dict(_TAIL),
    "Unsqueeze": dict(_TAIL),
}

_CONTROL_FLOW = ("If", "Loop", "Scan")


def _type_str(tp: onnx.TypeProto) -> str | None:
    """The schema spelling of a type (``tensor(float)``, ``seq(tensor(int64))``...), None if unknown."""
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        if tp.tensor_type.elem_type == 0:
            return None
        return f"tensor({onnx.TensorProto.DataType.Name(tp.tensor_type.elem_type).lower()})"
    if kind == "sequence_type":
        inner = _type_str(tp.sequence_type.elem_type)
        return None if inner is None else f"seq({inner})"
    if kind == "optional_type":
        inner = _type_str(tp.optional_type.elem_type)
        return None if inner is None else f"optional({inner})"
    return None


def _boundary_types(node: onnx.NodeProto) -> list[onnx.TypeProto]:
    out: list[onnx.TypeProto] = []
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            out.extend(v.type for v in (*g.input, *g.output))
    return out


def _static_shape(tp: onnx.TypeProto) -> tuple[int, ...] | None:
    if tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
        return None
    dims = tp.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        return None
    return tuple(d.dim_value for d in dims)


def is_relabel(node: onnx.NodeProto, source: int, target: int,
               elem_type: Callable[[str], int | None] = lambda name: None) -> bool:
    """Whether converting ``node`` from opset ``source`` to ``target`` is exactly a relabel.

    True only when every version step crossed is a type-only one (:data:`TYPE_ONLY`; for control
    flow: If and Loop from 11 up, Scan from 9 up), every type the node uses is allowed by the
    target schema (``elem_type`` gives an input's element type, None when unknown, which is a
    no), the node sets no attribute the target lacks, and the control-flow details hold.
    """
    src_v, dst_v = since_version(node.op_type, source), since_version(node.op_type, target)
    if src_v is None or dst_v is None or src_v == dst_v:
        return False
    return relabel_opset(node, source, target, elem_type) == target


def relabel_opset(node: onnx.NodeProto, source: int, target: int,
                  elem_type: Callable[[str], int | None] = lambda name: None) -> int:
    """The opset nearest ``target`` that ``node`` reaches from ``source`` by relabelling alone.

    ``target`` when the whole change is a relabel (see :func:`is_relabel`); ``source`` when no
    step is; on the way down, the opset just above the first step that is not type-only (so
    that onnx's converter does only that step and the rest: Split-18 → 13 by relabel, → 11 by
    the converter).
    """
    op = node.op_type
    src_v, dst_v = since_version(op, source), since_version(op, target)
    if src_v is None or dst_v is None or src_v == dst_v:
        return source
    if op in _CONTROL_FLOW:
        return target if _control_flow_relabel(node, src_v, dst_v, target) else source
    steps = TYPE_ONLY.get(op)
    if steps is None:
        return source
    if op == "Split" and (len(node.input) < 2 or not node.input[1]):
        return source  # Split-18 without ``split`` needs ``num_outputs``: the converter's job
    low, high = min(src_v, dst_v), max(src_v, dst_v)
    crossed = sorted((v for v in range(low + 1, high + 1) if since_version(op, v) == v), reverse=dst_v < src_v)
    reached, used = source, set()
    if dst_v > src_v:  # upward: all or nothing
        # The types a node uses at ``source`` are allowed at ``target`` (type-only steps only add
        # types), and onnx's converter relabels these steps too: no type lookups needed.
        return target if set(crossed) <= set(steps) else source
    else:
        for v in crossed:  # descending
            if v not in steps or any(a.name in steps[v] for a in node.attribute):
                break
            used.add(v)
            reached = v - 1
        if not used:
            return source
        if since_version(op, reached) == dst_v:
            reached = target
    return reached if _types_fit(node, reached, elem_type) else source


@functools.lru_cache(maxsize=4096)
def relabel_always(op: str, source: int, target: int) -> bool:
    """Whether :func:`relabel_opset` gives ``target`` for every ``op`` node, whatever its inputs.

    True for upward changes made of type-only steps alone (not control flow, not Split, whose
    answers depend on the node). Lets the pipeline leave such nodes alone without looking at them.
    """
    if op in _CONTROL_FLOW or op == "Split" or target <= source:
        return False
    src_v, dst_v = since_version(op, source), since_version(op, target)
    steps = TYPE_ONLY.get(op)
    if src_v is None or dst_v is None or dst_v <= src_v or steps is None:
        return False
    return all(v in steps for v in range(src_v + 1, dst_v + 1) if since_version(op, v) == v)


def _types_fit(node: onnx.NodeProto, opset: int, elem_type: Callable[[str], int | None]) -> bool:
    """Whether every type ``node`` uses is allowed by its schema at ``opset``."""
    op = node.op_type
    schema = onnx.defs.get_schema(op, opset)
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    formal = list(schema.inputs)
    for i, name in enumerate(node.input):
        if not name:
            continue
        if not formal:
            return False
        param = formal[min(i, len(formal) - 1)]
        if i >= len(formal) and param.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
            return False
        types = allowed.get(param.type_str)
        if types is None:
            continue  # a fixed type (e.g. tensor(int64) shape inputs), not a type parameter
        elem = elem_type(name)
        if elem is None or _tensor_str(elem) not in types:
            return False
    for attr in node.attribute:  # types chosen by attributes: Cast's ``to``, Constant's value
        if op == "Cast" and attr.name == "to" and _tensor_str(attr.i) not in allowed.get("T2", set()):
            return False
        if op == "Constant" and attr.type == onnx.AttributeProto.TENSOR \
                and _tensor_str(attr.t.data_type) not in allowed.get("T", set()):
            return False
    return True


def _tensor_str(elem: int) -> str:
    return f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"


def _control_flow_relabel(node: onnx.NodeProto, src_v: int, dst_v: int, target: int) -> bool:
    op = node.op_type
    low = min(src_v, dst_v)
    if op == "If":
        if low < 11:
            if dst_v != 1 or src_v < 11:
                return False  # upward from 1 is the converter's job (it has that adapter)
            branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
            then_b, else_b = branches.get("then_branch"), branches.get("else_branch")
            if then_b is None or else_b is None or len(then_b.output) != len(else_b.output):
                return False
            for a, b in zip(then_b.output, else_b.output, strict=True):
                sa, sb = _static_shape(a.type), _static_shape(b.type)
                if sa is None or sa != sb:
                    return False
    elif op == "Loop":
        if low < 11:
            return False
    else:  # Scan
        if low < 9:
            return False
        if dst_v < 11:
            for attr in node.attribute:
                if attr.name in ("scan_input_axes", "scan_output_axes") and any(v < 0 for v in attr.ints):
                    return False
    schema = onnx.defs.get_schema(op, target)
    allowed = {t for c in schema.type_constraints for t in c.allowed_type_strs}
    for tp in _boundary_types(node):
        spelled = _type_str(tp)
        if spelled is None or spelled not in allowed:
            return False
    return True
