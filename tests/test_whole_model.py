"""Whole-model checks: ``lowerer verify A B`` and ``convert --verify-model``, steerable and with statistics.

Inputs under control (shapes, value ranges, loaded and saved inputs, index-like inputs in range),
tolerances (atol/rtol/ulp; discrete outputs exact), per-output statistics, a check that could not
run as a failure (unless --allow-unverified), external data read from the model's folder, the
memory budget by the bytes tensors claim.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import InputError
from lowerer.verification.compare import Tolerance, compare, statistics
from lowerer.verification.feeds import load_sets
from lowerer.verification.graph_inputs import model_inputs
from lowerer.verification.index_inputs import find_index_uses
from lowerer.verification.whole import ModelCheckOptions, ModelSource, compare_models


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto] | None = None, opset: int = 13,
           functions: list[onnx.FunctionProto] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits or [])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("local", 1)] if functions else [])
    return helper.make_model(graph, opset_imports=imports, ir_version=8, functions=functions or [])


def _const(name: str, value: object) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def scaled_models() -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """x*0.1*3/7 and x*(0.3/7): algebraically equal, 1 ulp apart on some inputs (issue 12, problem 2)."""
    io = ([helper.make_tensor_value_info("x", T.FLOAT, [2, 3])], [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    a = _model([helper.make_node("Mul", ["x", "a"], ["t1"]), helper.make_node("Mul", ["t1", "b"], ["t2"]),
                helper.make_node("Div", ["t2", "c"], ["y"])], *io, [_const("a", 0.1), _const("b", 3.0),
                                                                    _const("c", 7.0)])
    b = _model([helper.make_node("Mul", ["x", "k"], ["y"])], *io, [_const("k", np.float32(0.3) / np.float32(7))])
    return a, b


def embedding_model(opset: int = 11, rows: int = 30, via_cast: bool = False) -> onnx.ModelProto:
    """Gather over an embedding table with int64 ids [batch, seq], then a Hardmax lowerer converts."""
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((rows, 8)).astype(np.float32), "table")
    nodes = []
    ids = "ids"
    if via_cast:  # the ids reach Gather through ops that only move values
        nodes += [helper.make_node("Cast", ["ids"], ["ids32"], to=T.INT32),
                  helper.make_node("Unsqueeze", ["ids32"], ["ids3"], axes=[0]),
                  helper.make_node("Reshape", ["ids3", "flat"], ["ids_flat"])]
        ids = "ids_flat"
    nodes += [helper.make_node("Gather", ["table", ids], ["e"], axis=0, name="embed"),
              helper.make_node("Hardmax", ["e"], ["y"], axis=1, name="hm")]
    inits = [table] + ([numpy_helper.from_array(np.array([-1], dtype=np.int64), "flat")] if via_cast else [])
    out_shape: list[int | str] = ["n", 8] if via_cast else ["batch", "seq", 8]
    return _model(nodes, [helper.make_tensor_value_info("ids", T.INT64, ["batch", "seq"])],
                  [helper.make_tensor_value_info("y", T.FLOAT, out_shape)], inits, opset)


def _save(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


# -- tolerances and statistics ------------------------------------------------------------------------------

def test_statistics_report_maxima_share_and_worst() -> None:
    a = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=np.float32)
    b = a.copy()
    b[1, 2] = np.nextafter(np.float32(6.0), np.float32(7.0))  # 1 ulp
    b[0, 1] = 2.5
    s = statistics(a, b, name="y")
    assert (s.count, s.mismatches) == (6, 2) and s.share == pytest.approx(2 / 6)
    assert s.max_abs == pytest.approx(0.5) and s.max_rel == pytest.approx(0.25)
    assert s.worst_index == [0, 1] and s.worst == (2.0, 2.5)
    assert s.max_ulp is not None and s.max_ulp > 1
    # a tolerance accepts some: 1 ulp takes the [1, 2] value, an atol of 0.5 the other
    assert statistics(a, b, Tolerance(ulps=1)).mismatches == 1
    assert statistics(a, b, Tolerance(atol=0.5)).mismatches == 0
    assert statistics(a, b, Tolerance(rtol=0.2)).mismatches == 1
    assert statistics(a, b, Tolerance(rtol=0.25)).mismatches == 0


def test_discrete_outputs_are_exact_whatever_the_tolerance() -> None:
    a, b = np.array([1, 2, 3], dtype=np.int64), np.array([1, 2, 4], dtype=np.int64)
    s = statistics(a, b, Tolerance(atol=10, rtol=1, ulps=100))
    assert s.discrete and s.mismatches == 1 and s.worst == (3, 4)
    assert statistics(np.array([True, False]), np.array([True, True]), Tolerance(atol=1)).mismatches == 1


def test_nan_and_infinities_match_only_themselves() -> None:
    a = np.array([np.nan, np.inf, -np.inf, 1.0], dtype=np.float32)
    assert statistics(a, a.copy(), Tolerance(atol=1e30)).mismatches == 0
    b = np.array([1.0, np.inf, np.inf, 1.0], dtype=np.float32)
    s = statistics(a, b, Tolerance(atol=1e30))
    assert s.mismatches == 2 and s.max_abs == float("inf")


def test_tolerance_is_shared_with_exact_per_rewrite_comparison() -> None:
    x = np.array([1.0, 2.0], dtype=np.float32)
    y = np.nextafter(x, np.float32(3))
    assert compare(x, y)[0] is not None  # exact by default, as per-rewrite checks use it
    assert compare(x, y, Tolerance(ulps=1))[0] is None
    assert compare(x, y, Tolerance(rtol=1e-6))[0] is None
    assert Tolerance(ulps=4, atol=0.1).to_dict() == {"ulps": 4, "atol": 0.1}  # rtol only when set
    assert Tolerance().describe() == "exact" and Tolerance(atol=1e-6, ulps=2).describe() == "atol 1e-06 or 2 ulp"
    with pytest.raises(ValueError, match="finite number"):
        Tolerance(rtol=-1)


# -- lowerer verify: the example --------------------------------------------------------------------

def test_verify_reports_statistics_and_accepts_a_tolerance(tmp_path: Path) -> None:
    a, b = scaled_models()
    pa, pb = _save(tmp_path / "a.onnx", a), _save(tmp_path / "b.onnx", b)
    code, out, err = _invoke(["verify", str(pa), str(pb)])
    assert code == 1
    (line,) = err.strip().splitlines()
    assert line.startswith("lowerer: error: ") and "output 'y'" in line and "max ulp 1" in line
    assert "worst at index" in line and "--max-ulp 1" in line
    assert "max abs" in out and "mismatches" in out and "y " in out  # the per-output table
    for flags in (["--max-ulp", "1"], ["--rtol", "1e-6"], ["--atol", "1e-8"]):
        code, out, err = _invoke(["verify", str(pa), str(pb), *flags])
        assert code == 0, err
        assert "equal: 1 output(s) equal within" in out
    code, out, err = _invoke(["verify", str(pa), str(pb), "--rtol", "-1"])
    assert code == 2 and "finite number >= 0" in err


def test_verify_describes_mismatched_inputs_in_words(tmp_path: Path) -> None:
    a, _ = scaled_models()
    other = _model([helper.make_node("Identity", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 1])],
                   [helper.make_tensor_value_info("y", T.FLOAT, [2, 3, 1])])
    code, _, err = _invoke(["verify", str(_save(tmp_path / "a.onnx", a)), str(_save(tmp_path / "o.onnx", other))])
    assert code == 2
    assert "input 'x' has rank 2 in" in err and "rank 3 in" in err
    assert "[(" not in err and "('x'" not in err  # no raw tuples


# -- index-like inputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("via_cast", [False, True])
def test_index_inputs_are_found_and_generated_in_range(via_cast: bool) -> None:
    model = embedding_model(rows=30, via_cast=via_cast)
    specs = model_inputs(model)
    assert not isinstance(specs, str)
    uses = find_index_uses(model, specs)
    assert [u.size for u in uses["ids"]] == [30]
    result = compare_models(ModelSource(model, None, "A"), ModelSource(model, None, "B"))
    assert result.status == "equal", result.reason
    assert len(result.input_sets) == 6  # dims bound to 1 and 2, three kinds each: all ran
    assert any("0..29" in note for note in result.details["inputs"])


def test_index_inputs_through_functions_and_other_index_ops() -> None:
    data = numpy_helper.from_array(np.arange(20, dtype=np.float32).reshape(4, 5), "data")
    fn = helper.make_function("local", "Pick", ["d", "i"], ["o"],
                              [helper.make_node("Gather", ["d", "i"], ["o"], axis=1)], [helper.make_opsetid("", 13)])
    nodes = [helper.make_node("Pick", ["data", "i"], ["p"], domain="local"),
             helper.make_node("GatherElements", ["data", "j"], ["q"], axis=0),
             helper.make_node("OneHot", ["k", "depth", "vals"], ["r"])]
    inits = [data, numpy_helper.from_array(np.array(6, dtype=np.int64), "depth"),
             numpy_helper.from_array(np.array([0, 1], dtype=np.float32), "vals")]
    model = _model(nodes, [helper.make_tensor_value_info("i", T.INT64, [3]),
                           helper.make_tensor_value_info("j", T.INT64, [4, 5]),
                           helper.make_tensor_value_info("k", T.INT64, [2])],
                   [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("p", "q", "r")], inits,
                   functions=[fn])
    specs = model_inputs(model)
    assert not isinstance(specs, str)
    uses = find_index_uses(model, specs)
    assert set(uses) == {"j", "k", "i"}
    assert uses["j"][0].size == 4 and uses["k"][0].size == 6
    assert uses["i"][0].size is None  # inside the function the data's dims are unknown: indices 0
    result = compare_models(ModelSource(model, None, "A"), ModelSource(model, None, "B"))
    assert result.status == "equal", result.reason


def test_rotary_position_ids_are_generated_within_the_cache() -> None:
    """RotaryEmbedding-23's position_ids pick rows of cos_cache: generated in 0..rows-1, so every set runs."""
    rng = np.random.default_rng(0)
    caches = [numpy_helper.from_array(rng.normal(size=(8, 4)).astype(np.float32), n) for n in ("cos", "sin")]
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=2)
    model = _model([node], [helper.make_tensor_value_info("x", T.FLOAT, ["b", "s", 16]),
                            helper.make_tensor_value_info("pos", T.INT64, ["b", "s"])],
                   [helper.make_tensor_value_info("y", T.FLOAT, ["b", "s", 16])], caches, opset=23)
    model.ir_version = 10
    specs = model_inputs(model)
    assert not isinstance(specs, str)
    assert [u.size for u in find_index_uses(model, specs)["pos"]] == [8]
    result = compare_models(ModelSource(model, None, "A"), ModelSource(model, None, "B"))
    assert result.status == "equal", result.reason
    assert any("0..7" in note for note in result.details["inputs"])


