"""Hardmax, Softmax and LogSoftmax (versions 1, 11, 13) converted across opsets, checked exactly.

Every (source opset, target opset) pair over :data:`OPSETS` converts one float32 model holding the
three ops over every rank 1-5 and every axis the source version allows (negative from 11; absent =
the version's default, which changed from 1 to -1 at 13), and one more model per pair in float16,
double or bfloat16 (from 13) with static or symbolic dims.

Hardmax is compared exactly with the source version's oracle and with the original model in ORT.
Softmax/LogSoftmax are compared *exactly* with the original model in onnxruntime (the rewrites only
move data: Flatten/Reshape/Transpose around the same kernel, and ORT gives bit-identical numbers;
this file asserts it), and with the numpy oracle within a tight tolerance (the oracle computes in
float64, so exact equality with it genuinely fails in the last bits), on finite inputs only.
"""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import oracle
import pytest
from _convert_helpers import (
    DTYPES,
    OPSETS,
    SHAPES,
    check_model_full,
    elem_of,
    feeds_for,
    hidden_rank_model,
    input_shape,
    make_model,
    ort_can_run,
    ort_run,
    run_model,
    since,
    value_info,
)
from onnx import TensorProto, helper

import lowerer

PAIRS = list(itertools.product(OPSETS, OPSETS))
OPS = ("Hardmax", "Softmax", "LogSoftmax")
KIND = {"Hardmax": "hardmax", "Softmax": "softmax", "LogSoftmax": "logsoftmax"}
TOLERANCE = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-12, "bfloat16": 1e-2}


def node_specs(version: int) -> list[tuple[str, int, int | None]]:
    """(op, rank, axis) over every rank and valid axis; None = absent (the version's default)."""
    specs = []
    for rank in SHAPES:
        lo = -rank if version >= 11 else 0
        axes: list[int | None] = list(range(lo, rank))
        if version >= 13 or rank >= 2:  # the default axis 1 of versions 1/11 needs rank >= 2
            axes.append(None)
        specs.extend((op, rank, axis) for axis in axes for op in OPS)
    return specs


def _variant(index: int, src: int) -> tuple[str, bool]:
    names = ["float16", "float64", *(("bfloat16",) if src >= 13 else ())]
    i, j = divmod(index, len(OPSETS))
    return names[(i + j) % len(names)], (i + 2 * j) % 4 < 2


def _build(specs: list[tuple], src: int, elem: int, dynamic: bool) -> onnx.ModelProto:
    ranks = sorted({s[1] for s in specs})
    nodes = []
    for i, (op, rank, axis) in enumerate(specs):
        attrs = {} if axis is None else {"axis": axis}
        nodes.append(helper.make_node(op, [f"x{rank}"], [f"o{i}"], name=f"n{i}", **attrs))
    inputs = [value_info(f"x{r}", elem, input_shape(r, dynamic)) for r in ranks]
    outputs = [value_info(f"o{i}", elem, [None] * s[1]) for i, s in enumerate(specs)]
    return make_model(nodes, inputs, outputs, src)


