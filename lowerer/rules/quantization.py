"""Version-step adapters for QuantizeLinear and DequantizeLinear: per-axis quantization at 13, types after.

Version 13 added ``axis`` for per-axis scales and zero points; version 10 took scalars only.
Down, a node whose scale and zero point are scalars means the same without ``axis``; up, a
version-10 node (scalars) means the same at 13. DequantizeLinear's later steps (float8 at 19;
int16, int4 and blocks at 21 ...) cross generically. A DequantizeLinear that cannot cross (per-axis
below 13, a type or ``block_size`` the older version lacks) is folded into the float constant it
computes when its inputs are constants and the caller asks (``fold_dequantize``,
:mod:`lowerer.rules.dequantize_fold`); else it is refused with a remedy that fits a quantizer-made model.
"""

from __future__ import annotations

import numpy as np

from lowerer.core.errors import ConversionError
from lowerer.rules.dequantize_fold import fold_or_refuse
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter
from lowerer.steps.table import TABLE

__all__ = ["dequantize_down", "quantize_13_10"]

@adapter(("QuantizeLinear", "DequantizeLinear"), 13, DOWN)
def quantize_13_10(em: Emitter, step: Step, direction: str) -> None:
    """Scalar scale and zero point: drop ``axis``; per-axis ones have no version-10 form (folded where asked)."""
    node = copy_of(em.node)
    for index in (1, 2):
        if index < len(node.input) and node.input[index]:
            rank = em.rank(node.input[index])
            if rank == 1 and em.dims(node.input[index]) == [1]:
                # one element is per-tensor (onnxruntime's IsScalarOr1ElementVector): quantize_static with
                # per_channel=False writes the int32 bias scale so; as a scalar it means the same at 10
                node.input[index] = _as_scalar(em, node.input[index])
            elif rank != 0:
                shown = "unknown" if rank is None else str(rank)
                why = (f"input {node.input[index]!r} has rank {shown}; {step.op}-10 takes scalar scales and "
                       "zero points only (per-axis quantization came at 13)")
                if step.op == "DequantizeLinear":
                    fold_or_refuse(em, why)
                    return
                em.refuse(why)
    remove_attribute(node, "axis")
    generic.cross(em, step, direction, node, handled=(Semantics,))


def _as_scalar(em: Emitter, name: str) -> str:
    """The one-element 1-D value ``name`` as a scalar: a constant of shape (), else a Reshape to ()."""
    value = em.constant(name)
    if value is not None:
        return em.const(value.reshape(()), "scalar")
    return em.op("Reshape", [name, em.const(np.array([], dtype=np.int64), "scalar_shape")])


adapter(("QuantizeLinear", "DequantizeLinear"), 13, UP)(generic.meaning_kept)


@adapter("DequantizeLinear", tuple(v for v in sorted(TABLE["DequantizeLinear"]) if v > 13), DOWN)
def dequantize_down(em: Emitter, step: Step, direction: str) -> None:
    """The generic crossing; where it refuses (a type or ``block_size`` the older version lacks), the fold."""
    made = len(em.nodes), len(em.constants)
    try:
        generic.cross(em, step, direction)
    except ConversionError as e:
        del em.nodes[made[0]:], em.constants[made[1]:]
        message = str(e)
        head = f"cannot be converted to opset {em.target}: "
        fold_or_refuse(em, message.split(head, 1)[1] if head in message else message)