def test_index_range_follows_a_dynamic_data_dim() -> None:
    nodes = [helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("table", T.FLOAT, ["rows", 3]),
                           helper.make_tensor_value_info("ids", T.INT64, [5])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)])
    options = ModelCheckOptions(input_shapes={"table": (7, 3)})
    result = compare_models(ModelSource(model, None, "A"), ModelSource(model, None, "B"), options=options)
    assert result.status == "equal", result.reason
    assert any("0..6" in n for n in result.details["inputs"])


# -- convert --verify-model on an embedding model ------------------------------------------------------------

def test_verify_model_on_an_embedding_model(tmp_path: Path) -> None:
    src = _save(tmp_path / "embed11.onnx", embedding_model(11, rows=3000))
    out, report = tmp_path / "embed13.onnx", tmp_path / "r.json"
    code, _, err = _invoke(["convert", str(src), "-o", str(out), "--target-opset", "13", "--verify-model",
                            "--report", str(report)])
    assert code == 0, err
    assert "whole-model check: equal: 1 output(s) equal exactly on 6 input set(s)" in err
    check = json.loads(report.read_text())["summary"]["model_checks"]["whole-model check"]
    assert check["status"] == "equal" and check["outputs"][0]["count"] > 0
    assert any("Gather 'embed': 0..2999" in n for n in check["details"]["inputs"])


