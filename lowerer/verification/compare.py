"""Comparing outputs: exact (numeric equality, NaN equal to NaN) or within a stated tolerance in ulps."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

__all__ = ["Difference", "Tolerance", "compare", "tolerance_for", "ulp_distance"]

_BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class Tolerance:
    """How far apart two finite values may be: ``ulps`` units in the last place, or ``atol``.

    NaN matches only NaN, an infinity only itself.
    """

    ulps: int
    atol: float

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form."""
        return {"ulps": self.ulps, "atol": self.atol}


#: Used only for ops whose kernels compute (Softmax, LogSoftmax): onnxruntime's kernels for
#: different op versions or layouts may round differently (measured over ~5,000 checks: float16
#: Softmax-11 vs -13 and LogSoftmax on the same rows differ by at most 1 ulp; float32 and float64
#: were always bit-identical), and the numpy reference computes in float32/float64.
_ULPS = {np.dtype(np.float16): 2, _BF16: 2, np.dtype(np.float32): 4, np.dtype(np.float64): 4}


#: For arithmetic ops other than Softmax/LogSoftmax: how many epsilons, times the output's largest
#: magnitude (at least 1), two kernels summing in another order may differ by (AveragePool-19 with
#: dilations=[1, 1] vs AveragePool-11 measured 8 ulp of a small average of larger values).
KERNEL_EPSILONS = 16


def tolerance_for(dtype: np.dtype, op: str = "Softmax", scale: float = 1.0) -> Tolerance | None:  # type: ignore[type-arg]
    """The tolerance for ``op``'s outputs of ``dtype`` where arithmetic may differ (None: exact).

    Softmax is judged in ulps only (small probabilities keep their relative precision);
    LogSoftmax also accepts an absolute difference of the same number of epsilons, for
    outputs near 0 whose error is set by the larger terms of the row. Other arithmetic ops
    (sums, averages, products) also accept :data:`KERNEL_EPSILONS` epsilons times ``scale``
    (the largest magnitude in the expected output, at least 1): a sum's rounding error is set
    by its largest terms, not by the (possibly cancelled) result.
    """
    key = np.dtype(dtype)
    ulps = _ULPS.get(key)
    if ulps is None:
        return None
    eps = float(ml_dtypes.finfo(key).eps) if key == _BF16 else float(np.finfo(key).eps)
    if op == "Softmax":
        return Tolerance(ulps, 0.0)
    if op == "LogSoftmax":
        return Tolerance(ulps, ulps * eps)
    return Tolerance(ulps, KERNEL_EPSILONS * eps * max(1.0, scale))


_INT_VIEW = {np.dtype(np.float16): np.int16, _BF16: np.int16, np.dtype(np.float32): np.int32,
             np.dtype(np.float64): np.int64}


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many representable values lie between ``a`` and ``b`` (same float dtype; +0 and -0 are 0 apart)."""
    view = _INT_VIEW[np.dtype(a.dtype)]
    bits = np.dtype(view).itemsize * 8
    mask = (1 << (bits - 1)) - 1

    def ordered(x: np.ndarray) -> np.ndarray:
        i = np.ascontiguousarray(x).view(view).astype(np.int64)
        mag = (i & mask).astype(np.float64)
        return np.where(i < 0, -mag, mag)

    return np.abs(ordered(a) - ordered(b))


@dataclass(frozen=True)
class Difference:
    """Where two outputs first differ."""

    what: str
    index: tuple[int, ...] | None = None
    expected: object = None
    actual: object = None

    def describe(self) -> str:
        """One line: the index and both values, or what differs."""
        if self.index is None:
            return self.what
        return f"{self.what} at index {list(self.index)}: original {self.expected!r}, replacement {self.actual!r}"


def _as_float(a: np.ndarray) -> np.ndarray:
    if a.dtype == _BF16 or a.dtype == np.float16:
        return a.astype(np.float32)
    return a


def compare(expected: np.ndarray, actual: np.ndarray, tol: Tolerance | None = None) -> tuple[Difference | None, float]:
    """The first difference (None if equal) and the largest absolute difference seen.

    Exact comparison is numeric equality, with NaN equal to NaN in the same place; ``+0`` and
    ``-0`` compare equal (IEEE leaves max/min of the two zeros to the implementation).
    """
    if expected.dtype != actual.dtype:
        return Difference(f"element types differ: original {expected.dtype}, replacement {actual.dtype}"), float("inf")
    if expected.shape != actual.shape:
        what = f"shapes differ: original {list(expected.shape)}, replacement {list(actual.shape)}"
        return Difference(what), float("inf")
    if expected.size == 0:
        return None, 0.0
    e, a = _as_float(expected), _as_float(actual)
    if e.dtype.kind == "f":
        nan_e, nan_a = np.isnan(e), np.isnan(a)
        with np.errstate(all="ignore"):
            diff = np.abs(e.astype(np.float64) - a.astype(np.float64))
        diff[nan_e & nan_a] = 0.0
        diff[(e == a)] = 0.0
        diff[nan_e != nan_a] = np.inf
        if tol is None:
            bad = ~((e == a) | (nan_e & nan_a))
        else:
            finite = np.isfinite(e) & np.isfinite(a)
            close = finite & ((ulp_distance(expected, actual) <= tol.ulps) | (diff <= tol.atol))
            bad = ~((e == a) | close | (nan_e & nan_a))
    else:
        diff = np.abs(e.astype(np.float64) - a.astype(np.float64)) if e.dtype.kind in "iub" else np.zeros(e.shape)
        bad = e != a
    max_diff = float(np.max(diff)) if diff.size else 0.0
    if not np.any(bad):
        return None, max_diff
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    return Difference("values differ", index, _scalar(expected[index]), _scalar(actual[index])), max_diff


def _scalar(v: object) -> object:
    item = np.asarray(v)
    if item.dtype == _BF16 or item.dtype.kind == "f":
        return float(item)
    if item.dtype.kind in "iu":
        return int(item)
    if item.dtype.kind == "b":
        return bool(item)
    return item.item()
