"""Lowering of ConstantOfShape (9, 20, 23, 25) for targets below opset 9, and its ``constant-fill`` form.

The output is the ``value`` attribute (a one-element tensor; float32 0 when absent) broadcast to
the shape input: ``Expand`` of that scalar (opset >= 8), and below 8 ``Tile`` of a ones-shaped
constant with the shape as repeats, which needs the shape's length to be static. Both copy the
one value: exact for every type.

:class:`ConstantFillForm` (``constant-fill``, for a backend whose ConstantOfShape is wrong: MNN on an empty
shape): a shape input whose value is provably constant makes the output a constant, written as an
initializer holding the value (at most :data:`FILL_LIMIT` elements). :class:`ExplicitFillForm`
(``explicit-fill``): a ConstantOfShape without ``value`` written with ``value`` set to its default, float32 0
(MNN leaves such an output unfilled).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.steps.emitter import Emitter, Rule
from lowerer.steps.registry import lowering

__all__ = ["FILL_LIMIT", "ConstantFillForm", "ExplicitFillForm", "constant_of_shape"]

#: The most elements the ``constant-fill`` form writes as an initializer.
FILL_LIMIT = 1 << 16


def _fill_value(em: Emitter) -> np.ndarray:
    """The scalar the output is filled with (float32 0 when ``value`` is absent)."""
    for a in em.node.attribute:
        if a.name == "value":
            if a.ref_attr_name:
                em.refuse("value refers to a function attribute; the fill value must be known")
            return np.asarray(numpy_helper.to_array(a.t)).reshape(-1)[:1].reshape(())
    return np.zeros((), np.float32)


@lowering("ConstantOfShape")
def constant_of_shape(em: Emitter) -> None:
    """ConstantOfShape as Expand of the scalar value (Tile of a constant below opset 8)."""
    node = em.node
    shape = node.input[0]
    value = _fill_value(em)
    if em.target >= 8:
        em.op("Expand", [em.const(value, "value"), shape], list(node.output))
        return
    dims = em.dims(shape)
    length = dims[0] if dims is not None and len(dims) == 1 else None
    if length is None:
        em.refuse(f"the length of the shape input {shape!r} is not static, and below opset 8 (no Expand) the "
                  "output is a Tile of a constant of that rank; add shape information or choose a target opset >= 8")
    if length == 0:
        em.op("Identity", [em.const(value, "value")], list(node.output))
        return
    em.op("Tile", [em.const(np.full([1] * length, value), "value"), shape], list(node.output))


class ConstantFillForm(Rule):
    """``ConstantOfShape`` of a provably constant shape → the filled tensor as an initializer, exactly.

    The shape's value comes from :mod:`lowerer.facts.constants` (a literal, or folded from static dims); one
    not provably constant, or a fill of more than :data:`FILL_LIMIT` elements, is refused.
    """

    name = "constant-fill"
    op_types = ("ConstantOfShape",)
    versions = (9, 20, 23, 25)
    decomposition = "constant-fill"

    def rewrite(self, em: Emitter) -> None:
        """Emit ``Identity`` of an initializer holding the filled output."""
        node = em.node
        shape = em.constant(node.input[0])
        if shape is None or shape.dtype == object or shape.ndim != 1:
            em.refuse("the shape input is computed at run time (not provably constant), so the output cannot be "
                      "written as a constant")
        dims = [int(d) for d in shape]
        if any(d < 0 for d in dims):
            em.refuse(f"the shape input holds a negative dim ({dims}), which no tensor has")
        size = int(np.prod(dims, dtype=np.int64)) if dims else 1
        if size > FILL_LIMIT:
            em.refuse(f"the output holds {size} elements, more than the {FILL_LIMIT} lowerer writes as a constant")
        value = _fill_value(em)
        filled = np.full(dims, value, dtype=value.dtype)
        em.op("Identity", [em.const(filled, "filled")], list(node.output))


class ExplicitFillForm(Rule):
    """``ConstantOfShape`` without ``value`` → the same node with ``value`` = float32 ``[0]``, its schema default."""

    name = "explicit-fill"
    op_types = ("ConstantOfShape",)
    versions = (9, 20, 23, 25)
    decomposition = "explicit-fill"

    def rewrite(self, em: Emitter) -> None:
        """Emit the node with its default ``value`` written."""
        node = em.copy_node()
        if not any(a.name == "value" for a in node.attribute):
            node.attribute.append(onnx.helper.make_attribute("value", numpy_helper.from_array(
                np.zeros(1, np.float32), "value")))
