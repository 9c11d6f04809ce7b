"""One name per concept across CLI and API, LowerPass with every option, refusals visible through onnx_ir."""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import get_args

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from _convert_helpers import float_mod_model
from click.testing import CliRunner
from onnx import TensorProto, helper

import lowerer
from lowerer.cli import main
from lowerer.core.report import Rewrite, RewriteStatus
from lowerer.ir_pass import lowerer_error
from lowerer.verification.compare import Tolerance, statistics


def _hardmax_model(opset: int = 11) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hm", axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)



# -- LowerPass: every option, in a PassManager; a refusal shows lowerer's line ------------------------------

def test_lower_pass_takes_convert_options_in_a_pass_manager() -> None:
    lower = lowerer.LowerPass(target_opset=13, for_backend="cuda", max_ulp=8, verify_model=True)
    assert repr(lower).endswith("for_backend='cuda', max_ulp=8, verify_model=True)")
    result = ir.passes.PassManager([lower])(ir.serde.deserialize_model(_hardmax_model()))
    assert result.modified and result.model.opset_imports[""] == 13
    report = lower.report
    assert report is not None and report.backend is not None and report.model_check is not None
    assert report.model_check["status"] == "equal"
    assert lower.error is None


def test_lower_pass_takes_every_keyword_of_convert_and_shows_it() -> None:
    away = {"decompose": ["hardmax"], "verify": False, "providers": ["cpu"], "seed": 3, "verify_model": True,
            "optimize": True, "max_ulp": 2, "for_backend": "cuda", "allow_fallback": True, "ir_version": 9,
            "no_loops": True, "fold_dequantize": True, "keep_imports": True,
            "strict_backend": True}
    keywords = set(inspect.signature(lowerer.convert).parameters) - {"model", "target_opset", "progress"}
    assert keywords == set(away) | {"exact"}, keywords ^ (set(away) | {"exact"})
    shown = repr(lowerer.LowerPass(target_opset=13, **away))
    for name in away:
        assert f"{name}=" in shown, name
    assert "exact=True" in repr(lowerer.LowerPass(exact=True))  # exact goes with no max_ulp


def test_keep_imports_in_a_pass_manager() -> None:
    model = onnx.load(Path(__file__).parent / "fixtures" / "exporters" / "skl2onnx_kmeans.onnx")  # no ml node
    for keep, domains in ((False, {""}), (True, {"", "ai.onnx.ml"})):
        lower = lowerer.LowerPass(target_opset=11, keep_imports=keep)
        result = ir.passes.PassManager([lower])(ir.serde.deserialize_model(model))
        assert set(result.model.opset_imports) == domains
        assert lower.report is not None and any("which no node uses" in n for n in lower.report.notes) is not keep


def test_a_refusal_in_a_pass_manager_carries_lowerers_line() -> None:
    with pytest.raises(lowerer.ConversionError) as direct:
        lowerer.convert(float_mod_model(14), target_opset=9, verify=False)
    line = str(direct.value)
    lower = lowerer.LowerPass(target_opset=9, verify=False)
    with pytest.raises(ir.passes.PassError) as info:
        ir.passes.PassManager([lower])(ir.serde.deserialize_model(float_mod_model(14)))
    outer = info.value
    assert str(outer) == "An error occurred at step 0"  # onnx_ir's own words
    wrapper = outer.__cause__
    assert isinstance(wrapper, ir.passes.PassError) and line in str(wrapper)  # one level down, in the message
    assert lowerer_error(outer) is lower.error and str(lower.error) == line
    assert str(lower) == f"{line} (in {lower!r})"  # lowerer's line first: onnx_ir's PassError starts with it
    with pytest.raises(ir.passes.PassError, match="Mod"):
        ir.passes.Sequential(lowerer.LowerPass(target_opset=9, verify=False))(
            ir.serde.deserialize_model(float_mod_model(14)))


def test_lowerer_error_is_none_for_other_errors() -> None:
    try:
        raise RuntimeError("outer") from KeyError("inner")
    except RuntimeError as e:
        assert lowerer_error(e) is None


# -- one name per concept: max_ulp ---------------------------------------------------------------------------

def test_tolerance_takes_max_ulp_and_the_old_keyword_deprecated() -> None:
    assert Tolerance(max_ulp=2) == Tolerance(2)
    assert Tolerance(max_ulp=2).max_ulp == 2 and Tolerance(max_ulp=2).ulps == 2
    with pytest.warns(DeprecationWarning, match="max_ulp"):
        old = Tolerance(ulps=3, atol=0.5)
    assert old == Tolerance(max_ulp=3, atol=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Tolerance(max_ulp=1, atol=1e-6, rtol=1e-5)  # the new name warns nothing
    with pytest.raises(TypeError, match="not both"):
        Tolerance(max_ulp=1, ulps=1)
    with pytest.raises(ValueError, match="max_ulp"):
        Tolerance(max_ulp=-1)
    assert Tolerance(max_ulp=4, atol=0.1).to_dict() == {"ulps": 4, "atol": 0.1}  # the report's key is kept
    a = np.array([1.0, 2.0], dtype=np.float32)
    b = np.nextafter(a, np.float32(3))
    assert statistics(a, b, Tolerance(max_ulp=1)).mismatches == 0
    assert statistics(a, b, Tolerance()).mismatches == 2


def test_max_ulp_on_the_command_line_is_the_tolerance(tmp_path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(_hardmax_model(), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        result = CliRunner().invoke(main, ["verify", str(path), str(path), "--max-ulp", "3"])
    assert result.exit_code == 0, result.output


# -- --decompose lists what it accepts ---------------------------------------------------------------------

def test_decompose_help_and_docstring_list_what_is_accepted() -> None:
    result = CliRunner().invoke(main, ["convert", "--help"], terminal_width=200)
    text = " ".join(result.output.split())
    for word in ("hardmax", "globalmaxpool", "all", "function body", "layernormalization", "gelu"):
        assert word in text, word
    doc = " ".join((lowerer.convert.__doc__ or "").split())
    for word in ("hardmax", "globalmaxpool", "all", "function body", "layernormalization",
                 '"hardmax,layernormalization"'):
        assert word in doc, word


# -- Rewrite.status a Literal; short reprs -----------------------------------------------------------------

def test_rewrite_status_is_a_literal() -> None:
    assert set(get_args(RewriteStatus)) == {"verified", "reference-only", "unverified", "failed"}
    assert Rewrite.__annotations__["status"] in ("RewriteStatus", RewriteStatus)


def test_reprs_are_short() -> None:
    result = lowerer.convert(_hardmax_model(), target_opset=13)
    (rewrite,) = result.report.rewrites
    text = repr(rewrite)
    assert text == ("<Rewrite graph:hm Hardmax-11 -> Shape + Flatten + Hardmax + Reshape "
                    "(opset 13, rule coerced-axis, verified)>")
    assert str(rewrite) == text
    assert repr(result.report) == "<Report opset 11 -> 13, IR 8 -> 7: 1 rewrite (1 verified)>"
    big = Rewrite(node="n", op_type="Gelu", scope="graph", from_version=20, to_opset=13, rule="function-expansion",
                  emitted=["Mul"] * 500)
    assert len(repr(big)) < 200 and "(500 ops)" in repr(big)
