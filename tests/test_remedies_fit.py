"""Remedies and forms that fit the model in hand (issue 38): each checked where it is true and where it is not."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError

F = TensorProto.FLOAT


def _dequantize_model(scale_shape: list[int], constant_scale: bool = True) -> onnx.ModelProto:
    """x + DequantizeLinear-13(bias int32[4], scale, zero point): the int32 bias quantize_static writes."""
    scale = np.full(scale_shape, 0.25, dtype=np.float32) if scale_shape else np.float32(0.25)
    inits = [numpy_helper.from_array(np.array([3, -7, 11, 0], dtype=np.int32), "bias"),
             numpy_helper.from_array(np.zeros(scale_shape, dtype=np.int32), "zp")]
    inputs = [helper.make_tensor_value_info("x", F, [2, 4])]
    if constant_scale:
        inits.append(numpy_helper.from_array(np.asarray(scale), "scale"))
    else:
        inputs.append(helper.make_tensor_value_info("scale", F, scale_shape))
    nodes = [helper.make_node("DequantizeLinear", ["bias", "scale", "zp"], ["b"], axis=0, name="dq"),
             helper.make_node("Add", ["x", "b"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("constant_scale", [True, False])
def test_one_element_scale_is_per_tensor(constant_scale: bool) -> None:
    # quantize_static(per_channel=False) writes the int32 bias scale as a 1-element 1-D tensor: per-tensor
    result = lowerer.convert(_dequantize_model([1], constant_scale), target_opset=11)
    onnx.checker.check_model(result.model, full_check=True)
    assert [r.status for r in result.report if r.op_type == "DequantizeLinear"] == ["verified"]


def test_per_channel_scale_still_refused() -> None:
    with pytest.raises(ConversionError, match="per-axis quantization came at 13"):
        lowerer.convert(_dequantize_model([4]), target_opset=11)


def _unknown_rank_model(dims: list[int | str]) -> onnx.ModelProto:
    """Flatten-11 with axis=-1 on a value whose rank comes from the input's data (lowerer cannot know it)."""
    nodes = [helper.make_node("Mul", ["x", "zf"], ["x0"]),
             helper.make_node("ReduceMin", ["x0"], ["m"], keepdims=1, axes=[0, 1, 2, 3]),
             helper.make_node("Reshape", ["m", "one"], ["m1"]),
             helper.make_node("Cast", ["m1"], ["mi"], to=TensorProto.INT64),
             helper.make_node("Add", ["mi", "three"], ["end"]),
             helper.make_node("Slice", ["tail", "zero", "end"], ["shape"]),
             helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Flatten", ["r"], ["y"], axis=-1, name="flat")]
    inits = [numpy_helper.from_array(np.array(0, np.float32), "zf"),
             numpy_helper.from_array(np.array([1, -1, 40], np.int64), "tail"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([3], np.int64), "three")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, dims)],
                              [helper.make_tensor_value_info("y", F, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


def test_static_shapes_advised_only_for_dynamic_inputs() -> None:
    with pytest.raises(ConversionError) as dynamic:
        lowerer.convert(_unknown_rank_model(["n", 3, 40, 40]), target_opset=10)
    assert "make the input shapes static" in str(dynamic.value)
    with pytest.raises(ConversionError) as static:
        lowerer.convert(_unknown_rank_model([1, 3, 40, 40]), target_opset=10)
    message = str(static.value)
    assert "make the input shapes static" not in message
    assert "input shapes are static already" in message and "onnxscript.optimizer.optimize" in message
    assert all("make the input shapes static" not in r["refusal"] for r in static.value.refused)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("runtime", "provider_named"),
                         [("openvino", False), ("onnxruntime", True), ("tensorrt", True)])
def test_backend_line_speaks_of_the_runtime_named(runtime: str, provider_named: bool) -> None:
    from lowerer.backends.lowering import placement_line
    from lowerer.backends.proof import NOT_PROVEN

    record = {"spec": "x==1", "provider": "OpenVINOExecutionProvider", "rewritten": 0, "left": [],
              "placement": NOT_PROVEN, "placement_detail": "OpenVINOExecutionProvider is not installed",
              "loads": {"runtime": runtime}, "deployment": {"reason": "not run here"}}
    line = placement_line(record)
    assert ("OpenVINOExecutionProvider" in line) is provider_named
    assert line.endswith("deployment: not run here")


def _patch_model(dims: list[int | str]) -> onnx.ModelProto:
    """A DINOv2-like 4x4 patch Conv (stride 4): an image of 1x1 or 2x2, as generated for dynamic dims, is too small."""
    w = numpy_helper.from_array(np.ones((2, 3, 4, 4), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[4, 4], strides=[4, 4], name="patch"),
             helper.make_node("ReduceMean", ["c"], ["y"], axes=[2, 3], keepdims=0, name="pool")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, dims)],
                              [helper.make_tensor_value_info("y", F, [dims[0], 2])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_model_check_remedy_names_input_shapes_where_generated_dims_failed() -> None:
    from lowerer.core.errors import VerificationError
    from lowerer.verification.whole import ModelCheckOptions

    with pytest.raises(VerificationError) as generated:
        lowerer.convert(_patch_model(["n", 3, "h", "w"]), target_opset=11, verify_model=True)
    message = str(generated.value)
    assert "--input-shapes x:nx3xhxw" in message and "--load-inputs" in message
    assert "--allow-unverified" not in message
    # the sizes it names make the check run
    given = ModelCheckOptions(input_shapes={"x": (1, 3, 8, 8)})
    result = lowerer.convert(_patch_model(["n", 3, "h", "w"]), target_opset=11, verify_model=given)
    assert result.report.model_check is not None and result.report.model_check["status"] == "equal"


def test_model_check_remedy_without_generated_dims_is_allow_unverified() -> None:
    from lowerer.core.errors import VerificationError
    from lowerer.verification.whole import ModelCheckOptions

    # every dim given (here: too small): nothing about the generated shapes to change
    given = ModelCheckOptions(input_shapes={"x": (1, 3, 2, 2)})
    with pytest.raises(VerificationError) as shaped:
        lowerer.convert(_patch_model(["n", 3, "h", "w"]), target_opset=11, verify_model=given)
    assert "--input-shapes" not in str(shaped.value) and "--allow-unverified" in str(shaped.value)


def _scatter_add_model(opset: int = 17) -> onnx.ModelProto:
    """ScatterND with reduction='add' on run-time indices: OpenVINO < 2025's ONNX frontend refuses it."""
    nodes = [helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], reduction="add", name="scatter")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("data", F, [4, 3]),
                                           helper.make_tensor_value_info("idx", TensorProto.INT64, [2, 1]),
                                           helper.make_tensor_value_info("upd", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [4, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_backend_refusal_names_the_opset_that_works_there() -> None:
    with pytest.raises(ConversionError) as refused:
        lowerer.convert(_scatter_add_model(), for_backend="openvino==2024.0", verify=False)
    message = str(refused.value)
    assert "--target-opset 15" in message and "--allow-fallback" not in message
    # the opset it names converts for that backend
    lowerer.convert(_scatter_add_model(), for_backend="openvino==2024.0", target_opset=15, verify=False)


def test_backend_refusal_without_a_working_opset() -> None:
    # --no-loops refuses the loop form opset 15 needs: that opset is not offered, nor a fallback as if onnxruntime's
    with pytest.raises(ConversionError) as refused:
        lowerer.convert(_scatter_add_model(), for_backend="openvino==2024.0", verify=False, no_loops=True)
    message = str(refused.value)
    assert "--target-opset 15" not in message
    assert "no option makes openvino==2024.0 run it" in message


@pytest.mark.parametrize(("backend", "kept_said"), [("openvino==2024.0", False), (None, True)])
def test_loop_warning_speaks_of_the_backend_named(backend: str | None, kept_said: bool,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    import logging

    model = _scatter_add_model(18)
    with caplog.at_level(logging.WARNING, logger="lowerer"):
        lowerer.convert(model, target_opset=15, verify=False,
                        **({"for_backend": backend} if backend else {}))  # type: ignore[arg-type]
    (line,) = [r.getMessage() for r in caplog.records if "Loop over updates" in r.getMessage()]
    assert ("a target opset >= 16 keeps it" in line) is kept_said
    assert ("openvino==2024.0 cannot run every ScatterND in its own form at opset 16" in line) is not kept_said


def test_refusal_line_short_whole_words_with_the_remedy() -> None:
    from lowerer.core.remedies import refusal_line

    message = ("node 'n' (Slice-13, in graph) cannot be converted to opset 9: Slice takes 'ends' as input 2 from "
               "version 10; Slice-1 needs it as an attribute, and input 'v' is not a constant (an initializer that is "
               "not a graph input, a Constant, or a foldable shape computation); make it a constant: export with "
               "static input shapes (or python -m onnxruntime.tools.make_dynamic_shape_fixed) so that the shape "
               "computation it comes from folds; the lowest opset this node can be taken to is 10 (and 3 more nodes "
               "that cannot be converted: Where-16 x2, IsNaN-13)")
    line = refusal_line(message, 184)
    assert len(line) <= 184 and line.startswith("node 'n' (Slice-13) cannot be converted to opset 9: ")
    assert "lowest opset it converts to: 10" in line and "3 more nodes refused" in line
    assert line.endswith("(in full: --report, inspect)")
    words = set(message.replace("(", " ").replace(")", " ").split())
    assert all(w.rstrip("…;,:") in words or w.rstrip("…;,:") in line for w in line.split() if "…" in w)
    assert refusal_line("node 'n' (Abs-13, in graph): short", 184) == "node 'n' (Abs-13, in graph): short"


def test_cli_refusal_line_fits_and_the_report_has_it_in_full(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from lowerer.cli import main

    src, report = tmp_path / "m.onnx", tmp_path / "r.json"
    onnx.save(_scatter_add_model(), src)
    for extra in ([], ["--report", str(report)]):
        result = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--for",
                                           "openvino==2024.0", "--no-verify", *extra])
        (line,) = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(line) <= 200
        assert line.startswith("lowerer: error: node 'scatter' (ScatterND-16): ")
        # the why is cut first where the report's path is long (pytest-xdist's temporary folders): not the remedy
        assert "--target-opset 15" in line and (extra or "openvino==2024.0 cannot" in line)
    (refused,) = json.loads(report.read_text())["summary"]["refused"]
    assert len(refused["refusal"]) > 200 and "source: measured" in refused["refusal"]
    assert line.endswith(f"(in full: {report})")
    # inspect prints the refusal in full, then the short line
    shown = CliRunner().invoke(main, ["inspect", str(src), "--for", "openvino==2024.0"])
    assert shown.exit_code == 2 and f"convert would refuse: {refused['refusal']}" in shown.stdout
    (short,) = shown.stderr.strip().splitlines()
    assert len(short) <= 200 and short.endswith("(in full above)")


def _layer_norm_model(float_input: bool) -> onnx.ModelProto:
    """LayerNormalization-17 (at 11: its function body, whose NaN handling differs) fed by a float input or by ids."""
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "g"),
             numpy_helper.from_array(np.zeros(4, np.float32), "b")]
    nodes = [helper.make_node("LayerNormalization", ["h", "g", "b"], ["y"], axis=-1, name="ln")]
    if float_input:
        inputs = [helper.make_tensor_value_info("h", F, [2, 4])]
    else:
        inits.append(numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "table"))
        nodes.insert(0, helper.make_node("Gather", ["table", "ids"], ["h"], axis=0, name="embed"))
        inputs = [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, [2, 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("float_input", [True, False])
def test_nan_note_only_where_nan_inputs_reach(tmp_path, float_input: bool) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from lowerer.cli import main

    src = tmp_path / "m.onnx"
    onnx.save(_layer_norm_model(float_input), src)
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11",
                                       "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 0
    assert ("on NaN inputs" in result.stderr) is float_input
    assert "recorded, not judged" in (tmp_path / "r.json").read_text()  # the report keeps the difference either way
