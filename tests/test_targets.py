"""Runtime targets (``--for onnxruntime==1.14``, ``tensorrt==8.6`` ...): the opset, IR version and ops each allows."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.backends.loads import parse_loads
from lowerer.backends.plan import scan
from lowerer.backends.profile import BACKENDS, load_profile, load_rows
from lowerer.cli import main
from lowerer.core.errors import ConversionError, InputError
from lowerer.core.opsets import since_version

F = TensorProto.FLOAT


def _model(opset: int = 21, ir_version: int = 10) -> onnx.ModelProto:
    """Add (an initializer) + Hardmax + Relu at ``opset``: Hardmax is what several profiles name."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["a"], name="add"),
             helper.make_node("Hardmax", ["a"], ["h"], name="hardmax", axis=-1),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


SPECS = ["onnxruntime==1.14", "onnxruntime==1.10", "tensorrt==8.6", "tensorrt<9.2", "rknn", "winml==19041",
         "openvino==2023.0", "qnn==1.17", "coreml==1.14", "webgpu==1.18", "cuda==1.12", "tensorrt"]


@pytest.mark.parametrize("spec", SPECS)
def test_target_gets_an_opset_ir_version_and_ops_it_allows(spec: str) -> None:
    profile = load_profile(spec)
    loads = profile.loads
    assert loads is not None and loads.max_opset is not None and loads.max_ir is not None
    result = lowerer.convert(_model(), for_backend=spec, allow_fallback=True)
    model = result.model
    opset = model.opset_import[0].version
    assert opset == min(21, loads.max_opset)
    assert model.ir_version <= loads.max_ir
    assert all((since_version(n.op_type, opset) or 0) <= loads.max_opset for n in model.graph.node)
    assert not [f for f in scan(model, profile) if f.entry.rewrite is not None]
    assert result.report.backend is not None and result.report.backend["loads"]["max_opset"] == loads.max_opset
    onnx.checker.check_model(model, full_check=True)
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    before = ort.InferenceSession(_model().SerializeToString(), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(before.run(None, {"x": x})[0], after.run(None, {"x": x})[0])


def test_a_model_below_the_limit_keeps_its_opset_and_lowers_its_ir() -> None:
    result = lowerer.convert(_model(17, 10), for_backend="onnxruntime==1.14")
    assert result.model.opset_import[0].version == 17 and result.model.ir_version == 8


def test_target_opset_above_what_the_runtime_loads_is_refused_with_the_highest_that_works() -> None:
    with pytest.raises(ConversionError, match=r"onnxruntime==1.14 loads default-domain opsets up to 18 .*"
                                              r"output is at opset 20.*--target-opset 18 or lower"):
        lowerer.convert(_model(), for_backend="onnxruntime==1.14", target_opset=20)


def test_target_opset_still_overrides_below_the_limit() -> None:
    assert lowerer.convert(_model(), for_backend="tensorrt==8.6", target_opset=13).model.opset_import[0].version == 13


def test_ir_version_above_what_the_runtime_loads_is_refused() -> None:
    with pytest.raises(ConversionError, match=r"loads IR versions up to 8.*leave out --ir-version"):
        lowerer.convert(_model(17), for_backend="onnxruntime==1.14", ir_version=9)


def test_a_feature_the_runtime_ir_cannot_hold_names_a_release_that_works() -> None:
    with pytest.raises(ConversionError, match=r"winml==17763 loads IR versions up to 3.*initializers that are not "
                                              r"graph inputs.*winml==19041"):
        lowerer.convert(_model(), for_backend="winml==17763", allow_fallback=True)


@pytest.mark.parametrize(("spec", "version"), [("tensorrt==8.6", "8.6"), ("tensorrt==8.6.1", "8.6"),
                                               ("tensorrt<9.2", "9.0"), ("tensorrt<=8.5", "8.5"),
                                               ("tensorrt<8.5", "8.4"), ("tensorrt==10.13", "10.0"),
                                               ("tensorrt>=8.0", "10.14"), ("tensorrt", "10.14"),
                                               ("rknn==2.2.0", "1.6"), ("rknn==1.5.2", "1.5.2"),
                                               ("onnxruntime==1.14", "1.14"), ("ort==1.16.3", "1.16"),
                                               ("ort==1.15.1", "1.15"), ("webgpu<1.20", "1.18")])
def test_the_row_that_applies(spec: str, version: str) -> None:
    loads = load_profile(spec).loads
    assert loads is not None and loads.version == version


def test_a_release_older_than_the_table_is_refused() -> None:
    with pytest.raises(InputError, match=r"no load limits known for tensorrt ==7.1.*name 8.0 or newer"):
        load_profile("tensorrt==7.1")


@pytest.mark.parametrize("name", BACKENDS)
def test_every_row_names_its_source(name: str) -> None:
    for row in load_rows(name):
        assert row.source and (row.confirmed or "not" in row.note or "recalled" in row.note)
        if row.max_opset is not None:
            assert row.max_ir is not None and row.max_ir >= onnx.helper.find_min_ir_version_for(
                [helper.make_opsetid("", row.max_opset)])


@pytest.mark.parametrize("bad", [[], [{"version": "x", "source": "s"}], [{"version": "1", "source": ""}],
                                 [{"version": "2", "source": "s"}, {"version": "1", "source": "s"}],
                                 [{"version": "1", "source": "s", "max_opset": "9"}]])
def test_bad_loads_rows_are_refused(bad: object) -> None:
    with pytest.raises(InputError, match=r"profile x\.json"):
        parse_loads(bad, "x", "x.json")


def test_targets_command_lists_limits_and_sources() -> None:
    result = CliRunner().invoke(main, ["targets"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert any(line.split()[:2] == ["tensorrt", "8.6+"] and "opset <= 17" in line for line in lines)
    assert "not confirmed" in result.output and "[1] microsoft/onnxruntime" in result.output
    listed = json.loads(CliRunner().invoke(main, ["targets", "--json"]).output)
    assert {t["name"] for t in listed} == set(BACKENDS)
    assert "onnxruntime" in next(t for t in listed if t["name"] == "cpu")["aliases"]


def test_cli_for_tensorrt_picks_opset_and_ir(tmp_path: object) -> None:
    src, out = f"{tmp_path}/m.onnx", f"{tmp_path}/o.onnx"
    onnx.save(_model(), src)
    result = CliRunner().invoke(main, ["convert", src, "-o", out, "--for", "tensorrt==8.6"])
    assert result.exit_code == 0, result.output
    written = onnx.load(out)
    assert written.opset_import[0].version == 17 and written.ir_version == 8


# What each row says, as read in its source (the source strings name the file and revision read).
READ = [("tensorrt", "8.0", 13, 7, True), ("tensorrt", "8.2", 13, 7, True), ("tensorrt", "8.4", 17, 8, True),
        ("tensorrt", "8.5", 17, 8, True), ("tensorrt", "8.6", 17, 8, True), ("tensorrt", "9.0", 19, 9, True),
        ("tensorrt", "10.0", 20, 10, True), ("tensorrt", "10.14", 24, 12, False),
        ("rknn", "1.0", 12, 7, True), ("rknn", "1.5.2", 12, 9, True), ("rknn", "1.6", 19, 9, True),
        ("rknn", "2.3", 19, 9, False), ("winml", "17763", 7, 3, True), ("winml", "18362", 8, 3, True),
        ("winml", "19041", 9, 4, True), ("winml", "22000", 12, 7, False)]


@pytest.mark.parametrize(("name", "version", "opset", "ir", "confirmed"), READ)
def test_rows_hold_what_their_source_says(name: str, version: str, opset: int, ir: int, confirmed: bool) -> None:
    row = next(r for r in load_rows(name) if r.version == version)
    assert (row.max_opset, row.max_ir, row.confirmed) == (opset, ir, confirmed)
    assert f"{opset}" in row.source


# Rows whose IR bound is the IR of the onnx release the runtime pins (parser submodule, requirements file).
PINNED_ONNX = [("tensorrt", "8.0", "1.8.0"), ("tensorrt", "8.2", "1.8.0"), ("tensorrt", "8.4", "1.12.0"),
               ("tensorrt", "8.5", "1.12.0"), ("tensorrt", "8.6", "1.13.1"), ("tensorrt", "9.0", "1.14.0"),
               ("tensorrt", "10.0", "1.16.0"), ("rknn", "1.0", "1.7.0"), ("rknn", "1.4", "1.9.0"),
               ("rknn", "1.5", "1.10.0"), ("rknn", "1.5.2", "1.14.0"), ("rknn", "1.6", "1.14.1")]


@pytest.mark.parametrize(("name", "version", "onnx_release"), PINNED_ONNX)
def test_ir_bound_is_that_of_the_pinned_onnx(name: str, version: str, onnx_release: str) -> None:
    row = next(r for r in load_rows(name) if r.version == version)
    assert onnx_release in row.source
    ir = {entry[0]: entry[1] for entry in helper.VERSION_TABLE}[onnx_release]
    assert row.max_ir == ir


_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+ ")
_REVISION = re.compile(r"\b[0-9a-f]{7,40}\b|@ (tag |branch )?v?\d|\btag v?\d")


@pytest.mark.parametrize("name", BACKENDS)
def test_every_row_source_names_a_repository_and_revision_or_none_found(name: str) -> None:
    for row in load_rows(name):
        if row.source.startswith("none found: "):
            assert not row.confirmed and len(row.source) > len("none found: ") + 20
        elif row.source.startswith("measured: "):  # a probe run (lowerer.cli.probes) on the release itself
            cited = re.match(r"measured: (lowerer/backends/measured/[\w.+-]+\.json) \((\d{4}-\d\d-\d\d), ", row.source)
            assert cited and (Path(__file__).resolve().parent.parent / cited.group(1)).is_file(), row.source
        else:
            assert _REPO.match(row.source), row.source
            assert _REVISION.search(row.source), row.source


def test_tensorrt_entries_cite_the_parser_tables_at_a_revision() -> None:
    data = json.loads(resources.files("lowerer.backends").joinpath("tensorrt.json").read_text(encoding="utf-8"))
    for entry in data["entries"]:
        assert entry["source"].startswith("onnx/onnx-tensorrt docs/operators.md")
        assert _REVISION.search(entry["source"]), entry["source"]


def test_tensorrt_hardmax_bound_is_the_first_table_with_hardmax() -> None:
    def rewrites(spec: str) -> list[str]:
        return [e.rewrite or "" for e in load_profile(spec).entries if "Hardmax" in e.ops and not e.when]

    assert rewrites("tensorrt==9.1") == ["hardmax"]
    assert rewrites("tensorrt==9.2") == []
