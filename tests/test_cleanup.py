"""The clean-up pass: what the rewrites left unread is removed, and nothing else."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.report import Rewrite
from lowerer.model_io.scopes import used_names
from lowerer.passes.cleanup import remove_dead


def _reshape_model(extra_reader: bool = False, shape_is_input: bool = False) -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([3, 2], dtype=np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])]
    if extra_reader:
        nodes.append(helper.make_node("Identity", ["shape"], ["s"]))
        outputs.append(helper.make_tensor_value_info("s", TensorProto.INT64, [2]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if shape_is_input:
        inputs.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    graph = helper.make_graph(nodes, "g", inputs, outputs, [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _reduce_model() -> onnx.ModelProto:
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_initializer_only_the_rewritten_node_read_is_removed() -> None:
    out = lowerer.convert(_reduce_model(), target_opset=11).model
    assert [t.name for t in out.graph.initializer] == []  # axes became an attribute of ReduceSum-11
    onnx.checker.check_model(out, full_check=True)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.sum(axis=1, keepdims=True))


def test_dead_int64_constant_is_removed_so_the_output_passes_the_full_check() -> None:
    """onnx's version-converter case test_reshape_6_4: the shape Constant is no longer read at opset 4."""
    c = helper.make_node("Constant", [], ["shape"], value=numpy_helper.from_array(np.array([3, 2], dtype=np.int64)))
    graph = helper.make_graph([c, helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)], ir_version=3)
    out = lowerer.convert(model, target_opset=4, verify=False).model
    assert [n.op_type for n in out.graph.node] == ["Reshape"] and not out.graph.initializer
    onnx.checker.check_model(out, full_check=True)


def test_a_value_still_read_or_a_graph_input_is_kept() -> None:
    out = lowerer.convert(_reshape_model(extra_reader=True), target_opset=4, verify=False).model
    assert [t.name for t in out.graph.initializer] == ["shape"]  # the Identity still reads it
    # a graph input (its initializer is only its default) is never removed, read or not
    model = _reshape_model(shape_is_input=True)
    del model.graph.node[:]
    rewrite = Rewrite(node="r", op_type="Reshape", scope="graph", from_version=13, to_opset=4, rule="version-steps",
                      emitted=["Reshape"], original=helper.make_node("Reshape", ["x", "shape"], ["y"]))
    assert remove_dead(model, [rewrite]) == 0 and [t.name for t in model.graph.initializer] == ["shape"]
    model.graph.input.pop()
    assert remove_dead(model, [rewrite]) == 1 and not model.graph.initializer


def test_values_nothing_rewrote_are_not_touched() -> None:
    """A dead initializer the input already had stays: only what the rewrites left unread goes."""
    model = _reduce_model()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "unused_before"))
    out = lowerer.convert(model, target_opset=11, verify=False).model
    assert [t.name for t in out.graph.initializer] == ["unused_before"]


def test_dead_value_inside_a_subgraph_is_removed() -> None:
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    body = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["r"], keepdims=1)], "then",
                             [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 1])], [axes])
    other = helper.make_graph([helper.make_node("ReduceMax", ["x"], ["m"], axes=[1], keepdims=1)], "else",
                              [], [helper.make_tensor_value_info("m", TensorProto.FLOAT, [2, 1])])
    graph = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=other)], "g",
                              [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    out = lowerer.convert(model, target_opset=11).model
    assert not out.graph.node[0].attribute[0].g.initializer or not out.graph.node[0].attribute[1].g.initializer
    branches = {a.name: a.g for a in out.graph.node[0].attribute}
    assert not branches["then_branch"].initializer
    onnx.checker.check_model(out, full_check=True)


_REAL = sorted((Path(__file__).resolve().parent / "fixtures" / "real").glob("*.onnx"))


@pytest.mark.parametrize("path", _REAL, ids=lambda p: p.stem)
def test_no_converted_real_export_carries_dead_weight(path: Path) -> None:
    """Converted to 11: no initializer nothing reads, no node whose outputs nothing reads (the inputs have none)."""
    model = onnx.load(str(path))
    out = lowerer.convert(model, target_opset=11, verify=False).model
    used = used_names(out)
    assert [t.name for t in out.graph.initializer if t.name not in used] == []
    assert [n.name for n in out.graph.node if not any(o in used for o in n.output if o)] == []
