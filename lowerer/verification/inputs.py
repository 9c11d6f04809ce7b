"""Generated, seeded verification inputs: concrete shapes for dynamic dims, and input sets that find bugs.

Input sets (``kind``):

* ``normal``: random normal values (integers: uniform over a moderate range);
* ``ties``: two small integers (as floats for float types), so first vs last extremum matters; bools: each
  row (the last axis) wholly true or wholly false, so a mask hides every key of some rows;
* ``all-equal``: one value everywhere (every row is all ties);
* ``inf`` (floats): normal values with +inf and -inf sprinkled in;
* ``edges``: the type's range edges (integers: min, min+1, -1, 0, 1, max-1, max; floats:
  the largest finite values, the smallest subnormal, +0 and -0);
* ``nan`` (floats): normal values with NaN sprinkled in. What the two sides compute on it is
  judged only for the ops :mod:`.nan_judged` lists (where ONNX or onnxruntime's kernels define the
  result); for the others it is recorded, never judged.

Kinds are per input, not intersected over an op's inputs: a set's kind is one that some input takes
(:func:`set_kinds`), and each input is generated with it where its element type takes it, else as
``normal`` (:func:`input_kind`). So the float inputs of Where, the scatters and GatherElements get their
±inf, NaN and edge sets while the bool condition and the indices keep valid values (indices are folded into
range afterwards, :func:`.domain.into_domain`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from lowerer.facts.reference import np_dtype

__all__ = ["JUDGED_KINDS", "SEEDED_KINDS", "InputSet", "bind_shapes", "generate", "input_kind", "kinds_for",
           "min_rank_for", "set_kinds"]
#: The kinds of seeded input sets of a per-rewrite check (:mod:`.special` adds constructed ones).
SEEDED_KINDS = ("normal", "ties", "all-equal", "inf", "edges", "nan")
#: Kinds whose comparison decides verified/failed; the rest are recorded only.
JUDGED_KINDS = frozenset(SEEDED_KINDS) - {"nan"}
#: The most elements one generated input may have.
MAX_ELEMENTS = 1 << 24

_BF16 = np.dtype(ml_dtypes.bfloat16)


@dataclass(frozen=True)
class InputSet:
    """One generated input set: its kind and the concrete shape of each input."""

    kind: str
    shapes: tuple[tuple[int, ...], ...]

    def describe(self, names: Sequence[str], dtypes: Sequence[np.dtype[Any] | str],
                 kinds: Sequence[str] | None = None) -> str:
        """``kind (x: float32[2,3])``; an input generated as another kind says which (``c: bool[2,3] normal``)."""
        per_input = kinds if kinds is not None else [self.kind] * len(names)
        parts = [f"{n}: {d}[{','.join(map(str, s))}]" + ("" if k == self.kind else f" {k}")
                 for n, d, s, k in zip(names, dtypes, self.shapes, per_input, strict=True)]
        return f"{self.kind} ({'; '.join(parts)})"


def min_rank_for(node: onnx.NodeProto, version: int) -> int | None:
    """The smallest input rank ``node`` accepts, for ops lowerer knows; None for other ops."""
    axis = None
    for a in node.attribute:
        if a.name == "axis":
            axis = int(a.i)
    op = node.op_type
    if op in ("ArgMax", "ArgMin"):
        axis = 0 if axis is None else axis
    elif op in ("Hardmax", "Softmax", "LogSoftmax"):
        axis = (1 if version < 13 else -1) if axis is None else axis
    elif op in ("GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"):
        return 3
    else:
        return None
    return max(axis + 1, 1) if axis >= 0 else -axis


def bind_shapes(dims: Sequence[int | None] | None, min_rank: int | None) -> list[tuple[int, ...]] | str:
    """Concrete shapes to check: dynamic dims bound to 1, to 3, to distinct sizes 2, 3, 4, ..., and to 0.

    With an unknown rank (``dims`` None), ranks ``min_rank`` .. ``min_rank + 2`` are used. The
    empty binding checks that a rewrite keeps empty tensors empty (where the original accepts
    them; where it does not, the check skips that shape).
    Returns the reason instead when no shape can be chosen.
    """
    if dims is None:
        if min_rank is None:
            return "the input's rank is unknown and lowerer does not know which ranks the op accepts"
        templates: list[list[int | None]] = [[None] * r for r in range(min_rank, min_rank + 3)]
    else:
        templates = [list(dims)]
    shapes: list[tuple[int, ...]] = []
    for template in templates:
        dynamic = [i for i, d in enumerate(template) if d is None]
        bindings = ([[1] * len(dynamic), [3] * len(dynamic), [2 + k for k in range(len(dynamic))], [0] * len(dynamic)]
                    if dynamic else [[]])
        for binding in bindings:
            shape = list(template)
            for i, size in zip(dynamic, binding, strict=True):
                shape[i] = size
            concrete = tuple(int(d) for d in shape)  # type: ignore[arg-type]
            if concrete not in shapes:
                shapes.append(concrete)
    too_big = [s for s in shapes if int(np.prod(s, dtype=np.int64)) > MAX_ELEMENTS]
    if too_big and len(too_big) == len(shapes):
        size = int(np.prod(too_big[0], dtype=np.int64))
        return f"the input has {size} elements, over the {MAX_ELEMENTS} verification limit"
    return [s for s in shapes if s not in too_big]


def kinds_for(elem_type: int) -> tuple[str, ...]:
    """The input-set kinds that make sense for an element type."""
    dtype = np_dtype(elem_type)
    if dtype.kind == "f" or dtype == _BF16:
        return SEEDED_KINDS
    if dtype.kind == "b":
        return ("normal", "ties", "all-equal")
    return ("normal", "ties", "all-equal", "edges")


def set_kinds(elem_types: Sequence[int]) -> list[str]:
    """The kinds of input sets to run for inputs of ``elem_types``: those some input takes (SEEDED_KINDS order)."""
    if not elem_types:
        return ["normal"]
    taken = {k for e in elem_types for k in kinds_for(e)}
    return [k for k in SEEDED_KINDS if k in taken]


def input_kind(kind: str, elem_type: int) -> str:
    """What an input of ``elem_type`` is generated as in a set of ``kind``: ``kind`` where it takes it, else normal."""
    return kind if kind in kinds_for(elem_type) else "normal"


def generate(kind: str, elem_type: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """One input of ``kind`` for ``elem_type`` and ``shape``."""
    dtype = np_dtype(elem_type)
    is_float = dtype.kind == "f" or dtype == _BF16
    if dtype.kind == "b":
        if kind == "all-equal":
            return np.full(shape, bool(rng.integers(0, 2)))
        if kind == "ties" and shape:  # rows wholly true or wholly false
            rows = rng.integers(0, 2, size=(*shape[:-1], 1)).astype(bool)
            return np.array(np.broadcast_to(rows, shape))
        return rng.integers(0, 2, size=shape).astype(bool)
    if is_float:
        return _float_input(kind, dtype, shape, rng)
    return _int_input(kind, dtype, shape, rng)


def _float_input(kind: str, dtype: np.dtype[Any], shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if kind == "ties":
        return rng.integers(-1, 1, size=shape).astype(dtype)  # -1 and 0: exact in every float type
    if kind == "all-equal":
        return np.full(shape, np.float32(rng.integers(-3, 4) * 0.5)).astype(dtype, copy=False)
    if kind == "edges":
        info = ml_dtypes.finfo(dtype) if dtype == _BF16 else np.finfo(dtype)  # type: ignore[no-untyped-call]
        pool = np.array([float(info.max), -float(info.max), float(info.smallest_subnormal), 0.0, -0.0,
                         -float(info.smallest_subnormal), float(info.max) / 2], dtype=np.float64)
        return np.asarray(pool[rng.integers(0, len(pool), size=shape)]).astype(dtype)  # 0-d: an array, no scalar
    x = rng.standard_normal(size=shape).astype(np.float32)
    if kind == "inf":
        u = rng.random(size=shape)
        x[u < 0.2] = np.inf
        x[(u >= 0.2) & (u < 0.4)] = -np.inf
    elif kind == "nan":
        x[rng.random(size=shape) < 0.15] = np.nan
    return x.astype(dtype, copy=False)


def _int_input(kind: str, dtype: np.dtype[Any], shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    if kind == "ties":
        low = 0 if info.min == 0 else -1
        return rng.integers(low, low + 2, size=shape).astype(dtype)
    if kind == "all-equal":
        return np.full(shape, rng.integers(0, 5), dtype=dtype)
    if kind == "edges":
        pool = sorted({int(info.min), int(info.min) + 1, int(info.max) - 1, int(info.max),
                       *(v for v in (-1, 0, 1) if info.min <= v <= info.max)})
        return np.asarray(np.array(pool, dtype=dtype)[rng.integers(0, len(pool), size=shape)])
    low, high = (0, 200) if info.min == 0 else (-100, 100)
    return rng.integers(max(low, int(info.min)), min(high, int(info.max)) + 1, size=shape).astype(dtype)
