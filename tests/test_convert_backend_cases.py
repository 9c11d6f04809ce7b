"""The ONNX backend node tests of Hardmax, Softmax, LogSoftmax, ArgMax and ArgMin through every target opset.

Each case (``onnx.backend.test.case.node``: model + inputs + expected outputs, all opset 13) is
converted to every default-domain opset from 1 to the newest onnx knows, run in onnxruntime, and
compared with the expected outputs: exactly for Hardmax/ArgMax/ArgMin; for Softmax/LogSoftmax
exactly where ORT reproduces the numpy-computed expectation, else within the case's own
rtol/atol (the expectation is numpy in float32, ORT's exp differs in the last bits). The converted
model must also equal the original's ORT output exactly, and pass the full checker.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import pytest
from _convert_helpers import check_model_full, ort_run

import lowerer

OPS = {"Hardmax": "hardmax", "Softmax": "softmax", "LogSoftmax": "logsoftmax", "ArgMax": "argmax",
       "ArgMin": "argmin"}
TARGETS = list(range(1, onnx.defs.onnx_opset_version() + 1))


def _collect() -> list:
    """The backend test cases of the owned ops (importing a case module runs its exports once)."""
    import onnx.backend.test.case.node as node_cases

    node_cases._TargetOpType = None
    for module in OPS.values():
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    return [c for c in node_cases._NodeTestCases
            if c.model is not None and [n.op_type for n in c.model.graph.node] in ([op] for op in OPS)
            and c.name.startswith(tuple(f"test_{m}_" for m in OPS.values()))]


CASES = _collect()


def test_cases_were_collected() -> None:
    counts = {op: sum(c.model.graph.node[0].op_type == op for c in CASES) for op in OPS}
    assert counts == {"Hardmax": 7, "Softmax": 7, "LogSoftmax": 7, "ArgMax": 16, "ArgMin": 16}, counts


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backend_case_through_every_opset(case) -> None:
    model = case.model
    op = model.graph.node[0].op_type
    names = [i.name for i in model.graph.input]
    (inputs, expected), = case.data_sets
    feeds = [dict(zip(names, inputs, strict=True))]
    original = ort_run(model, feeds)[0]
    inexact = []
    for target in TARGETS:
        converted = lowerer.convert(model, target_opset=target, verify=False).model
        check_model_full(converted)
        got = ort_run(converted, feeds)[0]
        for actual, want, orig in zip(got, expected, original, strict=True):
            assert actual.dtype == want.dtype and actual.shape == want.shape, target
            assert np.array_equal(actual, orig), (target, "differs from the original in ORT")
            if op in ("Hardmax", "ArgMax", "ArgMin"):
                assert np.array_equal(actual, want), target
            elif not np.array_equal(actual, want):
                inexact.append(target)
                np.testing.assert_allclose(actual, want, rtol=case.rtol, atol=case.atol)
    if op in ("Hardmax", "ArgMax", "ArgMin"):
        assert not inexact
    else:
        # Bit-exactness against numpy is not a property ORT has; what must hold is that every
        # target gives the same numbers (checked above against the original) — so either all or
        # none of the targets match the expectation exactly.
        assert inexact in ([], TARGETS), inexact