def test_input_shapes_and_value_ranges_steer_generation(tmp_path: Path) -> None:
    src = _save(tmp_path / "e.onnx", embedding_model(13, rows=50))
    saved = tmp_path / "in.npz"
    code, out, err = _invoke(["verify", str(src), str(src), "--input-shapes", "ids:2x7", "--val-range", "ids:10,12",
                              "--save-inputs", str(saved)])
    assert code == 0, err
    specs = model_inputs(onnx.load(src))
    assert not isinstance(specs, str)
    sets = load_sets([saved], specs)
    assert len(sets) == 3  # every dim fixed: one binding, three kinds
    for feed_set in sets:
        ids = feed_set.feeds["ids"]
        assert ids.shape == (2, 7) and ids.dtype == np.int64 and ids.min() >= 10 and ids.max() <= 12
    # the saved inputs load back and run; a hand-made .npz too
    code, out, err = _invoke(["verify", str(src), str(src), "--load-inputs", str(saved)])
    assert code == 0 and "3 input set(s)" in out, err
    own = tmp_path / "own.npz"
    np.savez(own, ids=np.array([[49, 0, 7]], dtype=np.int64))
    code, out, err = _invoke(["verify", str(src), str(src), "--load-inputs", str(own)])
    assert code == 0 and "1 input set(s)" in out, err