def run_matrix_case(src: int, target: int, dtype_name: str, dynamic: bool, seed: int) -> dict[str, object]:
    """Convert one grouped model src → target and check every node; returns what was checked."""
    dtype = DTYPES[dtype_name]
    elem = elem_of(dtype)
    specs = node_specs(since("Hardmax", src))
    if dtype == oracle.BF16 and since("Hardmax", target) < 13:
        for spec in specs[:: max(1, len(specs) // 6)]:
            with pytest.raises(lowerer.ConversionError, match=rf"{spec[0]}-13.*opset {target}.*bfloat16"):
                lowerer.convert(_build([spec], src, elem, dynamic), target_opset=target, verify=False)
        return {"refused": len(specs), "checked": 0}
    # float32 runs as one model; other types one model per op, so that ORT still runs Softmax and
    # LogSoftmax where it has no Hardmax kernel (double, float16 at version 1).
    groups = [specs] if dtype_name == "float32" else [[s for s in specs if s[0] == op] for op in OPS]
    results = [_check_group(g, src, target, dtype_name, dynamic, seed) for g in groups]
    total: dict[str, object] = {"refused": 0, "runners": sorted({str(r["runner"]) for r in results}),
                                "ort_original": all(r["ort_original"] for r in results)}
    for key in ("checked", "exact_softmax", "cross_kernel"):
        total[key] = sum(int(r[key]) for r in results)  # type: ignore[call-overload]
    total["runner"] = total["runners"][0] if len(total["runners"]) == 1 else "mixed"  # type: ignore[index]
    return total


def _check_group(specs: list[tuple], src: int, target: int, dtype_name: str, dynamic: bool,
                 seed: int) -> dict[str, object]:
    dtype = DTYPES[dtype_name]
    elem = elem_of(dtype)
    model = _build(specs, src, elem, dynamic)
    check_model_full(model)
    before = model.SerializeToString()  # the original must stay untouched: it is run below
    converted = lowerer.convert(model, target_opset=target, verify=False).model
    assert model.SerializeToString() == before
    check_model_full(converted)
    assert {o.domain: o.version for o in converted.opset_import}[""] == target
    ranks = {s[1] for s in specs}
    feeds = feeds_for(ranks, dtype, seed) + feeds_for(ranks, dtype, seed + 1, with_inf=False)
    finite = [all(np.isfinite(v.astype(np.float64)).all() for v in f.values()) for f in feeds]
    runner, got = run_model(converted, feeds)
    original = ort_run(model, feeds) if ort_can_run(model) else None
    exact_softmax = 0
    cross_kernel = 0
    for k, (f, outs) in enumerate(zip(feeds, got, strict=True)):
        for i, (op, rank, axis) in enumerate(specs):
            x = f[f"x{rank}"]
            actual = outs[i]
            assert actual.dtype == x.dtype and actual.shape == x.shape
            if original is not None:
                if op == "Hardmax" or dtype_name != "float16":
                    assert np.array_equal(actual, original[k][i], equal_nan=True), (runner, op, rank, axis, k)
                    exact_softmax += op != "Hardmax"
                elif not np.array_equal(actual, original[k][i], equal_nan=True):
                    # float16 Softmax/LogSoftmax: ORT's kernels differ by version (Softmax-1 has no
                    # float16 kernel and runs as float with casts; 11 and 13 differ too), so the
                    # original and the rewrite can differ in the last bit; only a tolerance applies.
                    cross_kernel += 1
                    tol = TOLERANCE[dtype_name]
                    np.testing.assert_allclose(actual.astype(np.float64), original[k][i].astype(np.float64),
                                               rtol=tol, atol=tol, equal_nan=True)
                else:
                    exact_softmax += 1
            want = oracle.coerced_axis_op(KIND[op], x, axis, since(op, src))
            if op == "Hardmax":
                assert np.array_equal(actual, want), (runner, op, rank, axis, k, x, actual, want)
            elif finite[k]:
                tol = TOLERANCE[dtype_name]
                np.testing.assert_allclose(actual.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol,
                                           err_msg=f"{runner} {op} rank {rank} axis {axis}")
    return {"refused": 0, "checked": len(specs), "runner": runner, "ort_original": original is not None,
            "exact_softmax": exact_softmax, "cross_kernel": cross_kernel}


@pytest.mark.parametrize(("src", "target"), PAIRS, ids=[f"{s}to{t}" for s, t in PAIRS])
def test_coerced_axis_float32_all_axes(src: int, target: int) -> None:
    result = run_matrix_case(src, target, "float32", dynamic=False, seed=src * 100 + target)
    assert result["runner"] == "ort" and result["ort_original"]


@pytest.mark.parametrize(("src", "target"), PAIRS, ids=[f"{s}to{t}" for s, t in PAIRS])
def test_coerced_axis_other_dtypes_and_dynamic_dims(src: int, target: int) -> None:
    index = PAIRS.index((src, target))
    dtype_name, dynamic = _variant(index, src)
    result = run_matrix_case(src, target, dtype_name, dynamic, seed=index)
    assert result["checked"] or result["refused"]


def test_variants_cover_every_dtype_both_ways() -> None:
    seen: dict[str, set[str]] = {}
    for index, (src, target) in enumerate(PAIRS):
        dtype_name, dynamic = _variant(index, src)
        direction = "up" if target > src else "down" if target < src else "same"
        seen.setdefault(dtype_name, set()).update({direction, f"dynamic={dynamic}"})
    assert set(seen) == {"float16", "float64", "bfloat16"}
    for name, kinds in seen.items():
        assert {"up", "down", "dynamic=True", "dynamic=False"} <= kinds, name


# -- targeted cases ------------------------------------------------------------------------------
def _single(op: str, opset: int, shape: list | None, elem: int = TensorProto.FLOAT, **attrs: int) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="hm", **attrs)
    return make_model([node], [value_info("x", elem, shape)], [value_info("y", elem, None)], opset)


@pytest.mark.parametrize("op", OPS)
def test_refuse_single_axis_to_flatten_without_rank(op: str) -> None:
    model = hidden_rank_model(helper.make_node(op, ["x"], ["y"], axis=1, name="hm"), 13)
    check_model_full(model)
    with pytest.raises(lowerer.ConversionError, match=rf"'hm' \({op}-13.*opset 11.*rank of input 'h' is unknown"):
        lowerer.convert(model, target_opset=11, verify=False)


@pytest.mark.parametrize("op", OPS)
def test_refuse_negative_flatten_axis_below_11_without_rank(op: str) -> None:
    model = hidden_rank_model(helper.make_node(op, ["x"], ["y"], axis=-2, name="hm"), 11)
    check_model_full(model)
    with pytest.raises(lowerer.ConversionError, match=rf"{op}-11.*opset 10.*rank of input 'h' is unknown"):
        lowerer.convert(model, target_opset=10, verify=False)


@pytest.mark.parametrize(("op", "target"), [("Hardmax", 11), ("Softmax", 1), ("LogSoftmax", 12)])
def test_refuse_bfloat16_below_13(op: str, target: int) -> None:
    model = _single(op, 13, [2, 3], TensorProto.BFLOAT16)
    with pytest.raises(lowerer.ConversionError, match=rf"{op}-13.*opset {target}.*bfloat16"):
        lowerer.convert(model, target_opset=target, verify=False)


@pytest.mark.parametrize("op", OPS)
def test_unknown_rank_is_fine_where_not_needed(op: str) -> None:
    # Flatten meaning → 13 needs no rank (Flatten + Reshape to Shape(x)); last axis at 11 neither.
    x = np.random.default_rng(0).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    for src, target, attrs in ((11, 13, {"axis": 1}), (13, 11, {"axis": -1}), (9, 13, {})):
        model = hidden_rank_model(helper.make_node(op, ["x"], ["y"], **attrs), src)
        converted = lowerer.convert(model, target_opset=target, verify=False).model
        check_model_full(converted)
        for shape in ([2, 3, 4], [4, 6], [2, 2, 3, 2]):
            feeds = [{"x": x, "s": np.array(shape, np.int64)}]
            (got,) = ort_run(converted, feeds)[0]
            assert np.array_equal(got, ort_run(model, feeds)[0][0]), (src, target, shape)
            if op == "Hardmax":
                want = oracle.hardmax(x.reshape(shape), attrs.get("axis"), since(op, src))
                assert np.array_equal(got, want.reshape(1, -1))


def test_onnx_converter_bug_is_not_repeated() -> None:
    # Hardmax-11 axis=1 on [2, 2, 2]: the coerced meaning has one winner per 2x2 block; onnx's
    # converter relabels it to Hardmax-13 axis=1 (one winner per column). lowerer must not.
    from onnx import version_converter

    x = np.array([[[1, 5], [5, 0]], [[0, 0], [0, 1]]], np.float32)
    model = _single("Hardmax", 11, [2, 2, 2], axis=1)
    ours = lowerer.convert(model, target_opset=13, verify=False).model
    theirs = version_converter.convert_version(model, 13)
    want = oracle.hardmax(x, 1, 11)
    assert np.array_equal(ort_run(ours, [{"x": x}])[0][0], want)
    assert not np.array_equal(ort_run(theirs, [{"x": x}])[0][0], want)  # the known onnx bug, still there


def test_zero_sized_dim_through_flatten_reshape() -> None:
    # Reshape-14 allowzero=1 keeps a zero-sized dim exact after Flatten.
    model = _single("Softmax", 11, [2, 0, 3], axis=1)
    converted = lowerer.convert(model, target_opset=14, verify=False).model
    (got,) = ort_run(converted, [{"x": np.zeros((2, 0, 3), np.float32)}])[0]
    assert got.shape == (2, 0, 3)


@pytest.mark.parametrize("target", [13, 14, 18])
@pytest.mark.parametrize("op", OPS)
def test_empty_inputs_keep_their_shape(op: str, target: int) -> None:
    # Reshape-13 reads 0 as "copy": the flatten rewrite at opset 13 once returned [0, 10, 5, 2] for
    # an empty [0, 0, 5, 2] input (and failed on [2, 3, 0]). Symbolic dims fed empty, and static zeros.
    for declared, axis, fed in ((["a", "b", 5, 2], 2, [0, 0, 5, 2]), (["a", 3, "c"], 1, [2, 3, 0]),
                                (["a", 3, "c"], 1, [2, 3, 4]), ([0, 0, 5, 2], 2, [0, 0, 5, 2]),
                                ([2, 3, 0], 1, [2, 3, 0])):
        node = helper.make_node(op, ["x"], ["y"], axis=axis)
        out_dims = [f"o{i}" for i in range(len(declared))]
        model = make_model([node], [value_info("x", TensorProto.FLOAT, declared)],
                           [value_info("y", TensorProto.FLOAT, out_dims)], 11)
        converted = lowerer.convert(model, target_opset=target, verify=False).model
        check_model_full(converted)
        x = np.random.default_rng(0).integers(-2, 3, size=fed).astype(np.float32)
        (got,) = ort_run(converted, [{"x": x}])[0]
        (orig,) = ort_run(model, [{"x": x}])[0]
        assert got.shape == x.shape and np.array_equal(got, orig), (declared, fed)
        if op == "Hardmax":
            assert np.array_equal(got, oracle.hardmax(x, axis, 11))
