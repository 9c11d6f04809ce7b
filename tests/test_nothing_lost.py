"""Nothing is lost in a conversion: metadata, doc strings, names, value_info, other domains, functions."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.model_io.ir_version import choose, lowest_for_opsets

F, I64 = TensorProto.FLOAT, TensorProto.INT64
_SO = ort.SessionOptions()
_SO.log_severity_level = 3
OWNED = {"Hardmax", "Softmax", "LogSoftmax", "ArgMax", "ArgMin", "GlobalMaxPool"}


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _rich_model(opset: int = 11, ir_version: int = 10) -> onnx.ModelProto:
    """Every kind of thing a conversion must keep, around owned ops that it rewrites."""
    w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(4, 6) / 7, "W")
    unused = numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "unused_init")
    scale = helper.make_function(
        "custom.domain", "Scale", ["a"], ["b"],
        [helper.make_node("Mul", ["a", "a"], ["b"], name="fn_mul", doc_string="square it")],
        [helper.make_opsetid("", opset)], doc_string="a model-local function")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="matmul", doc_string="doc of matmul"),
        helper.make_node("Gelu", ["mm"], ["gelu"], name="ms_gelu", domain="com.microsoft",
                         doc_string="a contrib op"),
        helper.make_node("Scale", ["gelu"], ["scaled"], name="call_scale", domain="custom.domain"),
        helper.make_node("Reshape", ["scaled", "shape"], ["r"], name="reshape"),
        helper.make_node("Softmax", ["r"], ["sm"], name="softmax", axis=1, doc_string="doc of softmax"),
        helper.make_node("Hardmax", ["r"], ["hm"], name="hardmax", axis=2, doc_string="doc of hardmax"),
        helper.make_node("ArgMax", ["hm"], ["am"], name="argmax", axis=-1, keepdims=0),
        helper.make_node("GlobalMaxPool", ["r"], ["gmp"], name="gmp"),
    ]
    graph = helper.make_graph(
        nodes, "the_graph",
        [helper.make_tensor_value_info("x", F, ["batch", 4])],
        [helper.make_tensor_value_info("sm", F, ["batch", 2, 3]),
         helper.make_tensor_value_info("am", I64, ["batch", 2]),
         helper.make_tensor_value_info("gmp", F, ["batch", 2, 1])],
        initializer=[w, unused, numpy_helper.from_array(np.array([-1, 2, 3], dtype=np.int64), "shape")],
        doc_string="doc of the graph",
        value_info=[helper.make_tensor_value_info("mm", F, ["batch", 6]),
                    helper.make_tensor_value_info("gelu", F, ["batch", 6]),
                    helper.make_tensor_value_info("r", F, ["batch", 2, 3])],
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1),
                       helper.make_opsetid("custom.domain", 1)],
        functions=[scale], ir_version=ir_version, producer_name="preservation-test", producer_version="9.8.7",
        domain="org.example", model_version=42, doc_string="doc of the model")
    helper.set_model_props(model, {"author": "me", "license": "MIT", "empty": ""})
    if ir_version >= 10:
        graph_meta = model.graph.metadata_props.add()
        graph_meta.key, graph_meta.value = "graph-key", "graph-value"
        node_meta = model.graph.node[0].metadata_props.add()
        node_meta.key, node_meta.value = "node-key", "node-value"
        fn_meta = model.functions[0].metadata_props.add()
        fn_meta.key, fn_meta.value = "fn-key", "fn-value"
        model.functions[0].value_info.append(helper.make_tensor_value_info("a", F, ["batch", 6]))
    return model


def _not_owned(nodes: object) -> list[onnx.NodeProto]:
    return [n for n in nodes if n.op_type not in OWNED]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("target", "decompose"), [(13, ()), (13, ("all",)), (18, ("hardmax",)), (11, ("all",))])
def test_everything_survives(target: int, decompose: tuple[str, ...]) -> None:
    model = _rich_model()
    onnx.checker.check_model(model, full_check=True)
    out = lowerer.convert(model, target_opset=target, decompose=decompose).model
    onnx.checker.check_model(out, full_check=True)
    # model-level fields
    for fld in ("producer_name", "producer_version", "domain", "model_version", "doc_string"):
        assert getattr(out, fld) == getattr(model, fld), fld
    assert list(out.metadata_props) == list(model.metadata_props)
    # opset imports: the default domain moved, the others kept
    assert {o.domain: o.version for o in out.opset_import} == {"": target, "com.microsoft": 1, "custom.domain": 1}
    # graph-level
    g, g0 = out.graph, model.graph
    assert (g.name, g.doc_string) == (g0.name, g0.doc_string)
    assert list(g.metadata_props) == list(g0.metadata_props)
    assert list(g.input) == list(g0.input) and list(g.output) == list(g0.output)
    assert list(g.initializer)[:len(g0.initializer)] == list(g0.initializer)
    assert [vi for vi in g.value_info if vi.name in {v.name for v in g0.value_info}] == list(g0.value_info)
    # nodes lowerer does not own stay exactly as they were (names, doc strings, metadata, domains)
    assert [n for n in _not_owned(g.node) if n.name in {m.name for m in g0.node}] == _not_owned(g0.node)
    # every value name of the original graph is still there
    names = {v for n in g.node for v in (*n.input, *n.output)}
    assert {v for n in g0.node for v in (*n.input, *n.output)} <= names
    # functions
    assert list(out.functions) == list(model.functions) or (
        [(f.domain, f.name, f.doc_string, list(f.metadata_props), list(f.value_info)) for f in out.functions]
        == [(f.domain, f.name, f.doc_string, list(f.metadata_props), list(f.value_info)) for f in model.functions])
    # and it computes the same
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    for a, b in zip(_run(model, {"x": x}), _run(out, {"x": x}), strict=True):
        np.testing.assert_array_equal(a, b)


def test_unchanged_nodes_keep_doc_strings_inside_subgraphs() -> None:
    branch = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu", doc_string="keep me"),
         helper.make_node("Softmax", ["r"], ["y_b"], name="sm", axis=0, doc_string="and me")],
        "branch", [], [helper.make_tensor_value_info("y_b", F, [2, 3])], doc_string="branch doc")
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=branch, else_branch=branch,
                          doc_string="if doc")],
        "g", [helper.make_tensor_value_info("x", F, [2, 3]), helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
    out = lowerer.convert(model, target_opset=13).model
    if_node = out.graph.node[0]
    assert if_node.doc_string == "if doc"
    then_g = next(a.g for a in if_node.attribute if a.name == "then_branch")
    assert then_g.doc_string == "branch doc" and then_g.name == "branch"
    assert then_g.node[0].doc_string == "keep me"
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        np.testing.assert_array_equal(_run(model, feeds)[0], _run(out, feeds)[0])


@pytest.mark.parametrize(("ir", "source", "target"), [(3, 7, 13), (4, 9, 11), (7, 11, 18), (10, 13, 7),
                                                      (14, 28, 11), (8, 18, 28), (3, 1, 9), (6, 11, 11)])
def test_ir_version_allowed_and_loadable(ir: int, source: int, target: int) -> None:
    x = helper.make_tensor_value_info("x", F, [2, 3])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)], "g", [x],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", source)], ir_version=ir)
    out = lowerer.convert(model, target_opset=target, decompose=()).model
    needed = helper.find_min_ir_version_for(list(out.opset_import))
    assert out.ir_version == needed  # the lowest the target opset allows: no feature of this model holds it up
    onnx.checker.check_model(out, full_check=True)
    xv = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_array_equal(_run(out, {"x": xv})[0], _run(model, {"x": xv})[0])


def test_choose_ir_version_with_functions() -> None:
    fn = helper.make_function("pkg", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 13)])
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="pkg")], "g",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, functions=[fn], ir_version=7,
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("pkg", 1)])
    assert choose(model, source_ir=7, target_opset=13, asked=None).version >= 8
    assert lowest_for_opsets([helper.make_opsetid("", 28)]) == \
        helper.find_min_ir_version_for([helper.make_opsetid("", 28)])
