"""A small numpy oracle for Hardmax/Softmax/LogSoftmax (versions 1, 11, 13) and ArgMax/ArgMin (1, 11, 12, 13).

Written from the operator specs (``/work/shared/seeds``), not from onnx.reference (whose Hardmax-1/11
has the opset-13 meaning). Each function takes the op's *since-version* and applies that version's
rules, refusing attribute values the version does not allow (a test that feeds it a bad case fails
loudly instead of comparing against nonsense).

* Hardmax/Softmax/LogSoftmax 1 and 11: the input is coerced to 2-D ``[prod(d0..d_{k-1}), prod(d_k..)]``
  at ``axis`` k (default 1) and the op runs over dim 1 of that; 11 allows a negative axis.
* Hardmax/Softmax/LogSoftmax 13: the op runs over the single dim ``axis`` (default -1).
* ArgMax/ArgMin: axis default 0, keepdims default 1; negative axes from 11; ``select_last_index``
  from 12 (default 0); bfloat16 from 13. Ties pick the first index (or the last with
  ``select_last_index=1``); NaN is not compared here.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = [
    "BF16",
    "argextremum",
    "coerced_axis_op",
    "hardmax",
    "log_softmax",
    "softmax",
]

BF16 = np.dtype(ml_dtypes.bfloat16)

_FLOAT_TYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BF16)


def _check_axis(axis: int, rank: int, version: int, allow_rank: bool = False) -> int:
    if axis < 0 and version < 11:
        raise ValueError(f"negative axis {axis} is not allowed before version 11")
    hi = rank if allow_rank else rank - 1
    if not -rank <= axis <= hi:
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _check_dtype(x: np.ndarray, version: int, kinds: tuple[np.dtype, ...] | None = None) -> None:
    if x.dtype == BF16 and version < 13:
        raise ValueError("bfloat16 is not allowed before version 13")
    if kinds is not None and x.dtype not in kinds:
        raise ValueError(f"dtype {x.dtype} not allowed")


def _index_first(values: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Index of the first maximum (or minimum) along ``axis``; ±inf compare as numbers."""
    v = values.astype(np.float64) if values.dtype in (BF16, np.dtype(np.float16)) else values
    return np.argmax(v, axis=axis) if largest else np.argmin(v, axis=axis)


def _one_axis_hardmax(x: np.ndarray, axis: int) -> np.ndarray:
    out = np.zeros(x.shape, dtype=x.dtype)
    if x.size == 0:
        return out
    idx = np.expand_dims(_index_first(x, axis, True), axis)
    np.put_along_axis(out, idx, np.asarray(1, dtype=x.dtype), axis=axis)
    return out


def _one_axis_softmax(x: np.ndarray, axis: int, log: bool) -> np.ndarray:
    if x.size == 0:
        return x.copy()
    wide = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = wide - np.max(wide, axis=axis, keepdims=True)
        e = np.exp(shifted)
        s = np.sum(e, axis=axis, keepdims=True)
        out = shifted - np.log(s) if log else e / s
    return out.astype(x.dtype)


def coerced_axis_op(kind: str, x: np.ndarray, axis: int | None, version: int) -> np.ndarray:
    """Hardmax/Softmax/LogSoftmax (``kind`` = hardmax, softmax, logsoftmax) at ``version``."""
    if version not in (1, 11, 13):
        raise ValueError(f"no version {version}")
    _check_dtype(x, version, _FLOAT_TYPES)
    rank = x.ndim

    def one(v: np.ndarray, ax: int) -> np.ndarray:
        if kind == "hardmax":
            return _one_axis_hardmax(v, ax)
        return _one_axis_softmax(v, ax, log=(kind == "logsoftmax"))

    if version >= 13:
        ax = _check_axis(-1 if axis is None else axis, rank, version)
        return one(x, ax)
    k = _check_axis(1 if axis is None else axis, rank, version)
    rows = int(np.prod(x.shape[:k], dtype=np.int64))
    cols = int(np.prod(x.shape[k:], dtype=np.int64))
    return one(x.reshape(rows, cols), 1).reshape(x.shape)


def hardmax(x: np.ndarray, axis: int | None = None, version: int = 13) -> np.ndarray:
    """Hardmax at ``version``: 1 at the first maximum, else 0 (``axis`` None = the version's default)."""
    return coerced_axis_op("hardmax", x, axis, version)


def softmax(x: np.ndarray, axis: int | None = None, version: int = 13) -> np.ndarray:
    """Softmax at ``version``, computed in float64 and rounded to the input's type."""
    return coerced_axis_op("softmax", x, axis, version)


def log_softmax(x: np.ndarray, axis: int | None = None, version: int = 13) -> np.ndarray:
    """LogSoftmax at ``version``, computed in float64 and rounded to the input's type."""
    return coerced_axis_op("logsoftmax", x, axis, version)


def argextremum(op_type: str, x: np.ndarray, axis: int | None = None, keepdims: int | None = None,
                select_last_index: int | None = None, version: int = 13) -> np.ndarray:
    """ArgMax/ArgMin at ``version`` (attributes None = absent = the default); int64 output."""
    if version not in (1, 11, 12, 13):
        raise ValueError(f"no version {version}")
    if op_type not in ("ArgMax", "ArgMin"):
        raise ValueError(op_type)
    _check_dtype(x, version)
    if x.dtype.kind not in "fiu" and x.dtype != BF16:
        raise ValueError(f"dtype {x.dtype} not allowed")
    if select_last_index is not None and version < 12:
        raise ValueError("select_last_index does not exist before version 12")
    ax = _check_axis(0 if axis is None else axis, x.ndim, version)
    keep = 1 if keepdims is None else keepdims
    last = bool(select_last_index)
    largest = op_type == "ArgMax"
    n = x.shape[ax]
    if n == 0:
        raise ValueError("ArgMax/ArgMin over an empty axis is undefined")
    # select_last_index: the first extremum of the reversed axis, mapped back.
    idx = (n - 1) - _index_first(np.flip(x, axis=ax), ax, largest) if last else _index_first(x, ax, largest)
    idx = idx.astype(np.int64)
    return np.expand_dims(idx, ax) if keep else idx
