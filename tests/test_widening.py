"""Ops whose newer versions took narrower types, taken below them in a wider type (``lowerer.rules.widening``).

Each conversion runs before and after in onnxruntime and must be equal bit for bit (or, where
onnxruntime has no kernel for the original, equal numpy's answer).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _convert_helpers import check_model_full, make_model, ort_run, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError


def _same(model: onnx.ModelProto, target: int, feeds: list[dict[str, np.ndarray]]) -> onnx.ModelProto:
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    for got, want in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w, equal_nan=True), (g, w)
    return converted


@pytest.mark.parametrize("target", [19, 11])
def test_is_inf_on_float16(target: int) -> None:
    model = make_model([helper.make_node("IsInf", ["x"], ["y"], detect_negative=0)],
                       [value_info("x", TensorProto.FLOAT16, [6])], [value_info("y", TensorProto.BOOL, [6])], 20)
    x = np.array([np.inf, -np.inf, np.nan, 65504, -0.0, 6e-8], np.float16)
    _same(model, target, [{"x": x}])


@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8)])
@pytest.mark.parametrize("target", [11, 7])
def test_max_pool_on_8_bit_integers(elem: int, dtype: type, target: int) -> None:
    model = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])],
                       [value_info("x", elem, [1, 1, 3, 3])], [value_info("y", elem, [1, 1, 3, 3])], 12)
    info = np.iinfo(dtype)
    x = np.array([info.min, info.max, 0, 1, info.min, info.max - 1, 7, 3, info.min + 1], dtype).reshape(1, 1, 3, 3)
    _same(model, target, [{"x": x}])


@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8)])
@pytest.mark.parametrize("target", [11, 7])
def test_clip_on_small_integers_with_constant_bounds(elem: int, dtype: type, target: int) -> None:
    info = np.iinfo(dtype)
    lo = numpy_helper.from_array(np.array(info.min + 3, dtype), "lo")
    hi = numpy_helper.from_array(np.array(info.max - 5, dtype), "hi")
    model = make_model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [value_info("x", elem, [5])],
                       [value_info("y", elem, [5])], 13, initializers=[lo, hi])
    x = np.array([info.min, info.max, info.min + 4, info.max - 6, 0 if info.min == 0 else -1], dtype)
    out = _same(model, target, [{"x": x}])
    assert "Clip" in [n.op_type for n in out.graph.node]


def test_clip_with_a_run_time_bound_below_11_is_refused() -> None:
    model = make_model([helper.make_node("Clip", ["x", "lo"], ["y"], name="c")],
                       [value_info("x", TensorProto.INT8, [3]), value_info("lo", TensorProto.INT8, [])],
                       [value_info("y", TensorProto.INT8, [3])], 13)
    with pytest.raises(ConversionError, match=r"'c'.*'lo' is not a constant"):
        lowerer.convert(model, target_opset=9)
    _same(model, 11, [{"x": np.array([-128, 5, 127], np.int8), "lo": np.array(-3, np.int8)}])


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize(("shape", "axes"), [([2, 3], [1]), ([2, 0], [1]), ([3, 2], [0, 1])])
@pytest.mark.parametrize("target", [19, 11])
def test_bool_reductions(op: str, shape: list[int], axes: list[int], target: int) -> None:
    """Over nothing ([2, 0] along 1): false for ReduceMax, true for ReduceMin, bool's identities."""
    ax = numpy_helper.from_array(np.array(axes, np.int64), "axes")
    model = make_model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)],
                       [value_info("x", TensorProto.BOOL, shape)], [value_info("y", TensorProto.BOOL, None)], 20,
                       initializers=[ax])
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=shape).astype(bool)
    converted = lowerer.convert(model, target_opset=target).model
    (got,) = ort_run(converted, [{"x": x}])[0]
    fn = np.max if op == "ReduceMax" else np.min
    want = fn(x, axis=tuple(axes), keepdims=True, initial=(op == "ReduceMin"))
    assert got.dtype == np.bool_ and np.array_equal(got, want), (got, want)


