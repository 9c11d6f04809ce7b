"""The checks themselves checked (issue 36): each is given a wrong rule it must catch, or a right one it must pass.

* a relabel is checked for every rank (and static dims, element type) it is applied to, not once per op;
* the final model is opened and run with onnxruntime's default session options (as users open it): a
  ``--fold-dequantize`` to opset 10 of a quantize_static model loads and computes what the original does, and
  the fold's old form (a plain float initializer, which onnxruntime's optimizer quantizes again with a Round-11)
  is exit 1 naming the optimizer and the node;
* a listed kernel departure (``departures.json``) applies to every check that meets it: GlobalMaxPool-22 -> 18
  on a rank-5 input (a relabel whose replacement runs onnxruntime's GlobalMaxPool) converts and verifies;
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _mutant_list import KeepsCoercedAxis
from _mutants import one_node, replace_span
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


def test_the_fold_to_10_opens_as_users_open_it(qdq_path: Path) -> None:  # noqa: F811
    original = onnx.load(qdq_path)
    result = lowerer.convert(original, target_opset=10, fold_dequantize=True)
    assert any(n.startswith("users' session: ran") for n in result.report.notes)
    rng = np.random.default_rng(3)
    for scale in (0.5, 50.0):
        feeds = {"x": (rng.standard_normal((1, 3, 4, 4)) * scale).astype(np.float32)}
        for want, got in zip(_default_run(original, feeds), _default_run(result.model, feeds), strict=True):
            assert np.array_equal(want, got)


def test_a_model_only_the_default_options_fail_is_exit_1(qdq_path: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fold_module, "KEPT_FROM", 11)  # the fold's old form: a plain float initializer at 10
    with pytest.raises(VerificationError, match=r"as users open it.*graph optimizer leaves node '[^']*' \(Round, "
                                                r"inserted by onnxruntime's optimizer\)"):
        lowerer.convert(onnx.load(qdq_path), target_opset=10, fold_dequantize=True)


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
