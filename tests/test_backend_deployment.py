"""The deployment check: the converted model run on the backend's own runtime and compared with onnxruntime CPU.

The witness machinery is tested on onnxruntime's CPU provider (always there), a witness made to
depart, and a witness that dies; OpenVINO itself where it is installed (the test extra installs it,
so CI runs these): ``--for openvino`` runs the result on OpenVINO and says so, and a deliberately wrong
profile (the entry that fixes Softmax-11 on a non-last axis removed) makes it exit 1 naming the output.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.backends import deployment, profile
from lowerer.backends.witnesses import Ran, Witness, WitnessError
from lowerer.core.errors import VerificationError
from lowerer.verification.graph_inputs import FeedSet

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "example_opset11.onnx"
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
CPU_WITNESS = Witness("onnxruntime:CPUExecutionProvider", "cpu")


def _softmax_model(opset: int = 11, axis: int = 1) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 5])
    node = helper.make_node("Softmax", ["x"], ["y"], axis=axis, name="soft")
    graph = helper.make_graph([node], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


@pytest.fixture
def cpu_witness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every profile's witness is onnxruntime's CPU provider (the runtime lowerer verifies on)."""
    monkeypatch.setattr(deployment, "witness_for", lambda p: (CPU_WITNESS, ""))


def test_witness_runs_sets_in_a_worker() -> None:
    model = _softmax_model()
    sets = [{"x": np.full((n, 4, 5), v, np.float32)} for n, v in ((1, 0.0), (3, 2.0))]
    out = CPU_WITNESS.run_sets(model, sets)
    assert [o[0].shape for o in out] == [(1, 4, 5), (3, 4, 5)]
    assert np.allclose(out[0][0], 1 / 20)


def test_equal_on_the_witness_is_recorded(cpu_witness: None) -> None:
    result = lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")
    record = result.report.backend
    assert record is not None and record["deployment"]["status"] == "equal"
    assert "ran on onnxruntime cpu CPUExecutionProvider" in record["deployment"]["reason"]
    assert record["deployment"]["input_sets"][-1].startswith("ties")


def _softmax_and_gather() -> onnx.ModelProto:
    """Softmax-11 on axis 1 (OpenVINO 2024.0's profile names it) beside a Gather of a table of 4 by the input ``i``."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5]),
              helper.make_tensor_value_info("i", TensorProto.INT64, [2])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 5]),
               helper.make_tensor_value_info("g", TensorProto.FLOAT, [2])]
    table = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "table")
    nodes = [helper.make_node("Softmax", ["x"], ["y"], axis=1, name="soft"),
             helper.make_node("Gather", ["table", "i"], ["g"], name="pick")]
    graph = helper.make_graph(nodes, "g", inputs, outputs, [table])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


@pytest.mark.parametrize("valid", [2, 0])
def test_input_sets_the_model_rejects_are_left_out_and_said(cpu_witness: None, monkeypatch: pytest.MonkeyPatch,
                                                           valid: int) -> None:
    """Sets onnxruntime cannot run the original on (an index out of range) are left out, said; none left: not run."""
    x = np.random.default_rng(0).normal(size=(2, 4, 5)).astype(np.float32)
    sets = [FeedSet(f"set{k}", {"x": x, "i": np.array([0, 3] if k < valid else [1, 9], np.int64)})
            for k in range(3)]
    monkeypatch.setattr(deployment, "_input_sets", lambda *args: sets)
    record = lowerer.convert(_softmax_and_gather(), for_backend="openvino==2024.0").report.backend
    assert record is not None
    found = record["deployment"]
    if valid:
        assert found["status"] == "equal", found
        assert found["input_sets"] == ["set0", "set1"]
        assert "1 input set(s) left out, which it cannot run either, first set2" in found["reason"]
        assert "on 2 input set(s)" in found["reason"]
    else:
        assert found["status"] == "not-run", found
        assert "onnxruntime cannot run the model: input set set0" in found["reason"]


def _departing(monkeypatch: pytest.MonkeyPatch, model_departs: Callable[[onnx.ModelProto], bool] = lambda m: True,
               set_departs: Callable[[dict[str, np.ndarray]], bool] = lambda feeds: True) -> None:
    """The witness made to depart: 0.5 added to its float32 outputs, for the models and input sets named."""
    real = Witness.run_placed

    def departs(self: Witness, model: onnx.ModelProto, sets: list[dict[str, np.ndarray]], outputs: object = None,
                timeout: float = 0) -> Ran:
        got = real(self, model, sets, outputs).values  # type: ignore[arg-type]
        if not model_departs(model):
            return Ran(got)
        return Ran([[v + np.float32(0.5) if v.dtype == np.float32 else v for v in row] if set_departs(feeds) else row
                    for row, feeds in zip(got, sets, strict=True)])

    monkeypatch.setattr(Witness, "run_placed", departs)


def test_a_difference_beside_sets_onnxruntime_rejects_points_to_the_models_own_inputs(
        cpu_witness: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Generated sets onnxruntime cannot run either (an index out of range) hint that the inputs lie outside what
    the model takes: the failure line names --load-inputs and --input-shapes."""
    x = np.random.default_rng(0).normal(size=(2, 4, 5)).astype(np.float32)
    sets = [FeedSet(f"set{k}", {"x": x, "i": np.array([0, 3] if k < 2 else [1, 9], np.int64)}) for k in range(3)]
    monkeypatch.setattr(deployment, "_input_sets", lambda *args: sets)
    _departing(monkeypatch)
    with pytest.raises(VerificationError, match=r"onnxruntime could not run 1 of the generated input sets either: "
                                                 r".*--load-inputs IN\.npz, or --input-shapes NAME:DIMS\)$"):
        lowerer.convert(_softmax_and_gather(), for_backend="openvino==2024.0")


