"""What the command line prints: what changed, warnings in one line, no stale advice, -q/-v anywhere,
a closed pipe ends the run quietly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper

from lowerer.cli import main

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "example_opset11.onnx"


def _model(node: onnx.NodeProto, opset: int, out_elem: int = T.FLOAT, out_shape: list | None = None) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", out_elem, out_shape or [2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _save(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


def test_summary_says_what_changed(tmp_path: Path) -> None:
    argmax = _save(tmp_path / "a.onnx", _model(helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0), 12,
                                                T.INT64, [2, 4]))
    code, _, err = _invoke(["convert", str(argmax), "-o", str(tmp_path / "o.onnx"), "--target-opset", "18"])
    assert code == 0, err
    assert err.splitlines()[0] == "opset import ai.onnx 12 -> 18; no node needed rewriting"
    assert "no rewrites" not in err and "already matches" not in err
    hm = _model(helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm"), 13)
    hardmax = _save(tmp_path / "h.onnx", hm)
    code, _, err = _invoke(["convert", str(hardmax), "-o", str(tmp_path / "o.onnx"), "--target-opset", "13"])
    assert code == 0 and err.splitlines()[0] == "IR version 8 -> 7; no node needed rewriting", err  # opset 13's IR
    hm.ir_version = 7
    at_7 = _save(tmp_path / "h7.onnx", hm)
    code, _, err = _invoke(["convert", str(at_7), "-o", str(tmp_path / "o.onnx"), "--target-opset", "13"])
    assert code == 0 and err.splitlines()[0] == "nothing changed: the model already imports ai.onnx 13", err
    code, _, err = _invoke(["convert", str(hardmax), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11"])
    assert err.splitlines()[0] == "opset import ai.onnx 13 -> 11; IR version 8 -> 6; 1 node rewritten (1 verified)", err


def test_quick_start_output_and_nan_warning_in_one_line(tmp_path: Path) -> None:
    code, _, err = _invoke(["convert", str(EXAMPLE), "-o", str(tmp_path / "o.onnx"), "--target-opset", "13",
                            "--decompose", "all", "--report", str(tmp_path / "r.json")])
    assert code == 0, err
    lines = err.splitlines()
    assert lines[0] == "opset import ai.onnx 11 -> 13; 3 nodes rewritten (3 verified)"
    assert lines[1:4] == ["  1 x GlobalMaxPool 1 -> 13 decomposed to ReduceMax",
                          "  1 x Hardmax 11 -> 13 decomposed to Size + Equal + If",
                          "  1 x Softmax 11 -> 13 coerced axis"]
    warnings = [line for line in lines if line.startswith("lowerer: warning:")]
    assert len(warnings) == 1
    # Hardmax's decomposition is judged on NaN rows (0/1, at most one 1): only GlobalMaxPool's is recorded
    assert "1 rewrite computes differently from the original on NaN inputs" in warnings[0]
    assert "pool (GlobalMaxPool: original nan, replacement" in warnings[0] and "hardmax_axis1" not in warnings[0]
    assert lines[-1] == f"wrote {tmp_path / 'o.onnx'}"


def test_no_stale_advice_after_a_passing_whole_model_check(tmp_path: Path) -> None:
    # Shape-15's start on an input over the per-rewrite size limit: the Shape + Slice rewrite stays unverified
    node = helper.make_node("Shape", ["x"], ["y"], start=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [4097, 4096])],
                              [helper.make_tensor_value_info("y", T.INT64, [1])])
    src = _save(tmp_path / "u.onnx", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)],
                                                        ir_version=8))
    code, _, err = _invoke(["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11"])
    assert code == 0 and "use --verify-model" in err, err  # the advice, before the whole-model check ran
    code, _, err = _invoke(["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11",
                            "--verify-model"])
    assert code == 0, err
    assert "--verify-model" not in err and "the whole-model check covers them" in err
    assert "whole-model check: equal" in err


@pytest.mark.parametrize("where", ["before", "after"])
def test_quiet_and_verbose_before_or_after_the_subcommand(tmp_path: Path, where: str) -> None:
    src = _save(tmp_path / "h.onnx", _model(helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm"), 13))
    out = tmp_path / "o.onnx"

    def run(flag: str, command: list[str]) -> tuple[int, str, str]:
        return _invoke([flag, *command] if where == "before" else [*command, flag])

    convert = ["convert", str(src), "-o", str(out), "--target-opset", "11"]
    code, stdout, err = run("-q", convert)
    assert code == 0 and err == "" and stdout == "" and out.exists()
    code, _, plain = _invoke(convert)
    code, _, verbose = run("-v", convert)
    assert code == 0 and "lowerer: info: converting" in verbose and "lowerer: info: verified 1 rewrites" in verbose
    assert "lowerer: info" not in plain and "lowerer: debug" not in verbose
    code, _, debug = run("-vv", convert)
    assert code == 0 and "lowerer: debug: rewrote hm" in debug
    code, stdout, err = run("-q", ["verify", str(src), str(src)])
    assert code == 0 and stdout == "" and err == ""
    code, stdout, _ = run("-v", ["inspect", str(src)])
    assert code == 0 and "nodes: 1\n" in stdout


def test_verbosity_accumulates_across_positions(tmp_path: Path) -> None:
    src = _save(tmp_path / "h.onnx", _model(helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm"), 13))
    code, _, err = _invoke(["-v", "convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11", "-v"])
    assert code == 0 and "lowerer: debug:" in err


def test_providers_is_a_strict_list(tmp_path: Path) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("CUDA is installed here")
    src = _save(tmp_path / "h.onnx", _model(helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm"), 13))
    code, _, err = _invoke(["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11",
                            "--providers", "cuda,cpu"])
    assert code == 2 and "'cuda' (CUDAExecutionProvider) is not available in this onnxruntime" in err
    assert not (tmp_path / "o.onnx").exists()


def test_a_closed_pipe_ends_the_run_quietly(tmp_path: Path) -> None:
    nodes = [helper.make_node("ArgMax", ["x"], [f"y{i}"], name=f"argmax_number_{i}", axis=1, select_last_index=1)
             for i in range(1500)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info(f"y{i}", T.INT64, [2, 1, 4]) for i in range(1500)])
    src = _save(tmp_path / "big.onnx", helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                                                          ir_version=8))
    script = (f'"{sys.executable}" -m lowerer inspect "{src}" --target-opset 11 | head -1; '
              'echo "status=${PIPESTATUS[0]}"')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[0] == f"model: {src} (IR version 8)"
    assert proc.stdout.splitlines()[-1] == "status=141"
    assert proc.stderr == ""  # no "internal error", no traceback, no "Exception ignored"


def test_onnxruntime_prints_nothing_of_its_own(tmp_path: Path) -> None:
    """A run that fails inside a check prints none of onnxruntime's log lines on the user's stderr.

    moe_routing's ScatterND takes its indices from the computation; the users'-session check runs the
    converted model once on a generated input, where they fall out of range: onnxruntime raises (the check
    says so in the report) and, at its ERROR log level, also printed two red lines of its own.
    """
    src = Path(__file__).resolve().parent / "fixtures" / "real" / "moe_routing.dynamo.opset20.onnx"
    proc = subprocess.run([sys.executable, "-m", "lowerer", "convert", str(src), "-o", str(tmp_path / "o.onnx"),
                           "--target-opset", "17"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "onnxruntime:" not in proc.stderr and "\x1b[" not in proc.stderr, proc.stderr
