"""``--for rknn``: the forms rknn-toolkit2's build refuses, and its witness on models with named dims.

Without the toolkit: the profile writes two coerced-axis ops that read one tensor in the last-axis form,
and refuses NonMaxSuppression on run-time boxes and cubic Resize in one line naming the build's failure;
the witness module (run here against a stand-in ``rknn.api``) loads a model at the input set's shapes and
builds again for a set of other shapes. With the toolkit (a witness: ``LOWERER_WITNESS_PYTHON`` naming a
Python that has rknn-toolkit2), a written model the build refuses is exit 1 from the deployment check.
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
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.backends.probe_models import EXPANSIONS, base_probes
from lowerer.backends.witnesses import find_witness
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


@pytest.mark.skipif(WITNESS is None, reason=f"rknn-toolkit2 is not installed: {WHY}")
def test_deployment_check_fails_what_the_build_refuses(tmp_path: Path) -> None:
    """Non-causal grouped-query Attention-23's body: written for rknn, refused by its build (exit 1, not 0)."""
    model, _ = EXPANSIONS["Attention-23-gqa"]()
    source = tmp_path / "gqa.onnx"
    onnx.save(model, str(source))
    done = subprocess.run([sys.executable, "-m", "lowerer", "convert", str(source), "-o", str(tmp_path / "o.onnx"),
                           "--for", "rknn"], capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr[-500:]
    assert "rknn-toolkit2" in done.stderr and not (tmp_path / "o.onnx").exists()
