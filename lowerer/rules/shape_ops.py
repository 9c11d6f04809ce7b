"""Version-step adapters for the shape ops: Reshape, Shape, Split, Slice, Pad.

Each adapter crosses one step exactly, or refuses. The generic handling of the step's other
changes (types, constant inputs to attributes ...) is left to :func:`lowerer.steps.generic.cross`.

* ``Reshape`` 14 → 13: ``allowzero=1`` means the same as Reshape-13 unless the shape holds a 0
  (then the output is an empty tensor of exactly that shape); when that cannot be ruled out, a
  static form (Reshape with a trailing axis that takes the 0, Expand, Reshape back; no control
  flow: tract and MNN read lowerer's former ``If`` form wrongly) keeps it exact from opset 8.
* ``Shape`` 15 → 13: ``start``/``end`` become a ``Slice`` of the whole shape (same clamping).
* ``Split`` 18 → 13: ``num_outputs`` becomes the ``split`` sizes (needs the static size along
  the axis); 13 → 18: without ``split``, ``num_outputs`` is the number of outputs (equal parts).
* ``Slice`` 10 → 1: ``steps`` must be all ones (constant); the rest moves to attributes.
* ``Pad`` 18 → 13: an ``axes`` input is folded into full-rank ``pads`` (constant axes, known rank).
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute, set_attribute
from lowerer.steps.changes import AttrAdded, InputAdded, Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["pad_18_13", "reshape_14_13", "shape_15_13", "slice_10_1", "split_13_11", "split_13_18", "split_18_13",
           "unsqueeze_11_1"]

INT64_MAX = int(np.iinfo(np.int64).max)
#: Element types ConstantOfShape-9 can make (bfloat16 only from 20).
_CONSTANT_OF_SHAPE_9 = frozenset({
    onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.INT8,
    onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT8,
    onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64, onnx.TensorProto.BOOL})


def _zeros_copy_the_same(em: Emitter, data: str, shape_name: str) -> bool:
    """Whether a 0 in the shape would be the data's own dim at that place (so "copy" gives that 0 too).

    Exporters build a view's shape from dims of tensors (``Concat(Shape(x)[0:1], [12, 64])``): an
    entry that is dim ``k`` of the data itself, a dim of a tensor with the same symbolic dim, a
    static non-zero dim or a non-zero constant can only be 0 where the data's dim ``k`` is 0. A
    shape with a -1 may hold no 0 at all under ``allowzero=1`` (the spec forbids both together).
    """
    entries = em.facts.shape_entries(shape_name)
    if entries is None:
        return False
    if -1 in entries:  # with allowzero=1 a shape holding -1 may not hold a 0 (the spec): no 0 in valid runs
        return True
    mine = em.facts.symbols(data)
    for k, entry in enumerate(entries):
        if isinstance(entry, int):
            if entry == 0:
                return False
            continue
        source, index = entry
        if source == data and index == k:
            continue
        dims = em.facts.symbols(source)
        dim = dims[index] if dims is not None and 0 <= index < len(dims) else None
        if isinstance(dim, int) and dim > 0:
            continue
        here = mine[k] if mine is not None and k < len(mine) else None
        if isinstance(dim, str) and dim == here:
            continue
        return False
    return True


@adapter("Reshape", 14, DOWN)
def reshape_14_13(em: Emitter, step: Step, direction: str) -> None:
    """``allowzero`` dropped where it cannot matter, else guarded exactly (see the module docstring)."""
    node = copy_of(em.node)
    allowzero = attribute_value(node, "allowzero")
    remove_attribute(node, "allowzero")
    data, shape_name = node.input[0], node.input[1]
    if not allowzero:
        generic.cross(em, step, direction, node, handled=(AttrAdded,))
        return
    shape = em.constant(shape_name)
    data_dims = em.dims(data)
    shape_dims = em.dims(shape_name)
    no_zero = (shape is not None and not np.any(shape == 0)) \
        or (data_dims is not None and all(d is not None and d > 0 for d in data_dims)) \
        or shape_dims == [0] or _zeros_copy_the_same(em, data, shape_name)
    if no_zero:  # a 0 in the shape is impossible (or the original fails on it): the same meaning
        generic.cross(em, step, direction, node, handled=(AttrAdded,))
        return
    if em.target < 8:
        em.refuse("allowzero=1 with a shape that may hold a 0 has no Reshape-5 form below opset 8 (the exact form "
                  "needs Expand-8)")
    _reshape_empty_by_expand(em, node)


def _reshape_empty_by_expand(em: Emitter, node: onnx.NodeProto) -> None:
    """``allowzero=1`` without control flow (module docstring): every runtime reads it the same way.

    ``z = (shape == 0)``; ``X = Reshape(data, [shape + z, 1 - 2·max(z)])``: where the shape holds no
    0 this is the Reshape with a trailing 1; where it holds 0s (then no -1, by the spec, and the
    data is empty) the zero places read 1 and the trailing -1 takes the 0. ``Expand(X, [1 - z, 1])``
    puts the 0s in their places, and ``Reshape(·, shape)`` drops the trailing axis: each 0 there
    copies a 0 of the expanded tensor, so it means what ``allowzero=1`` means.
    """
    data, shape_name = node.input[0], node.input[1]
    one = em.const(np.array([1], np.int64), "one")
    zeros = em.op("Cast", [em.op("Equal", [shape_name, em.const(np.array([0], np.int64), "zero")])],
                  to=onnx.TensorProto.INT64)
    any_zero = em.op("ReduceMax", [zeros], keepdims=1)
    last = em.op("Sub", [one, em.op("Mul", [any_zero, em.const(np.array([2], np.int64), "two")])])
    padded = em.op("Reshape", [data, em.op("Concat", [em.op("Add", [shape_name, zeros]), last], axis=0)])
    placed = em.op("Expand", [padded, em.op("Concat", [em.op("Sub", [one, zeros]), one], axis=0)])
    em.op("Reshape", [placed, shape_name], list(node.output))


@adapter("Shape", 15, DOWN)
def shape_15_13(em: Emitter, step: Step, direction: str) -> None:
    """``start``/``end`` → ``Shape`` then ``Slice`` (Slice clamps out-of-range bounds the same way)."""
    node = copy_of(em.node)
    start = attribute_value(node, "start")
    end = attribute_value(node, "end")
    remove_attribute(node, "start")
    remove_attribute(node, "end")
    if (start in (None, 0)) and end is None:
        generic.cross(em, step, direction, node, handled=(AttrAdded,))
        return
    (output,) = node.output
    whole = em.fresh(f"{output}_whole")
    node.output[0] = whole
    generic.cross(em, step, direction, node, handled=(AttrAdded,))
    em.op("Slice", [whole, em.const(np.array([start or 0], dtype=np.int64), "start"),
                    em.const(np.array([INT64_MAX if end is None else end], dtype=np.int64), "end"),
                    em.const(np.array([0], dtype=np.int64), "axes")], [output])


@adapter("Split", 18, DOWN)
def split_18_13(em: Emitter, step: Step, direction: str) -> None:
    """``num_outputs`` → ``split`` sizes: parts of ``ceil(n / num_outputs)``, the last one smaller.

    With a static size along the axis the sizes are a constant; otherwise they are computed from
    ``Shape`` (Split-13 takes them as an input; below 13 they must be constant and are refused).
    """
    node = copy_of(em.node)
    parts = attribute_value(node, "num_outputs")
    remove_attribute(node, "num_outputs")
    if parts is None:
        generic.cross(em, step, direction, node, handled=(Semantics,))
        return
    x = node.input[0]
    axis_value = attribute_value(node, "axis")
    axis = 0 if axis_value is None else int(axis_value)  # type: ignore[call-overload]
    count = int(parts)  # type: ignore[call-overload]
    if len(node.output) != count:
        em.refuse(f"num_outputs={count} with {len(node.output)} outputs")
    dims = em.dims(x)
    if dims is not None and axis < 0:
        axis += len(dims)
    size = dims[axis] if dims is not None and 0 <= axis < len(dims) else None
    while len(node.input) < 2:
        node.input.append("")
    if size is not None:
        chunk = -(-size // count)
        sizes = [min(chunk, max(size - k * chunk, 0)) for k in range(count)]
        node.input[1] = em.const(np.array(sizes, dtype=np.int64), "split")
    else:
        if axis < 0:
            axis += em.require_rank(x, "to compute the split sizes")
        n = em.op("Gather", [em.op("Shape", [x]), em.const(np.array([axis], dtype=np.int64), "axis")], axis=0)
        k = em.const(np.array([count], dtype=np.int64), "parts")
        chunk_name = em.op("Div", [em.op("Add", [n, em.const(np.array([count - 1], dtype=np.int64), "round")]), k])
        last = em.op("Sub", [n, em.op("Mul", [chunk_name, em.const(np.array([count - 1], dtype=np.int64), "rest")])])
        if count > 1:
            repeated = em.op("Expand", [chunk_name, em.const(np.array([count - 1], dtype=np.int64), "repeat")])
            node.input[1] = em.op("Concat", [repeated, last], axis=0)
        else:
            node.input[1] = last
    generic.cross(em, step, direction, node, handled=(Semantics,))


@adapter("Split", 13, DOWN)
def split_13_11(em: Emitter, step: Step, direction: str) -> None:
    """Split sizes computed at run time: one Slice per output (its bounds the running sums), from Slice-10.

    Split-11 takes the sizes as an attribute; from opset 10 Slice takes run-time bounds, and the parts
    of a Split are the consecutive slices of those sizes along the axis. Constant sizes cross as usual.
    """
    node = em.node
    sizes = node.input[1] if len(node.input) > 1 else ""
    if not sizes or em.constant(sizes) is not None or em.target < 10:
        generic.cross(em, step, direction)
        return
    x = node.input[0]
    axis_value = attribute_value(node, "axis")
    axis = 0 if axis_value is None else int(axis_value)  # type: ignore[call-overload]
    if axis < 0:
        axis += em.require_rank(x, "to slice along a negative axis (Slice-10 takes none)")
    i64 = np.int64
    axes = em.const(np.array([axis], i64), "axes")
    start = em.const(np.array([0], i64), "start")
    for k, out in enumerate(node.output):
        size = em.op("Slice", [sizes, em.const(np.array([k], i64), "k"), em.const(np.array([k + 1], i64), "k1")])
        end = em.op("Add", [start, size])
        if out:
            em.op("Slice", [x, start, end, axes], [out])
        start = end


@adapter("Split", 18, UP)
def split_13_18(em: Emitter, step: Step, direction: str) -> None:
    """Without a ``split`` input, Split-18 needs ``num_outputs`` (equal parts: what Split-13 does)."""
    node = copy_of(em.node)
    if len(node.input) < 2 or not node.input[1]:
        set_attribute(node, "num_outputs", len(node.output))
    generic.cross(em, step, direction, node, handled=(Semantics,))


@adapter("Slice", 10, DOWN)
def slice_10_1(em: Emitter, step: Step, direction: str) -> None:
    """``steps`` (input 4) must be constant ones; starts/ends/axes move to attributes (generic)."""
    node = copy_of(em.node)
    if len(node.input) > 4 and node.input[4]:
        steps = em.constant(node.input[4])
        if steps is not None and not np.all(steps == 1):
            _stepped_slice(em, step, direction, node, steps.reshape(-1))
            return
        if steps is None:
            em.refuse(f"Slice-1 has no steps, and input 'steps' ({node.input[4]!r}) is not a constant")
        generic.drop_input(node, 4)
    generic.cross(em, step, direction, node, handled=(InputAdded,))


def _stepped_slice(em: Emitter, step: Step, direction: str, node: onnx.NodeProto, steps: np.ndarray) -> None:
    """Steps other than 1 (``x[:, ::2]``): Slice-1 on the other axes, then Gathers of constant indices.

    One Gather per stepped axis, of the indices Python's ``slice.indices`` gives (it clamps as Slice-10
    does). Needs constant starts, ends and axes, and static dims on the stepped axes.
    """
    starts, ends = em.constant(node.input[1]), em.constant(node.input[2])
    has_axes = len(node.input) > 3 and bool(node.input[3])
    axes = em.constant(node.input[3]) if has_axes else None if starts is None else np.arange(starts.size)
    dims = em.dims(node.input[0])
    if starts is None or ends is None or axes is None or dims is None:
        em.refuse("Slice-1 has no steps; taking every n-th element with Gather needs constant starts, ends and axes "
                  "and the input's rank")
    picked = [int(a) + len(dims) if int(a) < 0 else int(a) for a in axes.reshape(-1)]
    bounds = list(zip(picked, starts.reshape(-1).tolist(), ends.reshape(-1).tolist(), steps.tolist(), strict=True))
    plain = [b for b in bounds if b[3] == 1]
    x, output = node.input[0], node.output[0]
    if plain:
        sliced = copy_of(node)
        sliced.input[:] = [x, *(em.const(np.array([b[i] for b in plain], np.int64), n)
                                for i, n in ((1, "starts"), (2, "ends"), (0, "axes")))]
        x = sliced.output[0] = em.fresh(f"{output}_sliced")
        generic.cross(em, step, direction, sliced, handled=(InputAdded,))
    stepped = [b for b in bounds if b[3] != 1]
    for k, (axis, start, end, by) in enumerate(stepped):
        if dims[axis] is None:
            em.refuse(f"Slice-1 has no steps, and taking axis {axis} in steps of {by} with Gather needs its "
                      "size, which is not static")
        index = np.arange(*slice(start, end, by).indices(int(dims[axis] or 0)), dtype=np.int64)
        x = em.op("Gather", [x, em.const(index, "every")], [output] if k == len(stepped) - 1 else None, axis=axis)


@adapter("Pad", 18, DOWN)
def pad_18_13(em: Emitter, step: Step, direction: str) -> None:
    """An ``axes`` input (constant, known rank) is folded into pads for every axis (run-time pads sliced in place)."""
    node = copy_of(em.node)
    if len(node.input) > 3 and node.input[3]:
        axes = em.constant(node.input[3])
        pads = em.constant(node.input[1])
        rank = em.rank(node.input[0])
        if axes is None or rank is None or (pads is None and em.target < 11):
            em.refuse("Pad-13 has no 'axes' input; folding it into the pads needs constant axes and the input's "
                      "rank" + (", and constant pads below Pad-11 (pads as an attribute)" if em.target < 11 else ""))
        normalized = [int(a) + rank if a < 0 else int(a) for a in axes.reshape(-1)]
        if pads is not None:
            full = np.zeros(2 * rank, dtype=np.int64)
            for k, a in enumerate(normalized):
                full[a] = pads.reshape(-1)[k]
                full[a + rank] = pads.reshape(-1)[k + len(normalized)]
            node.input[1] = em.const(full, "pads")
        else:  # run-time pads: each axis's entries sliced into place, zeros elsewhere (the last mention wins)
            source: dict[int, int] = {}
            for k, a in enumerate(normalized):
                source[a], source[a + rank] = k, k + len(normalized)
            i64 = np.int64
            pieces = [em.op("Slice", [node.input[1], em.const(np.array([source[j]], i64), "at"),
                                      em.const(np.array([source[j] + 1], i64), "to")])
                      if j in source else em.const(np.array([0], i64), "zero") for j in range(2 * rank)]
            node.input[1] = em.op("Concat", pieces, axis=0)
        generic.drop_input(node, 3)
    generic.cross(em, step, direction, node, handled=(InputAdded,))



@adapter("Unsqueeze", 11, DOWN)
def unsqueeze_11_1(em: Emitter, step: Step, direction: str) -> None:
    """Negative axes count from the back of the *output*: made non-negative with rank(data) + len(axes)."""
    node = copy_of(em.node)
    axes = attribute_value(node, "axes")
    if isinstance(axes, list) and any(a < 0 for a in axes):
        rank = em.require_rank(node.input[0], "to make the negative axes non-negative (Unsqueeze-1)")
        out_rank = rank + len(axes)
        set_attribute(node, "axes", [a + out_rank if a < 0 else a for a in axes])
    generic.cross(em, step, direction, node, handled=(Semantics,))


adapter("Unsqueeze", 11, UP)(generic.meaning_kept)  # Unsqueeze-11 only accepts more (negative axes)
