"""The probe suite (lowerer.cli.probes) and the measured profiles it wrote.

The suite runs against onnxruntime's CPU provider itself through a witness (always available): every
probe must be right there, since the reference is the same runtime; a probe whose model is wrong on
purpose must be reported wrong. The measured runs (lowerer/backends/measured/*.json) must parse, and
every row and entry of the profiles built from them must cite one.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

from lowerer.backends.probe_models import Probe, base_probes, make_model, ties
from lowerer.backends.runtimes import runtimes
from lowerer.backends.witnesses import Witness
from lowerer.cli.probes import compare, expansion_probes, run_probes

MEASURED = Path(__file__).resolve().parent.parent / "lowerer" / "backends" / "measured"
PROFILES = Path(__file__).resolve().parent.parent / "lowerer" / "backends"
CPU = Witness("onnxruntime:CPUExecutionProvider", ort.__version__)


@pytest.fixture(scope="module")
def cpu_results() -> list:
    probes = base_probes() + expansion_probes()
    return run_probes(CPU, probes)


def test_every_probe_is_right_on_onnxruntime_cpu(cpu_results: list) -> None:
    assert len(cpu_results) > 140
    bad = [(r.name, r.status, r.message) for r in cpu_results if r.status != "right"]
    assert bad == []


def test_the_mission_families_are_covered(cpu_results: list) -> None:
    names = {r.name for r in cpu_results}
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for opset in (1, 11, 13):
            assert f"{op}-{opset}-axis1" in names and f"{op}-{opset}-rows64" in names
    for op in ("ArgMax", "ArgMin"):
        for opset in (1, 11, 12, 13):
            assert f"{op}-{opset}-rows64" in names
    assert {"ReduceMean-18-axes-input-keepdims1", "ReduceMean-13-axes-attribute-keepdims1",
            "Shape-15-start1-end-1", "RMSNormalization-23-to18"} <= names


def _argmax_probe(select_last: int) -> Probe:
    x = ties((6, 64), 11)
    x[:, [0, 63]] = 9.0  # the maximum first and last in every row
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=1, select_last_index=select_last)
    return Probe(f"ArgMax-13-last{select_last}", "test", "ArgMax", make_model([node], [("x", 1, x.shape)],
                                                                             [("y", 7)], 13), {"x": x})


def test_a_wrong_model_is_reported_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runtime is handed the last-maximum model where the reference runs the first-maximum one."""
    right, wrong = _argmax_probe(0), _argmax_probe(1)
    from lowerer.cli import probes as module

    real = module.run_batch

    def swapped(witness: Witness, batch: list[Probe]) -> list:
        return real(witness, [Probe(p.name, p.group, p.tests, wrong.model, p.feeds) for p in batch])

    monkeypatch.setattr(module, "run_batch", swapped)
    (result,) = run_probes(CPU, [right])
    assert result.status == "wrong" and "6 of 6 values differ" in result.message


def test_a_failing_model_is_reported_failing() -> None:
    bad = _argmax_probe(0)
    model = bad.model
    model.graph.node[0].op_type = "ArgMaxx"  # not an op: onnxruntime refuses it, so no reference
    (result,) = run_probes(CPU, [Probe("broken", "test", "", model, bad.feeds)])
    assert result.status == "skipped" and "onnxruntime CPU cannot run it" in result.message


def test_compare_budgets() -> None:
    ref = [np.array([1.0, -2.0, 4.0], np.float32), np.array([1, 2], np.int64)]
    assert compare(ref, [ref[0] * (1 + 1e-7), ref[1]], 1e-5)[0]
    ok, worst, what = compare(ref, [ref[0] + np.float32(1e-3), ref[1]], 1e-5)
    assert not ok and worst == pytest.approx(2.5e-4, rel=1e-2) and "output 0" in what
    assert not compare(ref, [ref[0], np.array([1, 3])], 1e-5)[0]
    assert not compare(ref, [ref[0][:2], ref[1]], 1e-5)[0]
    nan = [np.array([np.nan, np.inf], np.float32)]
    assert compare(nan, [nan[0].copy()], 1e-5)[0]
    assert not compare(nan, [np.array([np.nan, -np.inf], np.float32)], 1e-5)[0]


def _measured() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(MEASURED.glob("*.json"))}


def test_measured_runs_parse() -> None:
    runs = _measured()
    assert {"openvino-2023.0.2.json", "openvino-2024.0.0.json", "openvino-2026.4.1.json"} <= set(runs)
    for name, run in runs.items():
        assert name == f"{run['runtime']}-{run['version']}.json"
        assert re.fullmatch(r"\d{4}-\d\d-\d\d", run["date"]) and run["command"].startswith("python -m lowerer")
        total = run["summary"]["total"]
        assert sum(total.values()) > 100 and total.get("right", 0) > 0  # the whole suite ran, and some of it right
        assert set(total) <= {"right", "wrong", "fails", "skipped"}
        assert all(r["status"] in ("right", "wrong", "fails", "skipped") for r in run["results"].values())


def _citations(text: str) -> set[str]:
    return set(re.findall(r"measured/([\w.+-]+\.json)", text))


#: The witnessed backends whose profiles are not all measured: rknn's rows before 2.5 are read in rknn-toolkit2's
#: documents (no release before 2.5 was run here); qnn's entries below 2 in onnxruntime's source (its own rows).
MEASURED_FROM: dict[str, str | None] = {"rknn": "2.5", "qnn": None}


@pytest.mark.parametrize("backend", sorted({b for r in runtimes().values() for b in r.backends
                                            if MEASURED_FROM.get(b, "0") is not None}))
def test_every_profile_row_and_entry_cites_a_measured_run(backend: str) -> None:
    """Every entry, and every row from the first measured release on (:data:`MEASURED_FROM`), cites a dated run."""
    runs = _measured()
    profile = json.loads((PROFILES / f"{backend}.json").read_text(encoding="utf-8"))
    first = tuple(int(p) for p in str(MEASURED_FROM.get(backend, "0")).split("."))
    rows = [r for r in profile["loads"] if tuple(int(p) for p in r["version"].split(".")) >= first]
    assert rows and profile["tolerance"]["source"]
    for item in [*rows, *profile["entries"]]:
        cited = _citations(item["source"])
        assert cited, item
        assert cited <= set(runs), cited - set(runs)
        for name in cited:  # the run's date is given with it
            assert runs[name]["date"] in item["source"], (name, item["source"])


def test_a_run_is_recorded_under_its_runtimes_name() -> None:
    """A mode of a runtime (onnxruntime-qnn:htp-only) is in the command, not the name; a provider keeps its own."""
    from lowerer.cli.probes import _record

    qnn = _record(Witness("onnxruntime-qnn:htp-only", "2.7.0"), [], "python -m lowerer.cli.probes", 1e-2)
    assert qnn["runtime"] == "onnxruntime-qnn" and qnn["version"] == "2.7.0"
    cuda = _record(Witness("onnxruntime:CUDAExecutionProvider", "1.32.0"), [], "python -m lowerer.cli.probes", 1e-5)
    assert cuda["runtime"] == "onnxruntime:CUDAExecutionProvider"
