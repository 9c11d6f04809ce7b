"""Checks that onnxruntime may abort run in a worker process: lowerer and its caller survive (issue 31, item 7).

onnxruntime 1.32 calls std::terminate on LSTM with batch 0 and on GRU with an empty X. The
per-rewrite check avoids those bindings; with the avoidance switched off (as a check that meets an
abort nobody foresaw would be) the abort kills only the worker, that input set is dropped and the
check goes on with the others.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.verification import check as check_module
from lowerer.verification.worker import OrtAbortedError, VerificationWorker, WorkerEngine

_FORCED = """
import sys
import lowerer.verification.check as c
c._AVOIDED_ABORTS.clear()  # the known-fatal binding is generated: only the worker can save the process
from lowerer.cli import main
sys.argv = ["lowerer", *sys.argv[1:]]
main()
"""


def _rnn_model(op: str, opset: int, hidden: int = 4, width: int = 3) -> onnx.ModelProto:
    """One LSTM or GRU node with a dynamic sequence and batch, and an explicit ``layout`` (so 14 -> 7 rewrites)."""
    gates = 4 if op == "LSTM" else 3
    rng = np.random.default_rng(0)
    w = helper.make_tensor("W", TensorProto.FLOAT, [1, gates * hidden, width],
                           rng.standard_normal(gates * hidden * width).astype(np.float32).tolist())
    r = helper.make_tensor("R", TensorProto.FLOAT, [1, gates * hidden, hidden],
                           rng.standard_normal(gates * hidden * hidden).astype(np.float32).tolist())
    node = helper.make_node(op, ["X", "W", "R"], ["Y", "Yh"], hidden_size=hidden, layout=0)
    graph = helper.make_graph(
        [node], "rnn", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["seq", "batch", width])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["seq", 1, "batch", hidden]),
         helper.make_tensor_value_info("Yh", TensorProto.FLOAT, [1, "batch", hidden])], [w, r])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _equal_in_ort(a: onnx.ModelProto, b: onnx.ModelProto) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 3)).astype(np.float32)
    for want, got in zip(ort.InferenceSession(a.SerializeToString()).run(None, {"X": x}),
                         ort.InferenceSession(b.SerializeToString()).run(None, {"X": x}), strict=True):
        np.testing.assert_array_equal(want, got)


@pytest.mark.parametrize(("op", "opset", "target"), [("LSTM", 14, 13), ("GRU", 14, 13), ("LSTM", 20, 11),
                                                     ("GRU", 20, 11)])
def test_rnn_with_dynamic_batch_converts_through_the_cli(tmp_path: Path, op: str, opset: int, target: int) -> None:
    src = tmp_path / "in.onnx"
    onnx.save(_rnn_model(op, opset), src)
    done = subprocess.run([sys.executable, "-m", "lowerer", "convert", str(src), "-o", str(tmp_path / "out.onnx"),
                           "--target-opset", str(target)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    _equal_in_ort(onnx.load(src), onnx.load(tmp_path / "out.onnx"))


@pytest.mark.parametrize("op", ["LSTM", "GRU"])
def test_an_abort_in_a_check_is_survived_through_the_cli(tmp_path: Path, op: str) -> None:
    src = tmp_path / "in.onnx"
    onnx.save(_rnn_model(op, 14), src)
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-c", _FORCED, "convert", str(src), "-o", str(tmp_path / "out.onnx"),
                           "--target-opset", "13", "--report", str(report)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode in (0, 1, 2), (done.returncode, done.stderr)  # never a signal
    assert done.returncode == 0, done.stderr
    check = json.loads(report.read_text())["checks"][0]
    assert check["status"] == "verified"
    skipped = " ".join(check["details"]["skipped"])
    assert f"onnxruntime aborted running {op}-14 with" in skipped and "SIGABRT" in skipped
    assert len(check["details"]["input_sets"]) >= 6  # the other input sets still ran


def test_an_abort_in_a_check_does_not_kill_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(check_module, "_AVOIDED_ABORTS", set())
    model = _rnn_model("LSTM", 14)
    result = lowerer.convert(model, target_opset=13)  # this process survives the abort
    (record,) = result.report.rewrites
    assert record.status == "verified"
    assert any("onnxruntime aborted running LSTM-14 with batch 0" in s for s in record.details["skipped"])
    assert result.report.verification["worker"]["aborts"] >= 1
    _equal_in_ort(model, result.model)


def test_conversions_without_risky_ops_start_no_worker() -> None:
    node = helper.make_node("ReduceMax", ["x"], ["y"], axes=[1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    result = lowerer.convert(model, target_opset=18)
    assert result.report.rewrites and result.report.rewrites[0].status == "verified"
    assert "worker" not in result.report.verification


def test_the_worker_restarts_after_an_abort_and_makes_its_sessions_again() -> None:
    worker = VerificationWorker()
    try:
        lstm = WorkerEngine(worker, _rnn_model("LSTM", 14).SerializeToString(), {}, ["CPUExecutionProvider"],
                            "CPUExecutionProvider")
        lstm.create()
        good = lstm.run({"X": np.ones((2, 2, 3), np.float32)})
        with pytest.raises(OrtAbortedError, match="SIGABRT"):
            lstm.run({"X": np.ones((2, 0, 3), np.float32)})
        assert not worker.alive
        again = lstm.run({"X": np.ones((2, 2, 3), np.float32)})  # a fresh child, the session made there again
        np.testing.assert_array_equal(good[0], again[0])
        assert (worker.starts, worker.aborts) == (2, 1)
    finally:
        worker.close()
    assert not worker.alive
