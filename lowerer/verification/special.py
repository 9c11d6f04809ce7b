"""Input sets that reach an op's special cases by construction, not by seed.

Seeded sets (:mod:`.inputs`) may never put the first maximum last, or make a whole 3x3 plane -inf.
For the ops below, :func:`constructed` adds a bounded number of sets built to hit those cases:

* ArgMax, ArgMin, Hardmax (``positions``): along the reduced axis (Hardmax below 13: the coerced
  2-D view), rows where every position is the only, the first and the last extremum, and ties of
  every multiplicity (the first and the last ``m`` positions); for floats every other set uses
  ±inf as the extremum, and one row is all -inf (ArgMax, Hardmax) or all +inf (ArgMin);
* GlobalMaxPool, MaxPool, ReduceMax, ReduceMin (``planes``): the whole input -inf (+inf for
  ReduceMin), and planes (the first two dims, or the first) in turn all -inf, all +inf, one finite
  value among -inf, and random; single-element planes come from the shapes (dynamic dims bound to 1);
* ScatterElements, ScatterND, Scatter (``duplicates``): every index the same (the updates random);
* ArgMax, ArgMin, Hardmax on floats (``nan-rows``): rows all NaN, NaN first, NaN last, NaN beside -inf
  and +inf, and rows without NaN (judged as :mod:`.nan_judged` says: an index in range on a NaN row);
* the select-like ops, Where, the scatters and the gathers (``signed-zeros``, ``non-finite``): their float
  inputs made of -0.0, +0.0 and ±1 (a scatter's data all -0.0: a ``max``/``min`` that keeps it must keep
  its sign), then of ±inf, NaN, -0.0 and 1 (Where's condition alternating, so both truth values meet
  every value): a selection written with arithmetic (``x * c + y * (1 - c)``) or with onnxruntime's
  Where (which loses a chosen -0.0) shows; a scatter's data all NaN under updates without, and its
  updates all NaN over data without (a max/min whose comparison is negated shows on every seed); the bool
  condition and the indices stay valid (the indices are folded into range, :func:`.domain.into_domain`);
* DeformConv, GridSample (``sampling-edges``): sampling points exactly on integer pixels and on the
  borders, next to ±inf and NaN pixels (:mod:`.sampling`);
* IsNaN, IsInf (``non-finite``): every value class of the float type in every set, tiled: NaN, ±inf, ±0,
  the largest finite value and the smallest subnormal of each sign, ±1 (a classification wrong on one
  class shows on every seed);
* Cast, CastLike (``cast-edges``): values at the target type's edges (float16's largest finite and the
  values that round past it, subnormals, in-range integer bounds, halves, signed zeros);
* Gemm, MatMul (``signed-zeros``): A negative and B positive, both of the type's smallest normal
  magnitude, so that every product underflows to -0.0 and the sum (a fused multiply-add from +0.0, as
  onnxruntime's MLAS kernels compute it) is exactly -0.0 (Gemm's C, when given, -0.0 too): a rewrite
  that adds +0.0 somewhere (a C of +0.0 for -0.0) shows. A kernel that rounds each product before
  adding it to +0.0 gives +0.0 on both sides, and the set only compares equal.

Every set is judged like the seeded ones. At most :data:`MAX_SETS` sets per input shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import int_attribute
from lowerer.verification.sampling import SAMPLED, sampling_edges

__all__ = ["CONSTRUCTED_KINDS", "MAX_SETS", "constructed"]

#: The kinds of constructed sets (judged like the seeded kinds).
CONSTRUCTED_KINDS = frozenset({"positions", "planes", "all-inf", "duplicates", "cast-edges", "signed-zeros",
                               "sampling-edges"})
#: The most constructed sets per input shape.
MAX_SETS = 16

_BF16 = np.dtype(ml_dtypes.bfloat16)
_ARG = {"ArgMax": 1, "ArgMin": -1, "Hardmax": 1}
_MAX_LIKE = {"GlobalMaxPool": 1, "MaxPool": 1, "ReduceMax": 1, "ReduceMin": -1}
_SCATTERS = ("ScatterElements", "ScatterND", "Scatter")
_PRODUCTS = ("Gemm", "MatMul")
#: The ops that classify float values: every class in every set.
_CLASSIFIERS = ("IsNaN", "IsInf")
#: The select-like ops and the positions of their float inputs (the values they choose among).
_SELECTS = {"Where": (1, 2), "ScatterElements": (0, 2), "ScatterND": (0, 2), "Scatter": (0, 2),
            "GatherElements": (0,), "Gather": (0,), "GatherND": (0,)}

#: One constructed set: its kind, the inputs it gives (by position), and what it covers.
Constructed = tuple[str, dict[int, np.ndarray], str]


def _is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype == _BF16


def _patterns(n: int) -> list[tuple[int, ...]]:
    """Sets of extremum positions, most telling first.

    Each position alone; each as the first (with the last) and as the last (with the first); the
    first and the last ``m`` positions for every multiplicity ``m``.
    """
    out: list[tuple[int, ...]] = [(p,) for p in range(n)]
    out += [(p, n - 1) for p in range(n - 1)] + [(0, q) for q in range(1, n)]
    for m in range(2, n + 1):
        out += [tuple(range(m)), tuple(range(n - m, n))]
    return list(dict.fromkeys(out))


def _rows_layout(node: onnx.NodeProto, version: int, shape: tuple[int, ...]) -> tuple[int, int, int, bool] | None:
    """(rows, length, axis, coerced) of the reduced axis of an arg/hard-max op on ``shape``; None when empty."""
    rank = len(shape)
    if rank == 0:
        return None
    coerced = node.op_type == "Hardmax" and version < 13
    default = 1 if coerced else (-1 if node.op_type == "Hardmax" else 0)
    axis = int_attribute(node, "axis", default)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        return None
    if coerced:
        rows, n = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
    else:
        n = shape[axis]
        rows = int(np.prod(shape, dtype=np.int64)) // max(n, 1)
    return (rows, n, axis, coerced) if rows > 0 and n > 0 else None


def _positions(node: onnx.NodeProto, version: int, dtype: np.dtype[Any], shape: tuple[int, ...],
               rng: np.random.Generator) -> list[Constructed]:
    layout = _rows_layout(node, version, shape)
    if layout is None:
        return []
    rows, n, axis, coerced = layout
    sign = _ARG[node.op_type]
    patterns = _patterns(n)
    floats = _is_float(dtype)
    if floats:
        patterns.append(())  # a row of all -inf (+inf for ArgMin): a tie of every position
    n_sets = min(MAX_SETS, -(-len(patterns) // rows))
    out: list[Constructed] = []
    for k in range(n_sets):
        table = np.empty((rows, n), np.float64)
        for r in range(rows):
            pattern = patterns[(k * rows + r) % len(patterns)]
            row = rng.permutation(n).astype(np.float64) + 1.0  # distinct, 1..n: never the extremum
            if not pattern and floats:
                row[:] = -np.inf * sign
            else:
                extreme = (np.inf * sign if floats and k % 2 else (n + 1.0 if sign > 0 else 0.0))
                row[list(pattern)] = extreme
            table[r] = row
        if coerced:
            values = table.reshape(shape)
        else:
            moved = (*shape[:axis], *shape[axis + 1:], n)
            values = np.moveaxis(table.reshape(moved), -1, axis)
        covered = min(len(patterns), (k + 1) * rows)
        out.append(("positions", {0: np.ascontiguousarray(values).astype(dtype)},
                    f"every position as the only, first and last {'maximum' if sign > 0 else 'minimum'}, ties "
                    f"of multiplicity 1..{n}{' and a row all ' + ('-inf' if sign > 0 else '+inf') if floats else ''}"
                    f" ({covered} of {len(patterns)} row patterns)"))
    return [(kind, given, out[-1][2]) for kind, given, _ in out]


def _planes(op: str, dtype: np.dtype[Any], shape: tuple[int, ...], rng: np.random.Generator) -> list[Constructed]:
    if not _is_float(dtype) or not shape or 0 in shape:
        return []
    low = -np.inf if _MAX_LIKE[op] > 0 else np.inf
    size = int(np.prod(shape, dtype=np.int64))
    lead = int(np.prod(shape[:2], dtype=np.int64)) if len(shape) >= 3 else shape[0]
    rest = size // lead
    planes = rng.standard_normal((lead, rest))
    for p in range(lead):
        kind = p % 4
        if kind < 2:
            planes[p] = low if kind == 0 else -low
        elif kind == 2:
            planes[p] = low
            planes[p, p % rest] = rng.standard_normal()
    single = len(shape) >= 3 and rest == 1
    what = f"planes all {low:+}, all {-low:+}, one finite among {low:+}" + (", single-element planes" if single else "")
    return [("all-inf", {0: np.full(shape, low).astype(dtype)}, f"the whole input {low:+}"),
            ("planes", {0: planes.reshape(shape).astype(dtype)}, what)]


def _nan_rows(node: onnx.NodeProto, version: int, dtype: np.dtype[Any], shape: tuple[int, ...],
              rng: np.random.Generator) -> list[Constructed]:
    """Rows along the reduced axis: all NaN, NaN first, NaN last, NaN beside ±inf, and none."""
    layout = _rows_layout(node, version, shape)
    if layout is None or not _is_float(dtype):
        return []
    rows, n, axis, coerced = layout
    table = np.empty((rows, n), np.float64)
    for r in range(rows):
        row = rng.permutation(n).astype(np.float64) + 1.0
        kind = r % 5
        if kind == 0:
            row[:] = np.nan
        elif kind in (1, 2):
            row[0 if kind == 1 else n - 1] = np.nan
        elif kind == 3:
            row[n // 2] = np.nan
            row[0], row[n - 1] = (-np.inf, np.inf) if n > 2 else (row[0], row[n - 1])
        table[r] = row
    if coerced:
        values = table.reshape(shape)
    else:
        values = np.moveaxis(table.reshape((*shape[:axis], *shape[axis + 1:], n)), -1, axis)
    return [("nan-rows", {0: np.ascontiguousarray(values).astype(dtype)},
             "rows all NaN, NaN first, last and beside ±inf, rows without NaN")]


def _pooled(pool: Sequence[float], shape: tuple[int, ...], dtype: np.dtype[Any], rng: np.random.Generator
            ) -> np.ndarray:
    """``shape`` filled with ``pool``'s values, each about equally often, in a seeded order."""
    size = int(np.prod(shape, dtype=np.int64))
    values = np.array(pool, np.float64)[rng.permutation(size) % len(pool)]
    return values.reshape(shape).astype(dtype)


