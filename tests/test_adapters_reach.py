"""Adapters for steps that change meaning (Attention, GridSample, GroupNormalization, Scan, Scatter, Upsample,
Resize): each direction converted with verification on and compared with the original in onnxruntime (or
onnx's reference evaluator where onnxruntime lacks the op version), and each refusal condition."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _convert_helpers import make_model, run_model, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError

F, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(17)


def ties(*shape: int) -> np.ndarray:
    """Small integers as floats: many ties, exact arithmetic."""
    return RNG.integers(-3, 4, size=shape).astype(np.float32)


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def convert_exact(model: onnx.ModelProto, target: int, feeds: dict[str, np.ndarray]) -> onnx.ModelProto:
    """Convert with verification on, check the result fully, and compare outputs bit for bit."""
    onnx.checker.check_model(model, full_check=True)
    converted = lowerer.convert(model, target_opset=target, verify=True).model
    onnx.checker.check_model(converted, full_check=True)
    _, got = run_model(converted, [feeds])
    _, want = run_model(model, [feeds])
    for g, w in zip(got[0], want[0], strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w, equal_nan=True)
    return converted


def refused(model: onnx.ModelProto, target: int, match: str) -> None:
    with pytest.raises(ConversionError, match=match):
        lowerer.convert(model, target_opset=target)


# -- GridSample 16 <-> 20 ----------------------------------------------------------------------------------

def grid_sample(opset: int, mode: str | None, x_shape: list[int], grid_shape: list[int]) -> onnx.ModelProto:
    node = helper.make_node("GridSample", ["x", "g"], ["y"], name="gs", **({} if mode is None else {"mode": mode}))
    out = [x_shape[0], x_shape[1], *grid_shape[1:-1]]
    return make_model([node], [value_info("x", F, x_shape), value_info("g", F, grid_shape)],
                      [value_info("y", F, out)], opset)


@pytest.mark.parametrize(("source", "target", "mode", "renamed"), [
    (16, 20, "bilinear", "linear"), (16, 20, "bicubic", "cubic"), (16, 22, "nearest", "nearest"),
    (16, 20, None, None), (20, 16, "linear", "bilinear"), (20, 16, "cubic", "bicubic"), (22, 16, None, None)])
def test_grid_sample_modes_renamed(source: int, target: int, mode: str | None, renamed: str | None) -> None:
    model = grid_sample(source, mode, [1, 2, 3, 4], [1, 3, 2, 2])
    grid = (RNG.integers(-4, 5, size=(1, 3, 2, 2)) / 4).astype(np.float32)  # on pixel corners and centres
    out = convert_exact(model, target, {"x": ties(1, 2, 3, 4), "g": grid})
    assert attrs(out.graph.node[0]).get("mode") == (None if renamed is None else renamed.encode())


def test_grid_sample_down_refuses_5d() -> None:
    refused(grid_sample(20, "linear", [1, 1, 2, 2, 2], [1, 2, 2, 2, 3]), 16, "X is 5-D and GridSample-16 takes 4-D")


# -- Attention 23 <-> 24 -----------------------------------------------------------------------------------

def attention(opset: int, mask: list[int] | None) -> onnx.ModelProto:
    inputs = [value_info("q", F, [1, 2, 3, 4]), value_info("k", F, [1, 2, 5, 4]), value_info("v", F, [1, 2, 5, 4])]
    names = ["q", "k", "v"]
    if mask is not None:
        inputs.append(value_info("m", F, mask))
        names.append("m")
    node = helper.make_node("Attention", names, ["y"], name="att")
    return make_model([node], inputs, [value_info("y", F, [1, 2, 3, 4])], opset)


@pytest.mark.parametrize(("source", "target"), [(23, 24), (24, 23), (25, 23), (23, 25)])
@pytest.mark.parametrize("mask", [None, [3, 5], [1, 2, 3, 5]])
def test_attention_relabel(source: int, target: int, mask: list[int] | None) -> None:
    model = attention(source, mask)
    feeds = {"q": ties(1, 2, 3, 4), "k": ties(1, 2, 5, 4), "v": ties(1, 2, 5, 4)}
    if mask is not None:
        feeds["m"] = ties(*mask)
    out = lowerer.convert(model, target_opset=target, verify=True).model
    assert ops(out) == ["Attention"] and out.opset_import[0].version == target
    got, want = run_model(out, [feeds])[1][0][0], run_model(model, [feeds])[1][0][0]
    if 25 not in (source, target):  # onnxruntime's Attention-23 and -24 kernels: bit for bit
        np.testing.assert_array_equal(got, want)
    else:  # its Attention-25 kernel rounds differently from its -23 one (the same node, measured)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("mask", "why"), [([3, 1], "last dimension of 1 where total_sequence_length is 5"),
                                           ([3, "s"], "is not static")])
def test_attention_refuses_partial_mask(mask: list[int], why: str) -> None:
    """Up: refused; down: the step is refused and the engine expands the node into its function body."""
    refused(attention(23, mask), 24, why)
    result = lowerer.convert(attention(24, mask), target_opset=23)
    (rewrite,) = result.report.rewrites
    assert rewrite.rule == "function-expansion" and why in rewrite.steps[0]
    assert "Attention" not in ops(result.model)


# -- Scatter 9 -> ScatterElements 11 ---------------------------------------------------------------------

def scatter(opset: int, op: str = "Scatter", indices: np.ndarray | None = None) -> onnx.ModelProto:
    inits = [] if indices is None else [numpy_helper.from_array(indices, "i")]
    inputs = [value_info("x", F, [3, 4]), value_info("u", F, [2, 4])]
    if indices is None:
        inputs.append(value_info("i", I64, [2, 4]))
    node = helper.make_node(op, ["x", "i", "u"], ["y"], name="sc", axis=0)
    return make_model([node], inputs, [value_info("y", F, [3, 4])], opset, initializers=inits)


@pytest.mark.parametrize("target", [11, 13, 18])
def test_scatter_up_becomes_scatter_elements(target: int) -> None:
    indices = np.array([[0, 2, 1, 0], [1, 0, 2, 2]], np.int64)
    out = convert_exact(scatter(9), target, {"x": ties(3, 4), "u": ties(2, 4), "i": indices})
    assert ops(out) == ["ScatterElements"]


# -- Upsample 9 -> Resize 10, Resize 10 <-> 11 <-> 13 --------------------------------------------------------

def upsample(opset: int, op: str, mode: str, scales: list[float], roi: bool = False) -> onnx.ModelProto:
    x_shape = [1, 2, 3, 4]
    out = [int(d * s) for d, s in zip(x_shape, scales, strict=True)]
    inits = [numpy_helper.from_array(np.array(scales, np.float32), "s")]
    names = ["x", "s"]
    extra: dict[str, object] = {}
    if op == "Resize" and opset >= 11:
        names = ["x", "r", "s"] if roi else ["x", "", "s"]
        if roi:
            inits.append(numpy_helper.from_array(np.zeros([0], np.float32), "r"))
        extra = {"coordinate_transformation_mode": "asymmetric"}
        if mode == "nearest":
            extra["nearest_mode"] = "floor" if min(scales) >= 1 else "ceil"
    node = helper.make_node(op, names, ["y"], name="up", mode=mode, **extra)
    return make_model([node], [value_info("x", F, x_shape)], [value_info("y", F, out)], opset, initializers=inits)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("target", [10, 11, 13, 19])
def test_upsample_up_becomes_resize(mode: str, target: int) -> None:
    out = convert_exact(upsample(9, "Upsample", mode, [1, 1, 2, 1.5]), target, {"x": ties(1, 2, 3, 4)})
    assert ops(out) == ["Resize"]


@pytest.mark.parametrize(("mode", "scales"), [("nearest", [1, 1, 2, 1.5]), ("nearest", [1, 1, 0.5, 0.5]),
                                               ("linear", [1, 1, 2, 0.5])])
@pytest.mark.parametrize(("source", "target"), [(10, 11), (10, 13), (10, 19), (11, 10), (13, 10), (19, 10)])
def test_resize_10_11_both_ways(mode: str, scales: list[float], source: int, target: int) -> None:
    model = upsample(source, "Resize", mode, scales, roi=source == 11)
    convert_exact(model, target, {"x": ties(1, 2, 3, 4)})


def test_resize_up_refuses_mixed_nearest_scales() -> None:
    refused(upsample(10, "Resize", "nearest", [1, 1, 2, 0.5]), 11, "upsample some axes and downsample others")


@pytest.mark.parametrize(("attr", "value", "match"), [
    ("coordinate_transformation_mode", "half_pixel", r"on axis 2 \(3 -> 6\) its nearest picks \(half_pixel, floor\) "
                                                     "differ from Resize-10's"),
    ("nearest_mode", "round_prefer_floor", r"on axis 3 \(4 -> 12\) its nearest picks \(asymmetric, "
                                           r"round_prefer_floor\) differ"),
    ("coordinate_transformation_mode", "align_corners", "maps x to x / scale"),
    ("mode", "cubic", "nearest and linear only")])
def test_resize_down_refusals(attr: str, value: str, match: str) -> None:
    model = upsample(13, "Resize", "nearest", [1, 1, 2, 3])
    node = model.graph.node[0]
    for a in node.attribute:
        if a.name == attr:
            a.s = value.encode()
    refused(model, 10, match)


def _sized(sizes: list[int], dims: list[int | str]) -> onnx.ModelProto:
    z = numpy_helper.from_array(np.array(sizes, np.int64), "z")
    node = helper.make_node("Resize", ["x", "", "", "z"], ["y"], name="rs", coordinate_transformation_mode="asymmetric",
                            nearest_mode="floor")
    return make_model([node], [value_info("x", F, dims)], [value_info("y", F, sizes)], 13, initializers=[z])


@pytest.mark.parametrize("target", [10, 9, 7])
def test_resize_sized_by_integer_ratios_goes_below_11(target: int) -> None:
    """Sizes that are the input's static dims times integers become the same scales (exactly representable)."""
    out = convert_exact(_sized([1, 2, 6, 8], [1, 2, 3, 4]), target, {"x": ties(1, 2, 3, 4)})
    assert ops(out) == (["Resize"] if target == 10 else ["Upsample"])


