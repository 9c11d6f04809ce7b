"""The Python API: input kinds, the report, errors, the onnx_ir pass, the public surface."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer


def _hardmax_model(opset: int = 11, axis: int = 1) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hm", axis=axis)],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _tie_heavy(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(7).integers(0, 3, shape).astype(np.float32)


def test_modelproto_in_modelproto_out_and_input_untouched() -> None:
    model = _hardmax_model()
    before = model.SerializeToString()
    result = lowerer.convert(model, target_opset=13, verify=False)
    assert isinstance(result.model, onnx.ModelProto)
    assert model.SerializeToString() == before
    x = _tie_heavy((2, 3, 4))
    assert np.array_equal(_run(model, x), _run(result.model, x))
    assert [n.op_type for n in result.model.graph.node] == ["Shape", "Flatten", "Hardmax", "Reshape"]


def test_path_in_modelproto_out(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_hardmax_model(13), path)
    result = lowerer.convert(str(path), target_opset=11, verify=False)
    assert isinstance(result.model, onnx.ModelProto)
    assert [n.op_type for n in result.model.graph.node] == ["Transpose", "Hardmax", "Transpose"]


def test_onnx_ir_in_onnx_ir_out() -> None:
    model = ir.serde.deserialize_model(_hardmax_model())
    result = lowerer.convert(model, target_opset=13, verify=False)
    assert isinstance(result.model, ir.Model)
    assert result.model.opset_imports[""] == 13
    assert model.opset_imports[""] == 11  # the given model is not modified
    x = _tie_heavy((2, 3, 4))
    assert np.array_equal(_run(_hardmax_model(), x), _run(ir.serde.serialize_model(result.model), x))


def test_lower_pass_in_an_onnx_ir_pipeline() -> None:
    model = ir.serde.deserialize_model(_hardmax_model())
    lower = lowerer.LowerPass(target_opset=13, verify=False)
    result = ir.passes.Sequential(lower)(model)
    assert result.modified
    assert result.model.opset_imports[""] == 13
    assert [n.op_type for n in result.model.graph] == ["Shape", "Flatten", "Hardmax", "Reshape"]
    assert lower.report is not None and len(lower.report) == 1
    x = _tie_heavy((2, 3, 4))
    assert np.array_equal(_run(_hardmax_model(), x), _run(ir.serde.serialize_model(result.model), x))


def test_report_records_one_rewrite_per_node() -> None:
    result = lowerer.convert(_hardmax_model(), target_opset=13, verify=False)
    (record,) = result.report.rewrites
    assert (record.node, record.op_type, record.from_version, record.to_opset) == ("hm", "Hardmax", 11, 13)
    assert record.status == "unverified"
    data = result.report.to_dict()
    assert data["summary"]["rewrites"] == 1
    assert data["rewrites"][0]["emitted"] == ["Shape", "Flatten", "Hardmax", "Reshape"]


def test_errors_are_value_errors_with_one_line() -> None:
    with pytest.raises(lowerer.ConversionError) as info:
        model = _hardmax_model(13, axis=1)
        del model.graph.input[0].type.tensor_type.shape.dim[:]
        model.graph.input[0].type.tensor_type.ClearField("shape")
        model.graph.output[0].type.tensor_type.ClearField("shape")
        lowerer.convert(model, target_opset=11, verify=False)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, lowerer.LowererError)
    message = str(info.value)
    assert "\n" not in message
    assert "'hm'" in message and "Hardmax-13" in message and "opset 11" in message and "rank" in message


def test_bad_model_kind_and_bad_target() -> None:
    with pytest.raises(lowerer.InputError, match="cannot convert a int"):
        lowerer.convert(3, target_opset=13)  # type: ignore[arg-type]
    with pytest.raises(lowerer.InputError, match="out of range"):
        lowerer.convert(_hardmax_model(), target_opset=0, verify=False)
    with pytest.raises(lowerer.InputError, match="unknown decomposition 'nope'"):
        lowerer.convert(_hardmax_model(), decompose=["nope"], verify=False)


def test_public_api_is_what_is_documented() -> None:
    assert sorted(lowerer.__all__) == sorted([
        "ConversionError", "ConvertResult", "InputError", "LowerPass", "LowererError", "ModelCheckOptions",
        "Progress", "Report", "Rewrite", "Tolerance", "VerificationError", "__version__", "convert",
    ])
    for name in lowerer.__all__:
        assert getattr(lowerer, name) is not None


# -- typed results, objects holding an onnx_ir model, the pass's manners -------------------------------------

class _ProgramLike:
    """Like torch.onnx.ONNXProgram: the onnx_ir model is in ``.model`` (torch is not needed)."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model


def test_an_object_holding_an_onnx_ir_model_is_accepted() -> None:
    program = _ProgramLike(ir.serde.deserialize_model(_hardmax_model()))
    result = lowerer.convert(program, target_opset=13, verify=False)
    assert isinstance(result.model, ir.Model) and result.model.opset_imports[""] == 13
    assert program.model.opset_imports[""] == 11
    with pytest.raises(lowerer.InputError, match=r"object holding one in \.model"):
        lowerer.convert(_ProgramLike("not a model"), target_opset=13)  # type: ignore[arg-type]


