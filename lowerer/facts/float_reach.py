"""Which values of a model its float graph inputs reach: where a NaN (or inf) a user feeds can get to.

A rewrite whose NaN handling differs from the original's (its check records it: ``details.nan``) matters
to a user only where NaN can reach it from the inputs; a model whose inputs are integer ids (a language
model's) feeds NaN to none of its rewrites. Any value computed from a float input counts as reached
(no op is assumed to stop a NaN); a control-flow node's body is reached where the node's inputs are, and
the node's outputs where its inputs or its bodies' outputs are.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

__all__ = ["FLOAT_TYPES", "reached_by_float_inputs"]

_T = onnx.TensorProto
#: The element types that hold NaN (the float types, float8 and float4 included).
FLOAT_TYPES = frozenset(t for t in (_T.FLOAT, _T.DOUBLE, _T.FLOAT16, _T.BFLOAT16, *(
    getattr(_T, name) for name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1",
                                   "FLOAT8E8M0") if hasattr(_T, name))))


def _may_hold_float(value: onnx.ValueInfoProto) -> bool:
    """Whether a graph input may carry a float value (a non-tensor input, sequence or optional, counts)."""
    if not value.type.HasField("tensor_type"):
        return True
    return value.type.tensor_type.elem_type in FLOAT_TYPES


def reached_by_float_inputs(model: onnx.ModelProto) -> set[str]:
    """The names of the values that a float graph input of ``model`` reaches (the inputs included).

    Inputs that are also initializers (their default) count as not fed. Model-local functions are not
    entered: a call's outputs are reached where its inputs are.
    """
    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    reached = {v.name for v in graph.input if v.name not in initialized and _may_hold_float(v)}
    if reached:
        _propagate(graph.node, reached)
    return reached


def _propagate(nodes: Iterable[onnx.NodeProto], reached: set[str]) -> None:
    for node in nodes:
        hit = any(name in reached for name in node.input if name)
        for attribute in node.attribute:
            bodies = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
            for body in bodies:
                if hit:
                    reached.update(v.name for v in body.input)
                _propagate(body.node, reached)
                hit = hit or any(v.name in reached for v in body.output)
        if hit:
            reached.update(name for name in node.output if name)
