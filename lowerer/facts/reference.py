"""numpy reference implementations of the ops lowerer owns and of the ops its rewrites emit.

Used when onnxruntime cannot run a side of a check (no kernel for the type: Hardmax on
double or bfloat16, ArgMax on uint16; an opset it does not load). Each op is implemented
for the meaning of its *version*:

* Hardmax/Softmax/LogSoftmax 1 and 11 coerce the input to 2-D at ``axis`` (default 1);
  13 works on the single axis ``axis`` (default -1). (``onnx.reference`` implements the
  13 meaning for Hardmax 1/11, which is why lowerer has its own.)
* ArgMax/ArgMin 1 (non-negative axis), 11 (negative axis), 12 (``select_last_index``),
  13 (bfloat16), with ``keepdims``.
* GlobalMaxPool, and the data-movement and index ops rewrites emit (Transpose, Flatten,
  Reshape, Shape, Gather, Slice, Sub, Add, OneHot, ReduceMax, Cast, Equal, Range, ...).
  Arithmetic on float16/bfloat16 is carried out in float32 and rounded once.

:func:`evaluate` runs a list of nodes; :func:`supports` says whether it can.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.core.opsets import since_version
from lowerer.model_io.scopes import node_graphs

__all__ = [
    "ReferenceEvalError",
    "arg_extremum",
    "coerced_softmax",
    "evaluate",
    "global_max_pool",
    "hardmax",
    "np_dtype",
    "supports",
]


class ReferenceEvalError(Exception):
    """The reference cannot evaluate a node (op or version not implemented, or invalid input)."""


def np_dtype(elem_type: int) -> np.dtype[Any]:
    """The numpy dtype of an ONNX element type (bfloat16 via ml_dtypes)."""
    if elem_type == onnx.TensorProto.BFLOAT16:
        bf16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
        return bf16
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


def _compute_dtype(x: np.ndarray) -> np.dtype[Any]:
    """A dtype wide enough to compare/compute exactly for ``x`` (f16/bf16 widen to f32)."""
    if x.dtype == np.float64:
        return np.dtype(np.float64)
    if x.dtype.kind == "f" or x.dtype == np.dtype(ml_dtypes.bfloat16):
        return np.dtype(np.float32)
    return x.dtype


def _axis(axis: int, rank: int, version: int, op: str, allow_rank: bool = False) -> int:
    if axis < 0:
        if version < 11:
            raise ReferenceEvalError(f"{op}-{version} does not accept a negative axis ({axis})")
        axis += rank
    limit = rank + 1 if allow_rank else rank
    if not 0 <= axis < max(limit, 1):
        raise ReferenceEvalError(f"{op}-{version}: axis {axis} out of range for rank {rank}")
    return axis


def arg_extremum(x: np.ndarray, *, op: str, version: int, axis: int = 0, keepdims: int = 1,
                 select_last_index: int = 0) -> np.ndarray:
    """ArgMax/ArgMin at ``version``: int64 indices of the first (or last) extremum along ``axis``."""
    a = _axis(axis, x.ndim, version, op)
    if x.shape[a] == 0:
        out_shape = [1 if i == a else d for i, d in enumerate(x.shape)] if keepdims else \
            [d for i, d in enumerate(x.shape) if i != a]
        if 0 not in out_shape:
            raise ReferenceEvalError(f"{op}: empty axis {a} and a non-empty output")
        return np.zeros(out_shape, dtype=np.int64)
    v = x.astype(_compute_dtype(x), copy=False)
    fn = np.argmax if op == "ArgMax" else np.argmin
    if select_last_index and version >= 12:
        n = v.shape[a]
        idx = (n - 1) - fn(np.flip(v, axis=a), axis=a)
    else:
        idx = fn(v, axis=a)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, a) if keepdims else idx


def _rows(x: np.ndarray, op: str, version: int,
          axis: int | None) -> tuple[np.ndarray, int, Callable[[np.ndarray], np.ndarray]]:
    """``x`` viewed as rows to work on (last axis), and a function restoring the result's layout."""
    if version < 13:
        a = _axis(1 if axis is None else axis, x.ndim, version, op, allow_rank=True)
        n = int(np.prod(x.shape[:a], dtype=np.int64))
        d = int(np.prod(x.shape[a:], dtype=np.int64))
        shape = x.shape
        return x.reshape(n, d), 1, lambda y: y.reshape(shape)
    a = _axis(-1 if axis is None else axis, x.ndim, version, op)
    moved = np.moveaxis(x, a, -1)
    return moved, moved.ndim - 1, lambda y: np.moveaxis(y, -1, a)