def test_report_iterates_typed_rewrites() -> None:
    result = lowerer.convert(_hardmax_model(), target_opset=13, verify=False)
    for rewrite in result.report:
        assert isinstance(rewrite, lowerer.Rewrite)


def test_lower_pass_repr_and_errors_in_a_pipeline() -> None:
    lower = lowerer.LowerPass(target_opset=11, decompose=["hardmax"], verify=False)
    assert repr(lower) == ("LowerPass(target_opset=11, decompose=('hardmax',), verify=False, providers=None, "
                           "seed=0)")
    model = _hardmax_model(13, axis=1)
    model.graph.input[0].type.tensor_type.ClearField("shape")  # the rank is needed and unknown
    model.graph.output[0].type.tensor_type.ClearField("shape")
    with pytest.raises(ir.passes.PassError, match=r"LowerPass\(target_opset=11") as info:
        ir.passes.Sequential(lowerer.LowerPass(target_opset=11, verify=False))(ir.serde.deserialize_model(model))
    assert isinstance(info.value.__cause__, lowerer.ConversionError)
    assert str(info.value).startswith("An error occurred when running the 'node ")  # lowerer's line first


def test_a_refusal_in_a_pass_manager_reaches_the_conversion_error() -> None:
    from lowerer.ir_pass import lowerer_error

    model = _hardmax_model(13, axis=1)
    model.graph.input[0].type.tensor_type.ClearField("shape")
    model.graph.output[0].type.tensor_type.ClearField("shape")
    lower = lowerer.LowerPass(target_opset=11, verify=False)
    with pytest.raises(ir.passes.PassError, match="An error occurred at step 0") as info:
        ir.passes.PassManager([lower])(ir.serde.deserialize_model(model))
    error = lowerer_error(info.value)  # as the README shows
    assert isinstance(error, lowerer.ConversionError) and error is lower.error
    assert str(error).startswith("node ") and "cannot be converted to opset 11" in str(error)
    assert str(info.value.__cause__).startswith(f"An error occurred when running the '{error} (in LowerPass(")


def test_onnx_ir_errors_surface_as_lowerer_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    model = ir.serde.deserialize_model(_hardmax_model())

    def broken(_: object) -> None:
        raise ir.serde.SerdeError("cannot serialize this")

    monkeypatch.setattr(ir.serde, "serialize_model", broken)
    with pytest.raises(lowerer.InputError, match="onnx_ir says: SerdeError: cannot serialize this"):
        lowerer.convert(model, target_opset=13, verify=False)
    with pytest.raises(lowerer.LowererError):
        lowerer.LowerPass(target_opset=13, verify=False)(model)


def test_lower_pass_sets_node_versions_like_onnxscripts_converter() -> None:
    model = ir.serde.deserialize_model(_hardmax_model())
    lowerer.LowerPass(target_opset=13, verify=False)(model)
    assert {node.version for node in model.graph} == {13}


# -- --optimize: onnxscript's optimizer, checked ---------------------------------------------------------------

def test_optimize_folds_and_is_checked(tmp_path) -> None:
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "example_opset11.onnx"
    plain = lowerer.convert(str(example), target_opset=13, decompose="all", verify=False)
    result = lowerer.convert(str(example), target_opset=13, decompose="all", verify=False, optimize=True)
    opt = result.report.optimization
    assert opt is not None and opt["nodes_after"] < opt["nodes_before"] == _count(plain.model)
    assert result.report.model_checks["optimization check"]["status"] == "equal"
    assert len(result.model.functions) == len(plain.model.functions)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    run = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"image": x})
           for m in (plain.model, result.model)]
    for a, b in zip(*run, strict=True):
        np.testing.assert_array_equal(a, b)


def _count(model: onnx.ModelProto) -> int:
    from lowerer.passes.optimize import count_nodes

    return count_nodes(model)


def test_an_optimizer_that_changes_the_outputs_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxscript.optimizer

    def wrong(model: ir.Model, **kwargs: object) -> None:
        for node in model.graph:
            if node.op_type == "Hardmax":
                node.op_type = "Softmax"  # computes something else

    monkeypatch.setattr(onnxscript.optimizer, "optimize_ir", wrong)
    with pytest.raises(lowerer.VerificationError, match="optimization check failed: converted and optimized differ") \
            as info:
        lowerer.convert(_hardmax_model(), target_opset=13, verify=False, optimize=True)
    assert "rounding" not in str(info.value)  # no advice to accept a difference this large


def test_lower_pass_takes_every_convert_option_checked_once() -> None:
    import onnx_ir as ir

    from lowerer import LowerPass
    from lowerer.core.errors import InputError

    with pytest.raises(InputError, match="max_ulp"):
        LowerPass(target_opset=13, max_ulp=-1)  # checked when the pass is made, before any model
    p = LowerPass(target_opset=13, for_backend="cuda", max_ulp=4, verify_model=True)
    assert p.options.profile is not None and p.options.max_ulp == 4 and p.options.verify_model is not None
    example = Path(__file__).resolve().parent.parent / "examples" / "example_opset11.onnx"
    model = ir.serde.deserialize_model(onnx.load(example))
    result = ir.passes.PassManager([p])(model)
    assert result.model.opset_imports[""] == 13
    assert p.report is not None and p.report.backend is not None and p.report.model_check is not None
