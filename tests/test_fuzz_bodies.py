"""Fuzz: normalization ops expanded and specialized at their call site, against the original in onnxruntime.

LayerNormalization, RMSNormalization and GroupNormalization with random ranks, axes, static and
named dims and targets; the converted model runs on inputs whose named dims take random sizes,
0 included where the original runs on them (onnxruntime runs GroupNormalization's body, which fails
on an empty batch, so its empty cases are skipped: the guards the named dims of made values drop
are tested by rule in ``test_made_shapes.py``). Shapes must be equal; float outputs are judged by the
expansion's ulp budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from _compare import compare
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.verification.compare import EXPANSION_ULPS

BUDGET = float(EXPANSION_ULPS[np.dtype(np.float32)])


def _weights(name: str, shape: list[int], low: float, high: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.linspace(low, high, int(np.prod(shape))).reshape(shape).astype(np.float32), name)


@st.composite
def cases(draw: Any) -> tuple[onnx.ModelProto, list[int], list[int | str]]:
    op = draw(st.sampled_from(["LayerNormalization", "RMSNormalization", "GroupNormalization"]))
    rank = draw(st.integers(3 if op == "GroupNormalization" else 2, 4))
    dims = [draw(st.sampled_from([1, 2, 3])) for _ in range(rank)]
    if op == "GroupNormalization":
        dims[1] = 4
    named: list[int | str] = [d if (op == "GroupNormalization" and i == 1) or draw(st.booleans()) else f"d{i}"
                              for i, d in enumerate(dims)]
    axis = draw(st.integers(-rank, rank - 1))
    trailing = dims[axis:]
    if op == "LayerNormalization":
        node = helper.make_node(op, ["X", "S", "B"], ["Y"], axis=axis)
        inits, opset = [_weights("S", trailing, 0.5, 1.5), _weights("B", trailing, -1, 1)], 17
    elif op == "RMSNormalization":
        node = helper.make_node(op, ["X", "S"], ["Y"], axis=axis)
        inits, opset = [_weights("S", trailing, 0.5, 1.5)], 23
    else:
        node = helper.make_node(op, ["X", "S", "B"], ["Y"], num_groups=draw(st.sampled_from([1, 2, 4])))
        inits, opset = [_weights("S", [4], 0.5, 1.5), _weights("B", [4], -1, 1)], 21
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, named)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, named)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), dims, named


def _run(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[Any]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feed))


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=cases(), target=st.sampled_from([7, 9, 11, 13, 17]), sizes=st.lists(st.sampled_from([0, 1, 2, 3]),
                                                                               min_size=4, max_size=4))
def test_expanded_normalizations_match_the_original(case: tuple[onnx.ModelProto, list[int], list[int | str]],
                                                     target: int, sizes: list[int]) -> None:
    model, dims, named = case
    try:
        converted = lowerer.convert(model, target_opset=target, verify=False).model
    except lowerer.LowererError:
        return  # refused in one line: never a wrong model
    for shape in (dims, [d if isinstance(n, int) else s for d, n, s in zip(dims, named, sizes, strict=False)]):
        feed = {"X": np.random.default_rng(sum(shape)).integers(-3, 4, size=shape).astype(np.float32)}
        try:
            want = _run(model, feed)
        except Exception:  # the original refuses that input (scale not broadcastable, an empty normalized axis)
            continue
        got = _run(converted, feed)
        assert [g.shape for g in got] == [w.shape for w in want]
        compare(got, want, max_ulp=BUDGET)