def hardmax(x: np.ndarray, *, version: int, axis: int | None = None) -> np.ndarray:
    """Hardmax at ``version``: 1 at the first maximum of each row, 0 elsewhere (same dtype)."""
    rows, last, restore = _rows(x, "Hardmax", version, axis)
    out = np.zeros(rows.shape, dtype=x.dtype)
    if rows.size:
        idx = np.argmax(rows.astype(_compute_dtype(rows), copy=False), axis=last)
        np.put_along_axis(out, np.expand_dims(idx, last), np.array(1, dtype=x.dtype), axis=last)
    return restore(out)


def coerced_softmax(x: np.ndarray, *, op: str, version: int, axis: int | None = None) -> np.ndarray:
    """Softmax or LogSoftmax at ``version`` (computed in float32, or float64 for double)."""
    rows, last, restore = _rows(x, op, version, axis)
    v = rows.astype(_compute_dtype(rows), copy=False)
    with np.errstate(all="ignore"):
        shifted = v - np.max(v, axis=last, keepdims=True) if v.size else v
        e = np.exp(shifted)
        s = np.sum(e, axis=last, keepdims=True)
        y = shifted - np.log(s) if op == "LogSoftmax" else e / s
        return restore(y.astype(x.dtype))


def global_max_pool(x: np.ndarray) -> np.ndarray:
    """GlobalMaxPool: the maximum over every axis after the first two, kept as size-1 dims."""
    if x.ndim < 3:
        raise ReferenceEvalError("GlobalMaxPool needs rank >= 3")
    pooled: np.ndarray = np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)
    return pooled


# -- the interpreter ------------------------------------------------------------------------------

Attrs = Mapping[str, Any]
OpFn = Callable[[list[np.ndarray | None], Attrs, int], list[np.ndarray]]


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            out[a.name] = numpy_helper.to_array(a.t)
        elif a.type == onnx.AttributeProto.GRAPH or a.type == onnx.AttributeProto.GRAPHS:
            raise ReferenceEvalError(f"{node.op_type}: subgraph attributes are not supported")
        else:
            out[a.name] = onnx.helper.get_attribute_value(a)
    return out


def _slice_indices(dim: int, start: int, end: int, step: int) -> np.ndarray:
    if step == 0:
        raise ReferenceEvalError("Slice: step 0")
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:  # the spec: starts clamped to [0, dim-1], ends to [-1, dim-1] (so start < -dim takes element 0)
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return np.arange(start, end, step, dtype=np.int64)


def _slice(x: np.ndarray, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None,
           steps: Sequence[int] | None) -> np.ndarray:
    axes = list(range(len(starts))) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    steps = [1] * len(starts) if steps is None else list(steps)
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        x = np.take(x, _slice_indices(x.shape[a], int(s), int(e), int(st)), axis=a)
    return x


def _reshape(x: np.ndarray, shape: Sequence[int], allowzero: int) -> np.ndarray:
    new = [int(d) for d in shape]
    if not allowzero:
        new = [x.shape[i] if d == 0 else d for i, d in enumerate(new)]
    return x.reshape(new)


