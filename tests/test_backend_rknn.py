"""``--for rknn``: the forms rknn-toolkit2's build refuses, and its witness on models with named dims.

Without the toolkit: the profile writes two coerced-axis ops that read one tensor in the last-axis form,
non-causal Attention in the attention-scale-after form (causal Attention as its body), and refuses
NonMaxSuppression on run-time boxes and cubic Resize in one line naming the build's failure; the witness
module (run here against a stand-in ``rknn.api``) loads a model at the input set's shapes and builds again
for a set of other shapes. With the toolkit (a witness: ``LOWERER_WITNESS_PYTHON`` naming a Python that has
rknn-toolkit2), non-causal Attention's form builds there and is right, and a written model the build refuses
(a user's own attention pattern it fails on) is exit 1 from the deployment check.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.backends.probe_models import EXPANSIONS, Probe, base_probes
from lowerer.backends.witnesses import find_witness
from lowerer.cli.probes import budget_of, compare, run_batch
from lowerer.core.errors import ConversionError

RUNTIME = Path(lowerer.__file__).parent / "backends" / "runtimes" / "rknn.py"
PROBES = {p.name: p for p in base_probes()}


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def test_coerced_axes_on_one_tensor_become_the_last_axis_form() -> None:
    probe = PROBES["Softmax-Hardmax-11-shared-axis1"]
    result = lowerer.convert(probe.model, for_backend="rknn")
    ops = _ops(result.model)
    assert ops.count("Flatten") == 2 and ops.count("Reshape") == 2
    flats = [n.output[0] for n in result.model.graph.node if n.op_type == "Flatten"]
    readers = [n.input[0] for n in result.model.graph.node if n.op_type in ("Softmax", "Hardmax")]
    assert sorted(readers) == sorted(flats) and all(int(a.i) == 1 for n in result.model.graph.node
                                                    if n.op_type in ("Softmax", "Hardmax") for a in n.attribute)


@pytest.mark.parametrize(("probe", "said"), [
    ("NonMaxSuppression-11-inputs", "build wants NonMaxSuppression.s boxes and scores constant"),
    ("Resize-19-cubic-half_pixel", "build dies"), ("Resize-13-cubic-align_corners", "build dies")])
def test_what_the_build_refuses_is_refused_naming_it(probe: str, said: str) -> None:
    with pytest.raises(ConversionError, match=rf"rknn cannot run it: its {said}") as caught:
        lowerer.convert(PROBES[probe].model, for_backend="rknn")
    assert "\n" not in str(caught.value)


def test_linear_resize_is_kept() -> None:
    model = PROBES["Resize-19-linear-half_pixel"].model
    assert _ops(lowerer.convert(model, for_backend="rknn").model) == ["Resize"]


def _first_product(model: onnx.ModelProto) -> tuple[tuple[str, str], str]:
    """The ops making the inputs of the first MatMul (``""``: a graph input), and the op reading its output."""
    made = {o: n.op_type for n in model.graph.node for o in n.output}
    first = next(n for n in model.graph.node if n.op_type == "MatMul")
    reader = next(n.op_type for n in model.graph.node if first.output[0] in n.input)
    return (made.get(first.input[0], ""), made.get(first.input[1], "")), reader


@pytest.fixture
def profile_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No deployment check: the witness Python a bare interpreter (what is tested is the profile's choice; on a set
    with -inf in Q, K and V the toolkit's attention gives NaN rows, the causal body's too: measured, see the docs)."""
    monkeypatch.setenv("LOWERER_WITNESS_PYTHON", str(Path(sys.base_prefix) / "bin" / "python3"))


@pytest.mark.usefixtures("profile_only")
@pytest.mark.parametrize("name", ["Attention-23-gqa", "Attention-23-noncausal"])
def test_non_causal_attention_is_written_with_the_scale_after_the_product(name: str) -> None:
    """The build fails on the body (no Mul between Q K^T and the Softmax); the form puts one there."""
    model, _ = EXPANSIONS[name]()
    result = lowerer.convert(model, for_backend="rknn")
    assert "Attention" not in _ops(result.model)
    assert [(r.rule, r.status) for r in result.report.rewrites] == [("attention-scale-after", "verified")]
    assert _first_product(result.model) == (("", "Transpose"), "Mul")


