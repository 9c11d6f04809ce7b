"""Lowerings of Expand (below 8) and Where (below 9), compared exactly in onnxruntime.

Expand becomes Mul by ones (Or with false for bool); Where becomes a Gather from both sides
broadcast and flattened. Both pick or keep every value as it is, so outputs must be bit-identical on
tie-heavy values, ±inf, -0.0 and NaN (NaN compared as NaN).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _convert_helpers import make_model, run_model, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError

RNG = np.random.default_rng(23)
SPECIALS = np.array([np.inf, -np.inf, -0.0, 0.0, np.nan, 1.0, -2.0], dtype=np.float32)


def _values(shape: list[int], dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return RNG.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.floating):
        return RNG.choice(SPECIALS, size=shape).astype(dtype)
    return RNG.integers(-3, 4, size=shape).astype(dtype)


def _same(model: onnx.ModelProto, target: int, feeds: dict[str, np.ndarray], zero_sign: bool = True
          ) -> onnx.ModelProto:
    converted = lowerer.convert(model, target_opset=target, verify=True)
    # reference-only: a side onnxruntime cannot run (Where-16 on bool below its CPU kernel's types) was judged by
    # lowerer's numpy reference alone; the outputs are compared in onnxruntime below where it runs them
    assert all(r.status in ("verified", "reference-only") for r in converted.report.rewrites), \
        converted.report.rewrites
    onnx.checker.check_model(converted.model, full_check=True)
    _, got = run_model(converted.model, [feeds])
    _, want = run_model(model, [feeds])
    for g, w in zip(got[0], want[0], strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g, w, equal_nan=g.dtype.kind == "f")
        if g.dtype.kind == "f" and zero_sign:
            assert np.array_equal(np.signbit(g), np.signbit(w))  # -0.0 kept
    return converted.model


@pytest.mark.parametrize("target", [7])
@pytest.mark.parametrize(("x_shape", "shape"), [([3, 1], [2, 3, 4]), ([1], [5]), ([2, 3], [2, 3]), ([4, 1, 2], [3, 1])])
@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.FLOAT, np.float32), (TensorProto.INT64, np.int64),
                                             (TensorProto.BOOL, np.bool_), (TensorProto.FLOAT16, np.float16)])
def test_expand_below_8(target: int, x_shape: list[int], shape: list[int], elem: int, dtype: np.dtype) -> None:
    out = list(np.broadcast_shapes(tuple(x_shape), tuple(shape)))
    model = make_model([helper.make_node("Expand", ["x", "s"], ["y"], name="ex")], [value_info("x", elem, x_shape)],
                       [value_info("y", elem, out)], 13,
                       initializers=[numpy_helper.from_array(np.array(shape, np.int64), "s")])
    converted = _same(model, target, {"x": _values(x_shape, dtype)})
    assert "Expand" not in [n.op_type for n in converted.graph.node]


@pytest.mark.parametrize("target", [8, 7])
@pytest.mark.parametrize(("c", "x", "y"), [([3, 1], [1, 4], [3, 4]), ([2, 3], [2, 3], [2, 3]), ([4], [], [2, 4]),
                                           ([1], [5], [1])])
@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.FLOAT, np.float32), (TensorProto.INT32, np.int32),
                                             (TensorProto.BOOL, np.bool_), (TensorProto.DOUBLE, np.float64)])
def test_where_below_9(target: int, c: list[int], x: list[int], y: list[int], elem: int, dtype: np.dtype) -> None:
    out = list(np.broadcast_shapes(tuple(c), tuple(x), tuple(y)))
    model = make_model([helper.make_node("Where", ["c", "x", "y"], ["z"], name="wh")],
                       [value_info("c", TensorProto.BOOL, c), value_info("x", elem, x), value_info("y", elem, y)],
                       [value_info("z", elem, out)], 16)
    feeds = {"c": _values(c, np.bool_), "x": _values(x, dtype), "y": _values(y, dtype)}
    # onnxruntime 1.32's Where gives +0.0 where it selects a -0.0 (the Gather form keeps the -0.0 it
    # selects, as the spec says): zeros compare equal, their signs are not compared.
    converted = _same(model, target, feeds, zero_sign=False)
    assert "Where" not in [n.op_type for n in converted.graph.node]
    all_true = dict(feeds, c=np.ones(c, np.bool_))
    _same(model, target, all_true, zero_sign=False)


def test_where_inside_an_if_body() -> None:
    inner = helper.make_graph([helper.make_node("Where", ["c", "x", "x"], ["w"], name="wh")], "then", [],
                              [value_info("w", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["n"], name="neg")], "else", [],
                              [value_info("n", TensorProto.FLOAT, [2, 3])])
    node = helper.make_node("If", ["b"], ["y"], name="if", then_branch=inner, else_branch=other)
    inputs = [value_info("b", TensorProto.BOOL, []), value_info("c", TensorProto.BOOL, [2, 3]),
              value_info("x", TensorProto.FLOAT, [2, 3])]
    model = make_model([node], inputs, [value_info("y", TensorProto.FLOAT, [2, 3])], 16)
    for b in (True, False):
        _same(model, 8, {"b": np.array(b), "c": _values([2, 3], np.bool_), "x": _values([2, 3], np.float32)},
              zero_sign=False)


def test_refusals_name_the_condition() -> None:
    model = make_model([helper.make_node("Where", ["c", "x", "x"], ["z"], name="wh")],
                       [value_info("c", TensorProto.BOOL, ["n", 3]), value_info("x", TensorProto.FLOAT, ["n", 3])],
                       [value_info("z", TensorProto.FLOAT, ["n", 3])], 16)
    with pytest.raises(ConversionError, match=r"'wh' \(Where-16.*dims of 'c' are not all static"):
        lowerer.convert(model, target_opset=8)
    expand = make_model([helper.make_node("Expand", ["x", "s"], ["y"], name="ex")],
                        [value_info("x", TensorProto.INT8, [3, 1])], [value_info("y", TensorProto.INT8, [3, 4])], 13,
                        initializers=[numpy_helper.from_array(np.array([3, 4], np.int64), "s")])
    with pytest.raises(ConversionError, match="is INT8, and below Expand-8 an exact broadcast needs Mul-7"):
        lowerer.convert(expand, target_opset=7)
