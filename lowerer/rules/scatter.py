"""Version-step adapters for Scatter 9 ↔ 11, and for ScatterElements/ScatterND reductions going down.

Scatter was deprecated at 11 for ScatterElements; ScatterElements and ScatterND gained ``reduction``
at 16 (``add``, ``mul``) and 18 (``max``, ``min``).

* Up: Scatter-9 becomes ScatterElements-11 (the same meaning: Scatter-9 has no negative
  indices, ScatterElements-11 only adds them); the engine takes it on to the target.
* Down: a Scatter-11 node (already invalid: onnx.checker rejects the deprecated op) maps to
  Scatter-9 when its indices are a constant, negative ones counted from the back with the static
  size along ``axis``.
* ScatterElements/ScatterND with ``reduction`` ``add``/``mul`` going below 16, ``max``/``min`` below 18,
  by one of two exact forms (``none``, and ``add``/``mul`` crossing 18 → 16, is crossed as usual):

  - the indices a constant that writes no position twice (negative ones counted from the back first):
    ``Scatter(data, i, combine(Gather(data, i), updates))``, one vectorized pass;
  - otherwise (indices computed at run time, as TopK's in mixture-of-experts routing, or a constant that
    writes some position twice): a Loop that applies the updates one at a time in the kernel's order
    (row-major over the indices), each iteration reading the current value with GatherND, combining it
    with its update and writing it back with a plain single-row ScatterND. Exact for every reduction and
    any duplicates. Slower: one iteration per update element (ScatterElements) or per index row
    (ScatterND), each writing a copy of the data tensor.

  ``combine`` is the kernel's own: ``a + b``, ``a * b`` (bool: ``Or``, ``And``), and for ``max``/``min``
  ``a > b ? a : b`` / ``a < b ? a : b``, which is what onnxruntime's kernels compute (NaN and signed zeros
  included), where the Max/Min ops would propagate NaN. For floats the choice is a GatherElements over
  ``[b, a]`` indexed by ``Cast(a > b)``, not ``Where``, whose onnxruntime kernel turns a chosen -0.0 into
  +0.0 (:func:`_pick`).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter, normalize_axis
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["LOOP_OVER_UPDATES", "nonnegative_indices", "scatter_11", "scatter_11_9", "scatter_reduction_16_13",
           "scatter_reduction_18_16",
           "unique_element_indices", "unique_nd_indices"]


def nonnegative_indices(em: Emitter, data: str, indices: str, axis: int, why: str) -> str:
    """``indices`` as a value with no negative entry: itself, or a constant counted from the back; else refuse."""
    value = em.constant(indices)
    if value is None:
        em.refuse(f"indices {indices!r} are not a constant, so they cannot be proven non-negative, which {why}")
    if value.size == 0 or bool(np.all(value >= 0)):
        return indices
    dims = em.dims(data)
    size = dims[normalize_axis(axis, len(dims))] if dims is not None else None
    if size is None:
        em.refuse(f"indices {indices!r} hold negative entries, which {why}, and the size of {data!r} along axis "
                  f"{axis} is not static; add shape information")
    return em.const(np.where(value < 0, value + size, value).astype(value.dtype), "indices")


@adapter("Scatter", 11, UP)
def scatter_11(em: Emitter, step: Step, direction: str) -> None:
    """Scatter-9 → ScatterElements-11 (going up; the engine takes it on to the target)."""
    node = em.node
    axis = attribute_value(node, "axis")
    em.op("ScatterElements", list(node.input), list(node.output), axis=axis)


@adapter("Scatter", 11, DOWN)
def scatter_11_9(em: Emitter, step: Step, direction: str) -> None:
    """Scatter-11 → Scatter-9 with indices proven non-negative (a constant)."""
    node = copy_of(em.node)
    axis = attribute_value(node, "axis")
    node.input[1] = nonnegative_indices(em, node.input[0], node.input[1], axis if isinstance(axis, int) else 0,
                                        "Scatter-9 does not accept")
    generic.cross(em, step, direction, node, handled=(Semantics,))


# -- reductions going down, and the ops below their first versions ------------------------------
#: The op that combines the current value with an update, per ``reduction`` (max/min: see :func:`_combine`).
_COMBINE = {"add": "Add", "mul": "Mul"}
#: The op reading back what each scatter writes over.
_GATHER = {"ScatterElements": "GatherElements", "ScatterND": "GatherND"}
_BOOL = onnx.TensorProto.BOOL
_INT64 = onnx.TensorProto.INT64
#: The float element types, whose -0.0 onnxruntime's Where loses (see :func:`_pick`).
_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16,
                     onnx.TensorProto.BFLOAT16})


def _static_dims(em: Emitter, data: str, count: int | None) -> list[int] | None:
    """The first ``count`` (None: all) dims of ``data`` when all are static, else None."""
    dims = em.dims(data)
    chosen = None if dims is None else dims if count is None else dims[:count]
    if chosen is None or any(d is None for d in chosen):
        return None
    return [int(d) for d in chosen if d is not None]


def unique_element_indices(em: Emitter, data: str, indices: str, axis: int) -> np.ndarray | None:
    """ScatterElements' ``indices`` as a non-negative constant proven to write no position twice, else None.

    None when they are not a constant, write some position twice, or hold negative entries and the size
    along the axis is not static.
    """
    found = em.constant(indices)
    if found is None:
        return None
    value = np.asarray(found).astype(np.int64)
    if value.size and bool(np.any(value < 0)):
        dims = _static_dims(em, data, None)
        if dims is None:
            return None
        value = np.where(value < 0, value + dims[axis], value)
    if value.size and value.shape[axis] > 1 and bool(np.any(np.diff(np.sort(value, axis=axis), axis=axis) == 0)):
        return None
    return value


def unique_nd_indices(em: Emitter, data: str, indices: str) -> np.ndarray | None:
    """ScatterND's ``indices`` as a non-negative constant proven to address no slice twice, else None."""
    found = em.constant(indices)
    if found is None:
        return None
    value = np.asarray(found).astype(np.int64)
    k = value.shape[-1] if value.ndim else 0
    rows = value.reshape(-1, k) if k else value.reshape(-1, 0)
    if rows.size and bool(np.any(rows < 0)):
        dims = _static_dims(em, data, k)
        if dims is None:
            return None
        rows = np.where(rows < 0, rows + np.array(dims), rows)
    if len(rows) > 1 and len(np.unique(rows, axis=0)) != len(rows):
        return None
    return rows.reshape(value.shape)


