"""Per-rewrite verification: wrong rules are caught, results are reused, providers are chosen, reasons given."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from _wrong_rules import DropsSelectLast
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper

import lowerer
import lowerer.rules as rules
from lowerer.cli import main
from lowerer.core.report import Rewrite
from lowerer.steps.emitter import Emitter, Rule
from lowerer.verification import make_verifier
from lowerer.verification import providers as prov
from lowerer.verification.compare import Tolerance, compare
from lowerer.verification.inputs import bind_shapes


def one_node(op: str, opset: int, attrs: dict | None = None, elem: int = T.FLOAT,
             shape: list | str | None = None, name: str = "n0") -> onnx.ModelProto:
    if shape == "unknown":  # the rank is hidden behind a Reshape to a run-time shape (graph inputs need one)
        nodes = [helper.make_node("Reshape", ["x", "x_shape"], ["x_any_rank"]),
                 helper.make_node(op, ["x_any_rank"], ["y"], name=name, **(attrs or {}))]
        graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, ["N", 4, 5]),
                                               helper.make_tensor_value_info("x_shape", T.INT64, ["r"])],
                                  [helper.make_tensor_value_info("y", elem, ["N", 4, 5])])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    shape = ["N", 4, 5] if shape is None else shape
    node = helper.make_node(op, ["x"], ["y"], name=name, **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", elem, shape)],
                              [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)  # types the output (CLI inputs must pass onnx's checker)


def many_nodes(n: int, opset: int = 13) -> onnx.ModelProto:
    nodes, outputs = [], []
    for i in range(n):
        attrs = {"axis": i % 2, "keepdims": 1, "select_last_index": 1}
        nodes.append(helper.make_node("ArgMax", ["x"], [f"y{i}"], name=f"a{i}", **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{i}", T.INT64, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 4])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    return onnx.shape_inference.infer_shapes(model)




class WrongTranspose(Rule):
    """A deliberately wrong Softmax rule: moves the axis last but does not move it back correctly."""

    name = "wrong-softmax"
    op_types = ("Softmax",)
    versions = (1, 11, 13)

    def rewrite(self, em: Emitter) -> None:
        x = em.node.input[0]
        moved = em.op("Transpose", [x], perm=[0, 2, 1])
        inner = em.op("Softmax", [moved], axis=2)
        em.op("Transpose", [inner], list(em.node.output), perm=[0, 2, 1][::-1][:0] or [0, 2, 1])
        em.nodes[-1].attribute[0].ints[:] = [0, 1, 2]  # wrong: the inverse is not applied


@pytest.fixture
def wrong_argmax(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rules.REGISTRY._spans, ("", "ArgMax"), DropsSelectLast())


# -- failures are caught -------------------------------------------------------------------------------

def test_wrong_rule_raises_verification_error(wrong_argmax: None) -> None:
    model = one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}, name="am")
    with pytest.raises(lowerer.VerificationError) as info:
        lowerer.convert(model, target_opset=11)
    msg = str(info.value)
    assert "'am'" in msg and "ArgMax-13" in msg and "wrong-argmax" in msg
    assert "CPUExecutionProvider" in msg and "input set ties" in msg and "at index" in msg
    assert "original" in msg and "replacement" in msg and "\n" not in msg
    assert info.value.exit_code == 1


def test_wrong_transpose_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rules.REGISTRY._spans, ("", "Softmax"), WrongTranspose())
    with pytest.raises(lowerer.VerificationError, match="wrong-softmax"):
        lowerer.convert(one_node("Softmax", 13, {"axis": 1}, shape=[2, 3, 4]), target_opset=11)


def test_cli_exit_1_writes_nothing(wrong_argmax: None, tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}), src)
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "11",
                                       "--report", str(report)])
    assert result.exit_code == 1, result.output
    assert "failed verification" in result.output and f"the report is in {report}" in result.output
    assert not out.exists()
    failed = json.loads(report.read_text())  # the report is written, holding the failing record (issue 11)
    assert [r["status"] for r in failed["rewrites"]][-1] == "failed"
    report.unlink()
    out.write_bytes(b"keep me")
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "11"])
    assert result.exit_code == 1
    assert out.read_bytes() == b"keep me"
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "11", "--no-verify"])
    assert result.exit_code == 0
    assert out.read_bytes() != b"keep me"


def test_correct_rules_verify_and_report(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(one_node("ArgMax", 13, {"axis": -1, "select_last_index": 1}, shape=["N", 4, None]), src)
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "11",
                                       "--report", str(report), "--seed", "7"])
    assert result.exit_code == 0, result.output
    assert "1 x ArgMax 13 -> 11 as " in result.output  # the summary row names op, versions and change
    data = json.loads(report.read_text())
    rec = data["rewrites"][0]
    check = data["checks"][rec["check"]]
    assert rec["status"] == "verified" and check["provider"] == "CPUExecutionProvider"
    assert check["details"]["max_difference"] == 0.0 and check["details"]["tolerance"] == "exact"
    kinds = {s.split()[0] for s in check["details"]["input_sets"]}
    assert {"normal", "ties", "all-equal", "inf", "edges", "nan"} <= kinds
    assert data["summary"]["by_status"] == {"verified": 1}
    assert data["summary"]["verification"]["seed"] == 7


def test_nan_is_recorded_not_judged() -> None:
    # ArgMax with select_last_index emulated by reversal: NaN handling may differ (ONNX leaves it open).
    res = lowerer.convert(one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}), target_opset=11)
    rw = res.report.rewrites[0]
    assert rw.status == "verified"
    assert "nan" in rw.details


# -- reuse ----------------------------------------------------------------------------------------------

def test_identical_rewrites_are_checked_once() -> None:
    res = lowerer.convert(many_nodes(300), target_opset=11)
    v = res.report.verification
    assert v is not None
    assert v["rewrites"] == 300 and v["distinct_checks"] == 2 and v["cache_hits"] == 298
    assert v["sessions"] == 4
    assert all(r.status == "verified" for r in res.report)
    assert sum(r.details["reused"] for r in res.report) == 298


def test_progress_callback() -> None:
    from lowerer.core.progress import Progress

    seen: list[Progress] = []
    lowerer.convert(many_nodes(5), target_opset=11, progress=seen.append)
    verify = [p for p in seen if p.phase == "verify"]
    assert [p.done for p in verify] == [1, 2, 3, 4, 5]
    assert verify[-1].unit == "rewrites" and verify[-1].detail == "2 distinct checks"


# -- providers ------------------------------------------------------------------------------------------

def fake(monkeypatch: pytest.MonkeyPatch, names: list[str]) -> None:
    monkeypatch.setattr(prov, "available_providers", lambda: list(names))
    monkeypatch.setattr(prov, "provider_problem", lambda name: None)  # every listed provider can run


def test_provider_default_order(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, ["AzureExecutionProvider", "DmlExecutionProvider", "CUDAExecutionProvider",
                       "CPUExecutionProvider"])
    assert prov.select_providers(None) == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    fake(monkeypatch, ["DmlExecutionProvider", "CPUExecutionProvider"])
    assert prov.select_providers(None) == ["DmlExecutionProvider", "CPUExecutionProvider"]
    fake(monkeypatch, ["CPUExecutionProvider"])
    assert prov.select_providers(None) == ["CPUExecutionProvider"]


def test_provider_names(monkeypatch: pytest.MonkeyPatch) -> None:
    fake(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert prov.select_providers(["cuda", "cpu"]) == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert prov.select_providers(["CPUExecutionProvider", "cpu"]) == ["CPUExecutionProvider"]
    with pytest.raises(lowerer.InputError, match=r"not available.*CUDAExecutionProvider, CPUExecutionProvider"):
        prov.select_providers(["dml"])
    with pytest.raises(lowerer.InputError, match="unknown execution provider 'tpu'"):
        prov.select_providers(["tpu"])


def test_cli_unknown_provider_exit_2(tmp_path: Path) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(one_node("ArgMax", 13, {"axis": 1}), src)
    out = tmp_path / "o.onnx"
    for bad in ("tpu", "cuda,dml"):
        result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "11",
                                           "--providers", bad])
        assert result.exit_code == 2
        assert "available here" in result.output
        assert not out.exists()


# -- unverified, with the reason --------------------------------------------------------------------

def rewrite(original: onnx.NodeProto, replacement: list[onnx.NodeProto], types: dict, src: int = 11,
            dst: int = 13, from_version: int = 11) -> Rewrite:
    return Rewrite(node="n", op_type=original.op_type, scope="graph", from_version=from_version, to_opset=dst,
                   rule="test", emitted=[n.op_type for n in replacement], original=original,
                   replacement=replacement, from_opset=src, input_types=types)


def test_unknown_type_is_unverified_with_reason() -> None:
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=1)
    rw = rewrite(node, [helper.make_node("Hardmax", ["x"], ["y"], axis=1)], {"x": None})
    make_verifier()(rw)
    assert rw.status == "unverified" and "type of input 'x' is unknown" in rw.reason


def test_nothing_can_run_is_unverified() -> None:
    # ORT has no double Hardmax; the reference does not implement Neg: neither side can run the replacement.
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=1)
    repl = [helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Neg", ["t"], ["u"]),
            helper.make_node("Hardmax", ["u"], ["y"], axis=-1)]
    rw = rewrite(node, repl, {"x": (T.DOUBLE, [2, 3])})
    make_verifier()(rw)
    assert rw.status == "unverified"
    assert "onnxruntime cannot run the replacement" in rw.reason and "Neg" in rw.reason


def test_reference_fallback_for_missing_kernel() -> None:
    res = lowerer.convert(one_node("Hardmax", 11, {"axis": 1}, elem=T.DOUBLE), target_opset=13)
    rw = res.report.rewrites[0]
    # onnxruntime has no double Hardmax: the reference alone judged it, and the status says so
    assert rw.status == "reference-only" and rw.provider == "numpy-reference"
    assert "NOT_IMPLEMENTED" in rw.details["original_fallback"] and rw.details["reference_only"] == ["original",
                                                                                                   "replacement"]
    assert res.report.summary()["by_status"] == {"reference-only": 1}


def test_bfloat16_uses_reference() -> None:
    res = lowerer.convert(one_node("Softmax", 11, {"axis": 1}, elem=T.BFLOAT16), target_opset=13)
    rw = res.report.rewrites[0]
    assert rw.status == "reference-only" and rw.provider == "numpy-reference"


def test_unknown_rank_uses_several_ranks() -> None:
    res = lowerer.convert(one_node("Softmax", 11, {"axis": 1}, shape="unknown"), target_opset=13)
    rw = res.report.rewrites[0]
    assert rw.status == "verified"
    ranks = {s.count(",") + 1 for s in rw.details["input_sets"]}
    assert ranks == {2, 3, 4}


def test_invalid_replacement_fails() -> None:
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=0)
    repl = [helper.make_node("ArgMax", ["x"], ["y"], axis=0, bogus=3)]
    rw = rewrite(node, repl, {"x": (T.FLOAT, [2, 3])})
    with pytest.raises(lowerer.VerificationError, match="not a valid ONNX graph"):
        make_verifier()(rw)


def test_missing_output_fails() -> None:
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=0)
    rw = rewrite(node, [helper.make_node("ArgMax", ["x"], ["z"], axis=0)], {"x": (T.FLOAT, [2, 3])})
    with pytest.raises(lowerer.VerificationError, match="does not produce output"):
        make_verifier()(rw)


def test_no_verify_marks_unverified() -> None:
    res = lowerer.convert(one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}), target_opset=11, verify=False)
    rw = res.report.rewrites[0]
    assert rw.status == "unverified" and "turned off" in rw.reason and rw.provider is None


# -- pieces ---------------------------------------------------------------------------------------------

def test_shape_bindings() -> None:
    assert bind_shapes([None, 4, None], None) == [(1, 4, 1), (3, 4, 3), (2, 4, 3), (0, 4, 0)]
    assert bind_shapes([2, 3], None) == [(2, 3)]
    assert bind_shapes(None, 2)[0] == (1, 1)
    assert isinstance(bind_shapes(None, None), str)


def test_compare_reports_first_difference() -> None:
    a = np.array([[1, 2], [3, 4]], dtype=np.int64)
    b = np.array([[1, 2], [3, 5]], dtype=np.int64)
    diff, _ = compare(a, b)
    assert diff is not None and diff.index == (1, 1) and diff.expected == 4 and diff.actual == 5
    x = np.array([np.nan, 0.0, 1.0], dtype=np.float32)
    signed = compare(x, np.array([np.nan, -0.0, 1.0], dtype=np.float32))[0]  # exact: +0 and -0 differ
    assert signed is not None and signed.index == (1,) and "sign of zero" in signed.what
    assert compare(x, np.array([np.nan, -0.0, 1.0], dtype=np.float32), signed_zero=False)[0] is None
    assert compare(x, np.array([np.nan, -0.0, 1.0], dtype=np.float32), Tolerance(max_ulp=1))[0] is None
    other_nan = np.array([0, 0, 0], dtype=np.uint32).view(np.float32)
    other_nan[:] = [np.float32(np.nan), 0.0, 1.0]
    other_nan.view(np.uint32)[0] |= 0x1234  # another NaN payload
    assert compare(x, other_nan)[0] is None
    assert compare(x, x.astype(np.float64))[0] is not None


# -- whole models and the verify command ------------------------------------------------------------

def test_verify_model_option() -> None:
    res = lowerer.convert(one_node("Softmax", 13, {"axis": 1}, shape=[2, 3, 4]), target_opset=11, verify_model=True)
    assert res.report.model_check is not None and res.report.model_check["status"] == "equal"


def test_verify_command(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "c.onnx"
    onnx.save(one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}), a)
    onnx.save(lowerer.convert(str(a), target_opset=11).model, b)
    onnx.save(one_node("ArgMax", 13, {"axis": 1}), c)
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", str(a), str(b)])
    assert ok.exit_code == 0 and "equal" in ok.output
    bad = runner.invoke(main, ["verify", str(a), str(c)])
    assert bad.exit_code == 1 and "differ" in bad.output and "at index" in bad.output
    missing = runner.invoke(main, ["verify", str(a), str(tmp_path / "none.onnx")])
    assert missing.exit_code == 2
    d = tmp_path / "d.onnx"
    onnx.save(one_node("ArgMax", 13, {"axis": 1}, elem=T.INT32), d)
    other = runner.invoke(main, ["verify", str(a), str(d)])
    assert other.exit_code == 2 and "different inputs" in other.output


def test_whole_model_check_catches_what_per_rewrite_skipped(wrong_argmax: None) -> None:
    model = one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}, shape=[2, 4, 5])
    with pytest.raises(lowerer.VerificationError, match="whole-model check failed"):
        lowerer.convert(model, target_opset=11, verify=False, verify_model=True)


# -- placement on a GPU provider, with a faked onnxruntime -------------------------------------------

class _FakeOptions:
    def __init__(self) -> None:
        self.entries: dict[str, str] = {}
        self.enable_profiling = False

    def add_session_config_entry(self, key: str, value: str) -> None:
        self.entries[key] = value


class _FakeSession:
    def __init__(self, profile: str) -> None:
        self.profile = profile

    def run(self, names: object, feeds: dict, options: object = None) -> list:
        return [feeds["x"]]

    def end_profiling(self) -> str:
        return self.profile


def test_cpu_fallback_is_reported(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from lowerer.verification.runner import SessionMaker

    profile = tmp_path / "p.json"
    profile.write_text(json.dumps([
        {"cat": "Node", "name": "a_kernel_time", "args": {"op_name": "ArgMax", "provider": "CPUExecutionProvider"}},
        {"cat": "Node", "name": "b_kernel_time", "args": {"op_name": "Gather", "provider": "CUDAExecutionProvider"}}]))

    def session(data: bytes, so: _FakeOptions, providers: list[str]) -> _FakeSession:
        if so.entries.get("session.disable_cpu_ep_fallback") == "1":
            raise RuntimeError("no kernel for ArgMax on CUDA")
        return _FakeSession(str(profile))

    maker = SessionMaker(["CUDAExecutionProvider", "CPUExecutionProvider"])
    maker._ort = SimpleNamespace(SessionOptions=_FakeOptions, InferenceSession=session,
                                 GraphOptimizationLevel=SimpleNamespace(ORT_DISABLE_ALL=0),
                                 RunOptions=SimpleNamespace)
    engine = maker.create(b"model")
    assert not isinstance(engine, str)
    assert engine.label == "CUDAExecutionProvider"
    assert "some nodes ran on CPUExecutionProvider" in (engine.placement or "")
    engine._run_options = object()
    engine.run({"x": np.zeros(1)})
    engine.resolve_placement()
    assert engine.placement is not None and engine.placement.endswith("on CPUExecutionProvider: ArgMax")
    assert not profile.exists()


def test_progress_counter_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from lowerer.cli import output as cli_output
    from lowerer.core.progress import Progress

    quiet = cli_output.TerminalProgress()
    assert not quiet.enabled  # pytest's stderr is not a terminal
    monkeypatch.setattr(cli_output.sys.stderr, "isatty", lambda: True)
    loud = cli_output.TerminalProgress(delay=0.0, interval=0.0)
    assert loud.enabled
    loud(Progress("verify", 10, None, "rewrites", "2 distinct checks"))
    loud(Progress("model-check", 3, 12, "runs"))
    loud.close()
    err = capsys.readouterr().err
    assert "verify: 10 rewrites, 2 distinct checks" in err
    assert "model-check: 3/12 runs (25%)" in err


class LastMaxHardmax(Rule):
    """A deliberately wrong Hardmax decomposition: ArgMax picking the *last* maximum, then OneHot."""

    name = "wrong-hardmax-decomposition"
    op_types = ("Hardmax",)
    versions = (13,)
    decomposition = "hardmax"

    def rewrite(self, em: Emitter) -> None:
        x = em.node.input[0]
        depth = em.const(np.array([5], dtype=np.int64), "depth")
        values = em.const(np.array([0, 1], dtype=np.float32), "values")
        index = em.op("ArgMax", [x], axis=-1, keepdims=0, select_last_index=1)
        em.op("OneHot", [index, depth, values], list(em.node.output), axis=-1)


def test_wrong_decomposition_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rules.REGISTRY.decompositions, "hardmax", LastMaxHardmax())
    with pytest.raises(lowerer.VerificationError, match=r"wrong-hardmax-decomposition.*input set (ties|all-equal)"):
        lowerer.convert(one_node("Hardmax", 13, {"axis": -1}), decompose="hardmax")
