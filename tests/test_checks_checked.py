"""The checks themselves checked (issue 36): each is given a wrong rule it must catch, or a right one it must pass.

* a relabel is checked for every rank (and static dims, element type) it is applied to, not once per op;
* the final model is opened and run with onnxruntime's default session options (as users open it): a
  ``--fold-dequantize`` to opset 10 of a quantize_static model loads and computes what the original does, and
  the fold's old form (a plain float initializer, which onnxruntime's optimizer quantizes again with a Round-11)
  is exit 1 naming the optimizer and the node;
* a listed kernel departure (``departures.json``) applies to every check that meets it: GlobalMaxPool-22 -> 18
  on a rank-5 input (a relabel whose replacement runs onnxruntime's GlobalMaxPool) converts and verifies;
* the whole-model check (``--verify-model``, ``lowerer verify``) and the deployment check compare every output
  (a wrong second output is caught), the whole-model check on ±inf sets too (judged) and NaN sets (recorded),
  and a listed departure met inside a model (GlobalMaxPool's all -inf plane) does not fail it;
* the constructed sets reach the inputs they are built for where the model fixes an earlier input (a scatter's
  constant indices): they address the op's inputs by position, the check generates only the inputs not fixed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _mutant_list import MUTANTS, KeepsCoercedAxis
from _mutants import one_node, replace_span, run
from onnx import TensorProto, helper
from test_fold_dequantize import qdq_path  # noqa: F401 (a fixture)

import lowerer
import lowerer.rules.dequantize_fold as fold_module
from lowerer.core.errors import VerificationError
from lowerer.steps.engine import StepEngine

F = TensorProto.FLOAT


def _softmaxes(second_from_graph_input: bool) -> onnx.ModelProto:
    """Softmax(axis=1) on a 2-D input (where 11 and 13 agree), then on a 3-D one (where they differ)."""
    nodes = [helper.make_node("Softmax", ["a"], ["ya"], name="s2d", axis=1)]
    b = "b"
    if not second_from_graph_input:  # the 3-D value's type known only from inference
        nodes.insert(0, helper.make_node("Relu", ["b"], ["rb"], name="r"))
        b = "rb"
    nodes.append(helper.make_node("Softmax", [b], ["yb"], name="s3d", axis=1))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", F, [2, 3]),
                                           helper.make_tensor_value_info("b", F, [2, 3, 4])],
                              [helper.make_tensor_value_info("ya", F, [2, 3]),
                               helper.make_tensor_value_info("yb", F, [2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


@pytest.mark.parametrize("typed", [True, False], ids=["stated", "inferred"])
def test_a_relabel_is_checked_for_each_rank(monkeypatch: pytest.MonkeyPatch, typed: bool) -> None:
    """Softmax 11 -> 13 wrongly labelled "same meaning": right on the 2-D node, wrong on the 3-D one."""
    replace_span("Softmax", KeepsCoercedAxis())(monkeypatch)  # the rule relabels: the node stays as it is
    monkeypatch.setattr(StepEngine, "_meaning_changes", lambda self, node, source, target: False)
    with pytest.raises(VerificationError, match=r"'s3d'.*Softmax-11.*rule 'same-meaning'.*failed verification"):
        lowerer.convert(_softmaxes(typed), target_opset=13)


def _default_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run as users run it: ``InferenceSession`` without session options."""
    return list(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds))