def _selects(op: str, elems: Sequence[int], shapes: Sequence[tuple[int, ...]], rng: np.random.Generator
             ) -> list[Constructed]:
    """Signed zeros, then ±inf and NaN, in the float inputs a select-like op chooses among."""
    floats = [k for k in _SELECTS[op] if k < len(elems) and k < len(shapes) and _is_float(np_dtype(elems[k]))
              and 0 not in shapes[k]]
    if not floats:
        return []
    zeros: dict[int, np.ndarray] = {}
    special: dict[int, np.ndarray] = {}
    for k in floats:
        dtype = np_dtype(elems[k])
        scattered_data = op in _SCATTERS and k == 0
        zeros[k] = np.full(shapes[k], -0.0).astype(dtype) if scattered_data else \
            _pooled((-0.0, 0.0, -1.0, 1.0), shapes[k], dtype, rng)
        special[k] = _pooled((np.inf, -np.inf, np.nan, -0.0, 1.0), shapes[k], dtype, rng)
    if op == "Where" and elems and np_dtype(elems[0]).kind == "b" and shapes[0]:
        size = int(np.prod(shapes[0], dtype=np.int64))
        special[0] = (np.arange(size) % 2 == 0).reshape(shapes[0])
    out: list[Constructed] = [
        ("signed-zeros", zeros, "chosen values -0.0, +0.0, -1 and 1 (a scatter's data all -0.0)"),
        ("non-finite", special, "chosen values ±inf, NaN, -0.0 and 1 (a condition of both truth values)")]
    if op in _SCATTERS and set(floats) == {0, 2}:
        # NaN on one side of every combined pair, whatever the seed: a max/min written with the negated
        # comparison (``Not(a >= b)`` for ``a < b``) differs exactly there
        finite = (np.inf, -np.inf, -0.0, 1.0)
        data, updates = np_dtype(elems[0]), np_dtype(elems[2])
        out += [("non-finite", {0: np.full(shapes[0], np.nan).astype(data),
                                2: _pooled(finite, shapes[2], updates, rng)}, "a scatter's data all NaN"),
                ("non-finite", {0: _pooled(finite, shapes[0], data, rng),
                                2: np.full(shapes[2], np.nan).astype(updates)}, "a scatter's updates all NaN")]
    return out


