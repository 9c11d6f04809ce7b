"""Resize below 11 where its sizes or scales mean exactly what Resize-10's scales do.

A sized Resize whose sizes are static dims times or divided by integers becomes Resize-10 with the
float32 scales onnxruntime itself computes from the sizes; nearest picks are compared output index
by output index (exactly, and in float32 as onnxruntime computes them), so any coordinate mode and
rounding that picks what Resize-10 picks converts, and no other. Each conversion is verified per
rewrite and compared bit for bit with the original in onnxruntime; non-integer ratios are refused,
and refusals name axes as axes.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from _convert_helpers import make_model, run_model, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError

F = TensorProto.FLOAT


def sized(dims: list[int | str], sizes: list[int], mode: str = "nearest", ctm: str = "asymmetric",
          rounding: str = "floor", opset: int = 13) -> onnx.ModelProto:
    z = numpy_helper.from_array(np.array(sizes, np.int64), "z")
    extra = {"nearest_mode": rounding} if mode == "nearest" else {}
    node = helper.make_node("Resize", ["x", "", "", "z"], ["y"], name="rs", mode=mode,
                            coordinate_transformation_mode=ctm, **extra)
    return make_model([node], [value_info("x", F, dims)], [value_info("y", F, sizes)], opset, initializers=[z])


def scaled(dims: list[int | str], scales: list[float], ctm: str = "asymmetric", rounding: str = "floor"
           ) -> onnx.ModelProto:
    s = numpy_helper.from_array(np.array(scales, np.float32), "s")
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs", mode="nearest",
                            coordinate_transformation_mode=ctm, nearest_mode=rounding)
    return make_model([node], [value_info("x", F, dims)], [value_info("y", F, None)], 13, initializers=[s])


def exact(model: onnx.ModelProto, target: int, shape: list[int]) -> onnx.ModelProto:
    """Convert with verification, then compare with the original in onnxruntime, bit for bit."""
    result = lowerer.convert(model, target_opset=target, verify=True)
    assert {r.status for r in result.report.rewrites} == {"verified"}
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    _, got = run_model(result.model, [{"x": x}])
    _, want = run_model(model, [{"x": x}])
    assert got[0][0].shape == want[0][0].shape and np.array_equal(got[0][0], want[0][0])
    return result.model


def refusal(model: onnx.ModelProto, target: int) -> str:
    with pytest.raises(ConversionError) as caught:
        lowerer.convert(model, target_opset=target, verify=False)
    return str(caught.value)


def scales_of(model: onnx.ModelProto) -> list[float]:
    node = next(n for n in model.graph.node if n.op_type == "Resize")
    assert len(node.input) == 2
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}[node.input[1]]
    return [float(v) for v in found]


def test_integer_downsampling_reaches_resize_10_with_exact_scales() -> None:
    """The DETR case: a static [1, 1, 64, 64] resized to [1, 1, 8, 8] (nearest, asymmetric, floor)."""
    model = sized([1, 1, 64, 64], [1, 1, 8, 8])
    out = exact(model, 10, [1, 1, 64, 64])
    assert scales_of(out) == [1.0, 1.0, 0.125, 0.125]
    message = refusal(model, 9)  # Upsample, Resize's form below 10, takes scales >= 1 only
    assert "it downsamples axis 2 (scale 0.125), and below opset 10 Resize is Upsample" in message
    assert message.endswith("the lowest opset this node can be taken to is 10")


@pytest.mark.parametrize(("dims", "sizes", "ctm", "rounding"), [
    ([1, 1, 9, 9], [1, 1, 3, 3], "asymmetric", "floor"),             # 1/3 has no exact float32; picks agree
    ([1, 1, 9, 9], [1, 1, 3, 3], "asymmetric", "ceil"),
    ([1, 1, 12, 10], [1, 1, 3, 5], "asymmetric", "round_prefer_floor"),
    ([1, 1, 8, 8], [1, 1, 4, 4], "half_pixel", "round_prefer_floor"),  # (x + 0.5) * 2 - 0.5 = 2x + 0.5 -> 2x
    ([1, 1, 4, 4], [1, 1, 12, 8], "asymmetric", "floor"),             # integer upsampling
    ([1, 1, 4, 4], [1, 1, 12, 8], "pytorch_half_pixel", "round_prefer_ceil"),
    (["n", 3, 4, 4], ["n", 3, 8, 2], "asymmetric", "floor"),          # a dynamic dim that is not resized
])
def test_sizes_that_are_dims_times_or_divided_by_integers_convert_exactly(
        dims: list, sizes: list, ctm: str, rounding: str) -> None:
    shape = [2 if isinstance(d, str) else d for d in dims]
    if isinstance(sizes[0], str):  # the input's own dim, read with Shape
        model = _with_own_dim(dims, sizes, ctm, rounding)
    else:
        model = sized(dims, sizes, ctm=ctm, rounding=rounding)
    out = exact(model, 10, shape)
    got = scales_of(out)
    want = [float(np.float32(s) / np.float32(d)) if isinstance(s, int) else 1.0
            for s, d in zip(sizes, shape, strict=True)]
    assert got == want


def _with_own_dim(dims: list, sizes: list, ctm: str, rounding: str) -> onnx.ModelProto:
    """Sizes Concat(Shape(x)[0:1], constants): the batch dim stays, the others are static multiples."""
    tail = numpy_helper.from_array(np.array(sizes[1:], np.int64), "tail")
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="sh", end=1),
             helper.make_node("Concat", ["shape", "tail"], ["z"], name="cat", axis=0),
             helper.make_node("Resize", ["x", "", "", "z"], ["y"], name="rs", mode="nearest",
                              coordinate_transformation_mode=ctm, nearest_mode=rounding)]
    return make_model(nodes, [value_info("x", F, dims)], [value_info("y", F, None)], 15, initializers=[tail])


@pytest.mark.parametrize(("dims", "sizes", "ctm", "rounding", "match"), [
    ([1, 1, 8, 8], [1, 1, 4, 4], "half_pixel", "round_prefer_ceil",
     r"on axis 2 \(8 -> 4\) its nearest picks \(half_pixel, round_prefer_ceil\) differ from Resize-10's"),
    ([1, 1, 4, 4], [1, 1, 12, 8], "asymmetric", "round_prefer_floor",
     r"on axis 2 \(4 -> 12\) its nearest picks \(asymmetric, round_prefer_floor\) differ"),
    ([1, 1, 4, 4], [1, 1, 8, 8], "align_corners", "floor", "maps x to x / scale"),
])
def test_sizes_whose_picks_differ_from_resize_10_are_refused(dims: list, sizes: list, ctm: str, rounding: str,
                                                             match: str) -> None:
    model = sized(dims, sizes, ctm=ctm, rounding=rounding)
    with pytest.raises(ConversionError, match=match):
        lowerer.convert(model, target_opset=10, verify=False)
    exact(model, 11, dims)  # where it can go, it goes exactly


@pytest.mark.parametrize(("dims", "sizes", "mode", "match"), [
    ([1, 1, 10, 10], [1, 1, 4, 4], "nearest", "resizes axis 2 from 10 to 4, not by an integer factor or divisor"),
    ([1, 1, 4, 6], [1, 1, 8, 9], "nearest", "resizes axis 3 from 6 to 9, not by an integer factor or divisor"),
    ([1, 1, 63, 63], [1, 1, 21, 21], "linear", r"resizes axis 2 from 63 to 21 \(linear\): the scale 1/3 has no "
                                               "exact float32"),
])
def test_non_integer_ratios_are_refused(dims: list, sizes: list, mode: str, match: str) -> None:
    model = sized(dims, sizes, mode=mode)
    message = refusal(model, 10)
    assert re.search(match, message), message
    assert message.endswith("the lowest opset this node can be taken to is 11")
    assert "size 2" not in message and "size 3" not in message


def test_linear_integer_downsampling_by_a_power_of_two_converts() -> None:
    out = exact(sized([1, 1, 64, 64], [1, 1, 8, 16], mode="linear"), 10, [1, 1, 64, 64])
    assert scales_of(out) == [1.0, 1.0, 0.125, 0.25]


def test_a_dynamic_resized_dim_is_named_as_an_axis() -> None:
    message = refusal(sized([1, 1, 64, "w"], [1, 1, 8, 8]), 10)
    assert "resizes axis 3 to 8 while the input's axis 3 is dynamic" in message
    assert "add shape information (value_info) for it, or make the input shapes static" in message
    assert "size 3" not in message and "dim 3" not in message


@pytest.mark.parametrize("rounding", ["floor", "ceil", "round_prefer_floor", "round_prefer_ceil"])
def test_scales_of_one_over_a_power_of_two_pick_integers_whatever_the_rounding(rounding: str) -> None:
    """Dynamic dims: x / 0.125 is 8x exactly, so every nearest_mode picks what Resize-10 picks."""
    model = scaled([1, 1, "h", "w"], [1, 1, 0.125, 0.25], rounding=rounding)
    exact(model, 10, [1, 1, 64, 64])
    ties = scaled([1, 1, "h", "w"], [1, 1, 1 / 3, 1], rounding=rounding)  # no exact float32 for 1/3
    if rounding != "ceil":
        assert "nearest_mode=" in refusal(ties, 10) and "only nearest_mode='ceil' means the same" in refusal(ties, 10)


def test_static_dims_judge_picks_not_settings() -> None:
    """Upsampling by 2, round_prefer_floor: x / 2 is k or k + 0.5, which it rounds down, as Resize-10 does.

    With static dims the picks are compared and agree; with dynamic ones only the rule is known, which asks
    for floor. Scales 1/3 (no exact float32) with floor: x / 0.33333334 is just under 3x, floor picks 3x - 1
    by the spec where Resize-10 picks 3x: refused, though onnxruntime's float32 rounds both to 3x.
    """
    exact(scaled([1, 1, 3, 4], [1, 1, 2, 2], rounding="round_prefer_floor"), 10, [1, 1, 3, 4])
    message = refusal(scaled([1, 1, "h", "w"], [1, 1, 2, 2], rounding="round_prefer_floor"), 10)
    assert "nearest_mode='round_prefer_floor', and Resize-10 rounds down on these scales" in message
    message = refusal(scaled([1, 1, 9, 9], [1, 1, 1 / 3, 1 / 3]), 10)
    assert "on axis 2 (9 -> 3) its nearest picks (asymmetric, floor) differ from Resize-10's (asymmetric, rounding " \
           "up): output index 1 takes input index 2, Resize-10's 3" in message