def _unoptimized_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """``model`` run with onnxruntime's graph optimizations off: its ops as written (the values verified)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return list(ort.InferenceSession(model.SerializeToString(), options,
                                     providers=["CPUExecutionProvider"]).run(None, feeds))


def test_the_fold_to_10_opens_as_users_open_it(qdq_path: Path) -> None:  # noqa: F811
    """The fold opened as users open it computes the original's values as written, on small and saturating inputs.

    Compared with the original run with optimizations off: onnxruntime's default optimizer itself changes the
    original's outputs (its QDQ fusion into integer kernels: measured on 1.32.0 with numpy 2.4.6, on x 50 inputs
    every logit but one off, and on some x 0.5 draws too), which is onnxruntime's, not the fold's.
    """
    original = onnx.load(qdq_path)
    result = lowerer.convert(original, target_opset=10, fold_dequantize=True)
    assert any(n.startswith("users' session: ran") for n in result.report.notes)
    rng = np.random.default_rng(3)
    for scale in (0.5, 50.0):
        feeds = {"x": (rng.standard_normal((1, 3, 4, 4)) * scale).astype(np.float32)}
        for want, got in zip(_unoptimized_run(original, feeds), _default_run(result.model, feeds), strict=True):
            assert np.array_equal(want, got)


def test_a_model_only_the_default_options_fail_is_exit_1(qdq_path: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold_module, "KEPT_FROM", 11)  # the fold's old form: a plain float initializer at 10
    with pytest.raises(VerificationError, match=r"as users open it.*graph optimizer leaves node '[^']*' \(Round, "
                                                r"inserted by onnxruntime's optimizer\)"):
        lowerer.convert(onnx.load(qdq_path), target_opset=10, fold_dequantize=True)


@pytest.mark.parametrize("name", ["resnet18.dynamo.opset20.onnx", "mobilenet_v3_small.legacy.opset17.onnx"])
def test_the_users_session_thread_count_changes_no_optimization(name: str, tmp_path: Path) -> None:
    """The users'-session check opens with one thread (default_session.py): onnxruntime's optimizer ignores it."""
    from collections import Counter

    graphs = []
    for threads in (0, 1):  # 0: onnxruntime's default pools
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = threads
        so.optimized_model_filepath = str(tmp_path / f"{threads}.onnx")
        ort.InferenceSession(str(Path(__file__).parent / "fixtures" / "real" / name), so,
                             providers=["CPUExecutionProvider"])
        optimized = onnx.load(so.optimized_model_filepath)
        graphs.append(Counter((n.domain, n.op_type, tuple(a.SerializeToString() for a in n.attribute))
                              for n in optimized.graph.node))
    assert graphs[0] and graphs[0] == graphs[1]  # (on AVX2 machines: NCHWc layouts in both)


def test_a_listed_departure_applies_to_the_relabel_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from lowerer.passes import relabels

    made: list[relabels.RelabelCheck] = []
    real = relabels.RelabelCheck.__init__

    def init(self: relabels.RelabelCheck, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(relabels.RelabelCheck, "__init__", init)
    lowerer.convert(one_node("GlobalMaxPool", 22, {}, [1, 2, 3, 4, 5]), target_opset=18)
    (check,) = [r for c in made for r in c.checked]
    assert check.status == "verified" and "kernel_departure" in check.details
    assert "GlobalMaxPool (the replacement's, opset 18) departs" in check.details["kernel_departure"]["statement"]


def test_a_listed_departure_does_not_excuse_a_wrong_relabel(monkeypatch: pytest.MonkeyPatch) -> None:
    """GlobalMaxPool-22 -> 18 "relabelled" into MaxPool's neighbour GlobalAveragePool: still refused."""
    from lowerer.core.report import Rewrite
    from lowerer.passes import relabels

    def wrong(self: relabels.RelabelCheck, node: onnx.NodeProto, index: int, scope: object,
              versions: tuple[int, int], source: int, target: int) -> None:
        other = onnx.NodeProto()
        other.CopyFrom(node)
        other.op_type = "GlobalAveragePool"
        self.verifier(Rewrite(node=node.name, op_type=node.op_type, scope="graph", from_version=versions[0],
                              to_opset=target, rule=relabels.RULE, emitted=[other.op_type], original=node,
                              replacement=[other], from_opset=source, **self.describe(node, scope)))  # type: ignore[arg-type]

    monkeypatch.setattr(relabels.RelabelCheck, "_check", wrong)
    with pytest.raises(VerificationError, match=r"GlobalMaxPool-22.*same-meaning"):
        lowerer.convert(one_node("GlobalMaxPool", 22, {}, [1, 2, 3, 4, 5]), target_opset=18)


# -- the whole-model and deployment checks: every output, special sets, departures ----------------------------

