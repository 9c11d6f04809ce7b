"""Symbolic dims of values a conversion made (``lowerer.facts.made_shapes``), and what they buy.

Each rule names a dynamic dim only where it provably equals that named dim; a wrong name would let
a Reshape below 14 drop its empty-input guard, so the conversions at the end are run on empty inputs
in onnxruntime and compared with the original.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from _compare import compare, ort_session
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.facts.made_shapes import made_symbols
from lowerer.verification.compare import EXPANSION_ULPS

SYMBOLS: dict[str, list[Any]] = {"x": ["N", 8, 4, 4], "m": ["N", 2, 1], "one": [1, 8, 1], "idx": ["B", "S"],
                                 "cache": [None, 8], "w": [None, None, 4]}
ENTRIES: dict[str, list[Any]] = {"to3d": [("x", 0), 2, -1], "zeros": [0, 0, -1], "ax": [2], "ex": [("x", 0), 8, 4]}


def _named(op: str, inputs: list[str], dims: list[int | None], **attrs: Any) -> list[Any]:
    node = helper.make_node(op, inputs, ["out"], **attrs)
    return made_symbols(node, dims, SYMBOLS.get, ENTRIES.get)


def test_each_rule_names_only_what_it_proves() -> None:
    assert _named("Reshape", ["x", "to3d"], [None, 2, None]) == ["N", 2, None]
    assert _named("Reshape", ["m", "zeros"], [None, None, None]) == ["N", 2, None]  # 0 copies the data's dim
    assert _named("Reshape", ["m", "zeros"], [None, None, None], allowzero=1) == [0, 0, None]  # a 0 is a 0
    assert _named("Mul", ["one", "m"], [None, 8, 1]) == ["N", 8, 1]  # a 1 defers to the other side
    assert _named("Add", ["m", "m"], [None, 2, 1]) == ["N", 2, 1]
    assert _named("Sub", ["m", "w"], [None, None, 4]) == [None, None, 4]  # one side unknown: not named
    assert _named("ReduceMean", ["x", "ax"], [None, 8, 1, 4]) == ["N", 8, 1, 4]
    assert _named("ReduceSum", ["x"], [None, 8, 4], axes=[2], keepdims=0) == ["N", 8, 4]
    assert _named("Transpose", ["x"], [None, 4, 8, 4], perm=[0, 2, 1, 3]) == ["N", 4, 8, 4]
    assert _named("Gather", ["cache", "idx"], [None, None, 8]) == ["B", "S", 8]
    assert _named("Concat", ["x", "x"], [None, 8, 4, 8], axis=-1) == ["N", 8, 4, 8]
    assert _named("Expand", ["one", "ex"], [None, 8, 4]) == ["N", 8, 4]
    assert _named("Unsqueeze", ["m", "ax"], [None, 2, 1, 1]) == ["N", 2, 1, 1]
    assert _named("Softmax", ["m"], [None, 2, 1]) == [None, 2, 1]  # not a rule: as inferred


def _group_norm(dims: list[Any]) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.linspace(0.5, 1.5, 8).astype(np.float32), "s"),
             numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "b")]
    node = helper.make_node("GroupNormalization", ["X", "s", "b"], ["Y"], num_groups=2, name="gn")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, dims)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("target", [13, 9, 7])
def test_group_norm_with_a_dynamic_batch_goes_down_without_if(target: int) -> None:
    model = _group_norm(["N", 8, 4, 4])
    out = lowerer.convert(model, target_opset=target).model
    assert "If" not in [n.op_type for n in out.graph.node]
    rng = np.random.default_rng(3)
    before, after = ort_session(model), ort_session(out)
    budget = float(EXPANSION_ULPS[np.dtype(np.float32)])
    # (An empty batch fails in onnxruntime on both sides: the body's Reshape to [0, 0, -1] of no elements.)
    for n in (2, 1):
        feed = {"X": rng.integers(-3, 4, size=(n, 8, 4, 4)).astype(np.float32)}
        compare(after.run(None, feed), before.run(None, feed), max_ulp=budget)


def test_group_norm_with_dynamic_spatial_dims_keeps_its_guard() -> None:
    """An empty H would copy a non-zero dim under Reshape-13's rule: the exact (static) guard stays."""
    model = _group_norm(["N", 8, "H", 4])
    out = lowerer.convert(model, target_opset=13).model
    ops = [n.op_type for n in out.graph.node]
    assert "If" not in ops and "Expand" in ops
    feed = {"X": np.random.default_rng(4).integers(-3, 4, size=(2, 8, 3, 4)).astype(np.float32)}
    compare(ort_session(out).run(None, feed), ort_session(model).run(None, feed),
            max_ulp=float(EXPANSION_ULPS[np.dtype(np.float32)]))
