"""Comparing outputs: exact (numeric equality, NaN equal to NaN) or within a stated :class:`Tolerance`.

:func:`compare` finds the first difference (per-rewrite checks); :func:`statistics` measures a
whole output (whole-model checks): largest absolute, relative and ulp differences, how many
values are outside the tolerance, and where the worst one is. Both judge by the same
:class:`Tolerance`; discrete outputs (integers, booleans, strings) are always compared exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["ARITHMETIC_OPS", "EXACT", "EXPANSION_ULPS", "SIGN_UNSTABLE_OPS", "Difference", "OutputStats", "Tolerance",
           "compare", "dtype_eps", "expansion_budget", "output_scale", "statistics", "tolerance_for", "ulp_distance",
           "worst_difference", "zero_signs"]

_BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True, init=False)
class Tolerance:
    """How far apart two finite float values may be; every criterion that is set may accept a value.

    A pair of finite values matches when they are equal, or within ``max_ulp`` units in the last
    place, or within ``atol`` (absolute), or within ``rtol`` times the expected value's magnitude
    (relative): the same per-element rule as polygraphy's ``--atol``/``--rtol``. NaN matches only
    NaN, an infinity only itself, and discrete values (integers, booleans) only themselves.
    ``Tolerance()`` is exact. The keyword ``ulps=`` (the former name of ``max_ulp``) is still
    accepted, deprecated.

    Attributes:
        max_ulp: the most units in the last place two values may be apart (``--max-ulp``).
        atol: the largest absolute difference accepted (``--atol``).
        rtol: the largest difference accepted relative to the expected value (``--rtol``).
    """

    max_ulp: int = 0
    atol: float = 0.0
    rtol: float = 0.0

    def __init__(self, max_ulp: int = 0, atol: float = 0.0, rtol: float = 0.0, *, ulps: int | None = None) -> None:
        if ulps is not None:
            import warnings

            if max_ulp:
                raise TypeError("Tolerance takes max_ulp or its former name ulps, not both")
            warnings.warn("Tolerance(ulps=...) is deprecated: use max_ulp=... (the name of --max-ulp)",
                          DeprecationWarning, stacklevel=2)
            max_ulp = ulps
        object.__setattr__(self, "max_ulp", max_ulp)
        object.__setattr__(self, "atol", atol)
        object.__setattr__(self, "rtol", rtol)
        for name in ("max_ulp", "atol", "rtol"):
            value = getattr(self, name)
            if not value >= 0 or value == float("inf"):  # also refuses NaN
                raise ValueError(f"tolerance {name} must be a finite number >= 0, not {value!r}")

    @property
    def ulps(self) -> int:
        """``max_ulp`` under its former name (deprecated, kept for callers that read it)."""
        return self.max_ulp

    @property
    def exact(self) -> bool:
        """True when nothing but equality is accepted."""
        return self.max_ulp == 0 and self.atol == 0 and self.rtol == 0

    def describe(self) -> str:
        """``exact``, or the criteria that are set (``atol 1e-06 or rtol 1e-05 or 2 ulp``)."""
        if self.exact:
            return "exact"
        parts = [f"{name} {value:g}" for name, value in (("atol", self.atol), ("rtol", self.rtol)) if value]
        if self.max_ulp:
            parts.append(f"{self.max_ulp} ulp")
        return " or ".join(parts)

    def union(self, other: Tolerance | None) -> Tolerance:
        """What either tolerance accepts (each is an "any criterion" rule, so the larger of each criterion)."""
        if other is None:
            return self
        return Tolerance(max(self.max_ulp, other.max_ulp), max(self.atol, other.atol), max(self.rtol, other.rtol))

    def to_dict(self) -> dict[str, float]:
        """JSON-ready form (``rtol`` only when set; the report names ``max_ulp`` ``ulps``, as before)."""
        out: dict[str, float] = {"ulps": self.max_ulp, "atol": self.atol}
        if self.rtol:
            out["rtol"] = self.rtol
        return out


#: Nothing but equality.
EXACT = Tolerance()


#: Used only for ops whose kernels compute (Softmax, LogSoftmax): onnxruntime's kernels for
#: different op versions or layouts may round differently (measured over ~5,000 checks: float16
#: Softmax-11 vs -13 and LogSoftmax on the same rows differ by at most 1 ulp; float32 and float64
#: were always bit-identical), and the numpy reference computes in float32/float64.
_ULPS = {np.dtype(np.float16): 2, _BF16: 2, np.dtype(np.float32): 4, np.dtype(np.float64): 4}


#: For arithmetic ops other than Softmax/LogSoftmax: how many epsilons, times the output's largest
#: magnitude (at least 1), two kernels summing in another order may differ by (AveragePool-19 with
#: dilations=[1, 1] vs AveragePool-11 measured 8 ulp of a small average of larger values).
KERNEL_EPSILONS = 16


#: Ops whose kernels compute (rather than select or move) values. A rewrite of one keeps its
#: arithmetic (a version relabel, an attribute at its neutral value dropped, the axis moved), but
#: onnxruntime's kernels for different op versions, attribute sets or layouts may sum or round in
#: another order (measured: AveragePool-19 with dilations=[1, 1] vs AveragePool-11, 1 ulp;
#: float16 Softmax-11 vs -13, 1 ulp), and the numpy reference computes in float32/float64. Their
#: float outputs must match within :func:`tolerance_for`; a record says "exact" unless the
#: tolerance was needed, and then states it with the largest difference. Discrete outputs, and
#: every op outside this set (data movement, selection, comparisons), are compared exactly.
ARITHMETIC_OPS = frozenset({
    "Softmax", "LogSoftmax", "AveragePool", "GlobalAveragePool", "LpPool", "GlobalLpPool", "LpNormalization",
    "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceSumSquare", "Conv", "ConvTranspose", "ConvInteger", "Gemm", "MatMul", "Einsum", "BatchNormalization",
    "InstanceNormalization", "LayerNormalization", "GroupNormalization", "MeanVarianceNormalization", "LRN", "Mean",
    "Sum", "CumSum", "Resize", "Upsample", "RoiAlign", "GRU", "LSTM", "RNN", "Attention", "DFT", "STFT",
    "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Tanh", "Sigmoid", "Erf", "Softplus", "Softsign", "Elu", "Selu",
    "Celu", "Gelu", "HardSigmoid", "HardSwish", "Mish", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "Div", "Mod", "Range", "Dropout",
})


#: The default error budget of function-body expansions, in ulp per float type. An element passes
#: when it is within this many ulp of the original's, or within as many epsilons of the output
#: tensor's largest magnitude (at least 1): a body that reassociates a reduction changes a value by an
#: ulp or so of the terms it sums, which is many ulp of a result near 0. Measured worst on the real
#: exports (LayerNormalization, Gelu, HardSwish ...) against onnxruntime's fused kernels: 3 ulp of
#: the tensor scale in float32. ``--max-ulp N`` (API ``max_ulp``) replaces it, ``--exact`` makes it 0.
EXPANSION_ULPS = {np.dtype(np.float16): 4, _BF16: 4, np.dtype(np.float32): 8, np.dtype(np.float64): 8}


def expansion_budget(dtype: np.dtype[Any], scale: float, max_ulp: int | None = None) -> Tolerance | None:
    """The tolerance an expansion's float output of ``dtype`` is judged by (None: not a float type).

    ``scale`` is the largest finite magnitude in the expected output; ``max_ulp`` replaces the
    per-type default of :data:`EXPANSION_ULPS`.
    """
    key = np.dtype(dtype)
    default = EXPANSION_ULPS.get(key)
    if default is None:
        return None
    ulps = default if max_ulp is None else max_ulp
    eps = float(ml_dtypes.finfo(key).eps) if key == _BF16 else float(np.finfo(key).eps)  # type: ignore[no-untyped-call]
    return Tolerance(ulps, ulps * eps * max(1.0, scale))


def dtype_eps(name: str | np.dtype[Any]) -> float:
    """The machine epsilon of a float type given by numpy name (``float32``, ``bfloat16``); 0 for others."""
    key = _BF16 if name in ("bfloat16", _BF16) else np.dtype(name)
    if key == _BF16:
        return float(ml_dtypes.finfo(key).eps)  # type: ignore[no-untyped-call]
    return float(np.finfo(key).eps) if key.kind == "f" else 0.0


def output_scale(values: np.ndarray) -> float:
    """The largest finite magnitude in ``values`` (0 when none; a budget's scale is at least 1)."""
    if values.size == 0 or not (values.dtype.kind == "f" or values.dtype == _BF16):
        return 0.0
    wide = values.astype(np.float64)
    finite = wide[np.isfinite(wide)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def worst_difference(expected: np.ndarray, actual: np.ndarray) -> tuple[float, float, float]:
    """The largest ulp distance, absolute difference and scaled difference between finite float elements.

    The scaled difference is the absolute one in epsilons of the expected output's largest magnitude
    (at least 1), the measure budgets use. All three are 0 for other types.
    """
    if expected.shape != actual.shape or expected.size == 0 or expected.dtype != actual.dtype \
            or np.dtype(expected.dtype) not in _INT_VIEW:
        return 0.0, 0.0, 0.0
    wide_e, wide_a = expected.astype(np.float64), actual.astype(np.float64)
    both = np.isfinite(wide_e) & np.isfinite(wide_a)
    if not np.any(both):
        return 0.0, 0.0, 0.0
    ulps = ulp_distance(expected[both], actual[both])
    diff = float(np.abs(wide_e[both] - wide_a[both]).max())
    key = np.dtype(expected.dtype)
    eps = float(ml_dtypes.finfo(key).eps) if key == _BF16 else float(np.finfo(key).eps)  # type: ignore[no-untyped-call]
    scale = max(1.0, float(np.abs(wide_e[both]).max()))
    return float(ulps.max()), diff, diff / (eps * scale)


def tolerance_for(dtype: np.dtype[Any], op: str = "Softmax", scale: float = 1.0) -> Tolerance | None:
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
    eps = float(ml_dtypes.finfo(key).eps) if key == _BF16 else float(np.finfo(key).eps)  # type: ignore[no-untyped-call]
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

    distance: np.ndarray = np.abs(ordered(a) - ordered(b))
    return distance


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


#: Ops whose result's sign of zero is not fixed where +0 and -0 compete for the maximum (minimum): IEEE 754's
#: maxNum/minNum leave it open, the ONNX spec says nothing, and onnxruntime's own kernels disagree (measured on
#: 1.32.0 CPU: over the plane [0, -0, -0, -0] GlobalMaxPool-1 gives -0 and ReduceMax-13 +0). A rewrite of such a
#: node is compared exactly up to the sign of zero, and its record says so (``details.zero_sign``).
SIGN_UNSTABLE_OPS = frozenset({"GlobalMaxPool", "MaxPool", "ReduceMax", "ReduceMin", "Max", "Min"})


def compare(expected: np.ndarray, actual: np.ndarray, tol: Tolerance | None = None,
            signed_zero: bool = True) -> tuple[Difference | None, float]:
    """The first difference (None if equal) and the largest absolute difference seen.

    Exact comparison (``tol`` None or exact) is bit equality of the values: NaN equals NaN in the same
    place whatever its payload, and ``+0`` differs from ``-0`` (a rule promising the sign of zero,
    Gemm's ``C = -0.0`` or a scatter's ``max``, must keep it). Under a tolerance the two zeros are equal.
    ``signed_zero=False`` accepts either zero where the original's kernel does not fix it (see
    :data:`SIGN_UNSTABLE_OPS`).
    """
    if expected.dtype != actual.dtype:
        return Difference(f"element types differ: original {expected.dtype}, replacement {actual.dtype}"), float("inf")
    if expected.shape != actual.shape:
        what = f"shapes differ: original {list(expected.shape)}, replacement {list(actual.shape)}"
        return Difference(what), float("inf")
    if expected.size == 0:
        return None, 0.0
    shape = expected.shape
    expected, actual = expected.reshape(-1), actual.reshape(-1)  # 0-d values too: numpy scalars take no masks
    e, a = _as_float(expected), _as_float(actual)
    if e.dtype.kind == "f":
        nan_e, nan_a = np.isnan(e), np.isnan(a)
        with np.errstate(all="ignore"):
            diff = np.abs(e.astype(np.float64) - a.astype(np.float64))
        diff[nan_e & nan_a] = 0.0
        diff[(e == a)] = 0.0
        diff[nan_e != nan_a] = np.inf
        if tol is None or tol.exact:
            bad = ~((e == a) | (nan_e & nan_a))
            if signed_zero:
                bad |= (e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a))
        else:
            finite = np.isfinite(e) & np.isfinite(a)
            close = finite & _close(expected, actual, diff, np.abs(e.astype(np.float64)), tol)
            bad = ~((e == a) | close | (nan_e & nan_a))
    else:
        diff = np.abs(e.astype(np.float64) - a.astype(np.float64)) if e.dtype.kind in "iub" else np.zeros(e.shape)
        bad = e != a
    max_diff = float(np.max(diff)) if diff.size else 0.0
    if not np.any(bad):
        return None, max_diff
    flat = int(np.argwhere(bad)[0][0])
    index = tuple(int(i) for i in np.unravel_index(flat, shape))
    what = "values differ (the sign of zero)" if e.dtype.kind == "f" and e[flat] == 0 and a[flat] == 0 \
        else "values differ"
    return Difference(what, index, _scalar(expected[flat]), _scalar(actual[flat])), max_diff


def zero_signs(expected: np.ndarray, actual: np.ndarray) -> Difference | None:
    """Where both outputs are exactly zero but of different signs (judged even under a tolerance), or None.

    For input sets built to make exact -0.0 results (:mod:`.special`'s ``signed-zeros``): a rounding
    difference cannot turn an exact zero into one of the other sign there, a lost ``C = -0.0`` can.
    """
    if expected.dtype != actual.dtype or expected.shape != actual.shape or expected.size == 0:
        return None
    e, a = _as_float(expected.reshape(-1)), _as_float(actual.reshape(-1))
    if e.dtype.kind != "f":
        return None
    bad = (e == 0) & (a == 0) & (np.signbit(e) != np.signbit(a))
    if not np.any(bad):
        return None
    flat = int(np.argwhere(bad)[0][0])
    index = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
    return Difference("values differ (the sign of zero)", index, _scalar(expected.reshape(-1)[flat]),
                      _scalar(actual.reshape(-1)[flat]))


def _scalar(v: object) -> object:
    item = np.asarray(v)
    if item.dtype == _BF16 or item.dtype.kind == "f":
        return float(item)
    if item.dtype.kind in "iu":
        return int(item)
    if item.dtype.kind == "b":
        return bool(item)
    return item.item()


def _close(expected: np.ndarray, actual: np.ndarray, diff: np.ndarray, magnitude: np.ndarray,
           tol: Tolerance) -> np.ndarray:
    """Where finite values are close enough under ``tol`` (``diff``: absolute difference, float64)."""
    close = np.zeros(diff.shape, dtype=bool)
    if tol.max_ulp and np.dtype(expected.dtype) in _INT_VIEW:
        close |= ulp_distance(expected, actual) <= tol.max_ulp
    if tol.atol:
        close |= diff <= tol.atol
    if tol.rtol:
        close |= diff <= tol.rtol * magnitude
    return close


@dataclass
class OutputStats:
    """How two values of one output compare: the statistics of a whole-model check.

    Attributes:
        name: the output's name.
        dtype: its element type (numpy's name).
        shape: its shape (the first side's; merged over input sets: where the worst value is).
        count: how many values were compared (over every input set merged in).
        mismatches: how many of them are outside the tolerance.
        max_abs: the largest absolute difference (inf where NaN meets a number).
        max_rel: the largest difference relative to the first side's value.
        max_ulp: the largest distance in units in the last place between finite values (floats only).
        discrete: integers, booleans or strings: compared exactly whatever the tolerance.
        worst_index: where the largest difference is (among the mismatches when there are any).
        worst: the two values there.
        worst_input_set: the input set it was found on (set by the caller).
        what: what differs when the values cannot be compared (element types or shapes).
        scale: the largest finite magnitude of the first side's values (floats; 0 otherwise).
    """

    name: str
    dtype: str
    shape: list[int]
    count: int = 0
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    max_ulp: int | None = None
    discrete: bool = False
    worst_index: list[int] | None = None
    worst: tuple[object, object] | None = None
    worst_input_set: str | None = None
    what: str | None = None
    scale: float = 0.0
    _worst_key: tuple[bool, float] = field(default=(False, -1.0), repr=False)

    @property
    def share(self) -> float:
        """The share of values outside the tolerance (0 to 1)."""
        return self.mismatches / self.count if self.count else 0.0

    @property
    def ulp_of_scale(self) -> float | None:
        """The largest absolute difference in epsilons of :attr:`scale` (at least 1): the budgets' measure.

        None for discrete outputs and values that could not be compared.
        """
        if self.discrete or self.what is not None:
            return None
        try:
            eps = dtype_eps(self.dtype)
        except TypeError:  # a float type numpy does not name (float8 ...)
            return None
        return self.max_abs / (eps * max(1.0, self.scale)) if eps else None

    @property
    def ok(self) -> bool:
        """True when every value is within the tolerance."""
        return self.mismatches == 0 and self.what is None

    def merge(self, other: OutputStats) -> OutputStats:
        """The statistics of both (e.g. two input sets): counts added, maxima kept, the worser worst."""
        worst = other if other._worst_key > self._worst_key else self
        ulps = [u for u in (self.max_ulp, other.max_ulp) if u is not None]
        return OutputStats(
            name=self.name, dtype=self.dtype, shape=worst.shape, count=self.count + other.count,
            mismatches=self.mismatches + other.mismatches, max_abs=max(self.max_abs, other.max_abs),
            max_rel=max(self.max_rel, other.max_rel), max_ulp=max(ulps) if ulps else None,
            discrete=self.discrete, worst_index=worst.worst_index, worst=worst.worst,
            worst_input_set=worst.worst_input_set, what=self.what or other.what,
            scale=max(self.scale, other.scale), _worst_key=worst._worst_key)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (non-finite numbers as strings: ``"inf"``)."""
        return {
            "name": self.name, "dtype": self.dtype, "shape": list(self.shape), "count": self.count,
            "mismatches": self.mismatches, "mismatch_share": self.share, "max_abs": _json_float(self.max_abs),
            "max_rel": _json_float(self.max_rel), "max_ulp": self.max_ulp, "discrete": self.discrete,
            "worst": None if self.worst_index is None or self.worst is None else {
                "index": list(self.worst_index), "values": [_json_value(v) for v in self.worst],
                "input_set": self.worst_input_set},
            "what": self.what,
            "scale": _json_float(self.scale),
            "ulp_of_scale": None if self.ulp_of_scale is None else _json_float(round(self.ulp_of_scale, 3)),
        }


def _json_float(x: float) -> float | str:
    return x if np.isfinite(x) else str(x)


def _json_value(v: object) -> object:
    return _json_float(v) if isinstance(v, float) else v


def statistics(expected: np.ndarray, actual: np.ndarray, tol: Tolerance = EXACT, *, name: str = "",
               sides: tuple[str, str] = ("original", "replacement")) -> OutputStats:
    """Compare two values of one output in full: maxima, mismatches under ``tol``, the worst element.

    Float values are judged by ``tol`` (see :class:`Tolerance`); NaN matches NaN; integers,
    booleans and strings must be equal. ``sides`` names the two values in :attr:`OutputStats.what`.
    """
    e_dtype, a_dtype = np.dtype(expected.dtype), np.dtype(actual.dtype)
    is_float = e_dtype.kind == "f" or e_dtype == _BF16
    stats = OutputStats(name=name, dtype=str(e_dtype), shape=[int(d) for d in expected.shape], discrete=not is_float)
    if e_dtype != a_dtype or expected.shape != actual.shape:
        if e_dtype != a_dtype:
            stats.what = f"element types differ: {sides[0]} {e_dtype}, {sides[1]} {a_dtype}"
        else:
            stats.what = f"shapes differ: {sides[0]} {list(expected.shape)}, {sides[1]} {list(actual.shape)}"
        stats.count = stats.mismatches = max(int(expected.size), int(actual.size), 1)
        stats.max_abs = stats.max_rel = float("inf")
        return stats
    stats.count = int(expected.size)
    if expected.size == 0:
        return stats
    shape = expected.shape
    expected, actual = expected.reshape(-1), actual.reshape(-1)  # 0-d values too: numpy scalars take no masks
    e, a = _as_float(expected), _as_float(actual)
    if is_float:
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        nan_e, nan_a = np.isnan(e64), np.isnan(a64)
        same = (e64 == a64) | (nan_e & nan_a)
        with np.errstate(all="ignore"):
            diff = np.abs(e64 - a64)
        diff[same] = 0.0
        diff[nan_e != nan_a] = np.inf
        finite = np.isfinite(e64) & np.isfinite(a64)
        magnitude = np.abs(e64)
        bad = ~(same | (finite & _close(expected, actual, diff, magnitude, tol)))
        if np.any(np.isfinite(e64)):
            stats.scale = float(np.abs(e64[np.isfinite(e64)]).max())
        if np.dtype(expected.dtype) in _INT_VIEW and np.any(finite):
            stats.max_ulp = int(np.max(ulp_distance(expected[finite], actual[finite])))
        else:
            stats.max_ulp = 0
    elif e.dtype.kind in "iub":
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
        diff = np.abs(e64 - a64)
        magnitude = np.abs(e64)
        bad = e != a
    else:  # strings and other objects: equal or not
        bad = np.asarray(e != a, dtype=bool)
        diff = bad.astype(np.float64)
        magnitude = np.ones(diff.shape)
    with np.errstate(all="ignore"):
        rel = np.where(diff == 0, 0.0, diff / magnitude)
    rel[np.isnan(rel)] = np.inf
    stats.mismatches = int(np.count_nonzero(bad))
    stats.max_abs = float(np.max(diff))
    stats.max_rel = float(np.max(rel))
    ranked = np.where(bad, diff, -1.0) if stats.mismatches else diff
    flat = int(np.argmax(ranked))
    stats.worst_index = [int(i) for i in np.unravel_index(flat, shape)]
    stats.worst = (_scalar(expected[flat]), _scalar(actual[flat]))
    stats._worst_key = (stats.mismatches > 0, float(diff[flat]))
    return stats