def _two_outputs() -> onnx.ModelProto:
    """Output 0 a Relu (relabelled, right), output 1 a Softmax(axis=1) on a 3-D input (the one made wrong)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Softmax", ["x"], ["s"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3, 4])],
                              [helper.make_tensor_value_info("r", F, [2, 3, 4]),
                               helper.make_tensor_value_info("s", F, [2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)


def test_verify_model_compares_every_output(monkeypatch: pytest.MonkeyPatch) -> None:
    replace_span("Softmax", KeepsCoercedAxis())(monkeypatch)  # output 's' wrong; per-rewrite checks off
    with pytest.raises(VerificationError, match=r"whole-model check failed: .*output 's'"):
        lowerer.convert(_two_outputs(), target_opset=13, verify=False, verify_model=True)


def test_the_deployment_comparison_compares_every_output() -> None:
    from lowerer.backends import deployment
    from lowerer.verification.graph_inputs import FeedSet

    model = _two_outputs()
    sets = [FeedSet("normal (x: float32[2,3,4])", {"x": np.ones((2, 3, 4), np.float32)})]
    want = [[np.ones((2, 3, 4), np.float32), np.ones((2, 3, 4), np.float32)]]
    got = [[want[0][0], want[0][1] + 1]]
    stats = deployment._compare(model, want, got, sets, 1e-3)
    assert [s.name for s in stats if not s.ok] == ["s"]


def _pair(changed: str) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """Relu(x), and Relu(x) with the values where ``changed`` (IsInf or IsNaN) holds replaced by 0."""
    x = helper.make_tensor_value_info("x", F, [4, 8])
    y = helper.make_tensor_value_info("y", F, [4, 8])
    a = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "a", [x], [y])
    zero = onnx.numpy_helper.from_array(np.zeros((), np.float32), "zero")
    b = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]), helper.make_node(changed, ["x"], ["m"]),
                           helper.make_node("Where", ["m", "zero", "r"], ["y"])], "b", [x], [y], [zero])
    return (helper.make_model(a, opset_imports=[helper.make_opsetid("", 13)]),
            helper.make_model(b, opset_imports=[helper.make_opsetid("", 13)]))


def test_the_whole_model_check_judges_inf_and_records_nan() -> None:
    from lowerer.verification.whole import ModelSource, compare_models

    on_inf = compare_models(*(ModelSource(m, None, n) for m, n in zip(_pair("IsInf"), "AB", strict=True)))
    assert on_inf.status == "different" and "input set inf" in on_inf.reason
    on_nan = compare_models(*(ModelSource(m, None, n) for m, n in zip(_pair("IsNaN"), "AB", strict=True)))
    assert on_nan.status == "equal" and not any(s.startswith("nan") for s in on_nan.input_sets)
    assert "values differ (recorded, not judged)" in next(iter(on_nan.details["recorded"].values()))


def test_a_listed_departure_inside_a_model_does_not_fail_the_whole_model_check() -> None:
    """GlobalMaxPool against ReduceMax on single-element planes: onnxruntime's departs on a -inf one (listed)."""
    from lowerer.verification.whole import ModelSource, compare_models

    x = helper.make_tensor_value_info("x", F, [2, 8, 1, 1])
    y = helper.make_tensor_value_info("y", F, [2, 8, 1, 1])
    pool = helper.make_model(helper.make_graph([helper.make_node("GlobalMaxPool", ["x"], ["y"])], "a", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 13)])
    reduce = helper.make_model(helper.make_graph([helper.make_node("ReduceMax", ["x"], ["y"], axes=[2, 3])], "b",
                                                 [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    result = compare_models(ModelSource(pool, None, "original"), ModelSource(reduce, None, "converted"))
    assert result.status == "equal", result.reason
    (said,) = result.details["departures"].values()
    assert "'GlobalMaxPool#0' (GlobalMaxPool) meets a listed departure" in said


def test_constructed_sets_reach_a_scatters_updates_beside_constant_indices() -> None:
    """ScatterElements-18 max -> 16 with constant indices: the signed-zero updates meet the data's -0.0.

    The check generates the data and the updates (the indices are the model's); the constructed sets address
    the op's inputs by position (updates third). They used to be given by the generated inputs' positions:
    the "duplicates" set zeroed the updates and the signed zeros never reached them, so a max written
    ``>=`` for ``>`` (which keeps a -0.0 the kernel replaces by an update's +0.0) passed on some seeds.
    """
    model = one_node("ScatterElements", 18, {"axis": 0, "reduction": "max"},
                     inputs=[("x", F, [4, 3]), ("u", F, [2, 3])],
                     consts={"i": np.array([[1, 0, 3], [2, 1, 0]], np.int64)}, order=["x", "i", "u"])
    (rewrite,) = lowerer.convert(model, target_opset=16).report.rewrites
    assert rewrite.status == "verified", rewrite.reason
    sets = rewrite.details["input_sets"]
    assert any(s.startswith("signed-zeros") for s in sets) and not any(s.startswith("duplicates") for s in sets)


@pytest.mark.parametrize("name", ["scatter-max-ge", "gridsample-16-border-inclusive", "scatter-min-loop-not-ge"])
def test_the_once_seed_dependent_mutants_die_on_every_seed(name: str) -> None:
    """Each survived some of seeds 0-9: the scatter's signed zeros missed the updates (above); the GridSample
    limit points' other coordinate fell outside the image at random (both readings then read the padding); a
    scatter-min written ``Not(a >= b)`` met NaN on one side only by chance (now: data all NaN, then updates)."""
    (mutant,) = [m for m in MUTANTS if m.name == name]
    survived = [seed for seed in range(10) if not run(mutant, seed).killed]
    assert not survived, f"{name} survives seeds {survived}"
