"""``--for BACKEND`` on each runtime lowerer has a witness for, where that runtime is installed.

For every runtime of :mod:`lowerer.backends.runtimes` that witnesses a backend (OpenVINO has its own
file, ``test_backend_openvino_real.py``), skipped where it is not installed in lowerer's Python or in
``LOWERER_WITNESS_PYTHON``: the example model and the expansion bodies converted ``for_backend=NAME``
exit 0 and their deployment check ran there and matched onnxruntime CPU on the original, or the
profile refuses a node in one line naming it (a runtime judged on what lowerer changed, onnxruntime-qnn,
may instead record a failure or difference the original model shows there too), or says the runtime computes
one of its nodes otherwise (a ``departure``: the check may then find it so, or fail on it, as on tract's
Attention over a wholly masked row or a hidden +inf score). CI installs tract (the
``test`` extra); the others run where a developer points ``LOWERER_WITNESS_PYTHON`` at a venv that has them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import lowerer
from lowerer.backends.probe_models import EXPANSIONS
from lowerer.backends.runtimes import runtimes
from lowerer.backends.witnesses import find_witness
from lowerer.core.errors import ConversionError, VerificationError

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = [r for r in runtimes().values() if r.backends and r.name not in ("openvino", "onnxruntime-openvino")]


def _witness_or_skip(name: str) -> None:
    witness, why = find_witness(name)
    if witness is None:
        pytest.skip(f"{name} is not installed here: {why}")


def _converts_and_matches(source: object, backend: str, shared: bool = False) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = lowerer.convert(source, for_backend=backend)  # type: ignore[arg-type]
    except VerificationError as failed:  # only where the profile says the runtime computes a node otherwise
        assert failed.report is not None and failed.report.backend and failed.report.backend.get("departures"), failed
        return
    except ConversionError as refusal:
        text = str(refusal)
        assert "\n" not in text and text.startswith("node "), text
        return
    deployment = result.report.backend["deployment"]
    allowed = {"equal", "differs-as-original", "fails-as-original"} if shared else {"equal"}
    if result.report.backend.get("departures"):
        allowed |= {"departs-as-original"}
    assert deployment["status"] in allowed, deployment


@pytest.mark.parametrize("name", [r.name for r in RUNTIMES])
def test_example_for_backend_runs_there(name: str) -> None:
    _witness_or_skip(name)
    record = runtimes()[name]
    _converts_and_matches(ROOT / "examples" / "example_opset11.onnx", record.backends[0], record.judges_changes)


@pytest.mark.parametrize("name", [r.name for r in RUNTIMES])
def test_expansion_bodies_for_backend_run_there(name: str) -> None:
    _witness_or_skip(name)
    for build in EXPANSIONS.values():
        model, _ = build()
        _converts_and_matches(model, runtimes()[name].backends[0], runtimes()[name].judges_changes)


def test_tract_binds_the_symbols_a_dynamo_export_names() -> None:
    """unet's torch dynamo export names ``batch`` in its inputs and value_info: concrete input facts cannot unify
    with it ("Impossible to unify Sym(batch) with Val(2)"), the symbol bound to the inputs' size runs, equal."""
    _witness_or_skip("tract")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = lowerer.convert(ROOT / "tests" / "fixtures" / "real" / "unet.dynamo.opset23.onnx", for_backend="tract")
    deployment = result.report.backend["deployment"]
    assert deployment["status"] == "equal", deployment
