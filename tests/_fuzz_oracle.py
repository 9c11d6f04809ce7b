"""A small numpy oracle of the SOURCE semantics of the ops lowerer owns (for the fuzz tests).

Written independently of lowerer's rules and of ``onnx.reference`` (which gets Hardmax-1/11
wrong): each function states the meaning of one op at one since-version.
"""

from __future__ import annotations

import numpy as np


def _norm(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _first_max_onehot_rows(rows: np.ndarray) -> np.ndarray:
    out = np.zeros_like(rows)
    if rows.shape[1] == 0:
        return out
    idx = np.argmax(rows, axis=1)
    out[np.arange(rows.shape[0]), idx] = 1
    return out


def _softmax_rows(rows: np.ndarray, log: bool) -> np.ndarray:
    r = rows.astype(np.float64)
    if r.size == 0:
        return r
    m = r.max(axis=1, keepdims=True)
    e = np.exp(r - m)
    s = e.sum(axis=1, keepdims=True)
    return (r - m - np.log(s)) if log else (e / s)


def _rows_op(op: str, rows: np.ndarray) -> np.ndarray:
    if op == "Hardmax":
        return _first_max_onehot_rows(rows)
    return _softmax_rows(rows, log=op == "LogSoftmax")


def coerced_family(op: str, x: np.ndarray, axis: int | None, since: int) -> np.ndarray:
    """Hardmax/Softmax/LogSoftmax at since-version ``since`` (1, 11 or 13) with attribute ``axis``.

    Versions 1 and 11 flatten the input to 2-D at ``axis`` (default 1) and work on the rows;
    version 13 works along the one dim ``axis`` (default -1). Softmax results are float64.
    """
    rank = x.ndim
    if since < 13:
        a = _norm(1 if axis is None else axis, rank)
        n = int(np.prod(x.shape[:a], dtype=np.int64))
        rows = x.reshape(n, int(np.prod(x.shape[a:], dtype=np.int64)))
        return _rows_op(op, rows).reshape(x.shape)
    a = _norm(-1 if axis is None else axis, rank)
    moved = np.moveaxis(x, a, -1)
    rows = moved.reshape(int(np.prod(moved.shape[:-1], dtype=np.int64)), moved.shape[-1])
    return np.moveaxis(_rows_op(op, rows).reshape(moved.shape), -1, a)


def arg_extremum(op: str, x: np.ndarray, axis: int | None, keepdims: int | None, select_last: int | None,
                 since: int) -> np.ndarray:
    """ArgMax/ArgMin at since-version ``since``; ``select_last_index`` counts from version 12."""
    a = _norm(0 if axis is None else axis, x.ndim)
    last = bool(select_last) and since >= 12
    fn = np.argmax if op == "ArgMax" else np.argmin
    if last:
        flipped = np.flip(x, axis=a)
        idx = x.shape[a] - 1 - fn(flipped, axis=a)
    else:
        idx = fn(x, axis=a)
    idx = idx.astype(np.int64)
    if keepdims is None or keepdims:
        idx = np.expand_dims(idx, a)
    return idx


def global_max_pool(x: np.ndarray) -> np.ndarray:
    """GlobalMaxPool: the maximum over every dim after the first two, kept as size-1 dims."""
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
