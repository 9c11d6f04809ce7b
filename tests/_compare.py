"""Comparing a converted model's outputs with the original's: exact, in ulp, or against expectations.

Used by ``test_real_models.py`` and by the node-case survey (``_node_cases.py``,
``benchmarks/node_cases.py``).

* Discrete outputs (integers, booleans, strings) must be equal.
* Float outputs are equal when every element is (NaN where the other has NaN, the same infinities).
  Otherwise their distance is measured by :func:`ulp_error`, in units in the last place *of the
  tensor's magnitude*: ``max |got - want| / ulp(max |want|, |got|)`` over the finite elements. A
  per-element ulp count is the wrong yardstick for a whole model: an element that is the sum of
  terms that cancel (a logit near 0, a normalized activation near its mean) carries the absolute
  error of the terms, which is many of its own ulps; measured against the tensor's scale, a
  reassociated reduction stays within a few ulp.
* Sequences (lists), optionals (None) and maps (dicts) are compared element by element.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

__all__ = [
    "Comparison",
    "compare",
    "ort_max_opset",
    "ort_session",
    "to_numpy",
    "ulp_error",
]

ort.set_default_logger_severity(4)

#: Lowest default-domain opset onnxruntime guarantees to run (it warns and may refuse below).
ORT_MIN_OPSET = 7


@dataclass(frozen=True)
class Comparison:
    """How two outputs compare.

    Attributes:
        same: every output matched (exactly, or within the ulp budget given).
        exact: every output matched exactly.
        max_ulp: the largest ulp distance (:func:`ulp_error`) over the float outputs (0 when exact).
        detail: what differs first, when something does.
    """

    same: bool
    exact: bool
    max_ulp: float = 0.0
    detail: str = ""


def to_numpy(value: Any) -> Any:
    """A case's value as ORT takes and gives it: TensorProto -> ndarray; lists and dicts recursively."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc" or (dtype.kind == "V" and _ml_finfo(dtype) is not None)


@functools.cache
def _ml_finfo(dtype: np.dtype) -> Any:
    try:
        return ml_dtypes.finfo(dtype)
    except Exception:
        return None


def _unit(scale: float, dtype: np.dtype) -> float:
    """One ulp of ``dtype`` at magnitude ``scale`` (the subnormal step below the normal range)."""
    info = np.finfo(dtype) if dtype.kind in "fc" and dtype.itemsize >= 2 else _ml_finfo(dtype)
    if info is None:
        info = np.finfo(np.float32)
    if not math.isfinite(scale) or scale < float(info.smallest_normal):
        return float(info.smallest_subnormal)
    return 2.0 ** (math.floor(math.log2(scale)) - int(info.nmant))


def ulp_error(got: np.ndarray, want: np.ndarray) -> float:
    """Distance of two float arrays of one dtype and shape, in ulp of the larger magnitude.

    ``max |got - want| / ulp(M)`` over the finite elements, where ``M`` is the largest finite
    magnitude in either array and ``ulp(M)`` the spacing of the dtype there. NaN must face NaN and an
    infinity the same infinity, else the distance is ``inf``. Complex values count their real and
    imaginary parts as two floats.
    """
    if got.dtype.kind == "c":
        return max(ulp_error(got.real, want.real), ulp_error(got.imag, want.imag))
    dtype = got.dtype
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return math.inf
    inf_g, inf_w = np.isinf(g), np.isinf(w)
    if not np.array_equal(inf_g, inf_w) or not np.array_equal(g[inf_g], w[inf_w]):
        return math.inf
    finite = np.isfinite(g) & np.isfinite(w)
    if not finite.any():
        return 0.0
    diff = float(np.max(np.abs(g[finite] - w[finite])))
    if diff == 0.0:
        return 0.0
    scale = float(max(np.max(np.abs(g[finite])), np.max(np.abs(w[finite]))))
    return diff / _unit(scale, dtype)


def _describe(path: str, got: Any, want: Any) -> str:
    def shape(v: Any) -> str:
        if isinstance(v, np.ndarray):
            return f"{v.dtype}{list(v.shape)}"
        return type(v).__name__

    return f"{path}: got {shape(got)}, want {shape(want)}"


