"""The JSON report: schema (checked against the shipped JSON Schema), versions, command, deduplicated checks."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import onnx
import pytest
from _json_schema import validate
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper

import lowerer
from lowerer.cli import main
from lowerer.core.report import SCHEMA_VERSION, Report, Rewrite

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "example_opset11.onnx"


def schema() -> dict:
    text = resources.files("lowerer.core").joinpath("report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def many_argmax(n: int) -> onnx.ModelProto:
    nodes = [helper.make_node("ArgMax", ["x"], [f"y{i}"], name=f"a{i}", axis=i % 2, select_last_index=1)
             for i in range(n)]
    outputs = [helper.make_tensor_value_info(f"y{i}", T.INT64, None) for i in range(n)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])], outputs)
    return onnx.shape_inference.infer_shapes(  # outputs need a shape (onnx's checker)
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))


def test_the_validator_catches_violations() -> None:
    s = schema()
    assert validate({"schema_version": 2}, s)  # wrong type and missing fields
    with pytest.raises(ValueError, match="does not know the keyword"):
        validate({}, {"oneOf": []})


def test_quick_start_report_matches_the_schema(tmp_path: Path) -> None:
    out, report = tmp_path / "example_opset13.onnx", tmp_path / "report.json"
    result = CliRunner().invoke(main, ["convert", str(EXAMPLE), "-o", str(out), "--target-opset", "13",
                                       "--decompose", "all", "--report", str(report), "--verify-model"])
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text())
    assert validate(data, schema()) == []
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["tool"]["lowerer"] == lowerer.__version__ and data["tool"]["onnx"] == onnx.__version__
    assert data["tool"]["onnxruntime"]
    assert data["command"][0] == "lowerer"
    assert data["summary"]["model_checks"]["whole-model check"]["status"] == "equal"


def test_identical_checks_are_stored_once_and_records_name_their_own_values() -> None:
    res = lowerer.convert(many_argmax(300), target_opset=11)
    data = res.report.to_dict()
    assert validate(data, schema()) == []
    assert data["command"] is None  # made through the API
    checks, records = data["checks"], data["rewrites"]
    assert len(records) == 300 and len(checks) == 2
    assert sum(c["used_by"] for c in checks) == 300
    for i, rec in enumerate(records):
        assert rec["values"] == {"inputs": ["x"], "outputs": [f"y{i}"]}  # its own node's values
        assert "details" not in rec and "reason" not in rec
        assert f"y{i}" not in json.dumps(checks) or checks[rec["check"]]["checked_on"] == i
    for c in checks:  # a check names the values of the node it ran on, and says which one that is
        own = records[c["checked_on"]]["values"]["outputs"][0]
        others = {f"y{i}" for i in range(300)} - {own}
        text = json.dumps(c["details"])
        assert not any(f"'{o}'" in text or f'"{o}' in text for o in others)
    # the deduplicated form is much smaller than a record per rewrite with its details
    flat = json.dumps([r.to_dict() for r in res.report], indent=2)
    assert len(json.dumps(data)) * 3 < len(flat)
    text = res.report.to_json()  # what --report writes: one record per line
    assert json.loads(text) == json.loads(json.dumps(data))
    assert len(text) * 3 < len(flat) and text.count("\n") < 400


def test_serialization_keeps_fields_added_to_rewrite() -> None:
    @dataclasses.dataclass
    class Extended(Rewrite):
        verified_by: str = "per-rewrite check"
        coverage: tuple[int, ...] = (1, 2)

    report = Report(rewrites=[Extended("n", "Hardmax", "graph", 11, 13, "coerced-axis", ["Flatten"])])
    data = report.to_dict(command=["lowerer", "convert"])
    rec = data["rewrites"][0]
    assert rec["verified_by"] == "per-rewrite check" and rec["coverage"] == [1, 2]
    assert "original" not in rec and "replacement" not in rec  # working data stays out
    assert validate(data, schema()) == []
    json.dumps(data)  # JSON-ready


def test_schema_ships_with_the_package() -> None:
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-data]", 1)[1].strip().splitlines()
    assert '"lowerer.core" = ["report.schema.json"]' in section
