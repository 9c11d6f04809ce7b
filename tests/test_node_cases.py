"""onnx's node test cases converted to their opset - 1 and to 11: never an invalid or wrong model.

A CI-sized subset of ``benchmarks/node_cases.py`` (same classification: ``_node_cases.py``).
Every case of ``onnx.backend.test.case.node`` that imports a default-domain opset is converted,
without verification, to its own opset - 1 and to 11; each result is classified (refusals are
allowed). No conversion may be ``INVALID`` (exit 0 with a model the checker or onnxruntime
rejects), ``WRONG`` (outputs differ from the original's) or ``crash`` (an exception that is not a
``LowererError``), except those listed in :data:`KNOWN_INVALID`, which are what main does today:
each is a strict xfail, so one that stops being bad fails the run until its entry is removed, and a
bad case not listed fails :func:`test_no_new_invalid_wrong_or_crash`.

The classifier itself is checked on a few cases with converters that break the model on purpose.
"""

from __future__ import annotations

from typing import Any

import onnx
import pytest
from _compare import compare, ulp_error
from _node_cases import BAD, Outcome, classify_case, load_cases, plan, run_cases

JOBS = 2
TARGETS = ("-1", "11")


#: (case, target) -> exit 0 with a model the checker or ORT rejects (INVALID), or whose outputs differ
#: (WRONG). Remove an entry when it is fixed. (The expanded LinearAttention cases whose Scan body states
#: no output shapes are refused below opset 14 now.)
KNOWN_INVALID: dict[tuple[str, int], str] = {}


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, int], Outcome]:
    results = run_cases(plan(load_cases(), TARGETS), verify=False, jobs=JOBS)
    return {(o.case, o.target): o for o in results}


def _describe(o: Outcome) -> str:
    return f"{o.case} {o.source}->{o.target}: {o.status}: {o.detail}"


def test_no_new_invalid_wrong_or_crash(outcomes: dict[tuple[str, int], Outcome]) -> None:
    new = [_describe(o) for key, o in sorted(outcomes.items()) if o.status in BAD and key not in KNOWN_INVALID]
    assert not new, f"{len(new)} new bad conversions:\n" + "\n".join(new)


def test_the_subset_converts_and_compares_something(outcomes: dict[tuple[str, int], Outcome]) -> None:
    statuses = {o.status for o in outcomes.values()}
    assert "converted-ok" in statuses
    assert any(o.basis == "original" for o in outcomes.values())
    assert set(KNOWN_INVALID) <= set(outcomes), "KNOWN_INVALID names a (case, target) the subset does not convert"


@pytest.mark.parametrize(("case", "target"), [
    pytest.param(case, target, id=f"{case}-to-{target}", marks=pytest.mark.xfail(strict=True, reason=reason))
    for (case, target), reason in sorted(KNOWN_INVALID.items())])
def test_known_invalid(case: str, target: int, outcomes: dict[tuple[str, int], Outcome]) -> None:
    outcome = outcomes[case, target]
    assert outcome.status not in BAD, _describe(outcome)


# -- the classifier on purpose-broken converters --------------------------------------------------
@pytest.fixture(scope="module")
def abs_case() -> Any:
    (case,) = load_cases("^test_abs$")
    return case


class _Result:
    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model


def _relabelled(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for opset in out.opset_import:
        if opset.domain == "":
            opset.version = target
    return out


def _classify(case: Any, target: int, convert: Any) -> Outcome:
    (outcome,) = classify_case(case, [target], convert=convert)
    return outcome


def test_classifier_accepts_a_correct_conversion(abs_case: Any) -> None:
    outcome = _classify(abs_case, 12, lambda m, target_opset, verify: _Result(_relabelled(m, target_opset)))
    assert (outcome.status, outcome.basis, outcome.max_ulp) == ("converted-ok", "original", 0.0)


def test_classifier_finds_an_invalid_model(abs_case: Any) -> None:
    def convert(m: onnx.ModelProto, target_opset: int, verify: bool) -> _Result:
        out = _relabelled(m, target_opset)
        out.graph.node[0].attribute.append(onnx.helper.make_attribute("bogus", 1))
        return _Result(out)

    assert _classify(abs_case, 12, convert).status == "INVALID"
    wrong_opset = _classify(abs_case, 12, lambda m, target_opset, verify: _Result(_relabelled(m, 11)))
    assert (wrong_opset.status, wrong_opset.group) == ("INVALID", "opset import is not the target")


def test_classifier_finds_a_wrong_model(abs_case: Any) -> None:
    def convert(m: onnx.ModelProto, target_opset: int, verify: bool) -> _Result:
        out = _relabelled(m, target_opset)
        out.graph.node[0].op_type = "Neg"
        return _Result(out)

    outcome = _classify(abs_case, 12, convert)
    assert outcome.status == "WRONG" and "ulp" in outcome.detail


def test_classifier_tells_refusals_from_crashes(abs_case: Any) -> None:
    import lowerer

    def refuse(m: onnx.ModelProto, target_opset: int, verify: bool) -> _Result:
        raise lowerer.ConversionError("node 'n7' (Abs-13, in graph) cannot be converted to opset 5: Abs says no")

    def crash(m: onnx.ModelProto, target_opset: int, verify: bool) -> _Result:
        raise KeyError("oops")

    refused = _classify(abs_case, 5, refuse)
    assert (refused.status, refused.blocking_op, refused.group) == ("refused", "Abs-13", "OP says no")
    assert _classify(abs_case, 5, crash).status == "crash"


def test_ulp_measure() -> None:
    import numpy as np

    want = np.array([1.0, -2.0, 0.0, np.nan, np.inf], np.float32)
    assert ulp_error(want.copy(), want) == 0.0
    one_ulp_at_2 = np.array([1.0, np.nextafter(np.float32(-2), np.float32(-3)), 0.0, np.nan, np.inf], np.float32)
    assert ulp_error(one_ulp_at_2, want) == 1.0
    tiny = np.array([1.0, -2.0, 1e-30, np.nan, np.inf], np.float32)  # far from 0 in its own ulps, not in 2's
    assert 0 < ulp_error(tiny, want) < 1e-6
    assert ulp_error(np.array([1.0, -2.0, 0.0, 0.0, np.inf], np.float32), want) == np.inf
    assert compare([want], [want]).exact
    assert not compare([np.array([1, 2])], [np.array([1, 3])]).same
    assert compare([one_ulp_at_2], [want], max_ulp=1).same and not compare([one_ulp_at_2], [want]).same


def test_expanded_scan_without_body_shapes_converts_below_14() -> None:
    """LinearAttention's body runs a Scan whose outputs state no shape (its Unsqueeze reads outer constant axes).

    onnxruntime's Scan below 14 needs them: the body inferred on its own with the outer constants gives them,
    and the result runs equal to the original (not returned unrunnable, not refused).
    """
    (case,) = load_cases("^test_linear_attention_linear_expanded$")
    outcomes = classify_case(case, [13, 11])
    assert [o.status for o in outcomes] == ["converted-ok", "converted-ok"], [o.detail for o in outcomes]
