"""Said once, where it matters (issue 32): the TensorRT kernel-table note only in the backend line."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper

from lowerer.cli import main


@pytest.mark.skipif("TensorrtExecutionProvider" in ort.get_available_providers(), reason="TensorRT is installed")
def test_the_tensorrt_note_is_said_once_in_the_backend_line(tmp_path: Path) -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    src = tmp_path / "m.onnx"
    src.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)],
                                      ir_version=8).SerializeToString())
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--for", "tensorrt==8.6"])
    assert result.exit_code == 0, result.stderr
    err = result.stderr
    assert "kernels are not looked up" not in err and "lowerer: warning" not in err, err
    backend = [line for line in err.splitlines() if line.startswith("backend tensorrt==8.6")]
    assert len(backend) == 1 and "TensorrtExecutionProvider is not installed" in backend[0], err
    assert err.count("TensorrtExecutionProvider kernel") == 1, err


def _resize_sized_by_an_input(static: bool, path: Path) -> Path:
    """Resize-11 whose ``sizes`` is a graph input: a run-time value, whatever the input shapes."""
    x_dims: list[int | str] = [1, 1, 4, 4] if static else ["n", 1, 4, 4]
    node = helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="nearest", name="rs")
    empty = [helper.make_tensor(name, T.FLOAT, [0], []) for name in ("roi", "scales")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, x_dims),
                                            helper.make_tensor_value_info("sizes", T.INT64, [4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, ["a", "b", "c", "d"])], empty)
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)],
                                       ir_version=8).SerializeToString())
    return path


def test_reach_does_not_advise_static_shapes_to_a_static_model(tmp_path: Path) -> None:
    static = _resize_sized_by_an_input(True, tmp_path / "s.onnx")
    result = CliRunner().invoke(main, ["inspect", str(static), "--reach"])
    assert result.exit_code == 0, result.stderr
    lowest = next(line for line in result.stdout.splitlines() if line.strip().startswith("lowest:"))
    assert "node 'rs'" in lowest and "static input shapes" not in lowest and "make_dynamic_shape_fixed" not in lowest
    assert "although the model's input shapes are static" in lowest, lowest
    result = CliRunner().invoke(main, ["inspect", str(static), "--target-opset", "10"])
    assert result.exit_code == 2 and "static input shapes" not in result.stderr, result.stderr
    dynamic = _resize_sized_by_an_input(False, tmp_path / "d.onnx")
    result = CliRunner().invoke(main, ["inspect", str(dynamic), "--reach"])
    assert "export with static input shapes" in result.stdout, result.stdout  # there the advice fits
