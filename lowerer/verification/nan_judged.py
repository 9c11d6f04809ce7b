"""Where outputs on NaN inputs are judged, and how; everywhere else they are recorded, not judged.

ONNX leaves NaN open for most ops, so the ``nan`` input sets (:mod:`.inputs`) are recorded only. For
the ops of :data:`NAN_RULES` the result on NaN is defined, by the spec or by onnxruntime's kernels
(which the original runs on), and lowerer's own forms promise it; there the ``nan`` sets (and the
constructed ``nan-rows`` and ``non-finite`` sets, :mod:`.special`) are judged:

Judged (``equal``: NaN at the same positions, every other value as on any set):

* Where (selection: "elements, either from X or Y": a NaN passes through as it is);
* Gather, GatherElements, GatherND (they copy the values they read);
* ScatterElements, ScatterND, Scatter, every ``reduction``: ``none`` copies; ``add``/``mul`` are
  arithmetic (NaN in, NaN out); ``max``/``min`` are the kernels' ``a > b ? a : b`` /
  ``a < b ? a : b`` with ``a`` the value already there (an update of NaN wins, a NaN already there
  loses): onnxruntime ``onnxruntime/core/providers/cpu/tensor/scatter.cc`` (``Func_Max``/``Func_Min``),
  measured on onnxruntime 1.32.0 (``max`` of a NaN already there and 1.0 is 1.0, of 1.0 and an update
  of NaN is NaN); lowerer's scatter adapters promise exactly that (``lowerer/rules/scatter.py``);
* Max, Min (elementwise): onnxruntime propagates NaN (``onnxruntime/core/providers/cpu/math/
  element_wise_ops.cc``; measured on 1.32.0: Max-8/12/13 of NaN and 1.0 is NaN, either order);
* IsNaN, IsInf: the spec defines them on NaN ("true where the input is NaN"; IsInf is false on NaN), and
  a form of IsNaN (``isnan-equal``, ``isnan-ordered``) is nothing but its answer on NaN;
* ReduceMax, ReduceMin: as onnxruntime computes them (measured on 1.32.0, versions 11 to 20: a leading
  NaN of the reduced row gives NaN, a later one is skipped), the same kernel on both sides of a rewrite
  that keeps the op.

Judged by range (``arg-index``): ArgMax, ArgMin, and lowerer's forms of them (``argmax-reduce``,
``argmax-topk``, ``argmax-flip``): on a row holding no NaN the index must be equal, on a row holding
NaN it must be in ``[0, n - 1]`` (any such index: ONNX leaves which one open; onnxruntime's ArgMax takes
the first NaN of a row only when it leads). ``one-hot``: Hardmax and its decomposition, ``hardmax-reduce``
and ``hardmax-topk``: a row holding no NaN must be equal, a row holding NaN holds only 0 and 1 with at
most one 1 (onnxruntime's Hardmax zeroes such a row, the decomposition follows ArgMax). A difference
within those bounds is recorded.

Recorded, not judged: every other op, GlobalMaxPool and MaxPool among them (onnxruntime's pooling skips a
NaN where its ReduceMax keeps a leading one, so the ``GlobalMaxPool`` decomposition differs there: the
README's example), and NaN offsets and grid coordinates of DeformConv and GridSample (the kernels index
with ``floor(NaN)``).
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.model_io.node_attributes import int_attribute
from lowerer.verification.compare import Difference

__all__ = ["NAN_KINDS", "NAN_RULES", "judge_rows", "nan_rule"]

#: The input-set kinds that hold NaN: judged only where :data:`NAN_RULES` names the op.
NAN_KINDS = frozenset({"nan", "nan-rows", "non-finite"})

_EQUAL = "equal"
#: How the outputs of each op's rewrites are judged on NaN inputs (see the module docstring for the sources).
NAN_RULES: dict[str, str] = {
    "Where": _EQUAL, "Gather": _EQUAL, "GatherElements": _EQUAL, "GatherND": _EQUAL,
    "ScatterElements": _EQUAL, "ScatterND": _EQUAL, "Scatter": _EQUAL,
    "Max": _EQUAL, "Min": _EQUAL, "ReduceMax": _EQUAL, "ReduceMin": _EQUAL,
    "ArgMax": "arg-index", "ArgMin": "arg-index", "Hardmax": "one-hot", "IsNaN": _EQUAL, "IsInf": _EQUAL,
}


def nan_rule(node: onnx.NodeProto) -> str | None:
    """How ``node``'s rewrites are judged on NaN inputs (a value of :data:`NAN_RULES`), or None: recorded."""
    if node.domain not in ("", "ai.onnx"):
        return None
    return NAN_RULES.get(node.op_type)