@pytest.mark.usefixtures("profile_only")
def test_causal_attention_is_its_body() -> None:
    """Causal Attention's body builds and is right there: the profile leaves it to the expansion."""
    model, _ = EXPANSIONS["Attention-23"]()
    result = lowerer.convert(model, for_backend="rknn")
    assert [r.rule for r in result.report.rewrites] == ["function-expansion"]
    assert _first_product(result.model)[0] == ("Mul", "Mul")


class _Toolkit:
    """A stand-in for rknn.api.RKNN: records what it was asked, returns the input's first array."""

    calls: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, verbose: bool = False) -> None:
        self.released = False

    def config(self, **kwargs: Any) -> None:
        self.calls.append(("config", kwargs))

    def load_onnx(self, **kwargs: Any) -> int:
        self.calls.append(("load_onnx", kwargs))
        return 0

    def build(self, **kwargs: Any) -> int:
        return 0

    def init_runtime(self) -> int:
        return 0

    def inference(self, inputs: list[np.ndarray], data_format: list[str]) -> list[np.ndarray]:
        return [inputs[0]]

    def release(self) -> None:
        self.released = True


def test_witness_loads_at_each_input_sets_shapes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    api = types.ModuleType("rknn.api")
    api.RKNN = _Toolkit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rknn", types.ModuleType("rknn"))
    monkeypatch.setitem(sys.modules, "rknn.api", api)
    spec = importlib.util.spec_from_file_location("_rknn_runtime_under_test", RUNTIME)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _Toolkit.calls = []
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])), str(path))
    one, two = {"x": np.zeros((1, 3), np.float32)}, {"x": np.ones((2, 3), np.float32)}
    prepared = module.prepare(module.load(str(path), ""), None, one, "")
    assert module.infer(prepared, one, None, ["x"])[0].shape == (1, 3)
    first = prepared["rknn"]
    assert module.infer(prepared, two, None, ["x"])[0].shape == (2, 3)
    module.close(prepared)
    loads = [kw for call, kw in _Toolkit.calls if call == "load_onnx"]
    assert [kw["input_size_list"] for kw in loads] == [[[1, 3]], [[2, 3]]]
    assert all(kw["inputs"] == ["x"] for kw in loads) and first.released and prepared["rknn"].released


WITNESS, WHY = find_witness("rknn-toolkit2")


def _convert(tmp_path: Path, model: onnx.ModelProto) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "m.onnx"
    onnx.save(model, str(source))
    return subprocess.run([sys.executable, "-m", "lowerer", "convert", str(source), "-o", str(tmp_path / "o.onnx"),
                           "--for", "rknn"], capture_output=True, text=True, check=False)


@pytest.mark.skipif(WITNESS is None, reason=f"rknn-toolkit2 is not installed: {WHY}")
@pytest.mark.usefixtures("profile_only")
@pytest.mark.parametrize("name", ["Attention-23-gqa", "Attention-23-noncausal"])
def test_non_causal_attention_form_builds_and_is_right_there(name: str) -> None:
    """Its body failed the build (IndexError in fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa); the form
    builds and matches onnxruntime on the original within the toolkit's float16 budget, on the probe's inputs."""
    assert WITNESS is not None
    model, feeds = EXPANSIONS[name]()
    written = lowerer.convert(model, for_backend="rknn").model
    (built,) = run_batch(WITNESS, [Probe(name, "", "", written, feeds)])
    assert not isinstance(built, tuple), built
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ok, _, what = compare(session.run(None, feeds), built, budget_of("rknn-toolkit2"))
    assert ok, what


@pytest.mark.skipif(WITNESS is None, reason=f"rknn-toolkit2 is not installed: {WHY}")
def test_deployment_check_fails_what_the_build_refuses(tmp_path: Path) -> None:
    """A user's own MatMul + Softmax + MatMul at batch 1 (no Mul after the product): the build fails it, exit 1."""
    shape = [1, 2, 4, 8]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["w"]), helper.make_node("Softmax", ["w"], ["p"], axis=-1),
             helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    done = _convert(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9))
    assert done.returncode == 1, done.stderr[-500:]
    assert "rknn-toolkit2" in done.stderr and not (tmp_path / "o.onnx").exists()