def test_resize_down_refuses_sizes_that_are_no_integer_ratio() -> None:
    model = _sized([1, 2, 6, 6], [1, 2, 3, 4])
    refused(model, 10, "resizes axis 3 from 4 to 6, not by an integer factor or divisor")
    convert_exact(model, 11, {"x": ties(1, 2, 3, 4)})  # an empty roi and scales next to sizes


@pytest.mark.parametrize("ctm", ["half_pixel", "pytorch_half_pixel"])
@pytest.mark.parametrize("rounding", ["round_prefer_floor", "round_prefer_ceil"])
@pytest.mark.parametrize("target", [10, 9, 7])
def test_half_pixel_nearest_on_integer_upsampling_goes_below_11(ctm: str, rounding: str, target: int) -> None:
    """x = k*s + j maps to k + (j + 0.5)/s - 0.5, within 0.5 of k: what asymmetric floor picks."""
    def resize(scales: list[float]) -> onnx.ModelProto:
        model = upsample(13, "Resize", "nearest", scales)
        for a in model.graph.node[0].attribute:
            if a.name == "coordinate_transformation_mode":
                a.s = ctm.encode()
            if a.name == "nearest_mode":
                a.s = rounding.encode()
        return model

    convert_exact(resize([1, 1, 2, 3]), target, {"x": ties(1, 2, 3, 4)})
    # A non-integer factor (4 -> 6): the picks are compared index by index on the static dims. Rounding ties
    # down they agree with asymmetric floor (x = 1 maps to 0.5 and 0.667: both 0); up they differ.
    if rounding == "round_prefer_ceil":
        refused(resize([1, 1, 2, 1.5]), 10, r"on axis 3 \(4 -> 6\) its nearest picks .* output index 1 takes input "
                                            "index 1, Resize-10's 0")
    elif target == 10:
        convert_exact(resize([1, 1, 2, 1.5]), 10, {"x": ties(1, 2, 3, 4)})