def _reduce_axes(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> tuple[int, ...] | None:
    if version >= 18:
        axes = inputs[1] if len(inputs) > 1 and inputs[1] is not None else None
        if axes is None or axes.size == 0:
            return () if attrs.get("noop_with_empty_axes", 0) else None
        return tuple(int(a) for a in axes.reshape(-1))
    axes_attr = attrs.get("axes")
    # An ``axes`` attribute present but empty reduces over every axis, as when absent (onnxruntime and
    # onnx.reference; below 18 there is no ``noop_with_empty_axes``).
    return tuple(int(a) for a in axes_attr) if axes_attr is not None and len(axes_attr) else None


def _reduce_max(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    axes = _reduce_axes(inputs, attrs, version)
    keep = bool(attrs.get("keepdims", 1))
    if axes == ():
        return [x.copy()]
    return [np.max(x, axis=axes, keepdims=keep)]


def _one_hot(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    indices, depth, values = inputs[0], inputs[1], inputs[2]
    assert indices is not None and depth is not None and values is not None
    d = int(depth.reshape(-1)[0])
    idx = indices.astype(np.int64)
    if version >= 11:  # OneHot-11 counts a negative index from the back; at 9 it is outside [0, depth): all off
        idx = np.where(idx < 0, idx + d, idx)
    axis = int(attrs.get("axis", -1))
    rank = idx.ndim + 1
    axis = axis + rank if axis < 0 else axis
    hot = np.arange(d, dtype=np.int64).reshape([d] + [1] * idx.ndim) == idx[None, ...]
    hot = np.moveaxis(hot, 0, axis)
    return [np.where(hot, values[1], values[0]).astype(values.dtype)]


def _cast(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    to = attrs["to"]
    if isinstance(to, bytes):  # Cast-1 names the type
        to = onnx.TensorProto.DataType.Value(to.decode().upper())
    return [x.astype(np_dtype(int(to)))]


def _unsqueeze(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    axes = [int(a) for a in (inputs[1] if version >= 13 else attrs["axes"])]  # type: ignore[union-attr]
    rank = x.ndim + len(axes)
    for a in sorted(a + rank if a < 0 else a for a in axes):
        x = np.expand_dims(x, a)
    return [x]


def _squeeze(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    raw = (inputs[1] if len(inputs) > 1 else None) if version >= 13 else attrs.get("axes")
    if raw is None:
        return [np.squeeze(x)]
    return [np.squeeze(x, axis=tuple(int(a) for a in raw))]


def _flatten(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    a = _axis(int(attrs.get("axis", 1)), x.ndim, version, "Flatten", allow_rank=True)
    return [x.reshape(int(np.prod(x.shape[:a], dtype=np.int64)), int(np.prod(x.shape[a:], dtype=np.int64)))]


def _shape(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    s = np.array(x.shape, dtype=np.int64)
    if version >= 15:
        start = attrs.get("start", 0)
        end = attrs.get("end", None)
        s = s[slice(start, end)]
    return [s]


def _gather(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x, idx = inputs[0], inputs[1]
    assert x is not None and idx is not None
    a = int(attrs.get("axis", 0))
    a = a + x.ndim if a < 0 else a
    i = idx.astype(np.int64)
    i = np.where(i < 0, i + x.shape[a], i)
    return [np.take(x, i, axis=a)]


def _slice_op(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    x = inputs[0]
    assert x is not None
    if version < 10:
        return [_slice(x, attrs["starts"], attrs["ends"], attrs.get("axes"), None)]

    def opt(i: int) -> list[int] | None:
        v = inputs[i] if len(inputs) > i else None
        return None if v is None else [int(t) for t in v.reshape(-1)]

    starts, ends = opt(1), opt(2)
    assert starts is not None and ends is not None
    return [_slice(x, starts, ends, opt(3), opt(4))]


def _at(inputs: list[np.ndarray | None], i: int) -> np.ndarray:
    """Input ``i``, which the op requires."""
    value = inputs[i] if i < len(inputs) else None
    if value is None:
        raise ReferenceEvalError(f"input {i} is missing")
    return value


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    values: np.ndarray = np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)
    return values


def _binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> OpFn:
    def run(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        assert a is not None and b is not None
        if version < 7 and a.shape != b.shape:
            b = _legacy_broadcast(a, b, attrs)
        with np.errstate(all="ignore"):
            return [np.asarray(fn(a, b)).astype(np.result_type(a, b) if a.dtype == b.dtype else a.dtype)]

    return run


def _legacy_broadcast(a: np.ndarray, b: np.ndarray, attrs: Attrs) -> np.ndarray:
    """``b`` shaped for the broadcast of Add/Sub/Mul/Div 1-6 (``broadcast=1``): its dims match ``a``'s from ``axis``.

    Without ``axis`` the dims of ``b`` are a suffix of ``a``'s (a scalar ``b`` matches anything).
    """
    if not attrs.get("broadcast", 0):
        raise ReferenceEvalError("binary op below opset 7 without broadcast=1 on different shapes")
    if b.ndim > a.ndim:
        raise ReferenceEvalError("binary op below opset 7: B has a higher rank than A")
    if b.size == 1:  # a 1-element B, of any rank up to A's
        return b.reshape([1] * a.ndim)
    axis = int(attrs.get("axis", a.ndim - b.ndim))
    if axis < 0 or axis + b.ndim > a.ndim or tuple(a.shape[axis:axis + b.ndim]) != b.shape:
        raise ReferenceEvalError(f"binary op below opset 7: B of shape {list(b.shape)} does not match A of "
                                 f"shape {list(a.shape)} at axis {axis}")
    return b.reshape([1] * axis + list(b.shape) + [1] * (a.ndim - axis - b.ndim))


def _single(fn: Callable[[np.ndarray, Attrs, int], np.ndarray]) -> OpFn:
    def run(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
        x = inputs[0]
        assert x is not None
        return [fn(x, attrs, version)]

    return run


def _compare(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> OpFn:
    """A comparison or logical op (bool result; legacy ``broadcast=1`` before 7)."""
    def run(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
        a, b = _at(inputs, 0), _at(inputs, 1)
        if version < 7 and a.shape != b.shape:
            b = _legacy_broadcast(a, b, attrs)
        return [np.asarray(fn(a.astype(_compute_dtype(a)), b.astype(_compute_dtype(b))), dtype=bool)]

    return run


def _trilu(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    """Trilu-14: the upper (``upper=1``) or lower triangle of the last two dims from diagonal ``k``."""
    x = _at(inputs, 0)
    k = int(inputs[1].reshape(-1)[0]) if len(inputs) > 1 and inputs[1] is not None else 0
    if x.ndim < 2:
        raise ReferenceEvalError("Trilu needs rank >= 2")
    return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]


def _constant(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    if "value" in attrs:
        return [np.asarray(attrs["value"])]
    for key, dtype in (("value_int", np.int64), ("value_float", np.float32), ("value_ints", np.int64),
                       ("value_floats", np.float32)):
        if key in attrs:
            return [np.asarray(attrs[key], dtype=dtype)]
    raise ReferenceEvalError("Constant without a supported value attribute")


def _concat(inputs: list[np.ndarray | None], attrs: Attrs, version: int) -> list[np.ndarray]:
    axis = int(attrs.get("axis", 1 if version < 4 else 0))  # Concat-1's axis defaults to 1; required from 4
    return [np.concatenate([i for i in inputs if i is not None], axis=axis)]


_OPS: dict[str, OpFn] = {
    "ArgMax": _single(lambda x, at, v: arg_extremum(
        x, op="ArgMax", version=v, axis=int(at.get("axis", 0)), keepdims=int(at.get("keepdims", 1)),
        select_last_index=int(at.get("select_last_index", 0)))),
    "ArgMin": _single(lambda x, at, v: arg_extremum(
        x, op="ArgMin", version=v, axis=int(at.get("axis", 0)), keepdims=int(at.get("keepdims", 1)),
        select_last_index=int(at.get("select_last_index", 0)))),
    "Hardmax": _single(lambda x, at, v: hardmax(x, version=v, axis=at.get("axis"))),
    "Softmax": _single(lambda x, at, v: coerced_softmax(x, op="Softmax", version=v, axis=at.get("axis"))),
    "LogSoftmax": _single(lambda x, at, v: coerced_softmax(x, op="LogSoftmax", version=v, axis=at.get("axis"))),
    "GlobalMaxPool": _single(lambda x, at, v: global_max_pool(x)),
    "ReduceMax": _reduce_max,
    "Transpose": _single(lambda x, at, v: np.transpose(x, at.get("perm"))),
    "Flatten": _flatten,
    "Reshape": lambda ins, at, v: [_reshape(
        _at(ins, 0), list(at["shape"]) if v < 5 else [int(d) for d in _at(ins, 1)],
        int(at.get("allowzero", 0)))],
    "Shape": _shape,
    "Gather": _gather,
    "Slice": _slice_op,
    "Sub": _binary(np.subtract),
    "Add": _binary(np.add),
    "Mul": _binary(np.multiply),
    "Div": _binary(np.divide),
    "Equal": lambda ins, at, v: [np.asarray(np.equal(_at(ins, 0), _at(ins, 1)))],
    "Greater": _compare(np.greater), "Less": _compare(np.less),
    "GreaterOrEqual": _compare(np.greater_equal), "LessOrEqual": _compare(np.less_equal),
    "And": _compare(np.logical_and), "Or": _compare(np.logical_or),
    "Not": lambda ins, at, v: [np.logical_not(_at(ins, 0))],
    "Trilu": _trilu,
    "OneHot": _one_hot,
    "Cast": _cast,
    "Identity": lambda ins, at, v: [_at(ins, 0)],
    "Constant": _constant,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Concat": _concat,
    "If": lambda ins, at, v: [],  # evaluated by _if, which needs the enclosing values
    "Size": lambda ins, at, v: [np.array(_at(ins, 0).size, dtype=np.int64)],
    "Range": lambda ins, at, v: [_range(_at(ins, 0), _at(ins, 1), _at(ins, 2))],
    "Where": lambda ins, at, v: [np.asarray(np.where(_at(ins, 0), _at(ins, 1), _at(ins, 2)))],
    "Expand": lambda ins, at, v: [_at(ins, 0) * np.ones([int(d) for d in _at(ins, 1)], dtype=_at(ins, 0).dtype)],
}

#: Since-versions of each op whose meaning the implementations above follow.
_VERSIONS: dict[str, tuple[int, ...]] = {
    "ArgMax": (1, 11, 12, 13), "ArgMin": (1, 11, 12, 13),
    "Hardmax": (1, 11, 13), "Softmax": (1, 11, 13), "LogSoftmax": (1, 11, 13),
    "GlobalMaxPool": (1, 22), "ReduceMax": (1, 11, 12, 13, 18, 20),
    "Transpose": (1, 13, 21, 23, 24, 25), "Flatten": (1, 9, 11, 13, 21, 23, 24, 25),
    "Reshape": (1, 5, 13, 14, 19, 21, 23, 24, 25), "Shape": (1, 13, 15, 19, 21, 23, 24, 25),
    "Gather": (1, 11, 13), "Slice": (1, 10, 11, 13), "Sub": (1, 6, 7, 13, 14), "Add": (1, 6, 7, 13, 14),
    "Mul": (1, 6, 7, 13, 14), "Div": (1, 6, 7, 13, 14), "Equal": (1, 7, 11, 13, 19), "OneHot": (9, 11),
    "Cast": (1, 6, 9, 13, 19, 21, 23, 24, 25), "Identity": (1, 13, 14, 16, 19, 21, 23, 24, 25),
    "Constant": (1, 9, 11, 12, 13, 19, 21, 23, 24, 25), "Unsqueeze": (1, 11, 13, 21, 23, 24, 25),
    "Squeeze": (1, 11, 13, 21, 23, 24, 25), "Concat": (1, 4, 11, 13),
    "Range": (11,), "Where": (9, 16), "Expand": (8, 13), "If": (1, 11, 13, 16, 19, 21, 23, 24, 25),
    "Size": (1, 13, 19, 21, 23, 24, 25), "Greater": (1, 7, 9, 13), "Less": (1, 7, 9, 13),
    "GreaterOrEqual": (12, 16), "LessOrEqual": (12, 16), "And": (1, 7), "Or": (1, 7), "Not": (1,), "Trilu": (14,),
}


def _version(node: onnx.NodeProto, opset: int) -> int:
    if node.domain not in ("", "ai.onnx"):
        raise ReferenceEvalError(f"{node.domain}.{node.op_type}: only the default domain is implemented")
    v = since_version(node.op_type, opset)
    if node.op_type not in _OPS or v is None or v not in _VERSIONS.get(node.op_type, ()):
        raise ReferenceEvalError(f"the reference does not implement {node.op_type} at opset {opset}")
    return v


def supports(nodes: Iterable[onnx.NodeProto], opset: int) -> str | None:
    """None when every node (and every If branch) can be evaluated at ``opset``, else the reason it cannot."""
    for node in nodes:
        try:
            _version(node, opset)
        except ReferenceEvalError as e:
            return str(e)
        if node.op_type == "If":
            for branch in node_graphs(node):
                why = supports(branch.node, opset)
                if why:
                    return why
    return None


def _if(node: onnx.NodeProto, opset: int, env: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """If: the chosen branch runs with the outer values in scope."""
    branch = {a.name: a.g for a in node.attribute}["then_branch" if bool(env[node.input[0]].reshape(-1)[0])
                                                   else "else_branch"]
    inner = dict(env)
    inner.update({t.name: numpy_helper.to_array(t) for t in branch.initializer})
    return evaluate(branch.node, opset, inner, [o.name for o in branch.output])


def evaluate(nodes: Sequence[onnx.NodeProto], opset: int, values: Mapping[str, np.ndarray],
             outputs: Sequence[str]) -> list[np.ndarray]:
    """Run ``nodes`` (topologically ordered) at default-domain ``opset`` on ``values``.

    Raises:
        ReferenceEvalError: an op or version the reference does not implement, or an invalid input.
    """
    env: dict[str, np.ndarray] = dict(values)
    for node in nodes:
        v = _version(node, opset)
        ins = [env[n] if n else None for n in node.input]
        try:
            results = _if(node, opset, env) if node.op_type == "If" else _OPS[node.op_type](ins, _attrs(node), v)
        except ReferenceEvalError:
            raise
        except (ValueError, IndexError, KeyError, TypeError) as e:
            raise ReferenceEvalError(f"{node.op_type}-{v}: {e}") from None
        for name, value in zip(node.output, results, strict=False):
            if name:
                env[name] = np.asarray(value)
    return [env[o] for o in outputs]
