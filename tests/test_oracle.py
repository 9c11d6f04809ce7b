"""The numpy oracle (tests/oracle.py) against onnxruntime, wherever ORT CPU runs the op.

ORT CPU kernels: Hardmax float (all versions) and float16 (11, 13); Softmax/LogSoftmax float and
double (all), float16 (11, 13); ArgMax/ArgMin float/double/int32/int64/int8/uint8 (all), float16
(11+). Hardmax/ArgMax compare exactly; Softmax/LogSoftmax within a tight tolerance (the oracle
computes in float64, ORT in the input's type, so the last bits differ).
"""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from _convert_helpers import DTYPES, elem_of, make_model, ort_run, since, tie_inputs, value_info
from onnx import TensorProto, helper

SHAPES = {1: (5,), 2: (3, 4), 3: (2, 3, 4), 4: (2, 3, 2, 3)}

ORT_COERCED = [
    ("Hardmax", 1, "float32"), ("Hardmax", 11, "float32"), ("Hardmax", 13, "float32"),
    ("Hardmax", 11, "float16"), ("Hardmax", 13, "float16"),
    *[(op, opset, dt) for op in ("Softmax", "LogSoftmax") for opset in (1, 11, 13)
      for dt in ("float32", "float64")],
    *[(op, opset, "float16") for op in ("Softmax", "LogSoftmax") for opset in (11, 13)],
]

ORT_ARG = [(opset, dt) for opset in (1, 11, 12, 13)
           for dt in ("float32", "float64", "int32", "int64", "int8", "uint8", *(("float16",) if opset >= 11 else ()))]

KIND = {"Hardmax": "hardmax", "Softmax": "softmax", "LogSoftmax": "logsoftmax"}


def _axes(rank: int, version: int) -> list[int | None]:
    lo = -rank if version >= 11 else 0
    axes: list[int | None] = list(range(lo, rank))
    if version >= 13 or rank >= 2:
        axes.append(None)  # the version's default
    return axes


def _tolerance(dtype: np.dtype) -> dict[str, float]:
    return {"float16": {"rtol": 2e-3, "atol": 2e-3}, "float32": {"rtol": 2e-6, "atol": 2e-6},
            "float64": {"rtol": 1e-12, "atol": 1e-12}}[np.dtype(dtype).name]


@pytest.mark.parametrize(("op", "opset", "dtype_name"), ORT_COERCED)
def test_coerced_axis_oracle_matches_ort(op: str, opset: int, dtype_name: str) -> None:
    dtype = DTYPES[dtype_name]
    elem = elem_of(dtype)
    version = since(op, opset)
    nodes, inputs, outputs, plan = [], [], [], []
    for rank, shape in SHAPES.items():
        inputs.append(value_info(f"x{rank}", elem, shape))
        for axis in _axes(rank, version):
            out = f"y{rank}_{'d' if axis is None else axis}".replace("-", "m")
            nodes.append(helper.make_node(op, [f"x{rank}"], [out], **({} if axis is None else {"axis": axis})))
            outputs.append(value_info(out, elem, shape))
            plan.append((rank, axis))
    model = make_model(nodes, inputs, outputs, opset)
    rng = np.random.default_rng(opset)
    # ±inf only for Hardmax: Softmax of a row with +inf (or all -inf) is NaN-ish and ORT's
    # kernels differ by type (LogSoftmax-double gives -inf where float gives NaN).
    variants = [tie_inputs(shape, dtype, rng, with_inf=op == "Hardmax") for shape in SHAPES.values()]
    feeds_list = [{f"x{r}": variants[r - 1][i] for r in SHAPES} for i in range(len(variants[0]))]
    results = ort_run(model, feeds_list)
    for feeds, got in zip(feeds_list, results, strict=True):
        for (rank, axis), actual in zip(plan, got, strict=True):
            want = oracle.coerced_axis_op(KIND[op], feeds[f"x{rank}"], axis, version)
            assert actual.dtype == want.dtype
            if op == "Hardmax":
                assert np.array_equal(actual, want), (rank, axis)
            else:
                np.testing.assert_allclose(actual.astype(np.float64), want.astype(np.float64),
                                           **_tolerance(dtype), equal_nan=True, err_msg=f"rank {rank} axis {axis}")


