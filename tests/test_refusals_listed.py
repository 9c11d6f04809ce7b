"""A refusal names every node that cannot be converted: the first in the line, the rest counted by op;
``--report`` is written on a refusal with each of them; "unverified" lines say what failed in a short clause.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import lowerer
from lowerer.cli import main
from lowerer.cli.output import print_convert_summary, short_reason
from lowerer.core.errors import ConversionError
from lowerer.core.remedies import ends_with_remedy
from lowerer.core.report import Report, Rewrite

F = TensorProto.FLOAT


def three_refusals() -> onnx.ModelProto:
    """Two float Mods (no exact form below Mod-10) and a GatherND (introduced at 11), with a Relu between."""
    nodes = [helper.make_node("Mod", ["x", "x"], ["a"], name="mod_a", fmod=1),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Mod", ["b", "x"], ["c"], name="mod_b", fmod=1),
             helper.make_node("GatherND", ["c", "i"], ["y"], name="gnd")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [3, 3]),
                                           helper.make_tensor_value_info("i", TensorProto.INT64, [3, 1])],
                              [helper.make_tensor_value_info("y", F, [3, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_the_refusal_names_the_first_node_and_counts_the_others() -> None:
    with pytest.raises(ConversionError) as caught:
        lowerer.convert(three_refusals(), target_opset=9)
    message = str(caught.value)
    assert message.startswith("node 'mod_a' (Mod-13, in graph) cannot be converted to opset 9: ")
    assert message.endswith("(and 2 more nodes that cannot be converted: GatherND-13, Mod-13)") or \
        message.endswith("(and 2 more nodes that cannot be converted: Mod-13, GatherND-13)")
    assert ends_with_remedy(message)
    assert [(r["node"], r["op_type"], r["version"], r["scope"]) for r in caught.value.refused] == [
        ("mod_a", "Mod", 13, "graph"), ("mod_b", "Mod", 13, "graph"), ("gnd", "GatherND", 13, "graph")]
    assert caught.value.refused[2]["refusal"].startswith("node 'gnd' (GatherND-13, in graph) cannot be converted")


def test_one_refusing_node_reads_as_before() -> None:
    from _convert_helpers import float_mod_model

    with pytest.raises(ConversionError) as caught:
        lowerer.convert(float_mod_model(13), target_opset=9)
    assert "more node" not in str(caught.value) and len(caught.value.refused) == 1


def test_the_report_is_written_on_a_refusal(tmp_path: Path) -> None:
    src, out, report = tmp_path / "m.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(three_refusals(), src)
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "9",
                                       "--report", str(report)])
    assert result.exit_code == 2 and not out.exists()
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.rstrip().endswith(f"(in full: {report})")
    data = json.loads(report.read_text())
    summary = data["summary"]
    assert [r["node"] for r in summary["refused"]] == ["mod_a", "mod_b", "gnd"]
    assert (summary["source_opset"], summary["target_opset"], data["rewrites"]) == (13, 9, [])
    assert summary["notes"] == ["refused: 3 nodes cannot be converted (summary.refused); nothing was written"]
    from importlib import resources

    from _json_schema import validate

    schema = json.loads(resources.files("lowerer.core").joinpath("report.schema.json").read_text(encoding="utf-8"))
    assert validate(data, schema) == []


def test_a_refusal_from_outside_the_walk_is_reported_too(tmp_path: Path) -> None:
    """The runtime's opset limit (--for): its one refusal, in the report."""
    src, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(three_refusals(), src)
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--for",
                                       "tensorrt==8.6", "--target-opset", "18", "--report", str(report)])
    assert result.exit_code == 2, result.output
    refused = json.loads(report.read_text())["summary"]["refused"]
    assert len(refused) == 1 and "loads default-domain opsets up to" in refused[0]["refusal"]


@pytest.mark.parametrize(("reason", "short"), [
    ("onnxruntime cannot run the replacement: 9 : NOT_IMPLEMENTED : Could not find an implementation for "
     "Reshape(19) node with name 'n'; and onnx.reference cannot run it", "onnxruntime cannot run the replacement "
                                                                         "(no kernel for Reshape-19)"),
    ("onnxruntime cannot run the original: 1 : FAIL : Load model from m failed:Type Error: Type (tensor(int64)) of "
     "input parameter (x) of operator (Max) in node () is invalid.", "onnxruntime cannot run the original (its Max "
                                                                     "takes no tensor(int64))"),
    ("the original could not run on any generated input (6 : RUNTIME_EXCEPTION : Non-zero status code returned "
     "while running Gather node. Name:'g' Status Message: indices element out of data bounds, idx=7 must be within",
     "the original could not run on any generated input (Gather failed: indices element out of data bounds)"),
    ("verification was turned off (verify=False / --no-verify)", "verification was turned off (verify=False / "
                                                                 "--no-verify)"),
])
def test_unverified_reasons_in_one_short_clause(reason: str, short: str) -> None:
    assert short_reason(reason) == short


def test_unverified_lines_are_short_and_merged(capsys: pytest.CaptureFixture[str]) -> None:
    raw = "onnxruntime cannot run the replacement: 9 : NOT_IMPLEMENTED : Could not find an implementation for " \
          "Reshape(19) node with name '{}'"
    rewrites = [Rewrite(node=f"r{i}", op_type="Reshape", scope="graph", from_version=21, to_opset=19,
                        rule="version-steps", emitted=["Reshape"], reason=raw.format(i)) for i in range(3)]
    print_convert_summary(Report(rewrites=rewrites, source_opset=21, target_opset=19), 0)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("unverified")]
    assert lines == ["unverified by per-rewrite checks (3: 'r0', 'r1', 'r2'): onnxruntime cannot run the replacement "
                     "(no kernel for Reshape-19)"]
