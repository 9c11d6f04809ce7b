"""onnxruntime-qnn (``--for qnn``): the forms lowerer writes for it, and its witness.

CPU only: HardSwish's body is written ``Mul(HardSigmoid(X), X)`` (onnx's own order, ``Mul(X, hs)``
with the HardSigmoid named, is computed as ``X * X`` by onnxruntime-qnn 2.7); the deployment check of a
runtime judged on what lowerer changed (onnxruntime-qnn's ``JUDGES_CHANGES``), on onnxruntime's CPU
provider made to depart or fail: a failure or difference the original shares is recorded with exit 0,
one of lowerer's own output fails, and the nodes its CPU fallback took are said. Where onnxruntime-qnn
is installed (lowerer's Python or ``LOWERER_WITNESS_PYTHON``; skipped otherwise): the written body and
``mobilenet_v3_small`` at ``--target-opset 13`` run on its HTP simulator and match onnxruntime CPU on
the original within the fp16 budget.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.backends import deployment
from lowerer.backends.probe_models import LOWERED, Probe, base_probes
from lowerer.backends.runtimes import runtimes
from lowerer.backends.witnesses import Ran, Witness, WitnessError, find_witness
from lowerer.core.errors import VerificationError

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "fixtures" / "real"


def _hardswish(opset: int = 14) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    graph = helper.make_graph([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize("backend", [None, "qnn==2.7"])
def test_hardswish_body_is_written_hardsigmoid_first(backend: str | None) -> None:
    """Below opset 14 HardSwish is Mul(HardSigmoid(X), X): the HardSigmoid's output is the Mul's first operand."""
    result = lowerer.convert(_hardswish(), target_opset=13, for_backend=backend)
    nodes = list(result.model.graph.node)
    assert [n.op_type for n in nodes] == ["HardSigmoid", "Mul"]
    hs, mul = nodes
    assert list(mul.input) == [hs.output[0], "x"] and list(mul.output) == ["y"]
    assert hs.name  # named (the trigger on onnxruntime-qnn is the operand order, not the name alone)


def _softmax(opset: int = 11) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 5])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=1, name="soft")], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


CPU_WITNESS = Witness("onnxruntime:CPUExecutionProvider", "cpu")
PLACED = {"fallback": True, "nodes": 5, "provider": "QNNExecutionProvider", "on_cpu": [["soft", "Softmax"]]}


def _judged_on_changes(monkeypatch: pytest.MonkeyPatch, original_too: bool, fails: bool) -> None:
    """The CPU provider as a witness judged on what lowerer changed, departing (or failing) on the converted
    model (opset 13), and on the original (opset 11) when ``original_too``."""
    real = Witness.run_placed

    def run(self: Witness, model: onnx.ModelProto, sets: object, outputs: object = None, timeout: float = 0) -> Ran:
        if model.opset_import[0].version == 13 or original_too:
            if fails:
                raise WitnessError("compile", self.label, "no kernel for the node 'soft'")
            got = real(self, model, sets, outputs).values  # type: ignore[arg-type]
            return Ran([[v + np.float32(0.5) for v in row] for row in got], PLACED)
        return real(self, model, sets, outputs)  # type: ignore[arg-type]

    monkeypatch.setattr(Witness, "run_placed", run)
    monkeypatch.setattr(deployment, "witness_for", lambda p: (CPU_WITNESS, ""))
    monkeypatch.setattr(deployment, "_judges_changes", lambda w: True)


def test_qnn_is_judged_on_what_lowerer_changed() -> None:
    assert runtimes()["onnxruntime-qnn"].judges_changes
    assert not runtimes()["openvino"].judges_changes


@pytest.mark.parametrize("fails", [False, True])
def test_a_failure_the_original_shares_is_recorded(monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    _judged_on_changes(monkeypatch, original_too=True, fails=fails)
    result = lowerer.convert(_softmax(), target_opset=13, for_backend="qnn==2.7")
    record = result.report.backend["deployment"]
    assert record["status"] == ("fails-as-original" if fails else "differs-as-original"), record
    assert "the original model" in record["reason"] and "recorded, not judged" in record["reason"]
    if not fails:
        assert "CPU fallback on (as users run it): 1 of 5 node(s) on the CPU" in record["reason"]
        assert record["placement"] == PLACED
    from _json_schema import validate

    schema = json.loads((Path(lowerer.__file__).parent / "core" / "report.schema.json").read_text(encoding="utf-8"))
    assert validate(result.report.to_dict(), schema) == []


@pytest.mark.parametrize("fails", [False, True])
def test_a_failure_of_lowerers_output_alone_fails(monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    _judged_on_changes(monkeypatch, original_too=False, fails=fails)
    with pytest.raises(VerificationError) as e:
        lowerer.convert(_softmax(), target_opset=13, for_backend="qnn==2.7")
    assert ("cannot compile the converted model" if fails else "output 'y' differs") in str(e.value)
    assert e.value.report is not None
    assert e.value.report.backend["deployment"]["status"] == ("failed" if fails else "different")


def test_placement_is_said_in_one_line() -> None:
    assert deployment._placed(None) == ""
    assert deployment._placed({**PLACED, "on_cpu": []}) == \
        ", CPU fallback on (as users run it): every node on QNNExecutionProvider"
    many = {**PLACED, "fallback": False, "nodes": 9, "on_cpu": [[f"n{i}", "Einsum"] for i in range(8)]}
    text = deployment._placed(many)
    assert text.startswith(", CPU fallback off: 8 of 9 node(s) on the CPU") and "(2 more)" in text


def _qnn_or_skip() -> None:
    witness, why = find_witness("onnxruntime-qnn")
    if witness is None:
        pytest.skip(f"onnxruntime-qnn is not installed here: {why}")


def _converted(source: object, **options: object) -> lowerer.ConvertResult:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lowerer.convert(source, for_backend="qnn==2.7", **options)  # type: ignore[arg-type]


def test_written_hardswish_body_runs_right_on_qnn() -> None:
    """The probe suite's run of the written body (CPU fallback off: on the HTP itself), and the deployment check."""
    _qnn_or_skip()
    from lowerer.cli.probes import expansion_probes, run_probes

    witness, why = find_witness("onnxruntime-qnn:htp-only")
    assert witness is not None, why
    written = [p for p in expansion_probes() if p.name == "HardSwish-14-to13"]
    assert [r.status for r in run_probes(witness, written)] == ["right"]
    model, _ = LOWERED["HardSwish-14"][0]()
    deployment = _converted(model, target_opset=13).report.backend["deployment"]
    # Equal on every finite set; on the ±inf sets the HTP departs from onnxruntime's CPU for the original's
    # HardSwish as well (recorded as the runtime's, not judged).
    assert deployment["status"] == "equal" or (
        deployment["status"] == "differs-as-original" and "inf (x:" in deployment["reason"]), deployment
    assert "CPU fallback on (as users run it): every node on QNNExecutionProvider" in deployment["reason"]