def test_a_departing_witness_fails_naming_output_and_node(cpu_witness: None, monkeypatch: pytest.MonkeyPatch) -> None:
    _departing(monkeypatch)
    with pytest.raises(VerificationError) as e:
        lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")
    text = str(e.value)
    assert "output 'y' differs" in text and "computes otherwise on onnxruntime cpu" in text
    assert "first node that departs" in text
    assert e.value.report is not None and e.value.report.backend["deployment"]["status"] == "different"


@pytest.mark.parametrize("original_departs", [True, False])
def test_a_difference_there_says_whether_the_original_gives_the_same(cpu_witness: None, monkeypatch: pytest.MonkeyPatch,
                                                                     original_departs: bool) -> None:
    """Exit 1 either way; the line says whose difference it is: the runtime's (the original gives the same there)
    or the conversion's (the original matches there)."""
    _departing(monkeypatch, lambda m: original_departs or m.opset_import[0].version != 11)
    with pytest.raises(VerificationError) as e:
        lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")
    text = str(e.value)
    assert "output 'y' differs" in text
    if original_departs:
        assert text.endswith("; the original model gives the same there: the runtime's own departure, in the model "
                             "as exported too")
    else:
        assert text.endswith("; the original model matches there: the difference comes with the conversion")


@pytest.mark.parametrize("original_fails", [True, False])
def test_a_special_set_the_runtime_cannot_run_for_the_original_either_is_left_out(
        cpu_witness: None, monkeypatch: pytest.MonkeyPatch, original_fails: bool) -> None:
    """A ±inf or NaN set the runtime cannot run (an index computed from ±inf, checked there) is left out and said
    where the original model fails on it there too; where the original runs it, the failure stands (exit 1)."""
    real = Witness.run_placed

    def fails_on_special(self: Witness, model: onnx.ModelProto, sets: list[dict[str, np.ndarray]],
                         outputs: object = None, timeout: float = 0) -> Ran:
        special = [k for k, s in enumerate(sets) if any(not np.isfinite(v).all() for v in s.values())]
        if special and (original_fails or model.opset_import[0].version == 13):
            raise WitnessError("run", self.label, "indices point to non-existing data", input_set=special[0])
        return real(self, model, sets, outputs)  # type: ignore[arg-type]

    monkeypatch.setattr(Witness, "run_placed", fails_on_special)
    if original_fails:
        record = lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0").report.backend
        assert record is not None and record["deployment"]["status"] == "equal", record["deployment"]
        assert "±inf or NaN input set(s) left out, which onnxruntime cpu CPUExecutionProvider cannot run for the " \
               "original model either, first inf" in record["deployment"]["reason"]
        assert not any(s.startswith(("inf", "-inf", "nan")) for s in record["deployment"]["input_sets"])
    else:
        with pytest.raises(VerificationError, match=r"cannot run the converted model \(input set (-?inf|nan).*the "
                                                     r"original model runs there"):
            lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")