def _compare_one(path: str, got: Any, want: Any, max_ulp: float, tolerance: tuple[float, float] | None,
                 worst: list[float], values: bool = True) -> str:
    """'' when ``got`` matches ``want``; else what differs. Appends float distances to ``worst``."""
    if want is None or got is None:
        return "" if want is None and got is None else _describe(path, got, want)
    if isinstance(want, Mapping):
        if not isinstance(got, Mapping) or set(got) != set(want):
            return _describe(path, got, want)
        for key in want:
            found = _compare_one(f"{path}[{key!r}]", got[key], want[key], max_ulp, tolerance, worst, values)
            if found:
                return found
        return ""
    if isinstance(want, Sequence) and not isinstance(want, (str, bytes)):
        if not isinstance(got, Sequence) or len(got) != len(want):
            return _describe(path, got, want)
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            found = _compare_one(f"{path}[{i}]", g, w, max_ulp, tolerance, worst, values)
            if found:
                return found
        return ""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return _describe(path, got, want)
    if not values:
        return "" if got.dtype == want.dtype or {got.dtype.kind, want.dtype.kind} <= set("OUS") else _describe(
            path, got, want)
    if want.dtype.kind in "OUS" or got.dtype.kind in "OUS":
        same = got.tolist() == want.tolist()
        return "" if same else f"{path}: strings differ"
    if got.dtype != want.dtype:
        return _describe(path, got, want)
    if not _is_float(want.dtype):
        if np.array_equal(got, want):
            return ""
        bad = int(np.sum(got != want))
        return f"{path}: {bad} of {want.size} {want.dtype} elements differ"
    g64, w64 = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64), want.astype(
        np.complex128 if want.dtype.kind == "c" else np.float64)
    if np.array_equal(g64, w64, equal_nan=True):
        worst.append(0.0)
        return ""
    if tolerance is not None:
        rtol, atol = tolerance
        if np.allclose(g64, w64, rtol=rtol, atol=atol, equal_nan=True):
            worst.append(0.0)
            return ""
        return (f"{path}: {want.dtype} differs beyond rtol={rtol:g}, atol={atol:g}: "
                f"max |diff| {float(np.nanmax(np.abs(g64 - w64))):.3g}")
    ulp = ulp_error(got, want)
    worst.append(ulp)
    if ulp <= max_ulp:
        return ""
    return f"{path}: {want.dtype} differs by {ulp:.4g} ulp (budget {max_ulp:g})"


def compare(got: Sequence[Any], want: Sequence[Any], *, max_ulp: float = 0.0,
            tolerance: tuple[float, float] | None = None, names: Sequence[str] | None = None,
            values: bool = True) -> Comparison:
    """Compare output lists: discrete exactly; floats exactly, within ``max_ulp``, or ``tolerance``.

    Args:
        got: the outputs to judge, in graph order.
        want: the reference outputs.
        max_ulp: the float budget in ulp of the tensor's magnitude (see :func:`ulp_error`); 0: exact.
        tolerance: ``(rtol, atol)`` for floats instead of ulp (onnx's backend-test comparison, for
            reference outputs that numpy computed).
        names: output names, for the message.
        values: False compares only structure, dtypes and shapes (outputs of random ops).
    """
    if len(got) != len(want):
        return Comparison(False, False, math.inf, f"{len(got)} outputs, want {len(want)}")
    worst: list[float] = []
    labels = list(names) if names is not None else [f"output {i}" for i in range(len(want))]
    for label, g, w in zip(labels, got, want, strict=True):
        found = _compare_one(label, g, w, max_ulp, tolerance, worst, values)
        if found:
            return Comparison(False, False, max(worst, default=0.0), found)
    top = max(worst, default=0.0)
    return Comparison(True, top == 0.0, top, "")


def ort_session(model: onnx.ModelProto, *, optimize: bool = False) -> ort.InferenceSession:
    """A CPU session, graph optimizations off unless ``optimize`` (so kernels, not fusions, compute)."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@functools.cache
def ort_max_opset() -> int:
    """The newest default-domain opset this onnxruntime loads (probed with an Identity model)."""
    for opset in range(onnx.defs.onnx_opset_version(), ORT_MIN_OPSET, -1):
        x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])
        y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])
        graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "probe", [x], [y])
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
        try:
            ort_session(model)
        except Exception:
            continue
        return opset
    return ORT_MIN_OPSET