@pytest.mark.parametrize("kind", ["scales", "sizes", "sizes-dynamic", "roi"])
@pytest.mark.parametrize("target", [17, 13, 11])
def test_resize_axes_spread_over_every_axis(kind: str, target: int) -> None:
    """Resize-18's ``axes``: scales 1, sizes the input's dims (read with Shape when dynamic), roi 0..1 elsewhere."""
    dims: list[int | str] = ["n" if kind == "sizes-dynamic" else 1, 2, 3, 4]
    inits, names, extra = [], ["x", "", ""], {}
    if kind in ("scales", "roi"):
        inits.append(numpy_helper.from_array(np.array([2, 1.5], np.float32), "s"))
        names = ["x", "", "s"]
    else:
        inits.append(numpy_helper.from_array(np.array([6, 8], np.int64), "z"))
        names = ["x", "", "", "z"]
    if kind == "roi":
        inits.append(numpy_helper.from_array(np.array([0.2, 0.1, 0.9, 0.7], np.float32), "r"))
        names[1] = "r"
        extra = {"coordinate_transformation_mode": "tf_crop_and_resize"}
    node = helper.make_node("Resize", names, ["y"], name="rs", mode="linear", axes=[2, -1], **extra)
    out = [dims[0], 2, 6, 6 if kind in ("scales", "roi") else 8]
    model = make_model([node], [value_info("x", F, dims)], [value_info("y", F, out)], 19, initializers=inits)
    converted = convert_exact(model, target, {"x": ties(1 if kind != "sizes-dynamic" else 3, 2, 3, 4)})
    assert not [a for n in converted.graph.node for a in n.attribute if a.name == "axes"]


