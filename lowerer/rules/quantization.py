"""Version-step adapters for QuantizeLinear and DequantizeLinear at 13 (per-axis quantization).

Version 13 added ``axis`` for per-axis scales and zero points; version 10 took scalars only.
Down, a node whose scale and zero point are scalars means the same without ``axis``; up, a
version-10 node (scalars) means the same at 13.
"""

from __future__ import annotations

from lowerer.steps import generic
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import remove_attribute
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["quantize_13_10"]


@adapter(("QuantizeLinear", "DequantizeLinear"), 13, DOWN)
def quantize_13_10(em: Emitter, step: Step, direction: str) -> None:
    """Scalar scale and zero point: drop ``axis``; per-axis ones have no version-10 form."""
    node = generic.copy_of(em.node)
    for index in (1, 2):
        if index < len(node.input) and node.input[index]:
            rank = em.rank(node.input[index])
            if rank != 0:
                shown = "unknown" if rank is None else str(rank)
                em.refuse(f"input {node.input[index]!r} has rank {shown}; {step.op}-10 takes scalar scales and "
                          "zero points only (per-axis quantization came at 13)")
    remove_attribute(node, "axis")
    generic.cross(em, step, direction, node, handled=(Semantics,))


adapter(("QuantizeLinear", "DequantizeLinear"), 13, UP)(generic.meaning_kept)
