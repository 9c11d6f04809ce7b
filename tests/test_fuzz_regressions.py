"""Minimized cases the fuzzer found.

Fixed ones pass; the open ones (owned by other parts of lowerer) are ``xfail`` with the reason,
so that they turn into XPASS once fixed. The fixed regressions of the fuzz campaign that need
more setup live beside their topic: ``test_functions_subgraphs.py`` (attribute references in
functions, IR-3 subgraph constants) and ``test_external_data.py`` (external ``axes`` constants,
hard links).
"""

from __future__ import annotations

import _fuzz_oracle as oracle
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer

F = TensorProto.FLOAT
_SO = ort.SessionOptions()
_SO.log_severity_level = 3


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_if_branch_constant_at_ir3_found_by_fuzzer() -> None:
    """Hardmax-1 decomposed to opset 1 inside an If of an IR-3 model: the identity table is an
    initializer of the branch, which IR 3 only allows as a (fixed) graph input; IR 4 is written."""
    branch = helper.make_graph([helper.make_node("Hardmax", ["x"], ["t"], name="hm", axis=0)], "b", [],
                               [helper.make_tensor_value_info("t", F, [1])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="if1", then_branch=branch, else_branch=branch)], "g",
        [helper.make_tensor_value_info("x", F, [1]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)], ir_version=3)
    out = lowerer.convert(model, target_opset=1, decompose=["hardmax"]).model
    onnx.checker.check_model(out, full_check=True)
    assert out.ir_version >= 4
    x = np.array([0.5], dtype=np.float32)
    np.testing.assert_array_equal(_run(out, {"x": x, "c": np.array(True)})[0],
                                  oracle.coerced_family("Hardmax", x, 0, 1))


def _hardmax_dynamic(opset: int, axis: int) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], name="hm", axis=axis)], "g",
                              [helper.make_tensor_value_info("x", F, ["n", 1])],
                              [helper.make_tensor_value_info("y", F, ["n", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.mark.parametrize(("source", "target"), [(1, 9), (1, 13), (13, 11)])
def test_hardmax_decomposition_on_dynamically_empty_input(source: int, target: int) -> None:
    """Found by the fuzzer: ArgMax fails on an empty input; the decomposition now passes it through."""
    model = _hardmax_dynamic(source, 0)  # Hardmax-1: one row of n values; -13: along n; empty when n == 0
    out = lowerer.convert(model, target_opset=target, decompose=["hardmax"]).model
    x = np.zeros((0, 1), dtype=np.float32)
    got = _run(out, {"x": x})[0]
    assert got.shape == (0, 1)
    x = np.array([[1.0], [3.0], [3.0]], dtype=np.float32)
    np.testing.assert_array_equal(_run(out, {"x": x})[0],
                                  oracle.coerced_family("Hardmax", x, 0, 13 if source >= 13 else 1))


def test_globalmaxpool_decomposition_verifies_on_minus_inf_windows() -> None:
    """Found by the fuzzer: onnxruntime's GlobalMaxPool starts from -FLT_MAX, so a window of only
    -inf gives -3.4e38 where ReduceMax (and the spec) give -inf; verification must not fail the
    (correct) decomposition on it."""
    graph = helper.make_graph([helper.make_node("GlobalMaxPool", ["x"], ["y"], name="gmp")], "g",
                              [helper.make_tensor_value_info("x", F, [2, 2, 2])],
                              [helper.make_tensor_value_info("y", F, [2, 2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    out = lowerer.convert(model, decompose=["globalmaxpool"]).model
    x = np.full((2, 2, 2), -np.inf, dtype=np.float32)
    np.testing.assert_array_equal(_run(out, {"x": x})[0], np.full((2, 2, 1), -np.inf, dtype=np.float32))
