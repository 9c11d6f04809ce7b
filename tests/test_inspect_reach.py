"""``lowerer inspect``: --reach names what limits each end; --for exits as convert --for would."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from _convert_helpers import float_mod_model
from click.testing import CliRunner

from lowerer.cli import main
from lowerer.inspection import opset_reach, reachable_opsets
from lowerer.reach import limit

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
        assert inspect_err.strip().splitlines()[-1] == f"lowerer: error: would refuse: {refusal}"
        assert "nodes it cannot run:" in table  # the table is printed before the refusal


def test_inspect_for_json_carries_the_refusal_and_exits_2() -> None:
    code, out, err = _invoke(["inspect", str(EXAMPLE), "--for", "coreml", "--json"])
    assert code == 2
    data = json.loads(out)
    assert data["refused"].startswith("node 'softmax_axis2' (Softmax-11, in graph): coreml cannot run it")
    assert [n["node"] for n in data["nodes"]] == ["hardmax_axis1", "softmax_axis2"]
    assert "would refuse:" in err
