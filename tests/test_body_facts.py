"""Types and ranks inside bodies and of values onnx's inference leaves unknown, proven by lowerer's own facts.

* A Scan or Loop body's inputs (``lowerer.facts.body_shapes.body_input_types``): a scanned slice has the
  sequence's dims without the scan axis; a state or loop-carried value the initial value's, where the
  body provably returns them unchanged (else its rank stays unknown and a step that needs it refuses).
* A model's own subgraph whose values onnx's inference of the whole model leaves without a rank (an
  Unsqueeze reading an outer Constant's axes) is inferred on its own (``ShapeIndex.refined``).
* A value whose producer reads a shape onnx's data propagation does not fold (``Identity(Shape(x))``)
  is inferred from its producer alone, with lowerer's constants.
* A main-graph input whose stated dims are static and hold a 0 has one value, the empty tensor.

Every conversion runs before and after in onnxruntime and must be equal (exactly, or within the
expansion's budget where a function body was expanded, as the node-case survey judges).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _compare import compare
from _convert_helpers import check_model_full, make_model, ort_run, tie_inputs, value_info
from _node_cases import classify_case, load_cases
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _same(model: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> None:
    for got, want in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        result = compare(got, want)
        assert result.same and result.exact, result.detail


def _feeds(shapes: dict[str, list[int]], seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    columns = {name: tie_inputs(shape, np.dtype(np.float32), rng) for name, shape in shapes.items()}
    return [dict(zip(columns, values, strict=True)) for values in zip(*columns.values(), strict=False)]


def _scan_outer_axes(opset: int = 16) -> onnx.ModelProto:
    """Scan whose body states no types; its Unsqueeze and Squeeze read outer Constants with negative axes."""
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["row", "minus1"], ["col"]),
         helper.make_node("Unsqueeze", ["row", "minus2"], ["line"]),
         helper.make_node("MatMul", ["col", "line"], ["outer"]),
         helper.make_node("Add", ["acc_in", "outer"], ["acc_out"]),
         helper.make_node("MatMul", ["line", "acc_out"], ["read"]),
         helper.make_node("Squeeze", ["read", "minus2"], ["each"])],
        "body", [onnx.ValueInfoProto(name="acc_in"), onnx.ValueInfoProto(name="row")],
        [onnx.ValueInfoProto(name="acc_out"), onnx.ValueInfoProto(name="each")])
    nodes = [helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
             helper.make_node("Constant", [], ["minus2"], value=numpy_helper.from_array(np.array([-2], np.int64))),
             helper.make_node("Scan", ["acc0", "x"], ["acc", "all"], body=body, num_scan_inputs=1)]
    return make_model(nodes, [value_info("acc0", F, [2, 3, 3]), value_info("x", F, [4, 2, 3])],
                      [value_info("acc", F, [2, 3, 3]), value_info("all", F, [4, 2, 3])], opset)


@pytest.mark.parametrize("target", [9, 11])
def test_scan_body_ranks_from_outer_constants_and_scanned_slices(target: int) -> None:
    # Below 11 Unsqueeze and Squeeze take no negative axes: each needs its input's rank, which only the
    # body inferred on its own (outer Constants valued, the slice [2, 3] of x, the state [2, 3, 3]) gives.
    model = _scan_outer_axes()
    check_model_full(model)
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    body = next(n for n in converted.graph.node if n.op_type == "Scan").attribute[0].g
    squeezes = [n for n in body.node if n.op_type in ("Squeeze", "Unsqueeze")]
    if target < 11:
        assert all(min(a.ints) >= 0 for n in squeezes for a in n.attribute if a.name == "axes"), squeezes
    _same(model, converted, _feeds({"acc0": [2, 3, 3], "x": [4, 2, 3]}))


def _loop_growing_carried(opset: int = 16) -> onnx.ModelProto:
    """Loop whose carried value gains a dim each iteration; the body squeezes a copy of it by a negative axis."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Unsqueeze", ["v_in", "zero"], ["v_out"]),
         helper.make_node("Unsqueeze", ["v_in", "minus1"], ["wide"]),
         helper.make_node("Squeeze", ["wide", "minus1"], ["back"]),
         helper.make_node("ReduceSum", ["back"], ["total"], keepdims=0)],
        "body", [value_info("i", I64, []), value_info("cond_in", TensorProto.BOOL, []),
                 onnx.ValueInfoProto(name="v_in")],
        [value_info("cond_out", TensorProto.BOOL, []), onnx.ValueInfoProto(name="v_out"),
         onnx.ValueInfoProto(name="total")])
    nodes = [helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.array([0], np.int64))),
             helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
             helper.make_node("Constant", [], ["trips"], value=numpy_helper.from_array(np.array(3, np.int64))),
             helper.make_node("Constant", [], ["go"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("Loop", ["trips", "go", "v0"], ["v", "totals"], body=body)]
    outputs = [value_info("v", F, [1, 1, 1, 2]), value_info("totals", F, [3])]
    return make_model(nodes, [value_info("v0", F, [2])], outputs, opset)


def test_loop_carried_value_whose_rank_changes_is_not_given_one() -> None:
    # The body returns v_in with one more dim: the initial [2] holds for the first iteration only, so
    # the carried value's rank is not known in the body, and Squeeze-1 (no negative axes) refuses.
    model = _loop_growing_carried()
    with pytest.raises(ConversionError, match=r"rank of .*unknown"):
        lowerer.convert(model, target_opset=9)
    converted = lowerer.convert(model, target_opset=11).model  # negative axes from 11: no rank needed
    _same(model, converted, _feeds({"v0": [2]}))


def _split_by_identity_of_shape() -> onnx.ModelProto:
    """RotaryEmbedding's body's way to split: sizes from ``Identity(Shape(x)[3:4])``, then a Split by num_outputs."""
    nodes = [helper.make_node("Shape", ["x"], ["head"], start=3, end=4),
             helper.make_node("Identity", ["head"], ["rotated"]),
             helper.make_node("Sub", ["head", "rotated"], ["rest"]),
             helper.make_node("Concat", ["rotated", "rest"], ["sizes"], axis=0),
             helper.make_node("Split", ["x", "sizes"], ["to_rotate", "kept"], axis=-1),
             helper.make_node("Split", ["to_rotate"], ["a", "b"], axis=-1, num_outputs=2),
             helper.make_node("Sub", ["a", "b"], ["y"])]
    return make_model(nodes, [value_info("x", F, [2, 3, 4, 8])], [value_info("y", F, [2, 3, 4, 4])], 18)


@pytest.mark.parametrize("target", [13, 11, 9])
def test_split_of_a_value_onnx_leaves_without_rank(target: int) -> None:
    model = _split_by_identity_of_shape()
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert not any(v.name == "to_rotate" and v.type.tensor_type.HasField("shape") for v in inferred.graph.value_info)
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    _same(model, converted, _feeds({"x": [2, 3, 4, 8]}))


@pytest.mark.parametrize(("case", "target"), [
    ("test_linear_attention_linear", 9),  # the expanded Scan's slices and state: ranks for Unsqueeze-1
    ("test_linear_attention_gated_delta", 9),
    ("test_linear_attention_linear_expanded", 9),  # the model's own Scan body, outer Constant axes
    ("test_rotary_embedding_expanded", 9),  # Split of a value onnx gives no rank
    ("test_rotary_embedding_no_position_ids_expanded", 7),
    ("test_range_int32_type_negative_delta", 7),  # the expanded Loop's body inputs state scalar types
    ("test_range_float16_type_positive_delta", 9),
    ("test_sequence_map_add_2_sequences", 13),  # a body built from sequence input types
    ("test_sequence_map_extract_shapes", 16),
    ("test_attention_3d_expanded", 7),  # Expand-1 by a shape that folds through And/Mod of head counts
    ("test_reduce_l1_default_axes_keepdims_example", 7),  # axes an input of static shape [0]: empty
    ("test_reduce_sum_default_axes_keepdims_random", 11),
    ("test_gather_negative_indices", 7),  # run-time indices guarded without Where
    ("test_nllloss_NCd1_weight", 7),
    ("test_linear_attention_linear", 7),  # no Scan below 8: a Loop over the sequence
    ("test_linear_attention_gated_expanded", 7),  # the model's own Scan: its body as given, in a Loop
    ("test_scan9_sum", 7),
    ("test_linear_attention_fp16_expanded", 7),  # a Reshape in the Loop's body to an outer constant shape
])
def test_node_cases_that_were_refused_convert_and_run_equal(case: str, target: int) -> None:
    (found,) = load_cases(f"^{case}$")
    (outcome,) = classify_case(found, [target])
    assert outcome.status == "converted-ok", outcome.detail


@pytest.mark.parametrize(("case", "target", "reason"), [
    ("test_sequence_map_add_2_sequences", 11, "Loop changed its types at version 13"),  # no carried sequences
    ("test_flexattention_causal_mask", 7, "Greater changed its types at version 9"),  # int64 compare from 9
    ("test_reduce_sum_empty_set", 9, "picking the reduced axes at run time needs If"),  # axes [1] fed at run time
])
def test_what_stays_refused_names_the_condition(case: str, target: int, reason: str) -> None:
    (found,) = load_cases(f"^{case}$")
    (outcome,) = classify_case(found, [target])
    assert outcome.status == "refused" and reason in outcome.detail, outcome.detail


def _dropout(x_shape: list[int | str], mask: bool, ratio_input: bool) -> onnx.ModelProto:
    inputs = ["x", "r"] if ratio_input else ["x"]
    node = helper.make_node("Dropout", inputs, ["y", "m"] if mask else ["y"])
    ins = [value_info("x", F, x_shape)] + ([value_info("r", F, [])] if ratio_input else [])
    outs = [value_info("y", F, x_shape)] + ([value_info("m", TensorProto.BOOL, x_shape)] if mask else [])
    return make_model([node], ins, outs, 22)


@pytest.mark.parametrize(("shape", "target"), [([2, 3], 7), ([2, 3], 11), (["n", 3], 9)])
def test_dropout_inference_mask_and_run_time_ratio(shape: list[int | str], target: int) -> None:
    # Dropout-12's inference mask is all true (a constant of static dims, ConstantOfShape of dynamic ones);
    # in inference mode the output does not depend on the ratio, so a ratio fed at run time goes.
    model = _dropout(shape, mask=True, ratio_input=True)
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    feeds = [{"x": x, "r": np.array(0.25, np.float32)} for x in tie_inputs([2, 3], np.dtype(np.float32),
                                                                          np.random.default_rng(3))]
    _same(model, converted, feeds)


def test_dropout_mask_of_dynamic_dims_below_9_is_refused() -> None:
    with pytest.raises(ConversionError, match="ConstantOfShape-9"):
        lowerer.convert(_dropout(["n", 3], mask=True, ratio_input=False), target_opset=7)


def _scan_reversed(opset: int = 16) -> onnx.ModelProto:
    """Scan-16: a running sum over x read backwards along axis 1, each partial sum a scan output."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
         helper.make_node("Unsqueeze", ["acc_out", "minus1"], ["each"])],
        "body", [value_info("acc_in", F, [2]), value_info("row", F, [2])],
        [value_info("acc_out", F, [2]), value_info("each", F, [2, 1])])
    nodes = [helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
             helper.make_node("Scan", ["acc0", "x"], ["acc", "all"], body=body, num_scan_inputs=1,
                              scan_input_axes=[1], scan_input_directions=[1])]
    return make_model(nodes, [value_info("acc0", F, [2]), value_info("x", F, [2, 5])],
                      [value_info("acc", F, [2]), value_info("all", F, [5, 2, 1])], opset)


def test_scan_below_8_is_a_loop_over_the_sequence() -> None:
    # Axis 1 read backwards: slice T - 1 - i Gathered along axis 1; the body as the model gave it (its
    # Unsqueeze-13 by an outer Constant), taken down to 7 in the Loop.
    model = _scan_reversed()
    converted = lowerer.convert(model, target_opset=7).model
    check_model_full(converted)
    assert [n.op_type for n in converted.graph.node].count("Loop") == 1
    _same(model, converted, _feeds({"acc0": [2], "x": [2, 5]}))


def test_scan_below_8_with_reversed_outputs_is_refused() -> None:
    model = _scan_reversed()
    scan = model.graph.node[1]
    scan.attribute.append(helper.make_attribute("scan_output_directions", [1]))
    with pytest.raises(ConversionError, match=r"scan_output_directions=\[1\]; the Loop"):
        lowerer.convert(model, target_opset=7)
