"""Version-step adapter for DFT 20 → 17, where ``axis`` moved from an attribute to an input.

A constant axis moves back to the attribute (the generic crossing). An axis computed at run time
picks, in nested Ifs, one DFT per axis it may name (``0 .. rank - 2``, or ``k - rank``; the last axis
holds the complex parts): the branch taken is the DFT the node computes, with the same kernel.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.rules.reduction import if_chain
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, set_attribute
from lowerer.steps.changes import AttrToInput, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, adapter

__all__ = ["dft_20_17"]


@adapter("DFT", 20, DOWN)
def dft_20_17(em: Emitter, step: Step, direction: str) -> None:
    """A run-time axis: one branch per axis it may name (DFT-17 takes it as an attribute)."""
    node = em.node
    axis = node.input[2] if len(node.input) > 2 else ""
    if not axis or em.constant(axis) is not None:
        generic.cross(em, step, direction)
        return
    x = node.input[0]
    rank = em.require_rank(x, "(one branch per axis the run-time axis may name)")
    elem = em.require_elem_type(x, "each branch states its output's type")
    dtype = np.int64 if em.elem_type(axis) != onnx.TensorProto.INT32 else np.int32
    candidates = list(range(rank - 1))
    if not candidates:
        em.refuse(f"the input {x!r} has rank {rank}; DFT transforms an axis before the last")

    def branch(k: int) -> onnx.GraphProto:
        start = len(em.nodes)
        made = copy_of(node)
        del made.input[2:]
        while made.input and not made.input[-1]:  # an absent dft_length, now last
            made.input.pop()
        set_attribute(made, "axis", k)
        out = em.fresh(f"{node.output[0]}_axis{k}")
        made.output[0] = out
        generic.cross(em, step, direction, made, handled=(AttrToInput,))
        nodes = em.nodes[start:]
        del em.nodes[start:]
        return onnx.helper.make_graph(nodes, em.fresh(f"axis{k}"), [],
                                      [onnx.helper.make_tensor_value_info(out, elem, None)])

    conds = [em.op("Or", [em.op("Equal", [axis, em.const(np.array([k], dtype), "axis")]),
                          em.op("Equal", [axis, em.const(np.array([k - rank], dtype), "axis")])])
             for k in candidates[:-1]]
    if_chain(em, node, conds, candidates, branch, elem)
