"""No hidden narrowing (issue 31 item 6): a replacement computing below its original's float type fails.

onnxruntime's CPU provider hides a Softmax computed through float16 (it has no float16 Softmax, wraps it in
casts to float and removes the redundant Cast pair, even with ORT_DISABLE_ALL), so the numeric check
passes it; the static check over the emitted nodes does not. Casts that end where the original ends (a
Cast to float16 whose original outputs float16), widen, or leave floats are not narrowing.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _mutant_list import MUTANTS
from _mutants import run
from onnx import TensorProto as T
from onnx import helper
from onnx.reference import ReferenceEvaluator

from lowerer.verification.narrowing import hidden_narrowing, narrower


def _cast(x: str, y: str, to: int, name: str = "") -> onnx.NodeProto:
    return helper.make_node("Cast", [x], [y], name=name, to=to)


def _softmax_through(elem: int) -> list[onnx.NodeProto]:
    return [_cast("x", "xh", elem, "down"), helper.make_node("Softmax", ["xh"], ["yh"], axis=-1),
            _cast("yh", "y", T.FLOAT, "up")]


def test_the_order_of_float_types() -> None:
    assert narrower(T.FLOAT16, T.FLOAT) and narrower(T.BFLOAT16, T.FLOAT) and narrower(T.FLOAT, T.DOUBLE)
    assert narrower(T.FLOAT16, T.BFLOAT16) and narrower(T.BFLOAT16, T.FLOAT16)  # neither holds the other
    assert not narrower(T.FLOAT, T.FLOAT16) and not narrower(T.FLOAT, T.FLOAT)


@pytest.mark.parametrize("elem", [T.FLOAT16, T.BFLOAT16])
def test_softmax_through_a_narrower_type_is_named(elem: int) -> None:
    original = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    said = hidden_narrowing(original, _softmax_through(elem), {"x": T.FLOAT}, [], 13, 13)
    assert said is not None and "'down'" in said and "float to " in said and "float16" in said, said


def test_onnxruntime_hides_what_the_check_names() -> None:
    """The premise, measured: onnxruntime CPU gives the float32 result, onnx.reference the float16 one."""
    nodes = _softmax_through(T.FLOAT16)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    got = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    in_fp32 = np.exp(x - x.max(-1, keepdims=True))
    in_fp32 /= in_fp32.sum(-1, keepdims=True)
    by_spec = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert np.abs(got - in_fp32).max() < 1e-6  # onnxruntime: computed in float32, the casts gone
    assert np.abs(by_spec - in_fp32).max() > 1e-5  # onnx.reference: computed in float16


def test_argmax_through_float16_is_named() -> None:
    """No float output: the original's float inputs are the precision kept on that path."""
    original = helper.make_node("ArgMax", ["x"], ["y"], axis=1)
    nodes = [_cast("x", "xh", T.FLOAT16), helper.make_node("ArgMax", ["xh"], ["y"], axis=1)]
    said = hidden_narrowing(original, nodes, {"x": T.FLOAT}, [], 13, 13)
    assert said is not None and "writing 'xh'" in said


@pytest.mark.parametrize(("original", "nodes", "types"), [
    # a Cast to float16 whose original ends in float16 (Cast-19 saturate -> Cast-13)
    (helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT16), [_cast("x", "y", T.FLOAT16)], {"x": T.FLOAT}),
    # a bfloat16 Softmax computed in float and cast back: widening, then the original's own type
    (helper.make_node("Softmax", ["x"], ["y"], axis=-1),
     [_cast("x", "xf", T.FLOAT), helper.make_node("Softmax", ["xf"], ["yf"], axis=-1), _cast("yf", "y", T.BFLOAT16)],
     {"x": T.BFLOAT16}),
    # a Hardmax's one-hot mask cast from bool: not a float source
    (helper.make_node("Hardmax", ["x"], ["y"], axis=-1),
     [helper.make_node("ArgMax", ["x"], ["a"], axis=-1), helper.make_node("Equal", ["a", "a"], ["m"]),
      _cast("m", "y", T.FLOAT)], {"x": T.FLOAT}),
])
def test_casts_that_do_not_narrow_pass(original: onnx.NodeProto, nodes: list[onnx.NodeProto],
                                       types: dict[str, int]) -> None:
    assert hidden_narrowing(original, nodes, types, [], 13, 13) is None


def test_the_softmax_through_float16_mutant_is_killed_for_every_seed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    mutant = next(m for m in MUTANTS if m.name == "softmax-through-fp16")
    assert mutant.known_gap is None
    for seed in range(3):
        outcome = run(mutant, seed)
        assert outcome.killed and "failed verification on structure: the Cast writing" in outcome.how, outcome.how
