"""ArgMax/ArgMin (versions 1, 11, 12, 13) converted across opsets, checked exactly.

Every (source opset, target opset) pair over :data:`OPSETS` (each since-version boundary and its
neighbours, up and down) converts one float32 model holding ArgMax and ArgMin over every rank 1-5,
every axis the source version allows (negative from 11, absent = default) and the keepdims /
select_last_index combinations (absent, 0, 1), and one more model per pair in another dtype
(rotating through float16, double, the int types and bfloat16) with static or symbolic dims.

Each converted model must pass the full checker, declare the target opset, and compute exactly what
the *source* version's oracle computes and what the original computes in onnxruntime (where ORT
has kernels; else the converted model runs in onnx.reference with the owned ops given by the oracle).
Nodes the conversion must refuse (bfloat16 below 13; select_last_index=1 with a symbolic size along
the axis below opset 10) are split off and each asserted to raise ConversionError.
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
    axis_is_dynamic,
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
OTHER_DTYPES = ["float16", "float64", "int32", "int64", "int8", "uint8", "int16", "uint16", "uint32", "uint64",
                "bfloat16"]


def _variant(index: int, src: int) -> tuple[str, bool]:
    """The second model of pair ``index``: a rotating dtype (bfloat16 only from 13) and dims."""
    names = [d for d in OTHER_DTYPES if d != "bfloat16" or src >= 13]
    i, j = divmod(index, len(OPSETS))
    return names[(3 * i + j) % len(names)], (i + j // 2) % 2 == 0


def node_specs(version: int) -> list[tuple[str, int, int | None, int | None, int | None]]:
    """(op, rank, axis, keepdims, select_last_index) over every rank and axis; None = absent."""
    combos = [(kd, sl) for kd in (None, 0, 1) for sl in ((None, 0, 1) if version >= 12 else (None,))]
    specs = []
    i = 0
    for rank in SHAPES:
        lo = -rank if version >= 11 else 0
        for axis in [*range(lo, rank), None]:
            for op in ("ArgMax", "ArgMin"):
                for kd, sl in (combos[i % len(combos)], combos[(i + 3) % len(combos)]):
                    i += 1
                    specs.append((op, rank, axis, kd, sl))
    return specs


def expected_refusal(spec: tuple, target: int, dtype: np.dtype, dynamic: bool) -> str | None:
    """The refusal (a regex) lowerer must give for this node, or None."""
    _op, rank, axis, _kd, sl = spec
    t = since("ArgMax", target)
    if dtype == oracle.BF16 and t < 13:
        return "bfloat16"
    if sl == 1 and t < 12 and target < 10 and axis_is_dynamic(rank, axis or 0, dynamic):
        return "select_last_index=1 needs the size along the axis"
    return None


def _make_node(spec: tuple, out: str) -> onnx.NodeProto:
    op, rank, axis, kd, sl = spec
    attrs = {k: v for k, v in (("axis", axis), ("keepdims", kd), ("select_last_index", sl)) if v is not None}
    return helper.make_node(op, [f"x{rank}"], [out], name=f"n_{out}", **attrs)


def _build(specs: list[tuple], src: int, elem: int, dynamic: bool) -> onnx.ModelProto:
    ranks = sorted({s[1] for s in specs})
    nodes = [_make_node(s, f"o{i}") for i, s in enumerate(specs)]
    inputs = [value_info(f"x{r}", elem, input_shape(r, dynamic)) for r in ranks]
    outputs = [value_info(f"o{i}", TensorProto.INT64, [None] * (s[1] - (s[3] == 0))) for i, s in enumerate(specs)]
    return make_model(nodes, inputs, outputs, src)


def run_matrix_case(src: int, target: int, dtype_name: str, dynamic: bool, seed: int) -> dict[str, int]:
    """Convert one grouped model src → target and check every node; returns counts."""
    dtype = DTYPES[dtype_name]
    version = since("ArgMax", src)
    specs = node_specs(version)
    refused = [(s, r) for s in specs if (r := expected_refusal(s, target, dtype, dynamic))]
    kept = [s for s in specs if not expected_refusal(s, target, dtype, dynamic)]
    for spec, reason in refused[:6]:
        single = _build([spec], src, elem_of(dtype), dynamic)
        with pytest.raises(lowerer.ConversionError, match=reason):
            lowerer.convert(single, target_opset=target, verify=False)
    if not kept:
        return {"refused": len(refused), "checked": 0}
    model = _build(kept, src, elem_of(dtype), dynamic)
    check_model_full(model)
    before = model.SerializeToString()  # the original must stay untouched: it is run below
    result = lowerer.convert(model, target_opset=target, verify=False)
    converted = result.model
    assert model.SerializeToString() == before
    check_model_full(converted)
    assert {o.domain: o.version for o in converted.opset_import}[""] == target
    feeds = feeds_for({s[1] for s in kept}, dtype, seed)
    runner, got = run_model(converted, feeds)
    original = ort_run(model, feeds) if ort_can_run(model) else None
    for k, (f, outs) in enumerate(zip(feeds, got, strict=True)):
        for i, spec in enumerate(kept):
            op, rank, axis, kd, sl = spec
            want = oracle.argextremum(op, f[f"x{rank}"], axis, kd, sl, version)
            assert outs[i].dtype == np.int64
            assert np.array_equal(outs[i], want), (runner, spec, k, f[f"x{rank}"], outs[i], want)
            if original is not None:
                assert np.array_equal(outs[i], original[k][i]), (spec, k)
    return {"refused": len(refused), "checked": len(kept), "ort_original": original is not None,
            "runner": runner}


@pytest.mark.parametrize(("src", "target"), PAIRS, ids=[f"{s}to{t}" for s, t in PAIRS])
def test_argmax_float32_all_axes(src: int, target: int) -> None:
    counts = run_matrix_case(src, target, "float32", dynamic=False, seed=src * 100 + target)
    assert counts["checked"] > 0 and counts["runner"] == "ort" and counts["ort_original"]


@pytest.mark.parametrize(("src", "target"), PAIRS, ids=[f"{s}to{t}" for s, t in PAIRS])
def test_argmax_other_dtypes_and_dynamic_dims(src: int, target: int) -> None:
    index = PAIRS.index((src, target))
    dtype_name, dynamic = _variant(index, src)
    counts = run_matrix_case(src, target, dtype_name, dynamic, seed=index)
    assert counts["checked"] + counts["refused"] > 0


#: bfloat16 beyond the rotation: up within 13+, down to 13 and below (refused), both kinds of dims.
BF16_PAIRS = [(13, 26, False), (13, 18, True), (26, 13, True), (21, 13, False), (13, 12, False), (18, 9, True)]


@pytest.mark.parametrize(("src", "target", "dynamic"), BF16_PAIRS)
def test_argmax_bfloat16(src: int, target: int, dynamic: bool) -> None:
    counts = run_matrix_case(src, target, "bfloat16", dynamic, seed=src + target)
    assert (counts["refused"] > 0) == (target < 13)
    if target >= 13:
        assert counts["runner"] == "reference"  # ORT has no bfloat16 ArgMax kernel on CPU


def test_matrix_covers_every_dtype_with_both_directions() -> None:
    seen: dict[str, set[str]] = {"bfloat16": {"up", "down", "dynamic=True", "dynamic=False"}}
    for index, (src, target) in enumerate(PAIRS):
        dtype_name, dynamic = _variant(index, src)
        direction = "up" if target > src else "down" if target < src else "same"
        seen.setdefault(dtype_name, set()).update({direction, f"dynamic={dynamic}"})
    assert set(seen) == set(OTHER_DTYPES)
    for name, kinds in seen.items():
        assert {"up", "down", "dynamic=True", "dynamic=False"} <= kinds, name


# -- targeted cases ------------------------------------------------------------------------------
def test_select_last_index_dynamic_axis_uses_slice_from_opset_10() -> None:
    spec = ("ArgMax", 2, 1, 0, 1)
    model = _build([spec], 13, TensorProto.FLOAT, dynamic=True)
    converted = lowerer.convert(model, target_opset=10, verify=False).model
    assert "Slice" in [n.op_type for n in converted.graph.node]
    check_model_full(converted)
    feeds = feeds_for([2], np.dtype(np.float32), 5)
    for f, (out,) in zip(feeds, ort_run(converted, feeds), strict=True):
        assert np.array_equal(out, oracle.argextremum("ArgMax", f["x2"], 1, 0, 1, 13))


def test_select_last_index_dynamic_axis_negative_below_11() -> None:
    # Negative axis, symbolic size along it, target 10: Slice-10 with the axis made non-negative.
    spec = ("ArgMin", 3, -1, 1, 1)
    model = _build([spec], 12, TensorProto.FLOAT, dynamic=True)
    converted = lowerer.convert(model, target_opset=10, verify=False).model
    check_model_full(converted)
    feeds = feeds_for([3], np.dtype(np.float32), 6)
    for f, (out,) in zip(feeds, ort_run(converted, feeds), strict=True):
        assert np.array_equal(out, oracle.argextremum("ArgMin", f["x3"], -1, 1, 1, 12))


def test_refuse_negative_axis_below_11_without_rank() -> None:
    model = hidden_rank_model(helper.make_node("ArgMax", ["x"], ["y"], axis=-1, name="am"), 11,
                              out_elem=TensorProto.INT64)
    check_model_full(model)
    with pytest.raises(lowerer.ConversionError, match=r"'am'.*ArgMax-11.*rank of input 'h' is unknown"):
        lowerer.convert(model, target_opset=10, verify=False)


def test_refuse_select_last_without_shape_below_10() -> None:
    model = hidden_rank_model(helper.make_node("ArgMin", ["x"], ["y"], axis=0, select_last_index=1, name="am"), 12,
                              out_elem=TensorProto.INT64)
    check_model_full(model)
    with pytest.raises(lowerer.ConversionError, match=r"opset 9.*select_last_index=1 needs the size"):
        lowerer.convert(model, target_opset=9, verify=False)


def test_select_last_without_shape_at_10_runs() -> None:
    model = hidden_rank_model(helper.make_node("ArgMin", ["x"], ["y"], axis=1, select_last_index=1, keepdims=0), 12,
                              out_elem=TensorProto.INT64)
    converted = lowerer.convert(model, target_opset=10, verify=False).model
    check_model_full(converted)
    x = np.random.default_rng(4).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    for shape in ([2, 3, 4], [6, 4], [4, 6]):
        (got,) = ort_run(converted, [{"x": x, "s": np.array(shape, np.int64)}])[0]
        want = oracle.argextremum("ArgMin", x.reshape(shape), 1, 0, 1, 12)
        assert np.array_equal(got, want.reshape(1, -1)), shape


def test_refuse_bfloat16_when_the_type_is_unknown() -> None:
    # ArgMax-13 → 12 fed by an op from another domain: the element type is unknown, so lowerer
    # cannot rule out bfloat16 and refuses.
    nodes = [helper.make_node("Foo", ["x"], ["h"], domain="custom.ops"),
             helper.make_node("ArgMax", ["h"], ["y"], name="am")]
    model = make_model(nodes, [value_info("x", TensorProto.FLOAT, [2, 3])], [value_info("y", TensorProto.INT64, None)],
                       13, extra_opsets=[("custom.ops", 1)])
    with pytest.raises(lowerer.ConversionError, match="element type of input 'h' is unknown"):
        lowerer.convert(model, target_opset=12, verify=False)


@pytest.mark.parametrize("target", [1, 11, 12])
def test_refuse_bfloat16_below_13(target: int) -> None:
    node = helper.make_node("ArgMin", ["x"], ["y"], axis=1, name="am")
    model = make_model([node], [value_info("x", TensorProto.BFLOAT16, [2, 3])],
                       [value_info("y", TensorProto.INT64, None)], 13)
    with pytest.raises(lowerer.ConversionError, match=rf"'am'.*ArgMin-13.*opset {target}.*bfloat16"):
        lowerer.convert(model, target_opset=target, verify=False)


def test_zero_sized_other_dim_select_last() -> None:
    # A zero-sized dim beside the axis: the emulation of select_last_index keeps it.
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)
    model = make_model([node], [value_info("x", TensorProto.FLOAT, [0, 3])],
                       [value_info("y", TensorProto.INT64, None)], 12)
    converted = lowerer.convert(model, target_opset=11, verify=False).model
    (out,) = ort_run(converted, [{"x": np.zeros((0, 3), np.float32)}])[0]
    assert out.shape == (0,)
