"""The subgraph walker of lowerer.model_io.scopes: every graph and node found once, in document order."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from lowerer.model_io.naming import NameGenerator, node_label
from lowerer.model_io.scopes import model_graphs, node_graphs, walk_graphs, walk_nodes


def _body(name: str, *nodes: onnx.NodeProto) -> onnx.GraphProto:
    out = helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [1])
    return helper.make_graph(list(nodes), name, [], [out])


def _model() -> onnx.ModelProto:
    """Main graph: an If (then: a nested If; else: Identity) and a custom node with a GRAPHS attribute."""
    inner = helper.make_node("If", ["c"], ["then_out"], name="inner_if", then_branch=_body("deep_then"),
                             else_branch=_body("deep_else"))
    outer = helper.make_node("If", ["c"], ["y"], name="outer_if",
                             then_branch=_body("then", inner),
                             else_branch=_body("else", helper.make_node("Identity", ["x"], ["else_out"], name="id")))
    multi = helper.make_node("Multi", ["x"], ["z"], name="multi", domain="custom")
    multi.attribute.append(helper.make_attribute("bodies", [_body("g0"), _body("g1")]))
    graph = helper.make_graph([outer, multi], "main",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    fn_if = helper.make_node("If", ["a"], ["b"], name="fn_if", then_branch=_body("fn_then"),
                             else_branch=_body("fn_else"))
    function = helper.make_function("pkg", "F", ["a"], ["b"], [fn_if], [helper.make_opsetid("", 18)])
    return helper.make_model(graph, functions=[function], opset_imports=[helper.make_opsetid("", 18)])


def test_node_graphs_lists_graph_and_graphs_attributes_in_order() -> None:
    model = _model()
    outer, multi = model.graph.node
    assert [g.name for g in node_graphs(outer)] == ["else", "then"]  # make_node sorts attributes
    assert [g.name for g in node_graphs(multi)] == ["g0", "g1"]
    assert list(node_graphs(helper.make_node("Relu", ["x"], ["y"]))) == []


def test_walk_graphs_is_depth_first_in_document_order() -> None:
    names = [g.name for g in walk_graphs(_model().graph)]
    assert names == ["main", "else", "then", "deep_else", "deep_then", "g0", "g1"]


def test_walk_graphs_yields_the_graphs_themselves() -> None:
    model = _model()
    then = next(g for g in walk_graphs(model.graph) if g.name == "then")
    then.node[0].name = "renamed"
    assert next(a.g for a in model.graph.node[0].attribute if a.name == "then_branch").node[0].name == "renamed"


def test_walk_graphs_finds_every_level_of_deep_nesting() -> None:
    graph = _body("level0")
    for depth in range(1, 30):  # protobuf refuses much deeper messages
        node = helper.make_node("If", ["c"], [f"level{depth}_out"], then_branch=graph, else_branch=_body("e"))
        graph = _body(f"level{depth}", node)
    names = [g.name for g in walk_graphs(graph)]
    assert [n for n in names if n.startswith("level")] == [f"level{d}" for d in range(29, -1, -1)]
    assert names.count("e") == 29


def test_model_graphs_and_walk_nodes_cover_functions() -> None:
    model = _model()
    assert [g.name for g in model_graphs(model)][-2:] == ["fn_else", "fn_then"]
    nodes = [n.name for n in walk_nodes(model)]
    assert sorted(nodes) == sorted(["outer_if", "multi", "inner_if", "id", "fn_if"])
    assert len(nodes) == len(set(nodes))


def test_name_generator_avoids_names_in_subgraphs_and_functions() -> None:
    model = _model()
    model.graph.node[0].attribute[1].g.node[0].output[0] = "v__lw1"  # in the then branch
    model.functions[0].node[0].attribute[0].g.output[0].name = "v__lw2"  # in a function's subgraph
    gen = NameGenerator(model)
    assert gen.fresh("v") == "v__lw3"


def test_node_label() -> None:
    assert node_label(helper.make_node("Relu", ["x"], ["y"], name="r1")) == "'r1'"
    assert node_label(helper.make_node("Relu", ["x"], ["y"])) == "<unnamed Relu>"