def test_resize_axes_with_run_time_scales_is_refused() -> None:
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs", axes=[2, 3])
    model = make_model([node], [value_info("x", F, [1, 2, 3, 4]), value_info("s", F, [2])],
                       [value_info("y", F, None)], 19)
    refused(model, 13, "scales 's' are not a constant to spread over every axis")


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("target", [9, 8, 7])
def test_resize_below_10_becomes_upsample(mode: str, target: int) -> None:
    out = convert_exact(upsample(19, "Resize", mode, [1, 1, 2, 3]), target, {"x": ties(1, 2, 3, 4)})
    assert ops(out) == ["Upsample"]


@pytest.mark.parametrize("source", [13, 18, 19])
def test_resize_without_roi_goes_to_11(source: int) -> None:
    """What torch's dynamo exporter makes of F.interpolate(mode="bilinear"): no roi input."""
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs", mode="linear",
                            coordinate_transformation_mode="pytorch_half_pixel")
    model = make_model([node], [value_info("x", F, [1, 2, 3, 4])], [value_info("y", F, [1, 2, 6, 8])], source,
                       initializers=[scales])
    out = lowerer.convert(model, target_opset=11, verify=True).model
    onnx.checker.check_model(out, full_check=True)
    resize = out.graph.node[0]
    assert resize.input[1] and [len(t.dims) and t.dims[0] for t in out.graph.initializer
                                if t.name == resize.input[1]] == [0]
    x = (RNG.integers(0, 8, size=(1, 2, 3, 4)) / 4).astype(np.float32)
    np.testing.assert_array_equal(run_model(out, [{"x": x}])[1][0][0], run_model(model, [{"x": x}])[1][0][0])


