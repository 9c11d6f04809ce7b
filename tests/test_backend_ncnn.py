"""``--for ncnn``: the forms its profile picks, the refusals it says, and the witness's batch axes.

Without ncnn the profile alone is tested: Gather with a constant list of indices is written as Slices
(``gather-slices``), Attention-23's body has its constant row guard taken as the branch it takes
(``where-constant``), a Where on a run-time condition is refused in one line, and the witness reads the batch
axes pnnx names from the script it writes. With ncnn (``LOWERER_WITNESS_PYTHON`` naming a venv that has
``ncnn`` and ``pnnx``), the written models run there equal, and so does a fixture at batch 2.
"""

from __future__ import annotations

import importlib.util
import os
import warnings
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.backends.probe_models import EXPANSIONS
from lowerer.backends.witnesses import find_witness
from lowerer.core.errors import ConversionError

ROOT = Path(__file__).resolve().parent.parent


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def _gather(indices: np.ndarray, axis: int) -> onnx.ModelProto:
    shape = [2, 3, 4]
    out = shape[:axis] + list(indices.shape) + shape[axis + 1:]
    graph = helper.make_graph([helper.make_node("Gather", ["x", "g"], ["y"], name="gather", axis=axis)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              [numpy_helper.from_array(indices.astype(np.int64), "g")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize(("indices", "axis"), [
    (np.array([-1, 0, -4]), 2), (np.array([2, 0]), 1), (np.array([1, 0]), 0), (np.array([[3, 0], [1, -2]]), 2),
    (np.array([-1]), 2)])
def test_gather_with_a_constant_list_is_written_as_slices_for_ncnn(indices: np.ndarray, axis: int) -> None:
    """pnnx writes a Gather over a constant list as one select: Slices concatenated, equal in onnxruntime."""
    model = _gather(indices, axis)
    result = lowerer.convert(model, for_backend="ncnn", verify=True)
    ops = [n.op_type for n in result.model.graph.node]
    assert "Gather" not in ops and "Slice" in ops, ops
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(_run(result.model, {"x": x})[0], _run(model, {"x": x})[0])


def test_gather_with_a_scalar_index_is_kept_for_ncnn() -> None:
    """A scalar index is right on ncnn (measured): the profile names no such Gather."""
    result = lowerer.convert(_gather(np.array(-1), 2), for_backend="ncnn")
    assert [n.op_type for n in result.model.graph.node] == ["Gather"]


@pytest.mark.parametrize("name", ["Attention-23", "Attention-23-gqa"])
def test_attention_body_for_ncnn_has_no_where(name: str) -> None:
    """The body's fully-masked-row guard folds to a constant all false: the Softmax passes through, no Where."""
    model, feeds = EXPANSIONS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = lowerer.convert(model, for_backend="ncnn")
    ops = [n.op_type for n in result.model.graph.node]
    assert "Where" not in ops and "Attention" not in ops, ops
    want, got = _run(model, feeds)[0], _run(result.model, feeds)[0]
    assert np.abs(want - got).max() <= 1e-6 * np.abs(want).max()


def test_attention_with_a_run_time_mask_is_refused_for_ncnn_in_one_line() -> None:
    """With a mask fed at run time the guard's condition is not constant: the Where is refused, naming it."""
    shapes = {"q": [1, 2, 4, 8], "k": [1, 2, 4, 8], "v": [1, 2, 4, 8], "m": [4, 4]}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    graph = helper.make_graph([helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], name="att")], "a", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    with pytest.raises(ConversionError) as refused:
        lowerer.convert(model, for_backend="ncnn")
    text = str(refused.value)
    assert "\n" not in text and text.startswith("node ") and "(Where-16" in text and "torch.where" in text, text


def test_where_on_a_constant_condition_is_its_branch_for_ncnn() -> None:
    """A Where whose condition is a constant all true becomes its first branch (an Identity), not refused."""
    nodes = [helper.make_node("Add", ["x", "x"], ["s"]), helper.make_node("Where", ["c", "s", "z"], ["y"])]
    graph = helper.make_graph(nodes, "w",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [numpy_helper.from_array(np.ones((1, 3), np.bool_), "c"),
                               numpy_helper.from_array(np.zeros((1,), np.float32), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    result = lowerer.convert(model, for_backend="ncnn")
    assert [n.op_type for n in result.model.graph.node] == ["Add", "Identity"]


def _ncnn_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ncnn_record", ROOT / "lowerer" / "backends" / "runtimes" / "ncnn.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_witness_reads_the_batch_axes_pnnx_names() -> None:
    """pnnx's test script names each input's and output's batch axis (233: none); the witness reads them."""
    module = _ncnn_module()
    script = ('            ex.input("in0", ncnn.Mat(in0.numpy(), batch_index=0).clone())\n'
              '            ex.input("in1", ncnn.Mat(in1.numpy(), batch_index=233).clone())\n'
              '            out.append(torch.from_numpy(out0.numpy(batch_index=0)))\n')
    assert {int(i): int(a) for i, a in module._BATCH_IN.findall(script)} == {0: 0, 1: 233}
    assert {int(i): int(a) for i, a in module._BATCH_OUT.findall(script)} == {0: 0}


def _ncnn_or_skip() -> None:
    witness, why = find_witness("ncnn")
    if witness is None or not os.environ.get("LOWERER_WITNESS_PYTHON"):
        pytest.skip(f"ncnn is not installed here: {why}")


def test_resnet18_at_batch_2_runs_on_ncnn() -> None:
    """The batch axis pnnx names is the Mat's batch count: the fixture at batch 2 matches there (it did not)."""
    _ncnn_or_skip()
    source = ROOT / "tests" / "fixtures" / "real" / "resnet18.legacy.opset17.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = lowerer.convert(str(source), for_backend="ncnn")
    assert result.report.backend["deployment"]["status"] == "equal", result.report.backend["deployment"]


@pytest.mark.parametrize("name", ["Attention-23", "Attention-23-gqa"])
def test_attention_body_runs_on_ncnn(name: str) -> None:
    _ncnn_or_skip()
    model, _ = EXPANSIONS[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = lowerer.convert(model, for_backend="ncnn")
    assert result.report.backend["deployment"]["status"] == "equal", result.report.backend["deployment"]


def test_gather_list_runs_on_ncnn() -> None:
    _ncnn_or_skip()
    result = lowerer.convert(_gather(np.array([-1, 0, -4]), 2), for_backend="ncnn")
    assert result.report.backend["deployment"]["status"] == "equal", result.report.backend["deployment"]
