"""Loop forms said aloud (issue 32): a GNN-like model's ScatterND(add) / ScatterElements(max) with run-time indices
taken below 16/18 become Loops over the updates; the registry marks them, convert warns in one line, the report
records them, inspect names them, --no-loops refuses them, and the summary names each change in plain words.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from _json_schema import validate
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import ConversionError
from lowerer.rules import REGISTRY
from lowerer.rules.scatter import LOOP_OVER_UPDATES

_SCHEMA = Path(lowerer.__file__).parent / "core" / "report.schema.json"


def gnn(nodes: int = 10, edges: int = 30, feat: int = 16, constant_dst: np.ndarray | None = None) -> onnx.ModelProto:
    """Message passing at opset 18: Gather by ``src``; ScatterND(add) and ScatterElements(max) on ``dst``."""
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((feat, feat)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros((nodes, feat), np.float32), "zeros"),
             numpy_helper.from_array(np.full((nodes, feat), -1e30, np.float32), "ninf"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    inputs = [vi("x", T.FLOAT, [nodes, feat]), vi("src", T.INT64, [edges])]
    if constant_dst is None:
        inputs.append(vi("dst", T.INT64, [edges]))
    else:
        inits.append(numpy_helper.from_array(constant_dst.astype(np.int64), "dst"))
    made = [helper.make_node("MatMul", ["x", "w"], ["h"], name="lin"),
            helper.make_node("Gather", ["h", "src"], ["msg"], axis=0, name="gather_src"),
            helper.make_node("Unsqueeze", ["dst", "last"], ["dst_nd"], name="dst_nd"),
            helper.make_node("ScatterND", ["zeros", "dst_nd", "msg"], ["agg_sum"], reduction="add",
                             name="scatter_sum"),
            helper.make_node("Unsqueeze", ["dst", "ax"], ["dst_col"], name="dst_col"),
            helper.make_node("Shape", ["msg"], ["msg_shape"], name="msg_shape"),
            helper.make_node("Expand", ["dst_col", "msg_shape"], ["dst_full"], name="dst_full"),
            helper.make_node("ScatterElements", ["ninf", "dst_full", "msg"], ["agg_max"], axis=0, reduction="max",
                             name="scatter_max"),
            helper.make_node("Add", ["agg_sum", "agg_max"], ["y"], name="combine")]
    graph = helper.make_graph(made, "gnn", inputs, [vi("y", T.FLOAT, [nodes, feat])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def gnn_path(tmp_path: Path) -> Path:
    path = tmp_path / "gnn.onnx"
    path.write_bytes(gnn().SerializeToString())
    return path


def test_the_registry_marks_the_loop_forms_as_data() -> None:
    marked = {(e.op, e.key) for e in REGISTRY.loop_forms()}
    assert marked == {(op, key) for op in ("ScatterElements", "ScatterND") for key in ((16, 13), (18, 16))}
    assert {e.loop_form for e in REGISTRY.loop_forms()} == {LOOP_OVER_UPDATES}
    assert "may become a Loop over updates" in REGISTRY.explain("ScatterND", 18, 13)[-1]
    assert all(not e.loop_form for e in REGISTRY.entries() if e.op == "Scan")  # the same loop as the Scan's


def test_convert_warns_in_one_line_and_the_summary_speaks_plainly(gnn_path: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    code, _, err = _invoke(["convert", str(gnn_path), "-o", str(tmp_path / "o.onnx"), "--target-opset", "13",
                            "--no-verify", "--report", str(report)])
    assert code == 0, err
    lines = err.splitlines()
    warnings = [line for line in lines if line.startswith("lowerer: warning:")]
    assert len(warnings) == 1, err
    assert "2 nodes became a Loop over updates" in warnings[0]
    assert "scatter_sum (ScatterND 18 -> 13, 30 iterations)" in warnings[0]
    assert "scatter_max (ScatterElements 18 -> 13, 480 iterations)" in warnings[0]  # 30 x 16 update elements
    assert "a target opset >= 18 keeps them" in warnings[0] and "--no-loops" in warnings[0]
    rows = [line for line in lines if line.startswith("  ")]
    assert rows == ["  1 x ScatterND 18 -> 13 as a Loop over updates",
                    "  1 x ScatterElements 18 -> 13 as a Loop over updates"], err
    summary = [line for line in lines if not line.startswith(("lowerer:", "unverified", "to check", "wrote"))]
    assert max(len(line) for line in summary[1:]) <= 55, summary
    data = json.loads(report.read_text())
    assert validate(data, json.loads(_SCHEMA.read_text())) == []
    loops = data["summary"]["loops"]
    assert [(e["node"], e["op_type"], e["trips"], e["keep"]) for e in loops] == [
        ("scatter_sum", "ScatterND", 30, 16), ("scatter_max", "ScatterElements", 480, 18)]
    rules = {r["node"]: r["rule"] for r in data["rewrites"]}
    assert "scatternd_16_13" in rules["scatter_sum"]  # the report keeps the entry ids
    assert {r["change"] for r in data["rewrites"]} == {"ScatterND 18 -> 13 as a Loop over updates",
                                                     "ScatterElements 18 -> 13 as a Loop over updates"}


def test_no_loops_refuses_in_one_line(gnn_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.onnx"
    code, _, err = _invoke(["convert", str(gnn_path), "-o", str(out), "--target-opset", "13", "--no-loops"])
    assert code == 2 and not out.exists()
    assert len(err.splitlines()) == 1, err
    # the line: the node, op and versions and the remedy (the full text: the report, the API's message)
    assert err.startswith("lowerer: error: node 'scatter_sum' (ScatterND-18) cannot be converted to opset 13: "), err
    assert "choose a target opset >= 16" in err and len(err.strip()) <= 200
    code, _, err = _invoke(["convert", str(gnn_path), "-o", str(out), "--target-opset", "16", "--no-loops"])
    assert code == 2 and "node 'scatter_max' (ScatterElements-18)" in err and "opset >= 18" in err, err
    code, _, err = _invoke(["convert", str(gnn_path), "-o", str(out), "--target-opset", "18", "--no-loops",
                            "--decompose", "hardmax"])
    assert code == 0, err
    with pytest.raises(ConversionError, match=r"below opset 16 it becomes a Loop over updates \(30 iterations: the "
                                              r"indices are computed at run time\), and --no-loops \(API: no_loops="):
        lowerer.convert(gnn(), target_opset=13, verify=False, no_loops=True)


def test_inspect_names_the_loop(gnn_path: Path) -> None:
    code, out, err = _invoke(["inspect", str(gnn_path), "--target-opset", "13"])
    assert code == 0, err
    assert "ScatterND-18        as a Loop over updates (30 iterations)" in out
    assert "ScatterElements-18  as a Loop over updates (480 iterations)" in out
    assert all(" + Loop (" in line for line in out.splitlines() if "as a Loop" in line)  # not cut before the Loop
    code, _, err = _invoke(["inspect", str(gnn_path), "--target-opset", "13", "--no-loops"])
    assert code == 2 and "would refuse: node 'scatter_sum'" in err


def test_the_loops_compute_what_the_model_does() -> None:
    model = gnn()
    result = lowerer.convert(model, target_opset=11, verify=False)
    assert [n.op_type for n in result.model.graph.node].count("Loop") == 2
    assert [e["trips"] for e in result.report.summary()["loops"]] == [30, 480]
    import onnxruntime as ort

    rng = np.random.default_rng(3)
    feeds = {"x": rng.integers(-2, 3, (10, 16)).astype(np.float32),  # small integers: ties in the max
             "src": rng.integers(0, 10, 30), "dst": rng.integers(-10, 10, 30)}  # negative ones counted from the back
    runs = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
            for m in (model, result.model)]
    assert np.array_equal(runs[0], runs[1])


def test_unique_constant_indices_need_no_loop() -> None:
    result = lowerer.convert(gnn(edges=10, constant_dst=np.arange(10)), target_opset=13, verify=False)
    assert result.report.loops() == [] and result.report.loop_warning() is None
    assert "Loop" not in [n.op_type for n in result.model.graph.node]
    changes = sorted(r.change for r in result.report)
    assert [c.rsplit(" as ", 1)[0] for c in changes] == ["ScatterElements 18 -> 13", "ScatterND 18 -> 13"]
    assert not any("Loop" in c for c in changes), changes


def test_a_runtime_without_loop_refuses_the_loop_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    # A profile's "loops": false refuses the loop forms as --no-loops does, naming the runtime.
    import dataclasses

    from lowerer.backends import profile

    real = profile.load_profile
    monkeypatch.setattr(profile, "load_profile", lambda spec: dataclasses.replace(real(spec), loops=False))
    with pytest.raises(ConversionError, match=r"node 'scatter_sum' \(ScatterND-18.*becomes a Loop over updates.*"
                                              r"and openvino==2026.4 has no Loop.*choose a target opset >= 16"):
        lowerer.convert(gnn(), target_opset=13, verify=False, for_backend="openvino==2026.4")
    with pytest.raises(profile.InputError, match="'loops' must be true or false"):
        profile.parse_profile({"provider": "X", "entries": [], "loops": "no"}, "x.json")
