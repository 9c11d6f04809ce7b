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