@pytest.mark.parametrize(("args", "needle"), [
    (["--input-shapes", "nope:1x2"], "names 'nope', which is not an input"),
    (["--input-shapes", "ids:1x2x3"], "gives rank 3"),
    (["--input-shapes", "ids:1xq"], "is not a whole number"),
    (["--val-range", "ids:5,1"], "LOW <= HIGH"),
    (["--val-range", "ids:0"], "give NAME:LOW,HIGH"),
])
def test_bad_steering_options_are_one_line_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    src = _save(tmp_path / "e.onnx", embedding_model(13))
    code, _, err = _invoke(["verify", str(src), str(src), *args])
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("lowerer: error: ") and needle in err


def test_loaded_inputs_must_fit_the_model(tmp_path: Path) -> None:
    src = _save(tmp_path / "e.onnx", embedding_model(13))
    bad = tmp_path / "bad.npz"
    np.savez(bad, ids=np.zeros((1, 2), dtype=np.int32))
    code, _, err = _invoke(["verify", str(src), str(src), "--load-inputs", str(bad)])
    assert code == 2 and "input 'ids' is int32, the model takes int64" in err
    np.savez(bad, other=np.zeros((1, 2), dtype=np.int64))
    code, _, err = _invoke(["verify", str(src), str(src), "--load-inputs", str(bad)])
    assert code == 2 and "holds input 'other' that the model does not take" in err


def test_save_inputs_never_lands_on_a_model(tmp_path: Path) -> None:
    src = _save(tmp_path / "e.onnx", embedding_model(13))
    before = src.read_bytes()
    code, _, err = _invoke(["verify", str(src), str(src), "--save-inputs", str(src)])
    assert code == 2 and "which lowerer reads" in err
    assert src.read_bytes() == before
    code, _, err = _invoke(["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11",
                            "--verify-model", "--save-inputs", str(tmp_path / "o.onnx")])
    assert code == 2 and "is also where" in err and not (tmp_path / "o.onnx").exists()


def test_whole_model_options_need_a_whole_model_check(tmp_path: Path) -> None:
    src = _save(tmp_path / "e.onnx", embedding_model(13))
    code, _, err = _invoke(["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--target-opset", "11",
                            "--rtol", "1e-3"])
    assert code == 2 and "--rtol steer the whole-model check: add --verify-model" in err


# -- a check that cannot run is a failure, with its full reason -------------------------------------------

def _unrunnable(tmp_path: Path) -> Path:
    """ids index a table of 3 rows, but the model adds 100 first: every generated input fails in Gather."""
    table = numpy_helper.from_array(np.ones((3, 2), dtype=np.float32), "table")
    nodes = [helper.make_node("Add", ["ids", "hundred"], ["far"]),
             helper.make_node("Gather", ["table", "far"], ["y"], axis=0)]
    model = _model(nodes, [helper.make_tensor_value_info("ids", T.INT64, [4])],
                   [helper.make_tensor_value_info("y", T.FLOAT, [4, 2])],
                   [table, numpy_helper.from_array(np.array(100, dtype=np.int64), "hundred")])
    return _save(tmp_path / "far.onnx", model)


def test_a_check_that_cannot_run_fails_unless_allowed(tmp_path: Path) -> None:
    src = _unrunnable(tmp_path)
    code, _, err = _invoke(["verify", str(src), str(src)])
    assert code == 1
    (line,) = err.strip().splitlines()
    assert "did not run on any input set" in line and "could not run" in line and "--allow-unverified" in line
    assert line.rstrip().endswith(")")  # the full reason: not cut off mid-word
    code, _, err = _invoke(["verify", str(src), str(src), "--allow-unverified"])
    assert code == 0 and "lowerer: warning: the comparison could not run" in err
    # convert --verify-model: nothing written unless allowed
    out = tmp_path / "o.onnx"
    code, _, err = _invoke(["convert", str(src), "-o", str(out), "--target-opset", "11", "--verify-model"])
    assert code == 1 and "whole-model check could not run" in err and not out.exists()
    code, _, err = _invoke(["convert", str(src), "-o", str(out), "--target-opset", "11", "--verify-model",
                            "--allow-unverified"])
    assert code == 0 and out.exists() and "whole-model check: not-run" in err
    # the value ranges a user gives fix it
    code, _, err = _invoke(["verify", str(src), str(src), "--val-range", "ids:-100,-98"])
    assert code == 0, err


