"""``--for openvino`` on the installed OpenVINO itself (CI installs the newest: the ``test`` extra).

Skipped where no OpenVINO witness exists (OpenVINO not installed here, and ``LOWERER_WITNESS_PYTHON``
naming no Python that has it). Where it does:

* ``lowerer.convert(M, for_backend="openvino")`` for the example model and one real fixture per
  architecture (the fastest of each): the conversion exits 0 and its deployment check ran on the
  installed OpenVINO and matched onnxruntime CPU on the original (``status == "equal"``), or differed as
  the original does there at a node the report lists as a departure (``departs-as-original``), or the
  profile refuses a node in one line naming it;
* the probe suite (:func:`lowerer.cli.probes.run_probes`, onnx's node cases left out) on the installed
  OpenVINO: every probe it computes wrongly is one the profile does not leave in place: converting it
  ``for_backend="openvino"`` is refused, or what is written is right there (the conversion's own
  deployment check runs it on that OpenVINO and would fail it otherwise).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import lowerer
from lowerer.backends.probe_models import base_probes
from lowerer.backends.witnesses import find_witness
from lowerer.cli.probes import form_probes, run_probes
from lowerer.core.errors import ConversionError

ROOT = Path(__file__).resolve().parent.parent
WITNESS, WHY = find_witness("openvino")
pytestmark = pytest.mark.skipif(WITNESS is None, reason=f"OpenVINO is not installed: {WHY}")

#: The example and one fixture per architecture (the fastest to convert and run of each), with what the installed
#: OpenVINO's profile does with each.
MODELS = [
    "examples/example_opset11.onnx",
    "tests/fixtures/real/spatial_transformer.dynamo.opset20.onnx",
    "tests/fixtures/real/linear_attention.dynamo.opset20.onnx",
    "tests/fixtures/real/tril_einsum.dynamo.opset20.onnx",
    "tests/fixtures/real/unet.dynamo.opset23.onnx",
    "tests/fixtures/real/vit.legacy.opset17.onnx",
    "tests/fixtures/real/detector.dynamo.opset20.onnx",
]


@pytest.mark.parametrize("path", MODELS, ids=[Path(p).name for p in MODELS])
def test_for_openvino_runs_there_or_refuses_in_one_line(path: str) -> None:
    try:
        result = lowerer.convert(ROOT / path, for_backend="openvino")
    except ConversionError as refusal:  # a node the profile refuses (detector: TopK-11 with k=20)
        text = str(refusal)
        assert "\n" not in text and text.startswith("node ") and "openvino cannot run it" in text, text
        return
    deployment = result.report.backend["deployment"]
    # departs-as-original: a node of the model OpenVINO computes differently (TopK's ties), kept and said
    assert deployment["status"] == "equal" or (deployment["status"] == "departs-as-original"
                                               and result.report.backend["departures"]), deployment
    assert WITNESS is not None and WITNESS.version in deployment["reason"]


def test_no_wrong_probe_is_left_in_place() -> None:
    assert WITNESS is not None
    probes = [p for p in base_probes() if p.group != "limits"] + form_probes()
    results = run_probes(WITNESS, probes)
    assert all(r.status == "right" for r in results if r.group == "reduce-forms"), \
        [(r.name, r.status, r.message) for r in results if r.group == "reduce-forms" and r.status != "right"]
    by_name = {p.name: p for p in probes}
    kept_wrong = []
    for result in results:
        if result.status != "wrong":
            continue
        try:
            # the deployment check runs the result on the installed OpenVINO: a wrong one raises VerificationError
            converted = lowerer.convert(by_name[result.name].model, for_backend="openvino")
        except ConversionError:
            continue
        status = converted.report.backend["deployment"]["status"]
        if status != "equal" and not (status == "departs-as-original" and converted.report.backend["departures"]):
            kept_wrong.append((result.name, converted.report.backend["deployment"]))
    assert not kept_wrong, kept_wrong