@pytest.mark.parametrize(("opset", "dtype_name"), ORT_ARG)
def test_argextremum_oracle_matches_ort(opset: int, dtype_name: str) -> None:
    dtype = DTYPES[dtype_name]
    elem = elem_of(dtype)
    version = since("ArgMax", opset)
    combos = [(kd, sl) for kd in (None, 0, 1) for sl in ((None, 0, 1) if version >= 12 else (None,))]
    nodes, inputs, outputs, plan = [], [], [], []
    i = 0
    for rank, shape in SHAPES.items():
        inputs.append(value_info(f"x{rank}", elem, shape))
        lo = -rank if version >= 11 else 0
        for axis in [*range(lo, rank), None]:
            for op in ("ArgMax", "ArgMin"):
                for kd, sl in (combos[i % len(combos)], combos[(i + 1) % len(combos)]):
                    i += 1
                    attrs = {k: v for k, v in (("axis", axis), ("keepdims", kd), ("select_last_index", sl))
                             if v is not None}
                    out = f"o{len(nodes)}"
                    nodes.append(helper.make_node(op, [f"x{rank}"], [out], **attrs))
                    outputs.append(value_info(out, TensorProto.INT64, None))
                    plan.append((op, rank, axis, kd, sl))
    model = make_model(nodes, inputs, outputs, opset)
    rng = np.random.default_rng(100 + opset)
    variants = [tie_inputs(shape, dtype, rng) for shape in SHAPES.values()]
    feeds_list = [{f"x{r}": variants[r - 1][i] for r in SHAPES} for i in range(len(variants[0]))]
    for feeds, got in zip(feeds_list, ort_run(model, feeds_list), strict=True):
        for (op, rank, axis, kd, sl), actual in zip(plan, got, strict=True):
            want = oracle.argextremum(op, feeds[f"x{rank}"], axis, kd, sl, version)
            assert actual.dtype == np.int64
            assert np.array_equal(actual, want), (op, rank, axis, kd, sl)


def test_oracle_refuses_what_the_version_does_not_allow() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="negative axis"):
        oracle.hardmax(x, -1, version=1)
    with pytest.raises(ValueError, match="select_last_index"):
        oracle.argextremum("ArgMax", x, 0, 1, 1, version=11)
    with pytest.raises(ValueError, match="bfloat16"):
        oracle.argextremum("ArgMax", x.astype(oracle.BF16), version=12)
    with pytest.raises(ValueError, match="out of range"):
        oracle.hardmax(x, 2, version=13)


def test_oracle_versions_differ_where_the_spec_says() -> None:
    # A [1, 2, 2] block: coerced at axis 1 there is one winner in the whole 2x2 block; one-axis
    # Hardmax-13 at axis 1 picks one per column.
    x = np.array([[[1.0, 5.0], [5.0, 0.0]]], np.float32)
    flat = oracle.hardmax(x, 1, version=11)
    single = oracle.hardmax(x, 1, version=13)
    assert flat.sum() == 1 and flat[0, 0, 1] == 1
    assert single.sum() == 2 and single[0, 1, 0] == 1 and single[0, 0, 1] == 1
    ties = np.array([3, 1, 3, 3], np.int32)
    assert int(oracle.argextremum("ArgMax", ties, 0, 0, 0, version=12)) == 0
    assert int(oracle.argextremum("ArgMax", ties, 0, 0, 1, version=12)) == 3
    assert int(oracle.argextremum("ArgMin", ties, 0, 0, 1, version=13)) == 1
