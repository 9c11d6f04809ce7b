"""Scan bodies' output shapes: onnxruntime's Scan below opset 14 needs them stated.

:func:`refuse_unshaped_scan_body` refuses taking a Scan from 14 or above to below 14 when its body
has an output of no known shape (:func:`unshaped_scan_output`); :func:`scan_body_output_dims` infers
a body's output dims on its own, as the conversion walk (:mod:`.walk`) states them.
"""

from __future__ import annotations

import onnx

from lowerer.core.errors import ConversionError
from lowerer.core.opsets import since_version
from lowerer.facts.body_shapes import infer_outputs
from lowerer.facts.constants import ConstantIndex
from lowerer.facts.shapes import ShapeIndex
from lowerer.model_io.naming import node_label
from lowerer.model_io.scopes import Scope

__all__ = ["SCAN_NEEDS_SHAPES_BELOW", "refuse_unshaped_scan_body", "scan_body_output_dims", "unshaped_scan_output"]

#: Below this opset onnxruntime's Scan needs its body's output shapes (from 14 on it infers them; measured on
#: the expanded LinearAttention cases of onnx's node tests, whose body shapes no inference recovers).
SCAN_NEEDS_SHAPES_BELOW = 14


def scan_body_output_dims(shapes: ShapeIndex, constants: ConstantIndex, body: Scope,
                          opsets: dict[str, int]) -> list[tuple[int, list[int | None] | None]]:
    """The dims of each output of a Scan ``body`` (nodes valid at ``opsets``), inferred for the body on its own.

    Its inputs and outer values typed as the model's inference knows them, small outer constants
    valued (a body's ``Unsqueeze(x, axes)`` with ``axes`` an outer initializer: the model's inference
    sees no value, so no rank); see :func:`lowerer.facts.body_shapes.infer_outputs`.
    """
    assert isinstance(body.holder, onnx.GraphProto)
    found, _ = infer_outputs(body.holder, opsets, lambda n: shapes.lookup(body, n), lambda n: shapes.symbols(body, n),
                             lambda n: constants.value(body, n))
    return [(elem, None if dims is None else [d if isinstance(d, int) else None for d in dims]) for elem, dims in found]


def unshaped_scan_output(shapes: ShapeIndex, body: Scope, constants: ConstantIndex | None = None,
                         opset: int | None = None) -> str | None:
    """The first output of a Scan ``body`` that states no shape and has none onnx infers, or None.

    With ``constants`` and the ``opset`` the body's nodes are valid at, also none inferred for the body
    on its own (:func:`scan_body_output_dims`), as the conversion walk states them.
    """
    assert isinstance(body.holder, onnx.GraphProto)
    alone: list[tuple[int, list[int | None] | None]] | None = None
    for k, out in enumerate(body.holder.output):
        if out.type.HasField("tensor_type") and out.type.tensor_type.HasField("shape"):
            continue
        vt = shapes.lookup(body, out.name, lambda vt: vt[1] is not None)
        if vt is None or vt[1] is None:
            if constants is not None and opset is not None:
                if alone is None:
                    alone = scan_body_output_dims(shapes, constants, body, {"": opset})
                if alone[k][1] is not None:
                    continue
            return str(out.name)
    return None


def refuse_unshaped_scan_body(node: onnx.NodeProto, scope: Scope, shapes: ShapeIndex, body: Scope,
                               source: int | None, target: int, constants: ConstantIndex | None = None) -> None:
    """Refuse taking a Scan below 14 from 14 or above when its body has an output of no known shape.

    ``constants`` given, a body (at ``source``, not yet converted) is also inferred on its own.
    """
    if source is None or not target < SCAN_NEEDS_SHAPES_BELOW <= source:
        return
    unshaped = unshaped_scan_output(shapes, body, constants, source)
    if unshaped is not None:
        raise ConversionError(
            f"node {node_label(node)} (Scan-{since_version('Scan', source)}, in {scope.path}) cannot be converted to "
            f"opset {target}: its body "
            f"states no shape for output {unshaped!r} and none can be inferred, and onnxruntime's Scan below "
            f"opset {SCAN_NEEDS_SHAPES_BELOW} cannot run such a body; the lowest opset this node can be taken "
            f"to is {SCAN_NEEDS_SHAPES_BELOW} (or state the body's output shapes)", node=node, scope=scope.path)
