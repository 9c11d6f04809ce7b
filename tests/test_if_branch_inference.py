"""If-11+ below 11 whose branches state no output shapes: the shapes inferred with the outer scope's facts.

If-1 needs both branches to yield the same shape (onnx's inference for If-1 merges them, and fails on
two different static sizes). The branches' outputs state no shape here; each branch is inferred on its
own, its outer values typed from the If's scope (named dims by name) and small constants valued. Equal
static sizes, or the same named dim of the model, let the If be relabelled; the original and the result
run in onnxruntime on tie-heavy inputs, both conditions, and must be equal bit for bit. Shapes not known
equal are refused, naming both.
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

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _branch(nodes: list[onnx.NodeProto], name: str, outputs: list[str]) -> onnx.GraphProto:
    """A branch whose outputs state their element type and no shape (as exporters often write them)."""
    return helper.make_graph(nodes, name, [], [value_info(o, F, None) for o in outputs])


def _feeds(shapes: dict[str, list[int]], seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    per_input = {name: tie_inputs(shape, np.dtype(np.float32), rng) for name, shape in shapes.items()}
    count = min(len(v) for v in per_input.values())
    return [{**{k: v[i] for k, v in per_input.items()}, "c": np.array(c)} for i in range(count) for c in (True, False)]


def _check_same(model: onnx.ModelProto, target: int, feeds: list[dict[str, np.ndarray]]) -> onnx.ModelProto:
    converted = lowerer.convert(model, target_opset=target).model
    check_model_full(converted)
    assert converted.opset_import[0].version == target
    assert [n.op_type for n in converted.graph.node].count("If") == [n.op_type for n in model.graph.node].count("If")
    for got, want in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        result = compare(got, want)
        assert result.same and result.exact, result.detail
    return converted


@pytest.mark.parametrize("target", [10, 9, 7])
def test_unstated_branch_shapes_from_outer_named_dims(target: int) -> None:
    """Two outputs per branch, read from ``x`` of ``[n, 3]`` and a constant bias: ``[n, 3]`` both ways."""
    bias = numpy_helper.from_array(np.array([0.5, -1.0, 2.0], dtype=np.float32), "bias")
    then_b = _branch([helper.make_node("Relu", ["x"], ["t0"]), helper.make_node("Add", ["x", "bias"], ["t1"])],
                     "then", ["t0", "t1"])
    else_b = _branch([helper.make_node("Neg", ["x"], ["e0"]), helper.make_node("Mul", ["x", "bias"], ["e1"])],
                     "else", ["e0", "e1"])
    node = helper.make_node("If", ["c"], ["y0", "y1"], then_branch=then_b, else_branch=else_b, name="branchy")
    model = make_model([node], [value_info("x", F, ["n", 3]), value_info("c", B, [])],
                       [value_info("y0", F, ["n", 3]), value_info("y1", F, ["n", 3])], 13, initializers=[bias])
    check_model_full(model)
    _check_same(model, target, _feeds({"x": [4, 3]}))


def test_unstated_branch_shapes_from_constant_shapes() -> None:
    """A Reshape to an outer constant shape, and a Transpose of another: ``[3, 4]`` both ways (data propagation)."""
    s34 = numpy_helper.from_array(np.array([3, -1], dtype=np.int64), "s34")
    s43 = numpy_helper.from_array(np.array([4, 3], dtype=np.int64), "s43")
    then_b = _branch([helper.make_node("Reshape", ["x", "s34"], ["t"])], "then", ["t"])
    else_b = _branch([helper.make_node("Reshape", ["x", "s43"], ["r"]),
                      helper.make_node("Transpose", ["r"], ["e"], perm=[1, 0])], "else", ["e"])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)
    model = make_model([node], [value_info("x", F, [2, 6]), value_info("c", B, [])], [value_info("y", F, [3, 4])],
                       13, initializers=[s34, s43])
    check_model_full(model)
    _check_same(model, 9, _feeds({"x": [2, 6]}))


def test_if_in_a_loop_body_reads_the_body_input() -> None:
    """An If in a Loop body, its branches reading the body's loop-carried value (stated ``[2, 3]``) and ``x``."""
    then_b = _branch([helper.make_node("Add", ["v_in", "x"], ["t"])], "then", ["t"])
    else_b = _branch([helper.make_node("Sub", ["v_in", "x"], ["e"])], "else", ["e"])
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]),
         helper.make_node("If", ["c"], ["v_out"], then_branch=then_b, else_branch=else_b)],
        "body", [value_info("i", I64, []), value_info("c_in", B, []), value_info("v_in", F, [2, 3])],
        [value_info("c_out", B, []), value_info("v_out", F, None)])
    loop = helper.make_node("Loop", ["trip", "keep", "x"], ["v"], body=body)
    model = make_model([loop], [value_info("x", F, [2, 3]), value_info("c", B, []), value_info("trip", I64, []),
                                value_info("keep", B, [])], [value_info("v", F, [2, 3])], 13)
    check_model_full(model)
    feeds = [{**f, "trip": np.array(3, dtype=np.int64), "keep": np.array(True)} for f in _feeds({"x": [2, 3]})]
    converted = _check_same(model, 10, feeds)
    assert converted.graph.node[0].attribute[0].g.node[1].op_type == "If"


def test_different_named_dims_refused() -> None:
    """``[n, 3]`` against ``[m, 3]``: not known equal; refused naming both shapes."""
    then_b = _branch([helper.make_node("Relu", ["x"], ["t"])], "then", ["t"])
    else_b = _branch([helper.make_node("Neg", ["z"], ["e"])], "else", ["e"])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)
    model = make_model([node], [value_info("x", F, ["n", 3]), value_info("z", F, ["m", 3]), value_info("c", B, [])],
                       [value_info("y", F, [None, 3])], 13)
    with pytest.raises(ConversionError, match=r"If-1 needs both branches to yield the same shape .*output 't' / 'e' "
                                              r"is neither stated nor inferred to \(then: \[n, 3\], else: \[m, 3\]\)"):
        lowerer.convert(model, target_opset=10)
    assert lowerer.convert(model, target_opset=11).model.opset_import[0].version == 11


def test_run_time_shape_refused() -> None:
    """A Reshape to a shape fed at run time: no rank known, refused ("no shape")."""
    then_b = _branch([helper.make_node("Reshape", ["x", "s"], ["t"])], "then", ["t"])
    else_b = _branch([helper.make_node("Neg", ["x"], ["e"])], "else", ["e"])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)
    model = make_model([node], [value_info("x", F, [2, 3]), value_info("s", I64, [2]), value_info("c", B, [])],
                       [value_info("y", F, [None, None])], 13)
    with pytest.raises(ConversionError, match=r"then: (no shape|\[\?, \?\]), else: \[2, 3\]"):
        lowerer.convert(model, target_opset=10)
