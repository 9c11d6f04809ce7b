"""The checks themselves checked (issue 36): each is given a wrong rule it must catch, or a right one it must pass.

* a relabel is checked for every rank (and static dims, element type) it is applied to, not once per op;
"""

from __future__ import annotations

import onnx
import pytest
from _mutant_list import KeepsCoercedAxis
from _mutants import replace_span
from onnx import TensorProto, helper

import lowerer
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
