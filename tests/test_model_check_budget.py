"""The whole-model check judges like the rewrites do; ``verify --report``; tolerance hints that fit.

``convert --verify-model`` accepts what the non-exact rewrites' own budgets accepted (propagated to
each output at its scale, stated in the line and the report), stays exact where every rewrite was
exact, and ``--exact`` keeps it bit-exact. A failed comparison proposes the tolerance that fits:
``--atol`` where differences are small against the output but large relative to values near zero,
``--max-ulp`` where each value is within a few ulp of its own.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import pytest
from _json_schema import validate
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import VerificationError
from lowerer.core.report import Rewrite
from lowerer.steps.expansion import EXPANSION_RULE
from lowerer.verification.compare import OutputStats
from lowerer.verification.propagated import ModelBudget, model_budget
from lowerer.verification.whole import ModelCheckOptions, ModelSource, compare_models, tolerance_hint

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
BERT = REAL / "bert.dynamo.opset20.onnx"
EPS32 = float(np.finfo(np.float32).eps)


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


def _schema() -> dict:
    return json.loads(resources.files("lowerer.core").joinpath("report.schema.json").read_text(encoding="utf-8"))


def _rewrite(op: str, rule: str = "relabel") -> Rewrite:
    return Rewrite(node="n", op_type=op, scope="graph", from_version=17, to_opset=13, rule=rule, emitted=[op])


def _scaled_pair(factor: float) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """y = x * 1 and y = x * factor (float32 [4, 8])."""
    def model(k: float) -> onnx.ModelProto:
        graph = helper.make_graph([helper.make_node("Mul", ["x", "k"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                                  [helper.make_tensor_value_info("y", T.FLOAT, [4, 8])],
                                  [numpy_helper.from_array(np.asarray(k, dtype=np.float32), "k")])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)

    return model(1.0), model(factor)


EXPANSION = ModelBudget(sources=(("expansion", "LayerNormalization"),), counts=(("expansion", 1),))


# -- the budget, from the rewrites ----------------------------------------------------------------------------

def test_budget_is_the_union_of_the_non_exact_rewrites_budgets() -> None:
    assert model_budget([_rewrite("Reshape"), _rewrite("Shape")]).exact  # data movement: exact
    budget = model_budget([_rewrite("Reshape"), _rewrite("LayerNormalization", EXPANSION_RULE),
                           _rewrite("Softmax")])
    assert not budget.exact and dict(budget.counts) == {"expansion": 1, "kernel": 1}
    tol = budget.tolerance(np.dtype(np.float32), scale=10.0)
    assert tol is not None and tol.max_ulp == 8 and tol.atol == pytest.approx(8 * EPS32 * 10)
    assert budget.tolerance(np.dtype(np.int64), 10.0) is None
    assert model_budget([_rewrite("Gelu", EXPANSION_RULE)], max_ulp=2).rule(np.dtype(np.float32)) == (2, 2.0)
    exact = model_budget([_rewrite("Gelu", EXPANSION_RULE)], exact=True)
    assert exact.exact and exact.to_dict() == {"kind": "exact", "why": "--exact"}
    assert "every rewrite was exact" in model_budget([]).describe()


def test_an_exact_budget_rejects_one_ulp_and_an_expansion_budget_accepts_it() -> None:
    a, b = _scaled_pair(float(np.nextafter(np.float32(1), np.float32(2))))
    sides = (ModelSource(a, None, "original"), ModelSource(b, None, "converted"))
    exact = compare_models(*sides, options=ModelCheckOptions(budget=ModelBudget()))
    assert exact.status == "different", exact.reason
    within = compare_models(*sides, options=ModelCheckOptions(budget=EXPANSION))
    assert within.status == "equal", within.reason
    assert "within the rewrites' own budget" in within.reason and "float32: 8 ulp or 8 epsilons" in within.reason
    assert within.to_dict()["budget"]["kind"] == "propagated"


def test_beyond_the_budget_fails_and_the_hint_names_the_max_ulp_that_fits() -> None:
    a, b = _scaled_pair(1.0 + 2e-5)  # ~168 ulp of each value, as many epsilons of the output's scale
    result = compare_models(ModelSource(a, None, "original"), ModelSource(b, None, "converted"),
                            options=ModelCheckOptions(budget=EXPANSION))
    assert result.status == "different"
    assert "are outside budget float32: 8 ulp" in result.reason
    scaled = max(o.ulp_of_scale or 0 for o in result.outputs)
    assert f"--max-ulp {int(np.ceil(scaled))} (API: max_ulp" in result.reason
    with_hint = compare_models(ModelSource(a, None, "original"), ModelSource(b, None, "converted"),
                               options=ModelCheckOptions(budget=ModelBudget(sources=EXPANSION.sources,
                                                                            max_ulp=int(np.ceil(scaled)))))
    assert with_hint.status == "equal", with_hint.reason  # the hint's value accepts them


# -- the hint -------------------------------------------------------------------------------------------------

def _stats(max_abs: float, max_rel: float, max_ulp: int, scale: float, discrete: bool = False) -> OutputStats:
    return OutputStats(name="y", dtype="float32", shape=[4], count=4, mismatches=1, max_abs=max_abs, max_rel=max_rel,
                       max_ulp=max_ulp, scale=scale, discrete=discrete)


def test_hint_proposes_atol_where_differences_sit_near_zero() -> None:
    # mobilevit dynamo vs legacy (issue 18): max abs 8.9e-8, max rel 4.6e-3: no hint before.
    hint = tolerance_hint([_stats(8.9e-8, 4.6e-3, 40000, 1.5)])
    assert hint is not None and "--atol 8.9e-08" in hint and "--max-ulp" not in hint


def test_hint_proposes_max_ulp_where_each_value_is_a_few_ulp_off() -> None:
    hint = tolerance_hint([_stats(2.4e-7, 1.2e-7, 3, 2.0)])
    assert hint is not None and "--max-ulp 3" in hint and "--atol" not in hint


def test_no_hint_for_large_or_discrete_differences() -> None:
    assert tolerance_hint([_stats(0.5, 0.5, 10 ** 7, 1.0)]) is None
    assert tolerance_hint([_stats(1.0, 1.0, 0, 0.0, discrete=True)]) is None


# -- convert --verify-model on a real export with LayerNormalization and Gelu expansions ----------------------

def test_bert_to_13_verify_model_passes_within_the_stated_budget(tmp_path: Path) -> None:
    out, report = tmp_path / "b13.onnx", tmp_path / "r.json"
    code, _, err = _invoke(["convert", str(BERT), "-o", str(out), "--target-opset", "13", "--verify-model",
                            "--report", str(report)])
    assert code == 0, err
    line = next(x for x in err.splitlines() if x.startswith("whole-model check:"))
    assert "equal within the rewrites' own budget" in line and "float32: 8 ulp or 8 epsilons" in line, line
    assert "expansions: Gelu, LayerNormalization" in line, line
    data = json.loads(report.read_text())
    assert validate(data, _schema()) == []
    check = data["summary"]["model_check"]
    assert check["budget"]["kind"] == "propagated" and check["budget"]["per_type"]["float32"]["ulps"] == 8
    assert {"Gelu", "LayerNormalization"} <= set(check["budget"]["ops"])
    assert all(0 < o["ulp_of_scale"] <= 8 for o in check["outputs"])


def test_bert_to_13_with_exact_fails_with_the_hint(tmp_path: Path) -> None:
    code, _, err = _invoke(["convert", str(BERT), "-o", str(tmp_path / "b.onnx"), "--target-opset", "13",
                            "--verify-model", "--exact", "--no-verify"])
    assert code == 1, err
    assert "whole-model check failed" in err and "--atol" in err and "leave out --exact" in err, err
    assert not (tmp_path / "b.onnx").exists()


def test_api_budget_and_exact() -> None:
    model = onnx.load(BERT)
    report = lowerer.convert(model, target_opset=13, verify_model=True).report
    assert report.model_check is not None and report.model_check["budget"]["kind"] == "propagated"
    with pytest.raises(VerificationError, match="leave out --exact"):
        lowerer.convert(model, target_opset=13, verify=False, verify_model=True, exact=True)


def test_where_every_rewrite_is_exact_the_check_stays_exact_and_says_so(tmp_path: Path) -> None:
    from test_whole_model import embedding_model

    src = tmp_path / "e11.onnx"
    src.write_bytes(embedding_model(11, rows=50).SerializeToString())
    code, _, err = _invoke(["convert", str(src), "-o", str(tmp_path / "e13.onnx"), "--target-opset", "13",
                            "--verify-model"])
    assert code == 0, err
    assert "equal exactly on 6 input set(s)" in err and "(exact: every rewrite was exact)" in err, err


# -- verify --report ------------------------------------------------------------------------------------------

def test_verify_writes_a_report_with_the_convert_schema(tmp_path: Path) -> None:
    a, b = _scaled_pair(1.0 + 2e-5)
    pa, pb, report = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "r.json"
    pa.write_bytes(a.SerializeToString())
    pb.write_bytes(b.SerializeToString())
    code, _, err = _invoke(["verify", str(pa), str(pb), "--report", str(report)])
    assert code == 1, err  # different, and the report is still written
    data = json.loads(report.read_text())
    assert validate(data, _schema()) == []
    assert data["summary"]["model_check"]["status"] == "different" and data["rewrites"] == []
    code, _, err = _invoke(["verify", str(pa), str(pa), "--report", str(report)])
    assert code == 0, err
    assert json.loads(report.read_text())["summary"]["model_check"]["status"] == "equal"
    code, _, err = _invoke(["verify", str(pa), str(pb), "--report", str(pa)])
    assert code == 2 and "--report" in err and "which lowerer reads" in err, err
