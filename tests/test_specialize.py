"""Function bodies specialized at their call site (``lowerer.steps.specialize``).

What the call fixes (ranks, static dims, attributes, constant inputs) is folded before a body goes
down, so axes computed from ``Shape``/``Size`` become constants and the body reaches opsets that need
them as attributes. Every conversion here is run before and after in onnxruntime and compared: the
expansion's float results against the expansion's ulp budget, everything else exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from _compare import compare, ort_session
from _node_cases import classify_case, load_cases
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.verification.compare import EXPANSION_ULPS

BUDGET = float(EXPANSION_ULPS[np.dtype(np.float32)]) if isinstance(EXPANSION_ULPS, dict) else 8.0


def _layer_norm_model(x_shape: list[Any], axis: int, scale_shape: list[int], opset: int = 17,
                      outputs: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(scale_shape).astype(np.float32), "S"),
             numpy_helper.from_array(rng.standard_normal(scale_shape).astype(np.float32), "B")]
    names = ["Y", "Mean", "InvStdDev"][:outputs]
    node = helper.make_node("LayerNormalization", ["X", "S", "B"], names, axis=axis, epsilon=1e-5)
    axis = axis + len(x_shape) if axis < 0 else axis
    shapes = [x_shape, x_shape[:axis] + [1] * (len(x_shape) - axis), x_shape[:axis] + [1] * (len(x_shape) - axis)]
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
                               for n, shape in zip(names, shapes, strict=False)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _feeds(shape: list[int]) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    ties = rng.integers(-3, 4, size=shape).astype(np.float32)
    equal_rows = np.full(shape, 2.0, dtype=np.float32)
    return [{"X": rng.standard_normal(shape).astype(np.float32)}, {"X": ties}, {"X": equal_rows}]


def _same_outputs(original: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                  max_ulp: float) -> None:
    before, after = ort_session(original), ort_session(converted)
    for feed in feeds:
        compare(after.run(None, feed), before.run(None, feed), max_ulp=max_ulp)


@pytest.mark.parametrize("target", [13, 11, 9, 7])
def test_layer_norm_with_static_hidden_dim_has_no_if(target: int) -> None:
    model = _layer_norm_model(["batch", "seq", 8], -1, [8])
    result = lowerer.convert(model, target_opset=target)
    ops = [n.op_type for n in result.model.graph.node]
    assert "If" not in ops and "Reshape" not in ops and "Flatten" not in ops, ops
    assert not [n for n in ops if n in ("Shape", "Size", "Range")], ops  # the rank-derived values folded
    _same_outputs(model, result.model, _feeds([2, 3, 8]), BUDGET)
    _same_outputs(model, result.model, [{"X": np.zeros([0, 3, 8], np.float32)}], 0.0)  # empty batch


def test_layer_norm_over_two_axes_with_mean_and_inv_std_dev() -> None:
    model = _layer_norm_model(["batch", 4, 8], -2, [4, 8], outputs=3)
    result = lowerer.convert(model, target_opset=11)
    ops = [n.op_type for n in result.model.graph.node]
    assert "If" not in ops and "Flatten" not in ops, ops
    _same_outputs(model, result.model, _feeds([3, 4, 8]), BUDGET)


def test_layer_norm_with_scale_laid_out_otherwise_keeps_the_flattening_body() -> None:
    # Scale [1, 8] for X [batch, seq, 8] normalized over the last axis: not laid out like X's trailing
    # dims, so the body stays as onnx writes it (flatten to 2-D, reshape back), still exact at 13.
    model = _layer_norm_model(["batch", 3, 8], -1, [1, 8])
    result = lowerer.convert(model, target_opset=13)
    assert "Flatten" in [n.op_type for n in result.model.graph.node]
    _same_outputs(model, result.model, _feeds([2, 3, 8]), BUDGET)


@pytest.mark.parametrize("target", [17, 13, 11])
def test_rms_normalization_axes_fold_into_constants(target: int) -> None:
    rng = np.random.default_rng(2)
    scale = numpy_helper.from_array(rng.standard_normal([8]).astype(np.float32), "S")
    node = helper.make_node("RMSNormalization", ["X", "S"], ["Y"], axis=-1)
    graph = helper.make_graph([node], "rms", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["b", "s", 8])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["b", "s", 8])], [scale])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    result = lowerer.convert(model, target_opset=target)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Range" not in ops and "Size" not in ops, ops
    reduce = next(n for n in result.model.graph.node if n.op_type == "ReduceMean")
    if target < 18:
        assert [a.ints for a in reduce.attribute if a.name == "axes"] == [[2]]
    _same_outputs(model, result.model, _feeds([2, 3, 8]), BUDGET)


def test_if_with_a_folded_condition_is_replaced_by_its_branch() -> None:
    # A model-local function's body with an If on its input's rank: expanding a call of the op whose body
    # it is would fold it; here the fold is exercised directly on an instantiated body.
    from lowerer.steps.specialize import fold

    class _Facts:
        def symbols(self, name: str) -> Any:
            return [None, 4] if name == "X" else None

        def elem_type(self, name: str) -> Any:
            return TensorProto.FLOAT if name == "X" else None

        def add_node(self, node: Any, opset: int) -> None:
            pass

        def add_constant(self, name: str, value: Any, elem: int) -> None:
            pass

    class _Scope:
        graph = object()

    class _Em:
        facts, scope, constants = _Facts(), _Scope(), []

        def constant(self, name: str) -> Any:
            return None

        def fresh(self, hint: str) -> str:
            return hint + "_1"

    shape = helper.make_node("Shape", ["X"], ["s"])
    rank = helper.make_node("Size", ["s"], ["r"])
    two = helper.make_node("Constant", [], ["two"], value=numpy_helper.from_array(np.array(2, np.int64)))
    is_2d = helper.make_node("Equal", ["r", "two"], ["c"])
    then = helper.make_graph([helper.make_node("Neg", ["X"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Abs", ["X"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    branch = helper.make_node("If", ["c"], ["Y"], then_branch=then, else_branch=other)
    out = fold([shape, rank, two, is_2d, branch], _Em(), 17, {"Y"})  # type: ignore[arg-type]
    assert [(n.op_type, list(n.input), list(n.output)) for n in out] == [("Neg", ["X"], ["Y"])]


#: onnx node cases whose expansions needed the fold to go down, each to a target it reaches now.
CASES = [
    ("test_rms_normalization_3d_axis_negative_1_epsilon_expanded", 11),
    ("test_rms_normalization_4d_axis1_expanded", 13),
    ("test_layer_normalization_4d_axis_negative_2_expanded", 9),
    ("test_layer_normalization_3d_axis1_epsilon", 7),
    ("test_reduce_l2_do_not_keepdims_example_expanded", 13),
    ("test_attention_4d_expanded", 17),
    ("test_sce_mean_3d", 13),
]


@pytest.mark.parametrize(("case_name", "target"), CASES)
def test_node_cases_reach_lower_opsets(case_name: str, target: int) -> None:
    (case,) = load_cases(f"^{case_name}$")
    (outcome,) = classify_case(case, [target], verify=True)
    assert outcome.status == "converted-ok", outcome