def test_api_verify_model_raises_when_the_check_cannot_run(tmp_path: Path) -> None:
    src = _unrunnable(tmp_path)
    with pytest.raises(lowerer.VerificationError, match="could not run"):
        lowerer.convert(str(src), target_opset=11, verify_model=True)
    res = lowerer.convert(str(src), target_opset=11, verify_model=lowerer.ModelCheckOptions(allow_unverified=True))
    assert res.report.model_check is not None and res.report.model_check["status"] == "not-run"
    with pytest.raises(InputError, match="verify_model must be"):
        lowerer.convert(str(src), target_opset=11, verify_model="yes")  # type: ignore[call-overload]


# -- external data and memory -----------------------------------------------------------------------------

def _external_model(folder: Path) -> Path:
    folder.mkdir()
    w = numpy_helper.from_array(np.arange(64, dtype=np.float32).reshape(8, 8), "w")
    model = _model([helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Hardmax", ["m"], ["y"], axis=1)],
                   [helper.make_tensor_value_info("x", T.FLOAT, ["n", 8])],
                   [helper.make_tensor_value_info("y", T.FLOAT, ["n", 8])], [w], opset=11)
    onnx.save(model, folder / "m.onnx", save_as_external_data=True, location="w.bin", size_threshold=0)
    return folder / "m.onnx"


def test_external_data_is_read_from_the_models_folder_not_the_cwd(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src = _external_model(tmp_path / "model")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "w.bin").write_bytes(b"\0" * 256)  # a decoy where a cwd-relative lookup would go
    monkeypatch.chdir(elsewhere)
    code, out, err = _invoke(["verify", str(src), str(src)])
    assert code == 0 and "equal" in out, err
    res = lowerer.convert(str(src), target_opset=13, verify_model=True)
    assert res.report.model_check is not None and res.report.model_check["status"] == "equal"
    # the decoy would give zeros: the compared outputs are the real weights'
    assert os.path.getsize(src.parent / "w.bin") == 256


def test_memory_budget_counts_claimed_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lowerer.verification import whole

    src = _external_model(tmp_path / "model")
    monkeypatch.setattr(whole, "available_memory", lambda: 100)  # bytes
    code, _, err = _invoke(["verify", str(src), str(src)])
    assert code == 1 and "claim" in err and "more than the" in err and "memory available" in err
    monkeypatch.undo()
    # a tensor claiming more than its file holds is refused before onnxruntime opens anything
    model = onnx.load(src, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "length":
            entry.value = str(10**9)
    result = compare_models(ModelSource(model, src.parent, "A"), ModelSource(model, src.parent, "B"))
    assert result.status == "not-run" and "claims bytes 0..1000000000" in result.reason


def test_no_size_cap() -> None:
    from lowerer.verification import whole

    assert not hasattr(whole, "MAX_MODEL_BYTES")


def test_optimize_from_the_command_line_is_checked_and_steerable(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "example_opset11.onnx"
    out, saved = tmp_path / "o.onnx", tmp_path / "in.npz"
    code, _, err = _invoke(["convert", str(example), "-o", str(out), "--target-opset", "13", "--decompose", "all",
                            "--no-verify", "--optimize", "--input-shapes", "image:3x3x8x8", "--save-inputs",
                            str(saved)])
    assert code == 0, err
    # 4 sets judged: normal, ties, all-equal, inf (NaN: recorded)
    assert "optimized: " in err and "optimization check: equal: 5 output(s) equal exactly on 4 input set(s)" in err
    specs = model_inputs(onnx.load(example))
    assert not isinstance(specs, str)
    sets = load_sets([saved], specs)  # the options reached the optimization check
    assert [s.feeds["image"].shape for s in sets] == [(3, 3, 8, 8)] * 5  # normal, ties, all-equal, inf, nan


def test_scalar_outputs_compare() -> None:
    one, two = np.array(1.0, dtype=np.float32), np.array(2.0, dtype=np.float32)
    diff, _ = compare(one, two)
    assert diff is not None and diff.index == () and (diff.expected, diff.actual) == (1.0, 2.0)
    s = statistics(one, two)
    assert s.mismatches == 1 and s.worst_index == [] and s.worst == (1.0, 2.0)
    assert statistics(np.array(np.nan), np.array(np.nan)).mismatches == 0


def test_external_locations_leading_out_are_not_run(tmp_path: Path) -> None:
    src = _external_model(tmp_path / "model")
    model = onnx.load(src, load_external_data=False)
    for entry in model.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../outside.bin"
    (tmp_path / "outside.bin").write_bytes(b"\0" * 256)
    result = compare_models(ModelSource(model, src.parent, "A"), ModelSource(model, src.parent, "B"))
    assert result.status == "not-run" and "leads out of the model's folder" in result.reason