def test_resize_up_refuses_tf_half_pixel_for_nn() -> None:
    model = upsample(11, "Resize", "nearest", [1, 1, 2, 2], roi=True)
    for a in model.graph.node[0].attribute:
        if a.name == "coordinate_transformation_mode":
            a.s = b"tf_half_pixel_for_nn"
    refused(model, 13, "tf_half_pixel_for_nn' was removed")


# -- Scan 8 <-> 9 ------------------------------------------------------------------------------------------

def _sum_body() -> onnx.GraphProto:
    """state' = state + x; y = state' (a running sum)."""
    add = helper.make_node("Add", ["s", "x"], ["s2"])
    copy = helper.make_node("Identity", ["s2"], ["y"])
    return helper.make_graph([add, copy], "body", [value_info("s", F, [2]), value_info("x", F, [2])],
                             [value_info("s2", F, [2]), value_info("y", F, [2])])


def scan(opset: int, batch: int | str = 1, sequence_lens: bool = False, **extra: object) -> onnx.ModelProto:
    lead = [batch] if opset == 8 else []
    inputs = [value_info("s0", F, [*lead, 2]), value_info("xs", F, [*lead, 3, 2])]
    names = ["s0", "xs"]
    if opset == 8:
        names = ["lens" if sequence_lens else "", *names]
        if sequence_lens:
            inputs.append(value_info("lens", TensorProto.INT32, [batch]))
    node = helper.make_node("Scan", names, ["sN", "ys"], name="scan", body=_sum_body(), num_scan_inputs=1, **extra)
    return make_model([node], inputs, [value_info("sN", F, [*lead, 2]), value_info("ys", F, [*lead, 3, 2])],
                      opset)


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("target", [9, 11, 16])
def test_scan_8_up(reverse: int, target: int) -> None:
    model = scan(8, directions=[reverse])
    out = convert_exact(model, target, {"s0": ties(1, 2), "xs": ties(1, 3, 2)})
    assert "Scan" in ops(out) and ops(out)[0] == "Squeeze"


@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("source", [9, 11, 16])
def test_scan_down_to_8(reverse: int, source: int) -> None:
    model = scan(source, scan_input_directions=[reverse])
    out = convert_exact(model, 8, {"s0": ties(2), "xs": ties(3, 2)})
    assert ops(out) == ["Unsqueeze", "Unsqueeze", "Scan", "Squeeze", "Squeeze"]


def test_scan_up_refusals() -> None:
    refused(scan(8, batch=2), 9, "batch \\(axis 0\\) of input 's0' is 2")
    refused(scan(8, batch="n"), 9, "no input's batch \\(axis 0\\) is statically 1")
    refused(scan(8, sequence_lens=True), 9, "it has sequence_lens")


@pytest.mark.parametrize(("extra", "match"), [({"scan_input_axes": [1]}, r"scan_input_axes=\[1\]"),
                                              ({"scan_output_directions": [1]}, "appends every scan output forward")])
def test_scan_down_refusals(extra: dict[str, object], match: str) -> None:
    refused(scan(9, **extra), 8, match)


# -- GroupNormalization 18 -> 21 ---------------------------------------------------------------------------

def group_norm(constant: bool, channels: int | str = 4) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array([2, -1], np.float32), "s"),
             numpy_helper.from_array(np.array([0.5, 3], np.float32), "b")] if constant else []
    inputs = [value_info("x", F, [2, channels, 3])]
    if not constant:
        inputs += [value_info("s", F, [2]), value_info("b", F, [2])]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], name="gn", num_groups=2, epsilon=0.5)
    return make_model([node], inputs, [value_info("y", F, [2, channels, 3])], 18, initializers=inits)


