"""Version-step adapter for Attention 23 ↔ 24.

Attention-24 added the ``nonpad_kv_seqlen`` input (input 6; absent, the node means what it does at
23) and lets the last dimension of ``attn_mask`` (input 3) be shorter than
``total_sequence_length`` (the rest counts as -inf), where Attention-23 broadcasts it. A node with
no mask, or whose mask's last dimension is statically ``total_sequence_length`` (past plus
incoming keys), means the same at both versions: a relabel. Other masks (a last dimension of 1,
shorter, or not static) are refused: the two versions may read them differently.
"""

from __future__ import annotations

from lowerer.steps import generic
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["attention_24", "total_sequence_length"]


def _static(em: Emitter, name: str, axis_4d: int, axis_3d: int) -> int | None:
    """The static size of ``name`` along its sequence axis (4-D or 3-D layout), or None."""
    dims = em.dims(name)
    if dims is None:
        return None
    axis = axis_4d if len(dims) == 4 else axis_3d
    return dims[axis] if 0 <= axis < len(dims) else None


def total_sequence_length(em: Emitter) -> int | None:
    """Past plus incoming key positions of the Attention node ``em.node``, when static; else None."""
    node = em.node
    kv = _static(em, node.input[1], 2, 1)
    past = 0
    if len(node.input) > 4 and node.input[4]:
        past_len = _static(em, node.input[4], 2, 2)
        if past_len is None:
            return None
        past = past_len
    return None if kv is None else kv + past


@adapter("Attention", 24, DOWN, UP)
def attention_24(em: Emitter, step: Step, direction: str) -> None:
    """A relabel when there is no mask or the mask spans the whole key sequence."""
    node = em.node
    if len(node.input) > 3 and node.input[3]:
        mask = node.input[3]
        dims = em.dims(mask)
        last = dims[-1] if dims else None
        total = total_sequence_length(em)
        if last is None or total is None:
            em.refuse(f"the last dimension of attn_mask {mask!r} or total_sequence_length (past plus key "
                      "sequence length) is not static; Attention-23 and -24 agree only on a mask spanning "
                      "total_sequence_length (add shape information)")
        if last != total:
            em.refuse(f"attn_mask {mask!r} has a last dimension of {last} where total_sequence_length is {total}: "
                      "Attention-24 pads a shorter mask with -inf, Attention-23 broadcasts it; only a mask "
                      "spanning total_sequence_length (or none) means the same at both")
    generic.cross(em, step, direction, handled=(Semantics,))
