"""Scan 8 → 9 with the batch fixed by one input, and Scan bodies that state no output shapes, below 14.

* Scan-8's inputs share one batch (onnxruntime fails on inputs of different batches): a state of
  ``[1, 2]`` fixes it for a scanned input of unknown shape, as in onnx's converter test
  ``test_scan_8_9`` with its input's shape not stated. The original and the result run in
  onnxruntime on tie-heavy inputs and must be equal bit for bit; with a batch of 2 both fail.
* onnxruntime's Scan below 14 wants every body output's shape: where the model's inference finds none
  (the body's Unsqueeze reads an outer constant axes, whose value the model's inference does not take
  into the body), the body is inferred on its own with its outer values' facts and the shapes stated.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _compare import compare
from _convert_helpers import check_model_full, make_model, ort_run, tie_inputs, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError
from lowerer.passes.reach import NodeReach

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _same(model: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> None:
    for got, want in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        result = compare(got, want)
        assert result.same and result.exact, result.detail


def _sum_body() -> onnx.GraphProto:
    """onnx's converter test's body: a running sum of [2] rows, and each sum as a scan output."""
    return helper.make_graph(
        [helper.make_node("Add", ["sum_in", "next"], ["sum_out"]),
         helper.make_node("Identity", ["sum_out"], ["scan_out"])],
        "scan_body", [value_info("sum_in", F, [2]), value_info("next", F, [2])],
        [value_info("sum_out", F, [2]), value_info("scan_out", F, [2])])


def _scan_8(initial_shape: list, x_shape: list | None, hidden: bool) -> onnx.ModelProto:
    """Scan-8 over ``x`` (hidden: made by a Reshape to a shape fed at run time, so of no known shape)."""
    nodes = []
    inputs = [value_info("initial", F, initial_shape)]
    x = "x"
    if hidden:
        inputs += [value_info("x_flat", F, [6]), value_info("x_shape", I64, [3])]
        nodes.append(helper.make_node("Reshape", ["x_flat", "x_shape"], ["x"]))
    else:
        inputs.append(value_info("x", F, x_shape))
    nodes.append(helper.make_node("Scan", ["", "initial", x], ["y", "z"], body=_sum_body(), num_scan_inputs=1))
    return make_model(nodes, inputs, [value_info("y", F, [1, 2]), value_info("z", F, [1, None, 2])], 8)


def _feeds(hidden: bool, batch: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    out = []
    for init, x in zip(tie_inputs([batch, 2], np.dtype(np.float32), rng),
                       tie_inputs([batch, 3, 2], np.dtype(np.float32), rng), strict=False):
        if hidden:
            out.append({"initial": init, "x_flat": x.reshape(-1), "x_shape": np.array(x.shape, dtype=np.int64)})
        else:
            out.append({"initial": init, "x": x})
    return out


@pytest.mark.parametrize("target", [9, 11, 13, 17])
@pytest.mark.parametrize(("x_shape", "hidden"), [([1, 3, 2], False), (["b", 3, 2], False), (None, True)])
def test_scan_8_up_batch_fixed_by_a_state(target: int, x_shape: list | None, hidden: bool) -> None:
    model = _scan_8([1, 2], x_shape, hidden)
    check_model_full(model)
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    assert [n.op_type for n in converted.graph.node if n.op_type != "Reshape"] == \
        ["Squeeze", "Squeeze", "Scan", "Unsqueeze", "Unsqueeze"]
    _same(model, converted, _feeds(hidden))


def test_scan_8_up_other_batch_fails_in_both() -> None:
    """A scanned input of batch 2 beside a state of batch 1: the original fails, and so does the result."""
    model = _scan_8([1, 2], None, True)
    converted = lowerer.convert(model, target_opset=9).model
    feeds = _feeds(True, batch=1)[:1]
    feeds[0]["x_flat"] = np.arange(12, dtype=np.float32)
    feeds[0]["x_shape"] = np.array([2, 3, 2], dtype=np.int64)
    for m in (model, converted):
        with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error types
            ort_run(m, feeds)


def test_scan_8_up_refusals() -> None:
    with pytest.raises(ConversionError, match=r"no input's batch \(axis 0\) is statically 1 \(inputs 'initial', "
                                              r"'x': not static\)"):
        lowerer.convert(_scan_8(["b", 2], ["b", 3, 2], False), target_opset=9)
    with pytest.raises(ConversionError, match=r"the batch \(axis 0\) of input 'initial' is 2"):
        lowerer.convert(_scan_8([2, 2], None, True), target_opset=9)


def _scan_16_unshaped_body() -> onnx.ModelProto:
    """Scan-16 whose body states no output types, its Unsqueeze reading the outer constant ``axes``."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["row", "axes"], ["col"]),
         helper.make_node("MatMul", ["col", "row2d"], ["outer"]),
         helper.make_node("Add", ["acc_in", "outer"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["each"])],
        "body", [onnx.ValueInfoProto(name="acc_in"), onnx.ValueInfoProto(name="row")],
        [onnx.ValueInfoProto(name="acc_out"), onnx.ValueInfoProto(name="each")])
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    nodes = [helper.make_node("Unsqueeze", ["r0", "zero"], ["row2d"]),
             helper.make_node("Scan", ["acc0", "x"], ["acc", "all"], body=body, num_scan_inputs=1)]
    zero = numpy_helper.from_array(np.array([0], dtype=np.int64), "zero")
    return make_model(nodes, [value_info("acc0", F, [3, 3]), value_info("x", F, [4, 3]), value_info("r0", F, [3])],
                      [value_info("acc", F, [3, 3]), value_info("all", F, [4, 3, 3])], 16, initializers=[axes, zero])


@pytest.mark.parametrize("target", [13, 11])
def test_scan_body_shapes_inferred_with_outer_constants(target: int) -> None:
    model = _scan_16_unshaped_body()
    check_model_full(model)
    assert NodeReach(model, frozenset()).refusal(target) is None  # inspect predicts it
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    body = next(n for n in converted.graph.node if n.op_type == "Scan").attribute[0].g
    assert [[d.dim_value for d in o.type.tensor_type.shape.dim] for o in body.output] == [[3, 3], [3, 3]]
    rng = np.random.default_rng(1)
    feeds = [{"acc0": a, "x": x, "r0": r} for a, x, r in zip(
        tie_inputs([3, 3], np.dtype(np.float32), rng), tie_inputs([4, 3], np.dtype(np.float32), rng),
        tie_inputs([3], np.dtype(np.float32), rng), strict=False)]
    _same(model, converted, feeds)