def _cast_edges(node: onnx.NodeProto, elems: Sequence[int], shape: tuple[int, ...]) -> list[Constructed]:
    source = np_dtype(elems[0])
    target = np_dtype(elems[1]) if node.op_type == "CastLike" and len(elems) > 1 else \
        np_dtype(int_attribute(node, "to", onnx.TensorProto.FLOAT))
    pool: list[float] = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5]
    if _is_float(target):
        info = ml_dtypes.finfo(target) if target == _BF16 else np.finfo(target)  # type: ignore[no-untyped-call]
        big, tiny = float(info.max), float(info.smallest_subnormal)
        pool += [big, -big, big * (1 + float(info.eps) / 4), big * (1 + float(info.eps)), tiny, -tiny, tiny / 4]
    elif target.kind in "iu":
        bounds = np.iinfo(target)
        lo, hi = (int(bounds.min), int(bounds.max)) if bounds.bits <= 16 else (-(1 << 24), 1 << 24)
        pool += [lo, hi, lo + 1, hi - 1, hi - 0.5, lo + 0.5]
    if not _is_float(source):
        if source.kind == "b":
            return []
        limits = np.iinfo(source)
        pool = [v for v in pool if float(v).is_integer() and limits.min <= v <= limits.max]
        pool += [int(limits.min), int(limits.max)]
    if target.kind == "u":
        pool = [v for v in pool if v > -1]
    values = np.array(pool, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        column = values.astype(source) if _is_float(source) else values.astype(np.int64).astype(source)
    given = np.resize(column, shape) if shape else column[:1].reshape(())
    return [("cast-edges", {0: given}, f"{len(pool)} values at {target}'s edges (signed zeros, halves, bounds)")]


def _value_classes(dtype: np.dtype[Any], shape: tuple[int, ...]) -> list[Constructed]:
    """NaN, ±inf, ±0, ±the largest finite value, ±the smallest subnormal and ±1, tiled over ``shape``."""
    if not _is_float(dtype) or 0 in shape:
        return []
    info = ml_dtypes.finfo(dtype) if dtype == _BF16 else np.finfo(dtype)  # type: ignore[no-untyped-call]
    big, tiny = float(info.max), float(info.smallest_subnormal)
    pool = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, big, -big, tiny, -tiny, 1.0, -1.0], np.float64)
    values = np.resize(pool.astype(dtype), shape) if shape else pool[:1].astype(dtype).reshape(())
    return [("non-finite", {0: values}, "every value class: NaN, ±inf, ±0, ±max, ±the smallest subnormal, ±1")]


