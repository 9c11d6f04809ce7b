"""``lowerer verify`` judges a pair lowerer made by the budget ``convert`` recorded, exact otherwise, and says which.

``convert`` records the whole-model budget propagated from its rewrites in the report
(``summary.model_budget``) and, where it is not exact, in the converted model's metadata; ``verify``
reads it from the models' metadata or from ``--budget-from R.json`` (an older report too, from its
rewrite records); ``--exact`` ignores it.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from _convert_helpers import make_model, value_info
from click.testing import CliRunner
from onnx import TensorProto, helper

from lowerer.cli import main
from lowerer.cli.budgets import METADATA_KEY, from_record, to_record
from lowerer.verification.propagated import ModelBudget

ROOT = Path(__file__).resolve().parent.parent
DECODER23 = ROOT / "tests" / "fixtures" / "real" / "decoder.dynamo.opset23.onnx"
EXAMPLE = ROOT / "examples" / "example_opset11.onnx"
BUDGET = "budget float32: 8 ulp or 8 epsilons of the output's largest magnitude; from 10 expansions: Attention, " \
         "RMSNormalization, RotaryEmbedding"


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The decoder at opset 17: ten function-body expansions, so the budget is not exact."""
    d = tmp_path_factory.mktemp("budget")
    out, report = d / "d17.onnx", d / "r.json"
    code, _, err = _invoke(["convert", DECODER23, "-o", out, "--target-opset", "17", "--no-verify",
                            "--report", report])
    assert code == 0, err
    return out, report


def test_convert_records_the_budget_in_the_model_and_the_report(converted: tuple[Path, Path]) -> None:
    out, report = converted
    meta = {e.key: e.value for e in onnx.load(out).metadata_props}
    recorded = json.loads(meta[METADATA_KEY])
    assert recorded["kind"] == "propagated" and recorded["counts"] == {"expansion": 10}
    assert recorded["described"] == BUDGET
    assert json.loads(report.read_text())["summary"]["model_budget"] == recorded


def test_verify_judges_the_pair_by_the_recorded_budget(converted: tuple[Path, Path]) -> None:
    out, _ = converted
    code, text, err = _invoke(["verify", DECODER23, out])
    assert code == 0, err
    assert text.splitlines()[0] == f"judged by: the budget lowerer recorded in {out}'s metadata ({METADATA_KEY}): " \
                                   f"{BUDGET}; --exact compares exactly"
    assert "equal: 1 output(s) equal within the rewrites' own budget" in text
    code, text, _ = _invoke(["verify", out, DECODER23])  # the other way round: A's metadata
    assert code == 0 and text.startswith(f"judged by: the budget lowerer recorded in {out}'s metadata")


def test_verify_exact_ignores_the_budget_and_says_so(converted: tuple[Path, Path]) -> None:
    out, _ = converted
    code, text, err = _invoke(["verify", DECODER23, out, "--exact"])
    assert code == 1  # the expansions round differently: not bit-identical
    assert text.splitlines()[0] == "judged by: exact (--exact: any budget lowerer recorded is ignored)"
    assert err.count("\n") == 1 and "differ" in err


def test_budget_from_a_report(converted: tuple[Path, Path], tmp_path: Path) -> None:
    out, report = converted
    bare = onnx.load(out)
    kept = [e for e in bare.metadata_props if e.key != METADATA_KEY]
    del bare.metadata_props[:]
    bare.metadata_props.extend(kept)
    stripped = tmp_path / "bare.onnx"
    onnx.save(bare, stripped)
    code, text, _ = _invoke(["verify", DECODER23, stripped])
    assert code == 1 and text.startswith("judged by: exact (neither model records a budget of lowerer's")
    code, text, err = _invoke(["verify", DECODER23, stripped, "--budget-from", report])
    assert code == 0, err
    assert text.splitlines()[0] == f"judged by: the budget lowerer recorded in {report}: {BUDGET}"
    # A report from before model_budget: the budget rebuilt from its rewrite records, the same.
    data = json.loads(report.read_text())
    del data["summary"]["model_budget"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    code, text, err = _invoke(["verify", DECODER23, stripped, "--budget-from", old])
    assert code == 0, err
    assert text.splitlines()[0] == f"judged by: the budget lowerer recorded in {old}: {BUDGET}"


@pytest.mark.parametrize(("content", "match"), [("{", "not JSON"), ("[]", "not a lowerer report"),
                                                ('{"summary": {"model_budget": 3}, "rewrites": []}',
                                                 "not a budget lowerer recorded")])
def test_budget_from_refuses_what_is_no_report(tmp_path: Path, content: str, match: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    code, _, err = _invoke(["verify", EXAMPLE, EXAMPLE, "--budget-from", bad])
    assert code == 2 and match in err and err.count("\n") == 1 and "Traceback" not in err
    code, _, err = _invoke(["verify", EXAMPLE, EXAMPLE, "--budget-from", tmp_path / "none.json"])
    assert code == 2 and "cannot read it" in err
    code, _, err = _invoke(["verify", EXAMPLE, EXAMPLE, "--budget-from", bad, "--exact"])
    assert code == 2 and "--exact ignores recorded budgets" in err


def test_an_exact_conversion_records_no_metadata(tmp_path: Path) -> None:
    src, out, report = tmp_path / "hm.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm")
    onnx.save(make_model([node], [value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                         [value_info("y", TensorProto.FLOAT, [2, 3, 4])], 11), src)
    code, _, err = _invoke(["convert", src, "-o", out, "--target-opset", "13", "--report", report])
    assert code == 0, err
    assert METADATA_KEY not in {e.key for e in onnx.load(out).metadata_props}
    assert json.loads(report.read_text())["summary"]["model_budget"]["kind"] == "exact"
    code, text, _ = _invoke(["verify", src, out])
    assert code == 0 and text.startswith("judged by: exact (neither model records")
    code, text, _ = _invoke(["verify", src, out, "--budget-from", report])
    assert code == 0 and text.startswith(f"judged by: the budget lowerer recorded in {report}: exact: every rewrite")


def test_a_budget_record_reads_back() -> None:
    budget = ModelBudget((("expansion", "Gelu"), ("kernel", "Exp")), (("expansion", 2), ("kernel", 1)), 4)
    assert from_record(json.loads(json.dumps(to_record(budget))), "x") == budget