@pytest.mark.parametrize("original_too", [True, False])
def test_an_all_equal_set_the_original_departs_on_too_is_recorded(cpu_witness: None, monkeypatch: pytest.MonkeyPatch,
                                                                  original_too: bool) -> None:
    """One value everywhere: normalizations divide rounding noise by a near-zero deviation, so a runtime rounding
    otherwise differs there beyond any budget. Recorded where the original model gives the same on the runtime;
    judged (exit 1) where only the converted one departs."""
    _departing(monkeypatch, lambda m: original_too or m.opset_import[0].version != 11,
               lambda feeds: all(np.unique(v).size == 1 for v in feeds.values()))
    if original_too:
        record = lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0").report.backend
        assert record is not None and record["deployment"]["status"] == "equal", record["deployment"]
        assert "input set all-equal (x: float32[1,4,5]): the original model gives the same on onnxruntime cpu " \
               "CPUExecutionProvider (the runtime's own rounding, amplified on one value everywhere" \
               in record["deployment"]["reason"]
    else:
        with pytest.raises(VerificationError, match=r"output 'y' differs .*input set all-equal"):
            lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")


def test_a_witness_that_dies_is_a_failure_not_a_signal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nkill -SEGV $$\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    dying = Witness("openvino", "2024.0.0", str(fake))
    with pytest.raises(WitnessError) as e:
        dying.run(_softmax_model(), {"x": np.zeros((1, 4, 5), np.float32)})
    assert e.value.stage == "crash" and "SIGSEGV" in str(e.value)
    monkeypatch.setattr(deployment, "witness_for", lambda p: (dying, ""))
    with pytest.raises(VerificationError, match=r"cannot run the converted model.*SIGSEGV"):
        lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")


@pytest.mark.parametrize("original_fails", [True, False])
def test_a_failure_there_says_whether_the_original_fails_too(cpu_witness: None, monkeypatch: pytest.MonkeyPatch,
                                                            original_fails: bool) -> None:
    """Exit 1 either way (the result does not run there); the line says whose failure it is: the runtime's or ours."""
    real = Witness.run_placed

    def fails(self: Witness, model: onnx.ModelProto, sets: object, outputs: object = None, timeout: float = 0) -> Ran:
        opset = model.opset_import[0].version
        if opset == 13 or original_fails:
            raise WitnessError("load" if opset == 11 else "compile", self.label, f"no kernel for Softmax-{opset}")
        return real(self, model, sets, outputs)  # type: ignore[arg-type]

    monkeypatch.setattr(Witness, "run_placed", fails)
    with pytest.raises(VerificationError) as e:
        lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")
    text = str(e.value)
    assert "cannot compile the converted model" in text and "no kernel for Softmax-13" in text
    if original_fails:
        assert "the original model fails there too (cannot load: no kernel for Softmax-11): the runtime's own" in text
    else:
        assert "the original model runs there: the failure comes with the conversion" in text
    assert e.value.report is not None and e.value.report.backend["deployment"]["status"] == "failed"


def test_not_installed_is_said_and_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deployment, "find_witness", lambda runtime: (None, f"{runtime} is not installed here"))
    result = lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0")
    record = result.report.backend
    assert record is not None and record["deployment"]["status"] == "not-run"
    assert "was not run on the backend" in record["deployment"]["reason"]