def test_mobilenet_v3_at_opset_13_runs_right_on_qnn() -> None:
    """Every logit was off (x * x) with onnx's operand order; the deployment check runs it on the HTP."""
    _qnn_or_skip()
    source = REAL / "mobilenet_v3_small.legacy.opset17.onnx"
    deployment = _converted(source, target_opset=13).report.backend["deployment"]
    assert deployment["status"] == "equal", deployment
    assert "CPU fallback" in deployment["reason"]


def _group_norm(label: str) -> Probe:
    return next(p for p in base_probes() if p.name == f"GroupNormalization-21-{label}")


@pytest.mark.parametrize(("label", "expanded"), [("dynamic", True), ("rank3", True), ("static", False)])
def test_group_normalization_is_expanded_where_qnn_fails_or_departs(label: str, expanded: bool) -> None:
    """GroupNormalization-21 on a dynamic shape (not taken: the NHWC node) or a rank other than 4 (wrong at rank 3)
    is written as its function body for qnn 2.x; a static rank-4 one, which QNN 2.7 runs right, is kept."""
    probe = _group_norm(label)
    result = _converted(probe.model)
    ops = {n.op_type for n in result.model.graph.node}
    assert ("GroupNormalization" not in ops) == expanded, ops
    named = [e for e in result.report.backend["named"] if e["op_type"] == "GroupNormalization"]
    assert [e["rewrite"] for e in named] == (["expand"] if expanded else [])
    if expanded:
        assert "ReduceMean" in ops and named[0]["source"].startswith("measured")
    below = lowerer.convert(probe.model, for_backend="qnn==1.24")
    assert "GroupNormalization" in {n.op_type for n in below.model.graph.node}  # measured on the plugin only


def test_unet_23_group_norms_are_written_as_their_body() -> None:
    """unet.dynamo.opset23 fails to load on QNN 2.7 as exported (GroupNormalization on a dynamic batch)."""
    result = _converted(REAL / "unet.dynamo.opset23.onnx")
    assert "GroupNormalization" not in {n.op_type for n in result.model.graph.node}
    assert sum(e["op_type"] == "GroupNormalization" for e in result.report.backend["named"]) == 5


def test_group_normalization_body_runs_right_on_qnn() -> None:
    """The probe suite's run (CPU fallback off): the original fails (dynamic) or is wrong (rank 3), the body right;
    unet-23 written for qnn runs whole on the HTP and matches onnxruntime CPU on the original (the fixture's inputs);
    the deployment check (CPU fallback on) exits 0, departing on ±inf sets only, which the original cannot show."""
    _qnn_or_skip()
    from lowerer.cli.probes import compare, form_probes, run_probes

    witness, why = find_witness("onnxruntime-qnn:htp-only")
    assert witness is not None, why
    probes = [_group_norm(label) for label in ("dynamic", "rank3", "static")] + \
        [p for p in form_probes() if p.name.startswith("GroupNormalization-21-")]
    got = {r.name: r.status for r in run_probes(witness, probes)}
    assert got == {"GroupNormalization-21-dynamic": "fails", "GroupNormalization-21-rank3": "wrong",
                   "GroupNormalization-21-static": "right", "GroupNormalization-21-dynamic-expand": "right",
                   "GroupNormalization-21-rank3-expand": "right"}, got
    source = REAL / "unet.dynamo.opset23.onnx"
    result = _converted(source)
    with np.load(REAL / "unet.inputs.npz") as data:
        feeds = {name: data[name] for name in data.files}
    reference = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, feeds)
    users, why = find_witness("onnxruntime-qnn")
    assert users is not None, why
    ran = users.run_placed(result.model, [feeds])
    assert compare(reference, ran.values[0], runtimes()["onnxruntime-qnn"].budget)[0]
    assert ran.placement is not None and ran.placement["on_cpu"] == []
    deployment = result.report.backend["deployment"]
    # On the ±inf sets the HTP gives finite values where onnxruntime's CPU gives NaN (it departs there for unet-20's
    # own ops too), which the original, failing to load, cannot show: recorded as the runtime's.
    assert deployment["status"] == "equal" or (
        deployment["status"] == "differs-as-original" and "inf (x:" in deployment["reason"]), deployment
    assert all(o["worst"]["input_set"].split(" ")[0] in ("inf", "-inf", "nan") for o in deployment["outputs"]
               if o["mismatches"]), deployment["outputs"]
    assert "every node on QNNExecutionProvider" in deployment["reason"]
