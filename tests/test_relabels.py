"""The step table's "same meaning" executed: one relabelled node per pattern run at both opsets (issue 31).

A relabel (the node crosses versions unchanged, every step saying the meaning stayed) is not a rewrite,
but the table could be wrong about a step: the first node of each pattern is checked like a rewrite whose
replacement is itself. A wrong "same meaning" is caught (exit 1, naming the node and ``same-meaning``);
a model of many relabelled nodes costs one check per pattern; nothing runs with ``--no-verify``.
"""

from __future__ import annotations

import logging

import onnx
import pytest
from _convert_helpers import make_model, value_info
from _mutant_list import KeepsCoercedAxis
from _mutants import one_node, replace_span
from onnx import TensorProto, helper

import lowerer
from lowerer.core.errors import VerificationError
from lowerer.passes import relabels
from lowerer.steps.engine import StepEngine

F = TensorProto.FLOAT


def _chain(n: int, opset: int = 11) -> onnx.ModelProto:
    """``n`` Adds and ``n`` ArgMax-free Relus in a chain: two patterns relabelled 11 -> 13 (Add 7, Relu 6)."""
    nodes, last = [], "x"
    for i in range(n):
        nodes += [helper.make_node("Add", [last, "x"], [f"a{i}"]), helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        last = f"r{i}"
    return make_model(nodes, [value_info("x", F, [2, 3])], [value_info(last, F, [2, 3])], opset)


def _checked(monkeypatch: pytest.MonkeyPatch) -> list[relabels.RelabelCheck]:
    made: list[relabels.RelabelCheck] = []
    real = relabels.RelabelCheck.__init__

    def init(self: relabels.RelabelCheck, *args: object, **kwargs: object) -> None:
        real(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(relabels.RelabelCheck, "__init__", init)
    return made


def test_one_check_per_pattern(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _checked(monkeypatch)
    result = lowerer.convert(_chain(100), target_opset=13)
    assert result.report.rewrites == []  # relabels are not rewrites
    (check,) = made
    assert sorted((r.op_type, r.from_version, r.to_opset, r.rule, r.status) for r in check.checked) == [
        ("Add", 7, 13, "same-meaning", "verified"), ("Relu", 6, 13, "same-meaning", "verified")]
    assert all(r.replacement == [r.original] for r in check.checked)


def test_nothing_runs_without_verification_or_without_a_version_crossed(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _checked(monkeypatch)
    lowerer.convert(_chain(3), target_opset=13, verify=False)
    lowerer.convert(_chain(3, 14), target_opset=15)  # Add 14 and Relu 14 stay the versions they are
    assert made == [] or all(not c.checked for c in made)


def test_a_wrong_same_meaning_is_caught(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Softmax 11 -> 13 changed meaning (coerce to 2-D); were it labelled "same meaning", the check catches it."""
    caplog.set_level(logging.ERROR)
    replace_span("Softmax", KeepsCoercedAxis())(monkeypatch)  # the rule relabels: the node stays as it is
    monkeypatch.setattr(StepEngine, "_meaning_changes", lambda self, node, source, target: False)
    with pytest.raises(VerificationError, match=r"'n0'.*Softmax-11.*rule 'same-meaning'.*failed verification"):
        lowerer.convert(one_node("Softmax", 11, {"axis": 1}, [2, 3, 4]), target_opset=13)
    lowerer.convert(one_node("Softmax", 11, {"axis": 2}, [2, 3, 4]), target_opset=13)  # the last axis: the same


def _one_hot(opset: int) -> onnx.ModelProto:
    import numpy as np

    return one_node("OneHot", opset, {"axis": -1}, inputs=[("i", TensorProto.INT64, [2, 3])],
                    consts={"d": np.array(5, np.int64), "v": np.array([0, 1], np.float32)})


def test_a_relabel_onnxruntime_runs_with_one_kernel_at_both_versions_is_judged_by_the_spec(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """OneHot-9 runs OneHot-11's kernel in onnxruntime: a table saying 11 -> 9 keeps the meaning is refused by the
    reference (OneHot-9 gives an all-off row for a negative index), and the real adapter is verified by both."""
    from _mutants import table_says_same

    right = lowerer.convert(_one_hot(11), target_opset=9)
    (rewrite,) = right.report.rewrites
    assert rewrite.status == "verified" and rewrite.details["versions_by_spec"].startswith("verified")
    with monkeypatch.context() as mp:
        table_says_same("OneHot", 11)(mp)
        with pytest.raises(VerificationError) as e:
            lowerer.convert(_one_hot(11), target_opset=9)
    text = str(e.value)
    assert "'same-meaning'" in text and "judged on both sides by lowerer's numpy reference" in text
    assert "OneHot-9 counts a negative index from the back" in text and "\n" not in text
