"""Upsample 1 ↔ 7: ``height_scale``/``width_scale`` (Upsample-1, 4-D) ↔ ``scales = [1, 1, h, w]`` (Upsample-7).

onnxruntime has no Upsample-1 (its range starts at opset 7), so going up the result is run there and
compared with the meaning Upsample-1 states (output pixel ``(i, j)`` of ``nearest`` is input pixel
``(floor(i / h), floor(j / w))``: exactly, on tie-heavy inputs) and, for both modes, with the same model
taken on to 9 (scales an input) and 13 (Resize): equal bit for bit. Going down, the result taken back
up must be the original node, and run equal to it.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _convert_helpers import check_model_full, make_model, ort_run, tie_inputs, value_info
from onnx import TensorProto, helper

import lowerer
from lowerer.core.errors import ConversionError

F = TensorProto.FLOAT


def _upsample_1(mode: str, height: float, width: float, shape: list, opset: int = 6,
                elem: int = F) -> onnx.ModelProto:
    node = helper.make_node("Upsample", ["X"], ["Y"], mode=mode, height_scale=height, width_scale=width)
    out = [shape[0], shape[1], int(shape[2] * height), int(shape[3] * width)] if len(shape) == 4 else None
    return make_model([node], [value_info("X", elem, shape)], [value_info("Y", elem, out)], opset)


def _upsample_7(scales: list[float], mode: str = "nearest", shape: list | None = None,
                elem: int = F) -> onnx.ModelProto:
    shape = shape or [1, 2, 2, 3]
    node = helper.make_node("Upsample", ["X"], ["Y"], mode=mode, scales=scales)
    out = [int(d * s) for d, s in zip(shape, scales, strict=True)]
    return make_model([node], [value_info("X", elem, shape)], [value_info("Y", elem, out)], 7)


def test_onnx_converter_test_upsample_6_7() -> None:
    """onnx's version converter test: one Upsample node with ``scales``, no height or width scale."""
    converted = lowerer.convert(_upsample_1("nearest", 2.0, 3.0, [1, 1, 2, 2]), target_opset=7).model
    check_model_full(converted)
    (node,) = converted.graph.node
    names = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert node.op_type == "Upsample" and names["scales"] == [1.0, 1.0, 2.0, 3.0]
    assert "width_scale" not in names and "height_scale" not in names
    assert converted.opset_import[0].version == 7


def _nearest(x: np.ndarray, height: int, width: int) -> np.ndarray:
    rows = np.arange(x.shape[2] * height) // height
    cols = np.arange(x.shape[3] * width) // width
    return x[:, :, rows][:, :, :, cols]


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize(("height", "width"), [(2.0, 3.0), (1.0, 2.0), (3.0, 1.0)])
def test_up_matches_the_stated_meaning_and_newer_forms(mode: str, height: float, width: float) -> None:
    shape = [2, 3, 3, 4]
    model = _upsample_1(mode, height, width, shape)
    rng = np.random.default_rng(0)
    feeds = [{"X": x} for x in tie_inputs(shape, np.dtype(np.float32), rng, with_inf=False)]
    feeds.append({"X": rng.standard_normal(shape).astype(np.float32)})
    results = {}
    for target in (7, 9, 13):
        converted = lowerer.convert(model, target_opset=target).model
        check_model_full(converted)
        results[target] = ort_run(converted, feeds)
    for got9, got13, got7 in zip(results[9], results[13], results[7], strict=True):
        assert np.array_equal(got7[0], got9[0]) and np.array_equal(got7[0], got13[0])
    if mode == "nearest":
        for feed, got in zip(feeds, results[7], strict=True):
            assert np.array_equal(got[0], _nearest(feed["X"], int(height), int(width)))
    else:  # a linear resize of H and W; axes of scale 1 are copied
        for feed, got in zip(feeds, results[7], strict=True):
            assert got[0].shape == (2, 3, int(3 * height), int(4 * width))
            assert np.array_equal(got[0][:, :, :: int(height), :: int(width)], feed["X"])


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_down_and_back_up(mode: str) -> None:
    model = _upsample_7([1.0, 1.0, 2.0, 3.0], mode)
    down = lowerer.convert(model, target_opset=6).model
    check_model_full(down)
    (node,) = down.graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == {"height_scale": 2.0, "width_scale": 3.0, "mode": b"bilinear" if mode == "linear" else b"nearest"}
    back = lowerer.convert(down, target_opset=7).model
    assert {a.name: helper.get_attribute_value(a) for a in back.graph.node[0].attribute} == \
        {"scales": [1.0, 1.0, 2.0, 3.0], "mode": mode.encode()}
    rng = np.random.default_rng(3)
    feeds = [{"X": x} for x in tie_inputs([1, 2, 2, 3], np.dtype(np.float32), rng)]
    for got, want in zip(ort_run(back, feeds), ort_run(model, feeds), strict=True):
        assert np.array_equal(got[0], want[0], equal_nan=True)


def test_refusals() -> None:
    with pytest.raises(ConversionError, match=r"scales=\[2\.0, 1\.0, 2\.0, 2\.0\]; Upsample-1 scales the height and "
                                              r"width of a 4-D tensor only"):
        lowerer.convert(_upsample_7([2.0, 1.0, 2.0, 2.0]), target_opset=6)
    with pytest.raises(ConversionError, match=r"scales=\[1\.0, 2\.0\]"):
        lowerer.convert(_upsample_7([1.0, 2.0], shape=[2, 3]), target_opset=6)
    with pytest.raises(ConversionError, match=r"Upsample changed its types at version 7"):
        lowerer.convert(_upsample_7([1.0, 1.0, 2.0, 2.0], elem=TensorProto.INT8), target_opset=6)
    with pytest.raises(ConversionError, match=r"height_scale=0\.5, width_scale=2\.0: Upsample-7 takes scales of 1 or "
                                              r"more only"):
        lowerer.convert(_upsample_1("nearest", 0.5, 2.0, [1, 1, 4, 4]), target_opset=7)
    with pytest.raises(ConversionError, match=r"input 'X' has rank 3; Upsample-1 scales height and width of a 4-D"):
        lowerer.convert(_upsample_1("nearest", 2.0, 2.0, [1, 4, 4]), target_opset=7)