def test_no_verify_runs_no_deployment_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deployment, "witness_for", lambda p: pytest.fail("the check ran"))
    result = lowerer.convert(_softmax_model(), target_opset=13, for_backend="openvino==2024.0", verify=False)
    assert result.report.backend is not None and result.report.backend["deployment"] is None


def test_a_release_other_than_the_named_one_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deployment, "find_witness", lambda runtime: (Witness(runtime, "2026.4.1"), ""))
    witness, why = deployment.witness_for(profile.load_profile("openvino==2024.0"))
    assert witness is None and "is not openvino==2024.0" in why
    witness, _ = deployment.witness_for(profile.load_profile("openvino==2026.4"))
    assert witness is not None
    witness, _ = deployment.witness_for(profile.load_profile("openvino>=2025"))
    assert witness is not None


def test_unnamed_version_is_the_installed_release(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(profile, "installed_release", lambda runtime: ("2024.0.0", "OpenVINO 2024.0.0"))
    chosen = profile.load_profile("openvino")
    assert chosen.chosen == "the installed release (OpenVINO 2024.0.0)"
    assert chosen.loads is not None and chosen.loads.version <= "2024.0"
    monkeypatch.setattr(profile, "installed_release", lambda runtime: None)
    newest = profile.load_profile("openvino")
    assert "newest row" in newest.chosen and "not installed" in newest.chosen


def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lowerer", *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})}, check=False)


@pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed (the test extra installs it)")
def test_for_openvino_runs_on_openvino_and_says_so(tmp_path: Path) -> None:
    out, report = tmp_path / "out.onnx", tmp_path / "report.json"
    done = _run_cli("convert", str(EXAMPLE), "-o", str(out), "--for", "openvino", "--report", str(report))
    assert done.returncode == 0, done.stderr
    assert "deployment: ran on OpenVINO" in done.stderr
    record = json.loads(report.read_text())["summary"]["backend"] if "summary" in json.loads(report.read_text()) \
        else json.loads(report.read_text())["backend"]
    assert record["deployment"]["status"] == "equal"
    assert record["chosen"].startswith("the installed release (OpenVINO ")
    # the ±inf sets depart first at the example's Relu-6, whose NaN -> 0 on OpenVINO is measured and cited
    assert "the first node that departs, 'relu' (Relu-6), is one OpenVINO" in record["deployment"]["reason"]


@pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed (the test extra installs it)")
def test_a_pass_wrong_only_on_infinities_fails_on_openvino(monkeypatch: pytest.MonkeyPatch) -> None:
    """A later pass writing NaN where an input is ±inf: the -inf set is judged (no known departure covers it)."""
    from _mutant_checks import _inf_only
    from _mutants import after_convert, one_node

    model = one_node("Softmax", 11, {"axis": 1}, [2, 3, 4])
    right = lowerer.convert(model, for_backend="openvino").report.backend
    assert right is not None and right["deployment"]["status"] == "equal"
    after_convert(_inf_only(0))(monkeypatch)
    with pytest.raises(VerificationError) as e:
        lowerer.convert(model, for_backend="openvino")
    assert "output 'y' differs" in str(e.value) and "input set -inf" in str(e.value)


@pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed (the test extra installs it)")
def test_a_wrong_profile_entry_fails_on_openvino(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The profile without its entries: Softmax-11 on a non-last axis stays as it is, and OpenVINO computes it
    # with opset 13's meaning (measured on 2023.0 to 2026.4). The deployment check must refuse the result.
    real = profile.load_profile

    def stripped(spec: object) -> profile.Profile:
        return dataclasses.replace(real(spec), entries=())

    monkeypatch.setattr("lowerer.passes.options.load_profile", stripped, raising=False)
    monkeypatch.setattr(profile, "load_profile", stripped)
    with pytest.raises(VerificationError) as e:
        lowerer.convert(onnx.load(EXAMPLE), for_backend="openvino")
    assert "output 'soft' differs" in str(e.value)
    assert "Softmax-11" in str(e.value)