def _nan_rows(node: onnx.NodeProto, version: int, x: np.ndarray) -> tuple[np.ndarray, int] | None:
    """Where the reduced rows of ``x`` hold NaN, shaped like the output (keepdims), and the row length."""
    rank = x.ndim
    if rank == 0 or x.size == 0:
        return None
    hardmax = node.op_type == "Hardmax"
    axis = int_attribute(node, "axis", (1 if version < 13 else -1) if hardmax else 0)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    nan = np.isnan(x.astype(np.float64))
    if hardmax and version < 13:  # rows of the coerced 2-D view
        rows = nan.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
        return np.broadcast_to(rows.any(axis=1, keepdims=True), rows.shape).reshape(x.shape), rows.shape[1]
    held = np.asarray(nan.any(axis=axis, keepdims=True))
    if hardmax:
        return np.broadcast_to(held, x.shape), x.shape[axis]
    kept = held if int_attribute(node, "keepdims", 1) else np.asarray(np.squeeze(held, axis=axis))
    return kept, x.shape[axis]


def _ones_per_row(node: onnx.NodeProto, version: int, ones: np.ndarray) -> np.ndarray:
    """How many ones each Hardmax row of ``ones`` holds, broadcast to its shape."""
    axis = int_attribute(node, "axis", 1 if version < 13 else -1)
    axis = axis + ones.ndim if axis < 0 else axis
    if version < 13:
        rows = ones.reshape(int(np.prod(ones.shape[:axis], dtype=np.int64)), -1)
        return np.broadcast_to(rows.sum(axis=1, keepdims=True), rows.shape).reshape(ones.shape)
    return np.broadcast_to(ones.sum(axis=axis, keepdims=True), ones.shape)


def judge_rows(node: onnx.NodeProto, version: int, rule: str, x: np.ndarray, expected: np.ndarray,
               actual: np.ndarray) -> Difference | None:
    """An arg form's output judged on NaN input ``x`` (``rule``: ``arg-index`` or ``one-hot``): what is wrong, or None.

    Rows without NaN must be equal; rows with NaN in range (``arg-index``) or 0/1 with at most one 1 (``one-hot``).
    """
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        return Difference(f"shapes or element types differ: original {expected.dtype}{list(expected.shape)}, "
                          f"replacement {actual.dtype}{list(actual.shape)}")
    found = _nan_rows(node, version, x)
    if found is None:
        return None
    rows, n = found
    if rows.shape != actual.shape:
        return None
    wide_e, wide_a = expected.astype(np.float64), actual.astype(np.float64)
    clean = ~rows & ~((wide_e == wide_a) | (np.isnan(wide_e) & np.isnan(wide_a)))
    if rule == "arg-index":
        bad = clean | (rows & ((wide_a < 0) | (wide_a > n - 1)))
        what = "an index out of [0, n - 1] on a row holding NaN, or a different index on a row without"
    else:
        bad = clean | (rows & ~((wide_a == 0) | (wide_a == 1)))
        bad |= rows & (_ones_per_row(node, version, wide_a == 1) > 1)
        what = "a row holding NaN with a value other than 0 and 1 or more than one 1, or a row without NaN differs"
    if not np.any(bad):
        return None
    flat = int(np.argwhere(bad.reshape(-1))[0][0])
    index = tuple(int(i) for i in np.unravel_index(flat, actual.shape))
    return Difference(f"values differ ({what})", index, expected.reshape(-1)[flat].item(),
                      actual.reshape(-1)[flat].item())