@pytest.mark.parametrize("inverse", [0, 1])
def test_dft_with_a_run_time_axis_at_17(inverse: int) -> None:
    """DFT-20's axis fed at run time: one DFT-17 per axis it may name, in nested Ifs (the same kernel runs)."""
    model = make_model([helper.make_node("DFT", ["x", "", "axis"], ["y"], inverse=inverse)],
                       [value_info("x", TensorProto.FLOAT, [2, 4, 3, 2]), value_info("axis", TensorProto.INT64, [])],
                       [value_info("y", TensorProto.FLOAT, [2, 4, 3, 2])], 20)
    x = np.random.default_rng(1).standard_normal([2, 4, 3, 2]).astype(np.float32)
    out = _same(model, 17, [{"x": x, "axis": np.array(a, np.int64)} for a in (0, 1, 2, -2, -3, -4)])
    assert [n.op_type for n in out.graph.node].count("If") == 1


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
def test_broadcast_constants_below_8(op: str) -> None:
    """Max-6/Min-6/Sum-6/Mean-6 take one shape: a constant input of another shape is written out at the output's."""
    half = numpy_helper.from_array(np.array(0.5, np.float32), "half")
    row = numpy_helper.from_array(np.array([[-1.0, 0.0, 2.0]], np.float32), "row")
    model = make_model([helper.make_node(op, ["x", "half", "row"], ["y"])],
                       [value_info("x", TensorProto.FLOAT, [2, 3])], [value_info("y", TensorProto.FLOAT, [2, 3])], 13,
                       initializers=[half, row])
    x = np.array([[np.nan, -np.inf, 0.25], [3.0, -0.0, 0.5]], np.float32)
    _same(model, 7, [{"x": x}])
    dynamic = make_model([helper.make_node(op, ["x", "half"], ["y"], name="v")],
                         [value_info("x", TensorProto.FLOAT, ["n"])], [value_info("y", TensorProto.FLOAT, ["n"])], 13,
                         initializers=[half])
    with pytest.raises(ConversionError, match=r"'v'.*same static shape"):
        lowerer.convert(dynamic, target_opset=7)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.INT8, np.int8), (TensorProto.INT16, np.int16),
                                             (TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64)])
@pytest.mark.parametrize("target", [21, 11])
def test_signed_bit_shift_below_28(direction: str, elem: int, dtype: type, target: int) -> None:
    """Every int8 against every shift from -3 to width + 2 (extremes and random values for the wider types)."""
    info = np.iinfo(dtype)
    width = info.bits
    if dtype is np.int8:
        xs = np.repeat(np.arange(-128, 128, dtype=np.int64), width + 6).astype(dtype)
        ys = np.tile(np.arange(-3, width + 3, dtype=np.int64), 256).astype(dtype)
    else:
        base = np.concatenate([np.array([info.min, info.max, -1, 0, 1, info.min + 1, info.max - 1], dtype),
                               np.random.default_rng(5).integers(info.min, info.max, 40, dtype=dtype)])
        xs = np.repeat(base, width + 6)
        ys = np.tile(np.arange(-3, width + 3, dtype=np.int64), len(base)).astype(dtype)
    model = make_model([helper.make_node("BitShift", ["x", "y"], ["z"], direction=direction)],
                       [value_info("x", elem, [len(xs)]), value_info("y", elem, [len(xs)])],
                       [value_info("z", elem, [len(xs)])], 28)
    _same(model, target, [{"x": xs, "y": ys}])


@pytest.mark.parametrize("target", [17, 11])
def test_qlinear_matmul_with_float16_scales(target: int) -> None:
    """Float16 scales (new at 21) cast to float: onnxruntime's kernel requantizes in float either way."""
    rng = np.random.default_rng(7)
    inits = [numpy_helper.from_array(np.array(v, np.float16), n)
             for n, v in (("sa", 0.0213), ("sb", 0.00391), ("sy", 0.0517))]
    inits += [numpy_helper.from_array(np.array(z, np.uint8), n) for n, z in (("za", 113), ("zb", 114), ("zy", 118))]
    model = make_model([helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])],
                       [value_info("a", TensorProto.UINT8, [4, 8]), value_info("b", TensorProto.UINT8, [8, 3])],
                       [value_info("y", TensorProto.UINT8, [4, 3])], 21, initializers=inits)
    feeds = [{"a": rng.integers(0, 256, (4, 8)).astype(np.uint8), "b": rng.integers(0, 256, (8, 3)).astype(np.uint8)}
             for _ in range(20)]
    _same(model, target, feeds)
