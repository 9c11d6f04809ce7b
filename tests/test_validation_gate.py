"""The output gate: checks in proportion to the change, and one policy for what onnxruntime cannot load.

Each guarantee the composition argument of :func:`lowerer.passes.checker_gate.validate_output` relies on
is tested here against onnx's own checker or onnxruntime (the oracles), not against lowerer's
answers: value_info that contradicts the graph, an attribute the target schema lacks, a
replacement whose output types differ from the original's; and the onnxruntime policy (an
op-version with no kernel is converted and noted, whatever the model's size; a rewrite only
onnxruntime rejects is refused).
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import ConversionError, InputError
from lowerer.core.report import Crossing, Rewrite
from lowerer.passes.checker_gate import NodeGate, RewriteChecker


def _model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[int]]],
           outputs: list[tuple[str, int, list[int]]], opset: int,
           value_info: list[tuple[str, int, list[int]]] = ()) -> onnx.ModelProto:  # type: ignore[assignment]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              value_info=[helper.make_tensor_value_info(*v) for v in value_info])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _ort_opens(model: onnx.ModelProto) -> bool:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception:
        return False
    return True


def _passes_full_check(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    return True


def _and_chain(n: int) -> onnx.ModelProto:
    """``n`` And-7 nodes in a chain (And-1 at opset 6, which onnxruntime has no kernel for)."""
    nodes = [helper.make_node("And", ["x" if i == 0 else f"v{i}", "y"], [f"v{i + 1}"]) for i in range(n)]
    return _model(nodes, [("x", TensorProto.BOOL, [2, 3]), ("y", TensorProto.BOOL, [2, 3])],
                  [(f"v{n}", TensorProto.BOOL, [2, 3])], 7)


# -- the onnxruntime policy -----------------------------------------------------------------------

def test_swish_24_to_28_converts_with_an_unverified_note() -> None:
    model = _model([helper.make_node("Swish", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2, 3])],
                   [("y", TensorProto.FLOAT, [2, 3])], 24)
    result = lowerer.convert(model, target_opset=28, verify=False)
    assert _passes_full_check(result.model)
    if _ort_opens(result.model):
        pytest.skip("this onnxruntime opens Swish at opset 28: nothing to note")
    assert any("unverified" in n and "no kernel for Swish-24" in n for n in result.report.notes), result.report.notes


@pytest.mark.parametrize("nodes", [1, 20_001])
def test_and_7_to_6_converts_with_a_note_whatever_the_size(nodes: int, tmp_path: Path) -> None:
    src, out = tmp_path / "and7.onnx", tmp_path / "and6.onnx"
    onnx.save(_and_chain(nodes), src)
    run = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "6", "--no-verify",
                                    "--report", str(tmp_path / "r.json")])
    assert run.exit_code == 0, run.output
    converted = onnx.load(out)
    assert _passes_full_check(converted)
    assert not _ort_opens(_first_and(converted))  # the oracle: onnxruntime has no And-1 kernel
    assert "no kernel for And-1" in run.output
    assert "no kernel for And-1" in (tmp_path / "r.json").read_text()


def _first_and(model: onnx.ModelProto) -> onnx.ModelProto:
    """The first And of ``model`` alone, at its opset (the oracle: onnxruntime refuses it)."""
    node = model.graph.node[0]
    return _model([node], [(i, TensorProto.BOOL, [2, 3]) for i in node.input],
                  [(node.output[0], TensorProto.BOOL, [2, 3])], model.opset_import[0].version)


def test_a_rewrite_onnxruntime_opens_the_original_of_but_not_the_replacement_is_refused() -> None:
    # Max on uint64 at 13 becomes a Where-9 form at 11, which onnxruntime has no uint64 kernel for.
    model = _model([helper.make_node("Max", ["a", "b"], ["y"])],
                   [("a", TensorProto.UINT64, [3]), ("b", TensorProto.UINT64, [3])],
                   [("y", TensorProto.UINT64, [3])], 13)
    assert _ort_opens(model)
    try:
        result = lowerer.convert(model, target_opset=11, verify=False)
    except ConversionError as e:
        assert "onnxruntime does not open" in str(e) and "gap in lowerer" in str(e)
        return
    assert _ort_opens(result.model), "a converted model onnxruntime cannot open left lowerer"


# -- the guarantees the composition relies on --------------------------------------------------------

@pytest.mark.parametrize("op", ["Hardmax", "Relu"])  # Hardmax: its rule infers shapes; Relu: nothing does
def test_value_info_contradicting_the_graph_is_an_input_error(op: str) -> None:
    model = _model([helper.make_node(op, ["x"], ["h"]), helper.make_node("Neg", ["h"], ["y"])],
                   [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])], 11,
                   value_info=[("h", TensorProto.FLOAT, [5, 7])])
    assert not _passes_full_check(model)
    with pytest.raises(InputError, match="input model fails onnx's full check"):
        lowerer.convert(model, target_opset=13, verify=False)


def test_declared_output_shape_contradicting_the_graph_is_an_input_error() -> None:
    # As onnx's test_add_5_8_with_unsqueeze-like models: the graph output states a shape the graph does not make.
    model = _model([helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0]), helper.make_node("Add", ["u", "u"], ["y"])],
                   [("x", TensorProto.FLOAT, [5])], [("y", TensorProto.FLOAT, [8])], 11)
    assert not _passes_full_check(model)
    with pytest.raises(InputError, match="input model"):
        lowerer.convert(model, target_opset=13, verify=False)


@pytest.mark.parametrize("verify", [False, True])
def test_outputs_pass_the_full_check_with_or_without_the_whole_model_check(verify: bool) -> None:
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], axis=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Unsqueeze", ["r"], ["u"], axes=[0]),
             helper.make_node("ReduceSum", ["u"], ["y"], axes=[0], keepdims=0)]
    model = _model(nodes, [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, [2, 3, 4])], 11)
    result = lowerer.convert(model, target_opset=13, verify=verify)
    assert result.report.rewrites
    assert _passes_full_check(result.model)


def test_node_gate_catches_an_attribute_the_target_lacks_even_after_a_valid_node_of_the_op() -> None:
    gate = NodeGate({"": 13}, 8)
    good = helper.make_node("Relu", ["x"], ["y"])
    gate.check(good, good, "graph", 13)  # valid: cached as such
    bad = helper.make_node("Relu", ["x"], ["y"], alpha=0.5)  # Relu-13 has no attribute alpha
    with pytest.raises(ConversionError, match="would not be valid"):
        gate.check(bad, bad, "graph", 13)
    old = helper.make_node("ReduceSum", ["x"], ["y"], axes=[0])  # an attribute ReduceSum-13 lacks (an input there)
    with pytest.raises(ConversionError, match="would not be valid"):
        gate.check(old, old, "graph", 13)


def _rewrite(replacement: list[onnx.NodeProto]) -> Rewrite:
    original = helper.make_node("Relu", ["x"], ["y"])
    return Rewrite(node="n", op_type="Relu", scope="graph", from_version=6, to_opset=13, rule="test",
                   emitted=[n.op_type for n in replacement], original=original, replacement=replacement,
                   from_opset=11, input_types={"x": (TensorProto.FLOAT, [2, 3])},
                   crossings=[Crossing("rule", "test", "Relu", 6, None, 13)])


def test_rewrite_checker_refuses_a_replacement_whose_output_type_differs() -> None:
    checker = RewriteChecker()
    same = _rewrite([helper.make_node("Relu", ["x"], ["y"])])
    assert checker.first(same)
    checker(same)  # the same types: accepted
    changed = _rewrite([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.DOUBLE)])
    assert checker.first(changed)
    with pytest.raises(ConversionError, match="has type"):
        checker(changed)
    reshaped = _rewrite([helper.make_node("Flatten", ["x"], ["y"], axis=0)])
    assert checker.first(reshaped)
    with pytest.raises(ConversionError, match="has shape"):
        checker(reshaped)
    assert checker.complete


def test_a_file_input_converts_by_composition_to_a_model_passing_the_full_check(tmp_path: Path) -> None:
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], axis=-1), helper.make_node("ReduceSum", ["h"], ["y"],
                                                                                   axes=[1], keepdims=1)]
    src = tmp_path / "in.onnx"
    onnx.save(_model(nodes, [("x", TensorProto.FLOAT, [2, 3, 4])], [("y", TensorProto.FLOAT, [2, 1, 4])], 11), src)
    result = lowerer.convert(str(src), target_opset=13, verify=False)
    assert result.report.strictly_checked  # the whole-model check was not run: the composition held
    assert _passes_full_check(result.model)


def test_the_plain_checker_runs_on_the_output_unless_the_input_passed_it() -> None:
    from lowerer.core.report import Report
    from lowerer.passes.checker_gate import validate_output

    broken = _model([helper.make_node("Relu", ["missing"], ["y"])], [("x", TensorProto.FLOAT, [2])],
                    [("y", TensorProto.FLOAT, [2])], 13)  # reads a value nothing defines
    report = Report(target_opset=13)
    report.strictly_checked = True
    with pytest.raises((ConversionError, InputError)):
        validate_output(broken, None, report, 13, input_checked=False)


def test_an_ir_version_older_than_the_opsets_need_is_refused() -> None:
    from lowerer.core.report import Report
    from lowerer.passes.checker_gate import validate_output

    model = _model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])],
                   [("y", TensorProto.FLOAT, [2])], 21)
    model.ir_version = 7  # opset 21 needs IR 10
    report = Report(target_opset=21)
    report.strictly_checked = True
    with pytest.raises(ConversionError, match="IR version"):
        validate_output(model, None, report, 21, input_checked=True)


def test_relabel_onto_a_kernel_without_the_input_type_is_recorded_as_unverified() -> None:
    """Max-13 on double -> opset 7 (Max-6): onnxruntime's Max-6 kernel takes float only; the node is kept and said."""

    import lowerer

    x = helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])
    y = helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3])
    model = helper.make_model(helper.make_graph([helper.make_node("Max", ["x", "x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    report = lowerer.convert(model, target_opset=7, verify=False).report
    assert any("has no kernel for Max-6 on tensor(double)" in n for n in report.notes)
    floats = helper.make_model(helper.make_graph([helper.make_node("Max", ["x", "x"], ["y"])], "g",
                                                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                                                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])]),
                               opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    assert not any("no kernel" in n for n in lowerer.convert(floats, target_opset=7, verify=False).report.notes)
