"""Version-step adapters for the reductions (``ReduceSum`` 13, the other ``Reduce*`` 18).

At those steps ``axes`` moved from an attribute to an input (the generic handling moves it back
when it is constant) and ``noop_with_empty_axes`` appeared. That attribute matters only when the
axes are absent or empty: then 1 means "reduce nothing", which the older versions write as the
input itself (``Identity``); with axes given (or 0) it is dropped.

Axes computed at run time, of a static length, go down to 11 as one branch per set of axes they may
name, each reducing over its set with the attribute, picked by the set the axes name (If-11 and on:
the branches yield different shapes).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute, set_attribute
from lowerer.steps.changes import AttrAdded, AttrToInput, Change, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, adapter

__all__ = ["by_run_time_axes", "if_chain", "reduce_axes_input_down", "squeeze_axes_input_down"]

REDUCTIONS_18 = ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
                 "ReduceLogSumExp", "ReduceSumSquare")


@adapter("ReduceSum", 13, DOWN)
@adapter(REDUCTIONS_18, 18, DOWN)
def reduce_axes_input_down(em: Emitter, step: Step, direction: str) -> None:
    """``noop_with_empty_axes=1`` with no axes → ``Identity``; otherwise drop it and move the axes back."""
    node = copy_of(em.node)
    noop = attribute_value(node, "noop_with_empty_axes")
    remove_attribute(node, "noop_with_empty_axes")
    axes_name = node.input[1] if len(node.input) > 1 else ""
    axes = em.constant(axes_name) if axes_name else None
    if noop:
        if not axes_name or (axes is not None and axes.size == 0):
            em.op("Identity", [node.input[0]], list(node.output))
            return
        if axes is None:
            em.refuse(f"noop_with_empty_axes=1 with run-time axes {axes_name!r}: whether it reduces anything "
                      f"depends on them, and {step.op}-{step.previous} takes constant axes only")
    if axes is not None and axes.size == 0:  # no axes given: reduce all, which an absent attribute says
        del node.input[1:]
    if axes_name and axes is None:
        _by_run_time_axes(em, step, direction, node, axes_name)
        return
    generic.cross(em, step, direction, node, handled=(AttrAdded,))


def _by_run_time_axes(em: Emitter, step: Step, direction: str, node: onnx.NodeProto, axes_name: str) -> None:
    """Run-time axes of a static length L: one branch per set of at most L axes (:func:`by_run_time_axes`)."""

    def sets(rank: int, length: int) -> tuple[int, list[tuple[int, ...]]]:
        return rank, [s for size in range(1, min(length, rank) + 1) for s in itertools.combinations(range(rank), size)]

    by_run_time_axes(em, step, direction, node, axes_name, sets, "reduced", (AttrAdded, AttrToInput))


#: The most branches :func:`by_run_time_axes` writes (one per set of axes the run-time axes may name).
MAX_AXIS_SETS = 31


def by_run_time_axes(em: Emitter, step: Step, direction: str, node: onnx.NodeProto, axes_name: str,
                     sets_of: Callable[[int, int], tuple[int, list[tuple[int, ...]]]], what: str,
                     handled: tuple[type[Change], ...]) -> None:
    """Run-time ``axes`` (input 1) of a static length L: one branch per set they may name, picked at run time.

    ``sets_of(rank, L)`` gives the number of axis positions (the input's rank; an Unsqueeze's output
    rank) and the candidate sets. Position ``k`` is named when some entry equals ``k`` or ``k - width``;
    the named set, as a number (bit ``k`` for position ``k``), picks the branch that is the node with
    exactly that set as the older version's ``axes`` attribute: the branch taken is what the node does.
    Branches yield different shapes, which If takes from version 11 only.
    """
    data = node.input[0]
    dims = em.dims(axes_name)
    length = dims[0] if dims is not None and len(dims) == 1 else None
    why = (f"{step.op} takes 'axes' as input 1 from version {step.version} and {step.op}-{step.previous} as an "
           f"attribute, and input {axes_name!r} is not a constant")
    if length is None or length == 0:
        em.refuse(f"{why}; picking the {what} axes at run time needs their number static, and "
                  f"{axes_name!r} has {'no static length' if length is None else 'none'}")
    if em.target < 11:
        em.refuse(f"{why}; picking the {what} axes at run time needs If branches of different shapes "
                  "(from If-11); choose a target opset >= 11")
    rank = em.require_rank(data, f"to pick the {what} axes at run time")
    width, sets = sets_of(rank, int(length))
    if not sets or len(sets) > MAX_AXIS_SETS:
        em.refuse(f"{why}; picking the {what} axes at run time writes one branch per set of axes they may "
                  f"name, {len(sets)} here (at most {MAX_AXIS_SETS})")
    elem = em.require_elem_type(data, "each branch states its output's type")
    i64 = np.int64
    code = ""
    for k in range(width):
        named = em.op("Or", [em.op("Equal", [axes_name, em.const(np.array([k], i64), "axis")]),
                             em.op("Equal", [axes_name, em.const(np.array([k - width], i64), "axis")])])
        bit = em.op("ReduceMax", [em.op("Cast", [named], to=onnx.TensorProto.INT64)], axes=[0], keepdims=0)
        weighted = em.op("Mul", [bit, em.const(np.array(1 << k, i64), "weight")])
        code = weighted if not code else em.op("Add", [code, weighted])
    conds = [em.op("Equal", [code, em.const(np.array(sum(1 << k for k in s), i64), "set")]) for s in sets[:-1]]

    def branch(axes: tuple[int, ...]) -> onnx.GraphProto:
        start = len(em.nodes)
        made_node = copy_of(node)
        del made_node.input[1:]
        set_attribute(made_node, "axes", list(axes))
        out = em.fresh(f"{node.output[0]}_axes{''.join(map(str, axes))}")
        made_node.output[0] = out
        generic.cross(em, step, direction, made_node, handled=handled)
        made = em.nodes[start:]
        del em.nodes[start:]
        return onnx.helper.make_graph(made, em.fresh("axes"), [], [onnx.helper.make_tensor_value_info(out, elem, None)])

    if_chain(em, node, conds, sets, branch, elem)


@adapter(("Unsqueeze", "Squeeze"), 13, DOWN)
def squeeze_axes_input_down(em: Emitter, step: Step, direction: str) -> None:
    """Run-time axes of a static length, from 11: one branch per set of positions they may name.

    Unsqueeze: L distinct positions among the output's rank + L; Squeeze: L distinct axes of the input.
    Constant or absent axes cross as usual (back to the attribute).
    """
    node = em.node
    axes_name = node.input[1] if len(node.input) > 1 else ""
    if not axes_name or em.constant(axes_name) is not None:
        generic.cross(em, step, direction)
        return
    unsqueeze = node.op_type == "Unsqueeze"
    dims = em.dims(node.input[0]) or []

    def sets(rank: int, length: int) -> tuple[int, list[tuple[int, ...]]]:
        width = rank + length if unsqueeze else rank
        found = list(itertools.combinations(range(width), length)) if length <= width else []
        # Squeeze: only dims that may be 1 (the others are an error in the original, and a branch squeezing one
        # fails onnx's inference)
        return width, found if unsqueeze else [s for s in found if all(k >= len(dims) or dims[k] in (1, None)
                                                                          for k in s)]

    by_run_time_axes(em, step, direction, node, axes_name, sets, "unsqueezed" if unsqueeze else "squeezed",
                     (AttrToInput,))


def if_chain(em: Emitter, node: onnx.NodeProto, conds: list[str], choices: list[Any],
             branch: Callable[[Any], onnx.GraphProto], elem: int) -> None:
    """``node``'s output as ``branch(choices[j])`` for the first ``conds[j]`` that holds, else the last choice.

    Nested Ifs, the last choice innermost (one If per choice but the last); a single choice is
    inlined. ``branch`` is called for the last choice first, then from the second-to-last back to
    the first (it may emit into ``em`` and take its nodes back).
    """
    inner = branch(choices[-1])
    if len(choices) == 1:
        em.nodes.extend(inner.node)
        em.op("Identity", [inner.output[0].name], [node.output[0]])
        return
    for j in range(len(choices) - 2, -1, -1):
        out = node.output[0] if j == 0 else em.fresh(f"{node.output[0]}_from{j}")
        made = onnx.helper.make_node("If", [conds[j]], [out], name=em.fresh(f"{node.name or node.op_type}/If"),
                                     then_branch=branch(choices[j]), else_branch=inner)
        if j == 0:
            em.nodes.append(made)
            em.facts.add_node(made, em.opset)
            return
        inner = onnx.helper.make_graph([made], em.fresh("axes"), [],
                                       [onnx.helper.make_tensor_value_info(out, elem, None)])