def _combine(em: Emitter, reduction: str, current: str, update: str, elem: int | None, leading_one: bool = False
             ) -> str:
    """``current`` combined with ``update`` as onnxruntime's scatter kernels do.

    ``add``/``mul``: Add/Mul (bool: Or/And); ``max``: ``a > b ? a : b``, ``min``: ``a < b ? a : b``, the
    kernels' own (an update of NaN wins, a NaN already there loses; the Max/Min ops would give NaN for
    both), chosen by :func:`_pick` for floats (bytes copied, the sign of zero kept), by Where otherwise.
    ``leading_one``: ``current`` and ``update`` have the same shape, of leading dim 1 (the Loop's one update).
    """
    if reduction in ("max", "min"):
        keep = em.op("Greater" if reduction == "max" else "Less", [current, update])
        if elem in _FLOATS:
            return _pick(em, keep, current, update, leading_one)
        return em.op("Where", [keep, current, update])
    if elem == _BOOL:
        return em.op("Or" if reduction == "add" else "And", [current, update])
    return em.op(_COMBINE[reduction], [current, update])


def _pick(em: Emitter, keep: str, current: str, update: str, leading_one: bool) -> str:
    """``keep ? current : update`` elementwise, copying the chosen values' bytes (the sign of zero kept).

    Not ``Where``: onnxruntime's CPU Where (``onnxruntime/core/providers/cpu/tensor/where_op.cc``) builds
    ``cond ? X : 0`` and ``!cond ? Y : 0`` and merges them with ``x != 0 ? x : y``, so an X of -0.0 where the
    condition holds comes out +0.0 (measured on onnxruntime 1.32.0: ``Where(true, -0.0, -1.0)`` is 0.0),
    while the scatter kernels' ``a > b ? a : b`` keeps it. ``GatherElements`` over ``[update, current]``
    (flattened to one row each unless ``leading_one``: both already of leading dim 1), indexed by
    ``Cast(keep)``, copies bytes instead.
    """
    which = em.op("Cast", [keep], to=_INT64)
    if leading_one:
        return em.op("GatherElements", [em.op("Concat", [update, current], axis=0), which], axis=0)
    row = em.const(np.array([1, -1], dtype=np.int64), "row")
    both = em.op("Concat", [em.op("Reshape", [update, row]), em.op("Reshape", [current, row])], axis=0)
    which = em.op("Reshape", [which, row])
    picked = em.op("GatherElements", [both, which], axis=0)
    return em.op("Reshape", [picked, em.op("Shape", [current])])


