"""The IR version written with the opset: the lowest the target and the model's features allow, or the one asked for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import ConversionError, InputError
from lowerer.model_io.ir_version import needed_features

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "example_opset11.onnx"
F = TensorProto.FLOAT


def _loads(model: onnx.ModelProto) -> None:
    onnx.checker.check_model(model, full_check=True)
    ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(("target", "highest"), [(9, 4), (11, 6), (13, 7)])
def test_example_gets_the_ir_version_of_its_opset(target: int, highest: int) -> None:
    result = lowerer.convert(str(EXAMPLE), target_opset=target, decompose="all")
    assert onnx.load(str(EXAMPLE)).ir_version == 7
    assert result.model.ir_version <= highest
    assert result.report.ir_version == result.model.ir_version and result.report.source_ir_version == 7
    assert any(n.startswith("IR version 7") and "VERSION_TABLE" in n for n in result.report.notes)
    _loads(result.model)


def _with_function(ir_version: int = 10) -> onnx.ModelProto:
    body = [helper.make_node("Mul", ["a", "a"], ["b"]), helper.make_node("Hardmax", ["b"], ["c"], axis=1)]
    square = helper.make_function("local", "SquareMax", ["a"], ["c"], body, [helper.make_opsetid("", 13)])
    graph = helper.make_graph([helper.make_node("SquareMax", ["x"], ["y"], domain="local", name="call")], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)],
                             functions=[square], ir_version=ir_version)


def test_local_functions_keep_ir_8() -> None:
    result = lowerer.convert(_with_function(), target_opset=11)
    assert result.model.ir_version == 8
    assert any("model-local functions" in n for n in result.report.notes)
    _loads(result.model)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    before = ort.InferenceSession(_with_function().SerializeToString(), providers=["CPUExecutionProvider"])
    after = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(before.run(None, {"x": x})[0], after.run(None, {"x": x})[0])


def test_an_ir_version_that_cannot_express_a_feature_is_refused() -> None:
    with pytest.raises(ConversionError, match=r"cannot write IR version 6: the model uses model-local functions "
                                              r"\(1\), which needs IR 8 or more; .*--ir-version 8"):
        lowerer.convert(_with_function(), target_opset=11, ir_version=6)


def test_an_ir_version_below_the_opsets_is_refused_with_the_lowest_that_works() -> None:
    with pytest.raises(ConversionError, match=r"cannot write IR version 5: the opsets \(ai.onnx 13\) need IR 7 "
                                              r"or more; .*--ir-version 7"):
        lowerer.convert(str(EXAMPLE), target_opset=13, ir_version=5)


def test_an_ir_version_asked_for_is_written() -> None:
    result = lowerer.convert(str(EXAMPLE), target_opset=13, ir_version=9)
    assert result.model.ir_version == 9
    assert any("as asked" in n for n in result.report.notes)
    _loads(result.model)


def test_ir_version_alone_converts_nothing_else() -> None:
    result = lowerer.convert(str(EXAMPLE), ir_version=6)
    assert result.model.ir_version == 6 and result.model.opset_import[0].version == 11
    assert len(result.report) == 0
    _loads(result.model)


@pytest.mark.parametrize("bad", [2, 99, "8", True, 8.0])
def test_bad_ir_versions_are_input_errors(bad: object) -> None:
    with pytest.raises(InputError, match=r"ir_version must be an integer|out of range"):
        lowerer.convert(str(EXAMPLE), target_opset=13, ir_version=bad)  # type: ignore[arg-type]


def test_without_a_target_the_ir_version_is_kept() -> None:
    result = lowerer.convert(str(EXAMPLE), decompose="hardmax")
    assert result.model.ir_version == 7


def test_initializers_not_inputs_stop_at_ir_4() -> None:
    w = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    result = lowerer.convert(model, target_opset=7)
    assert result.model.ir_version == 4
    assert any("initializers that are not graph inputs" in n for n in result.report.notes)
    _loads(result.model)
    model.graph.input.append(helper.make_tensor_value_info("w", F, [2, 3]))
    assert lowerer.convert(model, target_opset=7).model.ir_version == 3


@pytest.mark.parametrize(("elem", "ir"), [(TensorProto.BFLOAT16, 4), (TensorProto.FLOAT8E4M3FN, 9),
                                          (TensorProto.INT4, 10), (TensorProto.FLOAT4E2M1, 11)])
def test_element_types_need_their_ir_version(elem: int, ir: int) -> None:
    graph = helper.make_graph([], "g", [helper.make_tensor_value_info("x", elem, [2])],
                              [helper.make_tensor_value_info("x", elem, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)], ir_version=13)
    found = needed_features(model, 3)
    assert found and found[0][0] == ir
    assert needed_features(model, ir) == []


def test_cli_ir_version(tmp_path: Path) -> None:
    out = tmp_path / "m.onnx"
    result = CliRunner().invoke(main, ["convert", str(EXAMPLE), "-o", str(out), "--target-opset", "13",
                                       "--ir-version", "8"])
    assert result.exit_code == 0, result.output
    assert onnx.load(str(out)).ir_version == 8
    refused = CliRunner().invoke(main, ["convert", str(EXAMPLE), "-o", str(out), "--target-opset", "13",
                                        "--ir-version", "4"])
    assert refused.exit_code == 2 and "--ir-version 7" in refused.output
