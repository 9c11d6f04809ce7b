"""Models from exporters other than torch (skl2onnx, onnxmltools, tf2onnx, paddle2onnx), taken across opsets.

The fixtures are committed (``tests/fixtures/exporters``, made by ``make_fixtures.py`` there in an
environment with the exporters; none is needed here). Each is converted one and two opsets down, to
13 and 11, and one up; the original and the converted model run in onnxruntime (default session
options) on the sample inputs, on rows all equal (ties) and on zeros, and every output must be
identical (ZipMap's sequences of maps key by key). Also: imports the exporters write (the default
domain twice, an ai.onnx.ml import no node uses), and a backend whose runtime lacks ai.onnx.ml ops.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import lowerer
from lowerer.core.errors import ConversionError, InputError

FIXTURES = Path(__file__).parent / "fixtures" / "exporters"
MODELS = sorted(p.stem for p in FIXTURES.glob("*.onnx"))
MAX_OPSET = onnx.defs.onnx_opset_version()


def _source_opset(model: onnx.ModelProto) -> int | None:
    return next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), None)


def _targets(name: str) -> list[int]:
    """One and two opsets down, 13 and 11, one up (XGBoost's model imports no default domain: from 15)."""
    source = _source_opset(onnx.load(FIXTURES / f"{name}.onnx")) or 15
    return sorted(t for t in {source - 1, source - 2, 13, 11, source + 1} - {source} if 7 <= t <= MAX_OPSET)


CASES = [(name, target) for name in MODELS for target in _targets(name)]


def _feeds(name: str) -> list[dict[str, np.ndarray]]:
    """The sample inputs, the same with every row equal to the first (ties), and zeros."""
    sample = dict(np.load(FIXTURES / f"{name}.npz"))
    ties = {k: np.broadcast_to(v[:1], v.shape).copy() for k, v in sample.items()}
    zeros = {k: np.zeros_like(v) for k, v in sample.items()}
    return [sample, ties, zeros]


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def _assert_same(before: list[Any], after: list[Any], where: str) -> None:
    assert len(before) == len(after), where
    for i, (a, b) in enumerate(zip(before, after, strict=True)):
        if isinstance(a, list):  # ZipMap: a sequence of maps, compared key by key
            assert isinstance(b, list) and len(a) == len(b), f"{where}: output {i}"
            for row_a, row_b in zip(a, b, strict=True):
                assert set(row_a) == set(row_b), f"{where}: output {i} keys"
                for key in row_a:
                    assert np.array_equal(row_a[key], row_b[key], equal_nan=True), f"{where}: output {i}[{key}]"
        else:
            a, b = np.asarray(a), np.asarray(b)
            assert a.dtype == b.dtype and a.shape == b.shape, f"{where}: output {i}"
            assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), f"{where}: output {i} differs"


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_fixture_converts_with_equal_outputs(name: str, target: int) -> None:
    path = FIXTURES / f"{name}.onnx"
    original = onnx.load(path)
    result = lowerer.convert(str(path), target_opset=target)
    converted = result.model
    onnx.checker.check_model(converted, full_check=True)
    assert _source_opset(converted) == target
    assert sum(e.domain in ("", "ai.onnx") for e in converted.opset_import) == 1
    for i, feeds in enumerate(_feeds(name)):
        _assert_same(_run(original, feeds), _run(converted, feeds), f"{name} -> {target}, input set {i}")
    verification = result.report.verification
    assert verification is not None and verification["rewrites"] == len(result.report.rewrites)


def test_the_fixtures_cover_every_exporter_and_stay_small() -> None:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    assert set(manifest) == set(MODELS)
    assert {m["exporter"] for m in manifest.values()} == {"skl2onnx", "onnxmltools", "tf2onnx", "paddle2onnx"}
    assert all((FIXTURES / f"{n}.onnx").stat().st_size < 200_000 for n in MODELS)
    assert any(n.endswith("_zipmap") for n in MODELS)


@pytest.mark.parametrize("name", ["tf2onnx_cnn_opset18", "tf2onnx_transformer_opset18"])
def test_reductions_with_noop_with_empty_axes_taken_below_18_are_valid(name: str) -> None:
    """tf2onnx writes ReduceMax/ReduceMean-18 with noop_with_empty_axes, which their 13 versions lack.

    onnx's version converter keeps the attribute when it takes them to 17 or 16 (an invalid model).
    """
    path = FIXTURES / f"{name}.onnx"
    original = onnx.load(path)
    noop = {n.op_type for n in original.graph.node for a in n.attribute if a.name == "noop_with_empty_axes"}
    assert noop & {"ReduceMax", "ReduceMean"}, "the fixture is tf2onnx's: reductions with noop_with_empty_axes"
    for target in (17, 16):
        converted = lowerer.convert(str(path), target_opset=target, verify=False).model
        onnx.checker.check_model(converted, full_check=True)
        for node in converted.graph.node:
            if node.op_type in noop:
                allowed = onnx.defs.get_schema(node.op_type, target).attributes
                assert {a.name for a in node.attribute} <= set(allowed), (target, node.name)
        feeds = _feeds(name)[0]
        _assert_same(_run(original, feeds), _run(converted, feeds), f"{name} -> {target}")


def test_default_domain_twice_at_one_version_is_one_import(caplog: pytest.LogCaptureFixture) -> None:
    path = FIXTURES / "skl2onnx_logreg.onnx"
    imports = [(e.domain, e.version) for e in onnx.load(path).opset_import]
    assert imports.count(("", 22)) == 2, "the fixture is skl2onnx 1.20's: the default domain twice"
    with caplog.at_level(logging.WARNING, logger="lowerer"):
        result = lowerer.convert(str(path), target_opset=13)
    notes = [n for n in result.report.notes if "twice at version 22" in n]
    assert len(notes) == 1
    assert sum("twice at version 22" in r.getMessage() for r in caplog.records) == 1
    assert sorted((e.domain, e.version) for e in result.model.opset_import) == [("", 13), ("ai.onnx.ml", 1)]


