"""``lowerer inspect``: --reach names what limits each end; --for exits as convert --for would."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from _convert_helpers import float_mod_model
from click.testing import CliRunner

from lowerer.cli import main
from lowerer.cli.inspect_report import opset_reach, reachable_opsets
from lowerer.passes.reach import limit

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "example_opset11.onnx"
GPT2 = ROOT / "tests" / "fixtures" / "real" / "gpt2.dynamo.opset18.onnx"


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr



# -- --reach: the node that limits each end ----------------------------------------------------------------

def test_reach_names_the_node_that_limits_the_lowest_opset() -> None:
    found = opset_reach(float_mod_model(16))
    assert (found["lowest"], found["highest"]) == reachable_opsets(float_mod_model(16))
    assert found["lowest"] == 10
    stop = found["lowest_limit"]
    assert (stop["opset"], stop["node"], stop["op_type"], stop["version"], stop["scope"]) == (9, "'tri'", "Mod",
                                                                                            13, "graph")
    assert "choose a target opset >= 10" in stop["refusal"]


def test_reach_on_a_real_export_names_its_limit() -> None:
    found = opset_reach(onnx.load(GPT2))
    assert found["lowest"] == 11 and found["lowest_limit"]["op_type"] == "GatherND"
    assert found["lowest_limit"]["opset"] == 10 and found["lowest_limit"]["node"].startswith("'node_GatherND")


def test_a_search_that_runs_out_of_opsets_has_no_limit() -> None:
    found = opset_reach(onnx.load(EXAMPLE))
    assert found["highest_limit"] is None and found["lowest_limit"] is None


def test_limit_reads_the_node_from_any_refusal() -> None:
    unnamed = limit(9, "node <unnamed Slice> (Slice-13, in graph/loop.body) cannot be converted to opset 9: x")
    assert (unnamed["node"], unnamed["op_type"], unnamed["version"], unnamed["scope"]) == \
        ("<unnamed Slice>", "Slice", 13, "graph/loop.body")
    quoted = limit(9, "node 'a (b)' (Add-14, in function:pkg.F): y")
    assert (quoted["node"], quoted["op_type"], quoted["scope"]) == ("'a (b)'", "Add", "function:pkg.F")
    other = limit(3, "the model's IR version cannot express it")
    assert other["node"] is None and other["refusal"] == "the model's IR version cannot express it"


def test_inspect_reach_prints_the_limiting_node(tmp_path) -> None:
    path = tmp_path / "mod.onnx"
    onnx.save(float_mod_model(16), path)
    code, out, _ = _invoke(["inspect", str(path), "--reach"])
    assert code == 0
    assert "converts to opsets 10 .. " in out
    assert "lowest: limited by node 'tri' (Mod-13, in graph), refused at opset 9: " in out
    code, out, _ = _invoke(["inspect", str(path), "--reach", "--json"])
    data = json.loads(out)["reachable_opsets"]
    assert data["lowest"] == 10 and data["lowest_limit"]["node"] == "'tri'"


# -- inspect --for exits as convert --for ------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["--for", "coreml"],
    ["--for", "coreml", "--allow-fallback"],
    ["--for", "cuda"],
    ["--for", "coreml", "--target-opset", "3"],
    ["--for", "qnn", "--target-opset", "13"],
])
def test_inspect_for_exits_as_convert_would(tmp_path, args: list[str]) -> None:
    out_path = tmp_path / "out.onnx"
    convert_code, _, convert_err = _invoke(["convert", str(EXAMPLE), "-o", str(out_path), "--no-verify", *args])
    inspect_code, table, inspect_err = _invoke(["inspect", str(EXAMPLE), *args])
    assert inspect_code == convert_code
    assert table.startswith("backend: ")
    if convert_code:
        refusal = convert_err.strip().splitlines()[-1].removeprefix("lowerer: error: ")
        line = inspect_err.strip().splitlines()[-1]
        assert line.startswith(f"lowerer: error: would refuse: {refusal.split(': ', 1)[0]}: ")
        assert len(line) <= 200 and len(convert_err.strip().splitlines()[-1]) <= 200  # the full text is in the table
        assert "nodes it cannot run:" in table  # the table is printed before the refusal


def test_inspect_for_json_carries_the_refusal_and_exits_2() -> None:
    code, out, err = _invoke(["inspect", str(EXAMPLE), "--for", "coreml", "--json"])
    assert code == 2
    data = json.loads(out)
    assert data["refused"].startswith("node 'softmax_axis2' (Softmax-11, in graph): coreml cannot run it")
    assert [n["node"] for n in data["nodes"]] == ["hardmax_axis1", "softmax_axis2"]
    assert "would refuse:" in err


# -- inspect predicts convert: the same opset, the same rewrites ---------------------------------------------

DECODER23 = ROOT / "tests" / "fixtures" / "real" / "decoder.dynamo.opset23.onnx"


def _converted(tmp_path: Path, args: list[str]) -> tuple[int, dict, str]:
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code, _, err = _invoke(["convert", str(DECODER23), "-o", str(out), "--no-verify", "--report", str(report),
                            *args])
    return code, (json.loads(report.read_text()) if report.exists() else {}), err


def _groups(rewrites: list[dict]) -> list[tuple[str, int, str, int]]:
    from lowerer.cli.inspect_report import group_rewrites

    return sorted((g["op_type"], g["from_version"], g["rule"], g["count"]) for g in group_rewrites(rewrites))


@pytest.mark.parametrize("args", [["--for", "tensorrt==8.6"], ["--for", "tensorrt==8.6", "--target-opset", "17"],
                                  ["--target-opset", "17"]])
def test_inspect_picks_the_opset_and_lists_the_rewrites_convert_makes(tmp_path, args: list[str]) -> None:
    code, report, err = _converted(tmp_path, args)
    assert code == 0, err
    summary = report["summary"]
    assert (summary["source_opset"], summary["target_opset"]) == (23, 17)
    inspect_code, text, inspect_err = _invoke(["inspect", str(DECODER23), *args])
    assert inspect_code == 0, inspect_err
    _, out, _ = _invoke(["inspect", str(DECODER23), "--json", *args])
    plan = json.loads(out)["plan"]
    assert (plan["source_opset"], plan["target_opset"], plan["refused"]) == (23, 17, None)
    assert _groups(plan["rewrites"]) == _groups(report["rewrites"])  # the same nodes, rewritten the same way
    assert len(plan["rewrites"]) == summary["rewrites"] == 10
    assert "10 node(s) (opset 23 -> 17), 10 by expanding a function body, in 4 groups (op, rewrite):" in text
    assert "  4 x RMSNormalization-23  function body: no RMSNormalization at opset 17  -> Mul + ReduceMean" in text
    if args[:2] == ["--for", "tensorrt==8.6"] and len(args) == 2:
        assert text.splitlines()[0] == ("backend: tensorrt==8.6 (TensorrtExecutionProvider); opset 23 -> 17 "
                                        "(the opset convert --for tensorrt==8.6 picks)")


def test_inspect_for_refuses_as_convert_does_above_what_the_release_loads(tmp_path) -> None:
    args = ["--for", "tensorrt==8.6", "--target-opset", "18"]
    code, _, err = _converted(tmp_path, args)
    inspect_code, _, inspect_err = _invoke(["inspect", str(DECODER23), *args])
    assert code == inspect_code == 2
    refusal = err.strip().removeprefix("lowerer: error: ")
    assert inspect_err.strip().startswith("lowerer: error: would refuse: " + refusal[:40])


def test_inspect_summarizes_the_model() -> None:
    code, text, _ = _invoke(["inspect", str(GPT2)])
    assert code == 0
    lines = text.splitlines()
    assert lines[1:8] == ["opset imports: ai.onnx 18", "inputs: 2", "  input_ids       int64  [batch, sequence]",
                          "  attention_mask  int64  [batch, sequence]", "outputs: 1",
                          "  logits  float32  [batch, sequence, 1000]", "nodes: 139"]
    assert lines[8] == "ops: 26 distinct, by count:" and lines[9].startswith("  Reshape 29, Concat 12, Mul 12,")
    assert all(len(line) <= 102 for line in lines)
    assert "owned" not in text


def test_the_dry_run_groups_by_op_and_rewrite_and_names_nodes_with_v() -> None:
    code, text, _ = _invoke(["inspect", str(DECODER23), "--target-opset", "17"])
    assert code == 0
    assert sum(1 for line in text.splitlines() if " x RotaryEmbedding-23 " in line) == 1
    assert "nodes:" not in text.split("would rewrite", 1)[1]
    code, text, _ = _invoke(["inspect", str(DECODER23), "--target-opset", "17", "-v"])
    assert "      nodes: node_rms_norm, node_rms_norm_1, node_rms_norm_2, node_rms_norm_3" in text
