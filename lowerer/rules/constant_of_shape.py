"""Lowering of ConstantOfShape (9, 20, 23, 25) for targets below opset 9.

The output is the ``value`` attribute (a one-element tensor; float32 0 when absent) broadcast to
the shape input: ``Expand`` of that scalar (opset >= 8), and below 8 ``Tile`` of a ones-shaped
constant with the shape as repeats, which needs the shape's length to be static. Both copy the
one value: exact for every type.
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import lowering

__all__ = ["constant_of_shape"]


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
