"""Lowering of Trilu-14 (torch.tril / torch.triu) for targets below opset 14.

The kept part of the last two axes is a mask: element ``(i, j)`` is kept when ``j - i <= k``
(lower, ``upper=0``) or ``j - i >= k`` (``upper=1``). The output is ``Where(not mask, 0, X)``: a
selection, exact for every value (inf and NaN included; a multiplication by a 0/1 mask would
turn ``inf * 0`` into NaN). With static last two dims and a constant (or absent) ``k`` the mask
is a constant; otherwise it is computed from ``Range`` (opset >= 11). Where exists from opset 9;
below 9 integer and bool inputs use ``Mul``/``And`` with a constant mask (exact: no value is
rounded), floats of a fully static shape a Where that is lowered in turn, other floats are
refused. Bool inputs use ``And`` with the mask at every opset.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import lowering

__all__ = ["trilu"]


def _k_value(em: Emitter) -> int | None:
    """The constant ``k`` (0 when absent), or None when it is computed at run time."""
    node = em.node
    if len(node.input) < 2 or not node.input[1]:
        return 0
    value = em.constant(node.input[1])
    return None if value is None else int(np.asarray(value).reshape(-1)[0])


def _constant_mask(rows: int, cols: int, k: int, upper: bool) -> np.ndarray:
    diff = np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None]
    return diff >= k if upper else diff <= k


def _runtime_k_mask(em: Emitter, rows: int, cols: int, upper: bool, kept: bool = True) -> str:
    """The mask for static last two dims and a run-time ``k``: ``j - i`` is a constant, compared with ``k``.

    From opset 9 Less/Greater take int64. Below 9 they take floats only: both sides are compared as
    doubles, which is exact here: the cast is monotone, and every ``j - i`` is a small integer that no
    other int64 rounds to (an int64 ``k`` of magnitude >= 2**53 rounds to a double far from all of them).
    """
    node = em.node
    diff = np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None]
    k = node.input[1]
    if em.target >= 9:
        left = em.const(diff, "diff")
    else:
        left = em.const(diff.astype(np.float64), "diff")
        k = em.op("Cast", [k], to=onnx.TensorProto.DOUBLE)
    dropped = em.op("Less" if upper else "Greater", [left, k])
    return em.op("Not", [dropped]) if kept else dropped


def _computed_mask(em: Emitter, x: str, rank: int, upper: bool, kept: bool = True) -> str:
    """The mask from Range over the last two dims and the run-time ``k`` (opset >= 11); its negation if not ``kept``."""
    if em.target < 11:
        em.refuse(f"the last two dims of {x!r} are not static or k is not a constant, and the mask then needs "
                  "Range (opset >= 11); make the shapes static (python -m onnxruntime.tools.make_dynamic_shape_fixed) "
                  "or choose a target opset >= 11")
    node = em.node
    i64 = np.int64
    shape = em.op("Shape", [x])
    zero, one = em.const(np.array(0, i64), "zero"), em.const(np.array(1, i64), "one")

    def dim(axis: int) -> str:
        picked = em.op("Gather", [shape, em.const(np.array(axis, i64), "axis")], axis=0)
        return em.op("Range", [zero, picked, one])

    rows = em.op("Unsqueeze", [dim(rank - 2), em.const(np.array([1], i64), "axes")])
    diff = em.op("Sub", [dim(rank - 1), rows])
    has_k = len(node.input) > 1 and bool(node.input[1])
    k = node.input[1] if has_k else zero
    dropped = em.op("Less" if upper else "Greater", [diff, k])
    return em.op("Not", [dropped]) if kept else dropped


@lowering("Trilu")
def trilu(em: Emitter) -> None:
    """Trilu as Where(dropped, 0, X) (Mul/And by a constant mask below opset 9 for integers and bool).

    X is Where's third input: onnxruntime's CPU Where (``where_op.cc``) merges its two selections with
    ``x != 0 ? x : y``, so a -0.0 chosen from its second input comes out +0.0; from the third it is kept.
    """
    node = em.node
    x = node.input[0]
    upper = bool(int_attribute(node, "upper", 1))
    rank = em.require_rank(x, "(Trilu masks the last two axes)")
    dtype = np_dtype(em.require_elem_type(x, "the zero Trilu writes is of that type"))
    dims = em.dims(x) or []
    rows, cols = (dims[-2], dims[-1]) if len(dims) >= 2 else (None, None)
    k = _k_value(em)
    static = rows is not None and cols is not None and k is not None
    runtime_k = k is None and rows is not None and cols is not None
    if em.target < 9:
        _below_where(em, x, dtype, static, rows, cols, k, upper, runtime_k)
        return
    kept = dtype.kind == "b"  # And keeps exactly the masked values (onnxruntime's Where has no bool kernel)
    if static:
        constant = _constant_mask(int(rows or 0), int(cols or 0), int(k or 0), upper)
        mask = em.const(constant if kept else ~constant, "mask" if kept else "dropped")
    elif runtime_k:
        mask = _runtime_k_mask(em, int(rows or 0), int(cols or 0), upper, kept)
    else:
        mask = _computed_mask(em, x, rank, upper, kept)
    if kept:
        em.op("And", [x, mask], list(node.output))
        return
    em.op("Where", [mask, em.const(np.zeros((), dtype), "zero"), x], list(node.output))


def _below_where(em: Emitter, x: str, dtype: np.dtype, static: bool, rows: int | None, cols: int | None,
                 k: int | None, upper: bool, runtime_k: bool = False) -> None:
    """Below opset 9 (no Where): the mask applied by Mul (integers) or And (bool).

    Floats of a fully static shape go through Where, which is lowered in turn (a Gather from both sides:
    exact for inf and NaN). The mask is a constant, or with a run-time ``k`` and static last two dims,
    computed (:func:`_runtime_k_mask`) and cast to the integer type for Mul (0 and 1: exact).
    """
    dims = em.dims(x)
    if not static and not runtime_k:
        em.refuse(f"the last two dims of {x!r} are not static, which the mask below opset 9 "
                  "needs; make the shapes static or choose a target opset >= 11")
    if dtype.kind not in "iub" and (dims is None or None in dims):
        em.refuse(f"{x!r} is {dtype} and below opset 9 there is no Where (its Gather form needs every dim static); "
                  "multiplying by a 0/1 mask is not exact for inf and NaN; choose a target opset >= 9")
    if static:
        constant = _constant_mask(int(rows or 0), int(cols or 0), int(k or 0), upper)
        mask = em.const(constant if dtype.kind not in "iu" else constant.astype(dtype), "mask")
    else:
        mask = _runtime_k_mask(em, int(rows or 0), int(cols or 0), upper)
        if dtype.kind in "iu":
            mask = em.op("Cast", [mask], to=int(onnx.helper.np_dtype_to_tensor_dtype(dtype)))
    if dtype.kind not in "iub":
        em.op("Where", [mask, x, em.const(np.zeros((), dtype), "zero")], list(em.node.output))
    else:
        em.op("And" if dtype.kind == "b" else "Mul", [x, mask], list(em.node.output))