def _reduction_by_reading(em: Emitter, reduction: str, value: np.ndarray, axis: int | None) -> None:
    """``em.node`` as ``Scatter*(data, i, combine(Gather*(data, i), updates))``, ``value`` its unique indices."""
    node = em.node
    data, _, updates = node.input
    axis_attrs = {} if axis is None else {"axis": axis}
    idx = em.const(value, "indices")
    current = em.op(_GATHER[node.op_type], [data, idx], None, **axis_attrs)
    combined = _combine(em, reduction, current, updates, em.elem_type(data))
    em.op(node.op_type, [data, idx, combined], list(node.output), **axis_attrs)


def _positions(em: Emitter, shape: str) -> str:
    """The ``[count, len(shape)]`` int64 multi-indices of every position of a tensor of ``shape``, row-major."""
    ones = em.op("ConstantOfShape", [shape], value=helper.make_tensor("one", _BOOL, [1], [True]))
    return em.op("Transpose", [em.op("NonZero", [ones])], perm=[1, 0])


def _count(em: Emitter, table: str) -> str:
    """The number of rows of ``table``, an int64 scalar (a Loop's trip count)."""
    return em.op("Gather", [em.op("Shape", [table]), em.const(np.array(0, dtype=np.int64), "rows")], axis=0)


#: The slower form the reduction adapters may write (:attr:`lowerer.steps.registry.RegistryEntry.loop_form`).
LOOP_OVER_UPDATES = "a Loop over updates"


def _trips(em: Emitter, indices: str, axis: int | None) -> int | None:
    """The Loop's trip count where static: the index elements (ScatterElements) or index rows (ScatterND)."""
    dims = em.dims(indices)
    counted = dims if axis is not None else None if dims is None else dims[:-1]
    if counted is None or any(d is None for d in counted):
        return None
    return int(np.prod([d for d in counted if d is not None], dtype=np.int64))


def _say_loop(em: Emitter, indices: str, axis: int | None, keep: int) -> None:
    """Tell the emitter the replacement is a Loop over the updates (refused under ``no_loops``)."""
    why = ("the indices are computed at run time" if em.constant(indices) is None
           else "the constant indices are not proven to write each position once")
    em.loop_form(LOOP_OVER_UPDATES, _trips(em, indices, axis), why, keep)


