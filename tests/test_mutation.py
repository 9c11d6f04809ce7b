"""The tests that test the tests: wrong rules (tests/_mutant_list.py) must be refused with default options.

A quick subset runs here (``QUICK``, one per family and per check, each after its control run);
``benchmarks/mutation.py`` runs all of them over
several seeds and prints the score by family (the README gives it).
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from _mutant_list import MUTANTS, QUICK
from _mutants import control, one_node, run
from onnx import TensorProto as T

import lowerer

_BY_NAME = {m.name: m for m in MUTANTS}


def test_the_set_is_large_and_spans_every_family_and_check() -> None:
    assert len(MUTANTS) >= 100 and len(_BY_NAME) == len(MUTANTS)
    assert {m.family for m in MUTANTS} >= {"owned", "adapter", "lowering", "expansion", "decomposition",
                                          "reference", "engine", "form", "relabel", "pass"}
    assert {m.check for m in MUTANTS} == {"rewrite", "relabel", "model", "deployment", "reference", "engine"}
    assert set(QUICK) <= set(_BY_NAME)
    assert {_BY_NAME[n].family for n in QUICK} == {m.family for m in MUTANTS}
    assert {_BY_NAME[n].check for n in QUICK} == {m.check for m in MUTANTS}


@pytest.mark.parametrize("name", QUICK)
def test_mutant_is_killed(name: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)
    invalid = control(_BY_NAME[name])
    assert invalid is None, f"mutant {name} proves nothing: {invalid}"
    outcome = run(_BY_NAME[name])
    assert outcome.killed, f"mutant {name} survived: {outcome.how}"


@pytest.mark.parametrize("axis", [1, 2])
def test_correct_add_6_7_conversions_go_through(axis: int) -> None:
    """Add-6 with broadcast=1: axis=1 needs the Unsqueeze, axis=2 (a suffix) does not; both are right."""
    model = one_node("Add", 6, {"broadcast": 1, "axis": axis}, inputs=[("a", T.FLOAT, [2, 3, 4]),
                                                                        ("b", T.FLOAT, [3] if axis == 1 else [4])])
    result = lowerer.convert(model, target_opset=7)
    (rewrite,) = result.report.rewrites
    # onnxruntime does not run opset 6: the reference judged the original, and the status says so
    assert rewrite.status == "reference-only", rewrite.reason
    assert ("Unsqueeze" in rewrite.emitted) == (axis == 1)
    assert result.report.summary()["by_status"] == {"reference-only": 1}


def test_a_rule_that_changes_its_input_node_is_reported() -> None:
    outcome = run(_BY_NAME["argmax-flip-in-place"])
    assert outcome.killed and "changed the node it was given in place" in outcome.how
    assert "internal error" in outcome.how and "ArgMax-13" in outcome.how


def test_a_relabel_across_a_meaning_change_is_verified() -> None:
    """Softmax-11 axis=-1 → 13 stays the same bytes, but is checked (11 → 13 changed the meaning)."""
    result = lowerer.convert(one_node("Softmax", 11, {"axis": -1}, [2, 3, 4]), target_opset=13)
    (rewrite,) = result.report.rewrites
    assert rewrite.status == "verified" and rewrite.replacement == [rewrite.original]
    assert np.isfinite(rewrite.details["max_difference"])