def test_default_domain_at_two_versions_is_refused_with_a_report(tmp_path: Path) -> None:
    model = onnx.load(FIXTURES / "skl2onnx_logreg.onnx")
    model.opset_import[2].version = 21
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    with pytest.raises(InputError, match=r"twice \(versions 22 and 21\)"):
        lowerer.convert(model, target_opset=13)
    report = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "lowerer", "convert", str(src), "-o", str(tmp_path / "o.onnx"),
                           "--target-opset", "13", "--report", str(report)], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    assert "the report is in" in done.stderr and not (tmp_path / "o.onnx").exists()
    notes = json.loads(report.read_text())["summary"]["notes"]
    assert any("twice (versions 22 and 21)" in n for n in notes)


def test_unused_import_is_dropped_and_does_not_raise_the_ir_version() -> None:
    path = FIXTURES / "skl2onnx_kmeans.onnx"
    model = onnx.load(path)
    assert {e.domain for e in model.opset_import} == {"", "ai.onnx.ml"}
    assert not any(n.domain == "ai.onnx.ml" for n in model.graph.node)
    dropped = lowerer.convert(str(path), target_opset=7)
    assert [e.domain for e in dropped.model.opset_import] == [""]
    assert dropped.model.ir_version < 8  # ai.onnx.ml 3 alone would need IR 8
    assert any("ai.onnx.ml 3, which no node uses" in n for n in dropped.report.notes)
    kept = lowerer.convert(str(path), target_opset=7, keep_imports=True)
    assert {(e.domain, e.version) for e in kept.model.opset_import} == {("", 7), ("ai.onnx.ml", 3)}
    assert kept.model.ir_version == dropped.model.ir_version
    onnx.checker.check_model(kept.model, full_check=True)
    _assert_same(_run(model, _feeds("skl2onnx_kmeans")[0]), _run(kept.model, _feeds("skl2onnx_kmeans")[0]), "kept")


def test_an_ml_import_in_use_is_named_by_the_ir_version_remedy() -> None:
    model = onnx.load(FIXTURES / "skl2onnx_svc.onnx")
    next(e for e in model.opset_import if e.domain == "ai.onnx.ml").version = 3
    with pytest.raises(ConversionError, match=r"ai\.onnx\.ml 3 needs IR 8.*imports no node uses do not count"):
        lowerer.convert(model, target_opset=7, ir_version=4)


def test_tensorrt_refuses_ml_nodes_by_name_and_fallback_keeps_them(caplog: pytest.LogCaptureFixture) -> None:
    path = str(FIXTURES / "skl2onnx_svc_zipmap.onnx")
    refusal = r"tensorrt==8\.6 does not import ai\.onnx\.ml\.SVMClassifier .*ai\.onnx\.ml\.ZipMap .*operators\.md"
    with pytest.raises(ConversionError, match=refusal + ".*--allow-fallback"):
        lowerer.convert(path, for_backend="tensorrt==8.6")
    with caplog.at_level(logging.WARNING, logger="lowerer"):
        kept = lowerer.convert(path, for_backend="tensorrt==8.6", allow_fallback=True)
    assert sum("does not import ai.onnx.ml" in r.getMessage() for r in caplog.records) == 1
    assert kept.report.backend is not None
    assert {r["op_type"] for r in kept.report.backend["domains_left"]} == {"SVMClassifier", "ZipMap"}
    assert lowerer.convert(path, for_backend="cpu").report.backend is not None  # onnxruntime imports ai.onnx.ml
    lowerer.convert(str(FIXTURES / "skl2onnx_kmeans.onnx"), for_backend="tensorrt==8.6")  # no ml node


def test_bad_domains_entry_in_a_profile_is_refused() -> None:
    from lowerer.backends.profile import parse_profile

    base = {"provider": "X", "entries": []}
    assert parse_profile({**base, "domains": [{"domain": "ai.onnx.ml", "ops": [], "source": "s"}]},
                         "p")["domains"][0].lacks("ZipMap")
    for bad in ({"domain": "", "ops": "all", "source": "s"}, {"domain": "ai.onnx.ml", "ops": "some", "source": "s"},
                {"domain": "ai.onnx.ml", "ops": "all"}, {"domain": "ai.onnx.ml", "ops": "all", "source": "s", "x": 1}):
        with pytest.raises(InputError, match="profile p domains"):
            parse_profile({**base, "domains": [bad]}, "p")


def test_report_counts_agree_when_only_relabels_were_checked() -> None:
    result = lowerer.convert(str(FIXTURES / "skl2onnx_svc_zipmap.onnx"), target_opset=12)
    summary = result.report.summary()
    verification = result.report.verification
    assert verification is not None
    assert summary["rewrites"] == verification["rewrites"] == 0
    assert verification["relabels_checked"] >= 1


def test_cast_taken_to_opset_5_spells_to_as_a_name() -> None:
    result = lowerer.convert(str(FIXTURES / "skl2onnx_svc.onnx"), target_opset=5)
    casts = [n for n in result.model.graph.node if n.op_type == "Cast"]
    assert casts and all(a.type == onnx.AttributeProto.STRING for n in casts for a in n.attribute if a.name == "to")
    onnx.checker.check_model(result.model, full_check=True)
