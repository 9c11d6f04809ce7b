"""Every refusal ends with a remedy: what would work (an opset, type or shape information, an option).

The refusals walked are those of onnx's node cases (a sample, converted to opsets 7, 9 and 11) and of
the refusal tables of other test files (run here with :func:`lowerer.convert` recording what it
raises); each must end with a phrase of :data:`lowerer.core.remedies.REMEDY`. The three refusals the issue
names are checked word for word, and each remedy is checked to be true: the opset it names converts.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _node_cases import load_cases, source_opset
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core import remedies
from lowerer.core.errors import ConversionError, LowererError
from lowerer.model_io.scopes import has_subgraphs

F, I64 = TensorProto.FLOAT, TensorProto.INT64
TESTS = Path(__file__).resolve().parent


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], opset: int,
           inits: list[onnx.TensorProto] | None = None, extra: tuple[str, int] | None = None,
           rank: int = 2) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, [None] * rank)],
                              inits or [])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(*extra)] if extra else [])
    return helper.make_model(graph, opset_imports=imports)


def _refusal(model: onnx.ModelProto, target: int) -> str:
    with pytest.raises(ConversionError) as caught:
        lowerer.convert(model, target_opset=target, verify=False)
    return str(caught.value)


# -- the phrases ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(("message", "expected"), [
    ("x cannot be converted: it is odd; the lowest opset this node can be taken to is 10", True),
    ("x: the type of 'a' is unknown; add type information (value_info) for it", True),
    ("x: bfloat16 input; choose a target opset >= 13", True),
    ("x: it is odd", False),
    ("x: add shape information; but it is odd anyway", False),  # the remedy must be the last clause
])
def test_ends_with_remedy(message: str, expected: bool) -> None:
    assert remedies.ends_with_remedy(message) is expected


def test_with_reach_does_not_repeat_the_opset() -> None:
    said = "x: Where needs opset 9; the lowest opset for this node is 9"
    assert remedies.with_reach(said, 13, 7, 9) == said
    assert remedies.with_reach("x: odd", 13, 7, 10) == "x: odd; the lowest opset this node can be taken to is 10"
    assert remedies.with_reach("x: odd", 9, 11, 10).endswith("the highest opset this node can be taken to is 10")
    assert "re-export the model at opset 7" in remedies.with_reach("x: odd", 13, 7, 13)


# -- the three refusals ----------------------------------------------------------------------
def _maxpool_ceil() -> onnx.ModelProto:
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    return _model([node], [helper.make_tensor_value_info("x", F, [1, 1, 5, 5])], 12, rank=4)


def _slice_runtime_ends(dims: list[int | str]) -> onnx.ModelProto:
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["e"], axis=0),
             helper.make_node("Unsqueeze", ["e", "ax"], ["e1"]),
             helper.make_node("Slice", ["x", "st", "e1", "ax"], ["y"], name="slice")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([0]), "ax"),
             numpy_helper.from_array(np.array([0]), "st")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, dims)], 13, inits)


def _after_ort_optimizer() -> onnx.ModelProto:
    nodes = [helper.make_node("FusedGemm", ["x", "w"], ["f"], domain="com.microsoft", name="fused"),
             helper.make_node("Tanh", ["f"], ["y"], name="tanh")]
    inits = [numpy_helper.from_array(np.ones((3, 3), np.float32), "w")]
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3])], 13, inits, ("com.microsoft", 1))


def test_maxpool_ceil_mode_names_the_lowest_opset_that_works() -> None:
    message = _refusal(_maxpool_ceil(), 9)
    assert message.endswith("sets ceil_mode=1, which MaxPool-8 cannot express; "
                            "the lowest opset this node can be taken to is 10")
    out = lowerer.convert(_maxpool_ceil(), target_opset=10).model  # the remedy is true
    assert out.opset_import[0].version == 10


def test_slice_with_run_time_ends_suggests_static_shapes() -> None:
    message = _refusal(_slice_runtime_ends(["n", 4]), 9)
    assert "is not a constant" in message and remedies.MAKE_CONSTANT in message
    assert message.endswith("the lowest opset this node can be taken to is 10")
    # Both remedies are true: static input shapes fold the ends, and opset 10 takes them as an input.
    assert lowerer.convert(_slice_runtime_ends([3, 4]), target_opset=9).model.opset_import[0].version == 9
    assert lowerer.convert(_slice_runtime_ends(["n", 4]), target_opset=10).model.opset_import[0].version == 10


def test_unknown_type_says_how_to_add_it() -> None:
    message = _refusal(_after_ort_optimizer(), 5)
    assert "the type of input 'f' is unknown; add type information (value_info) for it: " in message
    assert "onnx.shape_inference.infer_shapes" in message and "onnxruntime's optimizer" in message
    assert message.endswith("the lowest opset this node can be taken to is 13")


# -- walking the refusals --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def node_case_refusals() -> list[tuple[str, int, str]]:
    """The refusals of every fourth onnx node case converted to 7, 9 and 11 (without verification)."""
    found = []
    for case in load_cases()[::4]:
        source = source_opset(case.model)
        for target in (7, 9, 11):
            if source is None or target == source:
                continue
            try:
                lowerer.convert(case.model, target_opset=target, verify=False)
            except LowererError as e:
                found.append((case.name, target, str(e)))
    return found


def test_node_case_refusals_end_with_a_remedy(node_case_refusals: list[tuple[str, int, str]]) -> None:
    assert len(node_case_refusals) > 300  # the walk sees many refusals
    bare = [f"{name} -> {target}: {message}" for name, target, message in node_case_refusals
            if not remedies.ends_with_remedy(message)]
    assert not bare, f"{len(bare)} refusals without a remedy:\n" + "\n".join(bare[:20])


def test_node_case_opset_remedies_are_true(node_case_refusals: list[tuple[str, int, str]]) -> None:
    """Where a node case's only refusing node is its one node, the opset named converts."""
    cases = {c.name: c for c in load_cases()}
    checked = 0
    for name, _target, message in node_case_refusals[::10]:
        model = cases[name].model
        found = remedies.REACHED.search(message)
        if found is None or len(model.graph.node) != 1 or int(found.group(1)) == source_opset(model) \
                or has_subgraphs(model.graph.node[0]):  # the refusing node may be one inside its body
            continue
        lowerer.convert(model, target_opset=int(found.group(1)), verify=False)
        checked += 1
    assert checked > 5


_TABLES = ("test_adapters_reach.py", "test_functions_subgraphs.py", "test_backends.py", "test_validation_gate.py")


class _Recorder:
    """A pytest plugin: every :class:`ConversionError` that :func:`lowerer.convert` raises, recorded."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._original: Any = None

    def pytest_sessionstart(self) -> None:
        self._original = original = lowerer.convert

        @functools.wraps(original)
        def recording(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except ConversionError as e:
                self.seen.append(str(e))
                raise

        lowerer.convert = recording  # type: ignore[assignment]

    def pytest_sessionfinish(self) -> None:
        lowerer.convert = self._original


def test_refusal_tables_of_other_tests_end_with_a_remedy() -> None:
    recorder = _Recorder()
    args = ["-q", "-p", "no:cacheprovider", "-n", "0", "-k", "refus or fallback or attribute_reference or gate",
            *(str(TESTS / t) for t in _TABLES)]
    assert pytest.main(args, plugins=[recorder]) == 0
    assert len(recorder.seen) >= 10
    bare = [m for m in recorder.seen if not remedies.ends_with_remedy(m)]
    assert not bare, "refusals without a remedy:\n" + "\n".join(bare)