def _reduction_by_loop(em: Emitter, reduction: str, axis: int | None) -> None:
    """``em.node`` as a Loop that applies its updates one at a time, in the kernel's (row-major) order.

    Iteration ``t``: ``row`` is the data coordinate written (ScatterElements: the position of element ``t``
    with its index on ``axis``; ScatterND: index row ``t``), ``new = combine(GatherND(state, row), update)``
    and ``state = ScatterND(state, row, new)`` (a single row: nothing written twice). GatherND checks every
    index as the kernel does, and counts negative ones from the back.
    """
    node = em.node
    data, indices, updates = node.input
    elem = em.require_elem_type(data, f"the Loop that applies reduction={reduction!r} one update at a time "
                                      "carries it")
    if elem == onnx.TensorProto.STRING or (elem == _BOOL and reduction in ("max", "min")):
        em.refuse(f"data {data!r} is {onnx.TensorProto.DataType.Name(elem).lower()}, for which "
                  f"reduction={reduction!r} has no meaning (onnxruntime has no kernel for it either)")
    if em.elem_type(indices) != _INT64:
        indices = em.op("Cast", [indices], to=_INT64)
    if axis is not None:  # ScatterElements: every position of the indices, its axis coordinate the index there
        rank = em.require_rank(data, "to normalize the axis")
        where = _positions(em, em.op("Shape", [indices]))
        column = em.op("Reshape", [indices, em.const(np.array([-1, 1], dtype=np.int64), "column")])
        order = [*range(axis), rank, *range(axis + 1, rank)]
        table = em.op("Gather", [em.op("Concat", [where, column], axis=1),
                                 em.const(np.array(order, dtype=np.int64), "order")], axis=1)
        flat = em.op("Reshape", [updates, em.const(np.array([-1], dtype=np.int64), "flat")])
        count = _count(em, table)
    else:  # ScatterND: every position of the index rows (indices' leading dims)
        index_rank = em.require_rank(indices, "to enumerate its index rows")
        if index_rank == 1:  # one index row, one update
            table = em.const(np.zeros((1, 0), dtype=np.int64), "position")
            count = em.const(np.array(1, dtype=np.int64), "rows")
        else:
            lead = em.op("Slice", [em.op("Shape", [indices]), em.const(np.array([0], dtype=np.int64), "start"),
                                   em.const(np.array([index_rank - 1], dtype=np.int64), "end")])
            table = _positions(em, lead)
            count = _count(em, table)
    start = len(em.nodes)
    step, cond_in, state = em.fresh("t"), em.fresh("cond_in"), em.fresh("state")
    for name, known in ((step, (_INT64, [])), (cond_in, (_BOOL, [])), (state, (elem, em.dims(data)))):
        em.facts.add_type(name, known)
    at = em.op("Reshape", [step, em.const(np.array([1], dtype=np.int64), "one")])
    entry = em.op("Gather", [table, at], axis=0)  # table[t:t+1]
    if axis is not None:
        row, update = entry, em.op("Gather", [flat, at], axis=0)
    else:
        row, update = em.op("GatherND", [indices, entry]), em.op("GatherND", [updates, entry])
    combined = _combine(em, reduction, em.op("GatherND", [state, row]), update, elem, leading_one=True)
    state_out = em.op("ScatterND", [state, row, combined])
    cond_out = em.op("Identity", [cond_in])
    body_nodes = em.nodes[start:]
    del em.nodes[start:]
    vi = helper.make_tensor_value_info
    body = helper.make_graph(body_nodes, em.fresh(f"{node.name or node.op_type}_updates"),
                             [vi(step, _INT64, []), vi(cond_in, _BOOL, []), vi(state, elem, None)],
                             [vi(cond_out, _BOOL, []), vi(state_out, elem, None)])
    em.op("Loop", [count, "", data], list(node.output), body=body)


def _reduction(em: Emitter, reduction: str, keep: int) -> None:
    """``em.node`` (a Scatter* with ``reduction``) written with plain scatters.

    Vectorized where the indices are a constant writing no position twice, else a Loop over the updates
    (said to the emitter: ``keep`` is the version the reduction came at, the lowest opset that needs none).
    """
    node = em.node
    data, indices, _ = node.input
    axis: int | None = None
    if node.op_type == "ScatterElements":
        rank = em.require_rank(data, "to normalize the axis")
        given = attribute_value(node, "axis")
        axis = normalize_axis(given if isinstance(given, int) else 0, rank)
        value = unique_element_indices(em, data, indices, axis)
    else:
        value = unique_nd_indices(em, data, indices)
    if value is not None:
        _reduction_by_reading(em, reduction, value, axis)
    else:
        _say_loop(em, indices, axis, keep)
        _reduction_by_loop(em, reduction, axis)


@adapter(("ScatterElements", "ScatterND"), 16, DOWN, loop_form=LOOP_OVER_UPDATES)
def scatter_reduction_16_13(em: Emitter, step: Step, direction: str) -> None:
    """Down from 16: a reduction other than ``none`` is written with a plain scatter, else crossed."""
    reduction = str(attribute_value(em.node, "reduction") or "none")
    if reduction == "none":
        generic.cross(em, step, direction)
        return
    _reduction(em, reduction, step.version)


@adapter(("ScatterElements", "ScatterND"), 18, DOWN, loop_form=LOOP_OVER_UPDATES)
def scatter_reduction_18_16(em: Emitter, step: Step, direction: str) -> None:
    """Down from 18: ``max``/``min`` (new at 18) are written with a plain scatter, else crossed."""
    reduction = str(attribute_value(em.node, "reduction") or "none")
    if reduction not in ("max", "min"):
        generic.cross(em, step, direction)
        return
    _reduction(em, reduction, step.version)
