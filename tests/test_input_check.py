"""The input's checks beside the conversion (:mod:`lowerer.model_io.input_check`): the same outcomes as in the process.

Every model here is small, so the worker is forced (``BESIDE_FROM`` 0); each case is also run with the
checks in the process (``LOWERER_NO_WORKER``), and both must agree.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import lowerer
from lowerer.core.errors import ConversionError, InputError
from lowerer.model_io import input_check


@pytest.fixture(params=["worker", "in-process"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(input_check, "BESIDE_FROM", 0)
    if request.param == "in-process":
        monkeypatch.setenv("LOWERER_NO_WORKER", "1")
    else:
        monkeypatch.delenv("LOWERER_NO_WORKER", raising=False)
    return str(request.param)


def _hardmax(value_info: bool = True, axis: int = 1) -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Hardmax", ["r"], ["y"], axis=axis)]
    infos = [helper.make_tensor_value_info("r", T.FLOAT, [2, 3, 4])] if value_info else []
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [2, 3, 4])], value_info=infos)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def _save(model: onnx.ModelProto, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _children() -> set[int]:
    try:
        return {int(p) for p in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()}
    except OSError:
        return set()


@pytest.mark.parametrize("value_info", [True, False])
def test_a_valid_file_converts_strictly_checked(tmp_path: Path, mode: str, value_info: bool) -> None:
    before = _children()
    result = lowerer.convert(_save(_hardmax(value_info), tmp_path / "m.onnx"), target_opset=13, verify=False)
    onnx.checker.check_model(result.model, full_check=True)
    assert result.report.rewrites
    assert result.report.strictly_checked is (mode == "worker" or not value_info)
    assert _children() <= before  # the worker is joined


def test_a_file_failing_the_checker_is_the_same_input_error(tmp_path: Path, mode: str) -> None:
    model = _hardmax()
    model.graph.node[1].input[0] = "nowhere"  # read before it is written
    with pytest.raises(InputError, match="onnx's checker says"):
        lowerer.convert(_save(model, tmp_path / "m.onnx"), target_opset=13, verify=False)


def test_a_bad_tensor_is_the_same_input_error(tmp_path: Path, mode: str) -> None:
    model = _hardmax()
    model.graph.initializer.append(helper.make_tensor("w", T.FLOAT, [4], [1.0, 2.0, 3.0, 4.0]))
    model.graph.initializer[0].raw_data = b"\0" * 5
    del model.graph.initializer[0].float_data[:]
    with pytest.raises(InputError, match="tensor"):
        lowerer.convert(_save(model, tmp_path / "m.onnx"), target_opset=13, verify=False)


def test_the_input_error_wins_over_a_refusal(tmp_path: Path, mode: str) -> None:
    # A node that cannot be converted (bfloat16 Hardmax below 13) in a model whose tensor is malformed.
    nodes = [helper.make_node("Hardmax", ["x"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.BFLOAT16, [2, 3])],
                              [helper.make_tensor_value_info("y", T.BFLOAT16, [2, 3])],
                              initializer=[helper.make_tensor("w", T.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    path = _save(model, tmp_path / "ok.onnx")
    with pytest.raises(ConversionError):
        lowerer.convert(path, target_opset=11, verify=False)
    model.graph.initializer[0].raw_data = b"\0" * 5
    del model.graph.initializer[0].float_data[:]
    with pytest.raises(InputError, match="tensor"):
        lowerer.convert(_save(model, tmp_path / "bad.onnx"), target_opset=11, verify=False)


def test_value_info_contradicting_the_graph_is_not_strictly_checked(tmp_path: Path, mode: str) -> None:
    model = _hardmax()
    model.graph.value_info[0].type.tensor_type.elem_type = T.INT64  # Relu of float is float
    try:
        result = lowerer.convert(_save(model, tmp_path / "m.onnx"), target_opset=13, verify=False)
    except lowerer.LowererError:
        return  # refused: also fine, never a model that fails the full check
    assert not result.report.strictly_checked
    onnx.checker.check_model(result.model, full_check=True)


def test_an_in_memory_model_is_inferred_beside(mode: str) -> None:
    result = lowerer.convert(_hardmax(), target_opset=13, verify=False)
    assert result.report.strictly_checked is (mode == "worker")
    onnx.checker.check_model(result.model, full_check=True)