@pytest.mark.parametrize("constant", [True, False])
@pytest.mark.parametrize("target", [21, 22])
def test_group_norm_up_repeats_per_channel(constant: bool, target: int) -> None:
    model = group_norm(constant)
    feeds = {"x": ties(2, 4, 3)}
    if not constant:
        feeds |= {"s": ties(2), "b": ties(2)}
    converted = lowerer.convert(model, target_opset=target, verify=True).model  # GroupNormalization-18 fails
    onnx.checker.check_model(converted, full_check=True)                      # the checker: deprecated
    got = run_model(converted, [feeds])[1][0][0]
    scale, bias = (np.array([2, -1], np.float32), np.array([0.5, 3], np.float32)) if constant else (feeds["s"],
                                                                                                   feeds["b"])
    groups = feeds["x"].reshape(2, 2, 6)
    mean, var = groups.mean(-1, keepdims=True), groups.var(-1, keepdims=True)
    want = ((groups - mean) / np.sqrt(var + 0.5)).reshape(2, 4, 3) * np.repeat(scale, 2)[:, None] \
        + np.repeat(bias, 2)[:, None]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run_model(model, [feeds])[1][0][0], got, rtol=1e-6, atol=1e-6)


def test_group_norm_up_refuses_dynamic_channels() -> None:
    refused(group_norm(True, channels="c"), 21, "channel count C .* is not static")


# -- Equal 11 -> 7 on floats ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("elem", "dtype"), [(F, np.float32), (TensorProto.DOUBLE, np.float64),
                                             (TensorProto.FLOAT16, np.float16)])
@pytest.mark.parametrize("target", [10, 9, 7])
def test_equal_on_floats_below_11(elem: int, dtype: type, target: int) -> None:
    """Neither less nor greater, and no NaN: ±0 equal, NaN never, ±inf equal to themselves."""
    node = helper.make_node("Equal", ["a", "b"], ["y"], name="eq")
    model = make_model([node], [value_info("a", elem, [9]), value_info("b", elem, [1])],
                       [value_info("y", TensorProto.BOOL, [9])], 13)
    a = np.array([0, -0.0, np.nan, np.inf, -np.inf, 1, 2, -2, 3], dtype)
    for b in (0.0, -0.0, np.nan, np.inf, -np.inf, 2.0):
        out = convert_exact(model, target, {"a": a, "b": np.array([b], dtype)})
    assert "Equal" not in ops(out)


# -- Slice steps below 10 --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), [
    ([0, 0], [5, 6], [1, 2], [2, 2]),  # YOLOv5's Focus: x[..., ::2, ::2]
    ([0, 1], [2, 10], [0, 2], [1, 2]), ([-1], [-100], [2], [-2]), ([4, 0], [0, 6], [1, -1], [-1, 3]),
    ([1], [2**62], [-1], [4])])
@pytest.mark.parametrize("target", [9, 7])
def test_slice_steps_below_10_become_gathers(starts: list[int], ends: list[int], axes: list[int], steps: list[int],
                                             target: int) -> None:
    """A step other than 1: Gather of the constant indices Slice-10 would take (Python's slice clamps alike)."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), n)
             for v, n in ((starts, "s"), (ends, "e"), (axes, "a"), (steps, "t"))]
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"], name="sl")
    model = make_model([node], [value_info("x", F, ["n", 5, 6])], [value_info("y", F, ["o0", "o1", "o2"])], 13,
                       initializers=inits)
    out = convert_exact(model, target, {"x": ties(2, 5, 6)})
    assert "Gather" in ops(out)


def test_slice_steps_on_a_dynamic_axis_are_refused() -> None:
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for v, n in (([0], "s"), ([9], "e"), ([0], "a"),
                                                                            ([2], "t"))]
    node = helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"], name="sl")
    model = make_model([node], [value_info("x", F, ["n", 5])], [value_info("y", F, ["o0", 5])], 13,
                       initializers=inits)
    refused(model, 9, "taking axis 0 in steps of 2 with Gather needs its size")