def _signed_zeros(dtype: np.dtype[Any], shapes: Sequence[tuple[int, ...]], rng: np.random.Generator
                  ) -> list[Constructed]:
    """A negative, B positive, both tiny (every product underflows to -0.0), Gemm's C -0.0."""
    if not _is_float(dtype) or len(shapes) < 2:
        return []
    tiny = float((ml_dtypes.finfo(dtype) if dtype == _BF16 else np.finfo(dtype)).smallest_normal)  # type: ignore[no-untyped-call]
    given = {0: (-tiny * rng.integers(1, 3, shapes[0])).astype(dtype),
             1: (tiny * rng.integers(1, 3, shapes[1])).astype(dtype)}
    if len(shapes) > 2:
        given[2] = np.full(shapes[2], -0.0).astype(dtype)
    return [("signed-zeros", given, "negative times positive products that underflow to -0.0 (sums of -0.0)")]


def constructed(node: onnx.NodeProto, version: int, elems: Sequence[int], shapes: Sequence[tuple[int, ...]],
                rng: np.random.Generator) -> list[Constructed]:
    """The constructed input sets of ``node`` (at ``version``) for one binding of its inputs' shapes.

    Inputs not given by a set are generated as the ``normal`` kind.
    """
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or not shapes or not elems:
        return []
    dtype = np_dtype(elems[0])
    if op in _ARG and dtype.kind != "b":
        return _positions(node, version, dtype, shapes[0], rng) + _nan_rows(node, version, dtype, shapes[0], rng)
    if op in _MAX_LIKE:
        return _planes(op, dtype, shapes[0], rng)
    if op in _SCATTERS and len(shapes) > 1 and 0 not in shapes[1]:
        return [("duplicates", {1: np.zeros(shapes[1], np_dtype(elems[1]))}, "every index the same"),
                *_selects(op, elems, shapes, rng)]
    if op in _SELECTS:
        return _selects(op, elems, shapes, rng)
    if op in SAMPLED:
        return sampling_edges(node, elems, shapes, rng)
    if op in ("Cast", "CastLike") and 0 not in shapes[0]:
        return _cast_edges(node, elems, shapes[0])
    if op in _PRODUCTS:
        return _signed_zeros(dtype, shapes, rng)
    if op in _CLASSIFIERS:
        return _value_classes(dtype, shapes[0])
    return []
