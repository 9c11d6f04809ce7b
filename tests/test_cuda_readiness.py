"""lowerer beside onnxruntime-gpu without a GPU: no crash, providers that cannot run named, the right party blamed.

Every test here runs without a GPU: providers are faked (a child that dies by a signal, a provider
listed but unable to create, a provider whose kernel is made wrong) and placements are recorded.
"""

from __future__ import annotations

import logging
import stat
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _wrong_rules import DropsSelectLast
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
import lowerer.rules as rules
from lowerer.backends import installed_kernels as ik
from lowerer.backends.placement import CPU_PREFERRED, NO_KERNEL, REJECTED, Assigned, classify
from lowerer.verification import provider_probe
from lowerer.verification import providers as prov
from lowerer.verification import whole as whole_mod
from lowerer.verification.runner import SessionMaker

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
FAKE = "FakeExecutionProvider"
LIB_ERROR = "onnxruntime failed to load libonnxruntime_providers_cuda.so: libcublasLt.so.13: cannot open shared object"


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


# -- 1. never crash: children that die, providers that cannot be created ---------------------------------

def test_probe_child_killed_by_a_signal_is_an_answer(tmp_path: Path) -> None:
    python = _script(tmp_path, "dies.sh", "cat > /dev/null\nkill -SEGV $$\n")
    why = provider_probe.probe_provider(CUDA, python=python)
    assert why is not None and "killed the process (SIGSEGV)" in why


def test_probe_names_the_library_onnxruntime_could_not_load(tmp_path: Path) -> None:
    python = _script(tmp_path, "nolib.sh", "cat > /dev/null\n"
                     "echo 'E:onnxruntime: Failed to load library /x/libonnxruntime_providers_cuda.so with error: "
                     "libcublasLt.so.13: cannot open shared object file: No such file or directory' >&2\n"
                     "echo '{\"ok\": false, \"error\": null}'\n")
    why = provider_probe.probe_provider(CUDA, python=python)
    assert why == ("onnxruntime failed to load libonnxruntime_providers_cuda.so: libcublasLt.so.13: cannot open "
                   "shared object file: No such file or directory")


def test_probe_of_a_provider_this_onnxruntime_lacks() -> None:
    # The CPU build of onnxruntime runs the session on the CPU: the provider was not used.
    assert provider_probe.probe_provider("NoSuchExecutionProvider") is not None


def test_kernel_table_child_killed_falls_back_to_a_shipped_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    python = _script(tmp_path, "dies.sh", "kill -SEGV $$\n")
    older = ik.KernelRows(CPU, {"Relu": [(14, None, {"T": frozenset({"tensor(float)"})})]}, "shipped 1.0 table",
                          exact=False, source_release="1.0.0")
    monkeypatch.setattr(ik, "_from_table", lambda provider, release: older)
    monkeypatch.setattr(ik, "_WARNED", set())
    ik.installed_kernels.cache_clear()
    ik._child_rows.cache_clear()
    try:
        with caplog.at_level(logging.WARNING):
            got = ik.installed_kernels(CPU, python=python)
            assert ik.installed_kernels(CUDA, python=python) is older
        assert got is older
        lines = [r.getMessage() for r in caplog.records if "died by signal 11" in r.getMessage()]
        assert len(lines) == 1 and "onnxruntime 1.0.0's docs/OperatorKernels.md" in lines[0]
        monkeypatch.setattr(ik, "_from_table", lambda provider, release: None)
        ik.installed_kernels.cache_clear()
        assert ik.installed_kernels(CPU, python=python) is None  # nothing known: nothing looked up
    finally:
        ik.installed_kernels.cache_clear()
        ik._child_rows.cache_clear()


def test_kernel_table_is_never_read_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnxruntime.capi import _pybind_state

    def boom() -> None:
        raise AssertionError("get_all_opkernel_def() called in lowerer's process")

    monkeypatch.setattr(_pybind_state, "get_all_opkernel_def", boom)
    ik.installed_kernels.cache_clear()
    from lowerer.passes import runtime_gate

    runtime_gate._cpu_kernel_defs.cache_clear()
    runtime_gate._cpu_kernels.cache_clear()
    runtime_gate._kernelless_at.cache_clear()
    try:
        model = helper.make_model(helper.make_graph(
            [helper.make_node("Hardmax", ["x"], ["y"], axis=1)], "g",
            [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
            [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])]), opset_imports=[helper.make_opsetid("", 11)],
            ir_version=7)
        result = lowerer.convert(model, target_opset=13)
        assert result.report.rewrites
    finally:
        runtime_gate._cpu_kernel_defs.cache_clear()
        runtime_gate._cpu_kernels.cache_clear()
        runtime_gate._kernelless_at.cache_clear()
        ik.installed_kernels.cache_clear()


@pytest.fixture
def cuda_listed_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prov, "available_providers", lambda: ["TensorrtExecutionProvider", CUDA, CPU])
    monkeypatch.setattr(prov, "provider_problem", lambda name: None if name == CPU else LIB_ERROR)
    monkeypatch.setattr(prov, "_WARNED", set())


def test_default_providers_skip_a_listed_provider_that_cannot_run(cuda_listed_unusable: None,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert prov.select_providers(None) == [CPU]
        assert prov.select_providers(None) == [CPU]
    lines = [r.getMessage() for r in caplog.records if "cannot run here" in r.getMessage()]
    assert len(lines) == 1 and "CUDAExecutionProvider" in lines[0] and "libcublasLt.so.13" in lines[0]


def test_requesting_a_provider_that_cannot_run_is_a_user_error(cuda_listed_unusable: None) -> None:
    with pytest.raises(lowerer.InputError, match=r"'cuda' \(CUDAExecutionProvider\) is listed by onnxruntime .* but "
                                                 r"cannot run here: onnxruntime failed to load .*libcublasLt"):
        prov.select_providers(["cuda"])
    assert prov.select_providers(["cpu"]) == [CPU]


def test_cli_providers_cuda_exits_2_with_one_line(cuda_listed_unusable: None, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from lowerer.cli import main

    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], axis=1)], "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])]), opset_imports=[helper.make_opsetid("", 11)],
        ir_version=7), src)
    out = tmp_path / "out.onnx"
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "13",
                                       "--providers", "cuda"])
    assert result.exit_code == 2, result.output
    assert "cannot run here" in result.output and "Traceback" not in result.output and not out.exists()
    result = CliRunner().invoke(main, ["convert", str(src), "-o", str(out), "--target-opset", "13"])
    assert result.exit_code == 0, result.output
    report = lowerer.convert(onnx.load(src), target_opset=13).report.to_dict()
    assert report["summary"]["verification"]["providers"] == [CPU]


# -- 3. float32 checks on CUDA without TF32 ---------------------------------------------------------------

def test_cuda_sessions_run_without_tf32_and_a_fixed_conv_algorithm() -> None:
    env: dict[str, str] = {}
    got = prov.session_providers([CUDA, CPU], env=env)
    assert got == [(CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": "DEFAULT"}), CPU]
    assert env == {"NVIDIA_TF32_OVERRIDE": "0"}
    env = {"NVIDIA_TF32_OVERRIDE": "1"}  # the user's own setting wins
    prov.session_providers([CUDA], env=env)
    assert env == {"NVIDIA_TF32_OVERRIDE": "1"}
    assert prov.session_providers([CPU], env=env) == [CPU]


def test_session_maker_passes_the_cuda_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    class FakeOrt:
        SessionOptions = __import__("onnxruntime").SessionOptions
        GraphOptimizationLevel = __import__("onnxruntime").GraphOptimizationLevel

        @staticmethod
        def InferenceSession(data: bytes, options: Any, providers: Any) -> object:
            seen.append(providers)
            return object()

    maker = SessionMaker([CUDA, CPU])
    maker._ort = FakeOrt
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    maker.create(b"model")
    assert seen[0] == [(CUDA, {"use_tf32": "0", "cudnn_conv_algo_search": "DEFAULT"})]


# -- 2. the right party blamed -----------------------------------------------------------------------------

def _parsed(model: onnx.ModelProto | bytes) -> onnx.ModelProto:
    return model if isinstance(model, onnx.ModelProto) else onnx.load_from_string(model)


def _fake_kernels(monkeypatch: pytest.MonkeyPatch, wrong_on: str, op: str,
                  attr: tuple[str, int] | None = None) -> None:
    """Sessions on ``wrong_on`` run on the CPU, but a model holding ``op`` (with ``attr``) gets its outputs shifted."""
    real = SessionMaker.create

    def create(self: SessionMaker, model: onnx.ModelProto | bytes, data_dir: Any = None) -> Any:
        if self.providers[0] == FAKE:
            engine = real(SessionMaker([CPU]), model, data_dir)
            if not isinstance(engine, str):
                engine.label = FAKE
        else:
            engine = real(self, model, data_dir)
        if isinstance(engine, str) or self.providers[0] != wrong_on:
            return engine
        nodes = _parsed(model).graph.node
        if any(n.op_type == op and (attr is None or any(a.name == attr[0] and a.i == attr[1] for a in n.attribute))
               for n in nodes):
            run = engine.run

            def shifted(feeds: Any) -> list[np.ndarray]:
                return [o + np.ones((), o.dtype) for o in run(feeds)]

            engine.run = shifted  # type: ignore[method-assign]
        return engine

    monkeypatch.setattr(SessionMaker, "create", create)
    monkeypatch.setattr("lowerer.verification.check.select_providers", lambda requested=None: [FAKE, CPU])
    monkeypatch.setattr(whole_mod, "select_providers", lambda requested=None: [FAKE, CPU])


def _upsample9() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Upsample", ["x", "s"], ["y"], name="up", mode="nearest")], "g",
                              [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 3, 4])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [1, 2, 6, 8])],
                              [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=7)


def test_a_provider_kernel_that_departs_is_named_and_the_rewrite_stands(monkeypatch: pytest.MonkeyPatch,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    _fake_kernels(monkeypatch, FAKE, "Upsample")
    with caplog.at_level(logging.WARNING):
        result = lowerer.convert(_upsample9(), target_opset=13)
    rewrite = next(r for r in result.report.rewrites if r.op_type == "Upsample")
    assert rewrite.status == "verified" and rewrite.provider == CPU
    said = rewrite.details["provider_departure"]["statement"]
    assert "FakeExecutionProvider's Upsample-9 kernel differs from its CPU kernel here (max |diff| 1" in said
    assert "Resize" not in said  # the replacement agrees across providers: it is not blamed
    assert sum("Upsample-9 kernel differs" in r.getMessage() for r in caplog.records) == 1




def test_a_wrong_rewrite_is_still_refused_after_every_second_opinion(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_kernels(monkeypatch, FAKE, "Nothing")  # the fake provider computes like the CPU
    monkeypatch.setitem(rules.REGISTRY._spans, ("", "ArgMax"), DropsSelectLast())
    graph = helper.make_graph([helper.make_node("ArgMax", ["x"], ["y"], name="am", axis=1, select_last_index=1)],
                              "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", T.INT64, [3, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    with pytest.raises(lowerer.VerificationError, match=r"wrong-argmax.*failed verification on CPUExecutionProvider"):
        lowerer.convert(model, target_opset=11)


def test_an_onnxruntime_cpu_kernel_that_departs_from_the_spec_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_kernels(monkeypatch, CPU, "ArgMax", ("select_last_index", 1))
    monkeypatch.setattr("lowerer.verification.check.select_providers", lambda requested=None: [CPU])
    graph = helper.make_graph([helper.make_node("ArgMax", ["x"], ["y"], name="am", axis=1, select_last_index=1)],
                              "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info("y", T.INT64, [3, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)], ir_version=7)
    # Not a listed departure: the reference agreeing with the replacement does not overrule onnxruntime.
    with pytest.raises(lowerer.VerificationError, match="failed verification on CPUExecutionProvider"):
        lowerer.convert(model, target_opset=11)
    # Listed (op, version, provider, condition, source): accepted, named, with its source.
    from lowerer.verification import blame

    monkeypatch.setitem(blame.CONDITIONS, "fake", lambda inputs: True)
    fake = blame.Departure("ArgMax", (12,), CPU, "fake", "the fake kernel ignores select_last_index", "this test")
    monkeypatch.setattr(blame, "departures", lambda: (fake,))
    result = lowerer.convert(model, target_opset=11)
    rewrite = next(r for r in result.report.rewrites if r.op_type == "ArgMax")
    # A listed departure: the original is judged by its spec, the departure and its source stated
    assert rewrite.status == "verified"
    said = rewrite.details["original_fallback"]
    assert "the fake kernel ignores select_last_index (source: this test)" in said


def test_whole_model_check_names_the_provider_that_departs(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_kernels(monkeypatch, FAKE, "Upsample")
    converted = lowerer.convert(_upsample9(), target_opset=13).model
    got = whole_mod.compare_models(whole_mod.ModelSource(_upsample9(), None, "original"),
                                   whole_mod.ModelSource(converted, None, "converted"))
    assert got.status == "equal" and got.provider == CPU
    assert "FakeExecutionProvider departs" in got.reason
    assert got.details["provider_departure"]["provider"] == FAKE


# -- 4. placement classes from recorded placements -----------------------------------------------------------

def _shape_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i"], ["d"], name="gather", axis=0),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Hardmax", ["r"], ["h"], name="hardmax", axis=1),
             helper.make_node("ArgMax", ["h"], ["y"], name="argmax", axis=1, select_last_index=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", T.INT64, ["N", 1]),
                               helper.make_tensor_value_info("d", T.INT64, [])],
                              [numpy_helper.from_array(np.array(0, np.int64), "i")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


_CUDA_ROWS: dict[str, list[tuple[int, int | None, Any]]] = {
    "Shape": [(13, 14, {"T": frozenset({"tensor(float)"})})],
    "Gather": [(13, None, {"T": frozenset({"tensor(int64)"}), "Tind": frozenset({"tensor(int64)"})})],
    "Relu": [(13, None, {"T": frozenset({"tensor(double)"})})],  # no float: a type gap
    "ArgMax": [(13, None, {"T": frozenset({"tensor(float)"})})],
}


def test_recorded_placement_is_classed() -> None:
    placed = [Assigned("shape", "Shape", "", CPU), Assigned("gather", "Gather", "", CPU),
              Assigned("relu", "Relu", "", CPU), Assigned("hardmax", "Hardmax", "", CPU),
              Assigned("argmax", "ArgMax", "", CPU)]
    got = classify(_shape_model(), placed, CUDA, _CUDA_ROWS,
                   {"argmax": "the CUDA ArgMax kernels pick the first index only"})
    assert got.classes[CPU_PREFERRED] == ["'shape' (Shape-13)", "'gather' (Gather-13)"]
    assert got.classes[NO_KERNEL] == ["'relu' (Relu-13): no kernel for tensor(float)",
                                      "'hardmax' (Hardmax-13): no kernel at all"]
    assert got.classes[REJECTED] == ["'argmax' (ArgMax-13): the CUDA ArgMax kernels pick the first index only"]
    assert not got.proven and got.compute_ops() == {"Relu", "Hardmax", "ArgMax"}
    only_shapes = classify(_shape_model(), [*placed[:2], Assigned("relu", "Relu", "", CUDA)], CUDA, _CUDA_ROWS, {})
    assert only_shapes.proven and only_shapes.on_provider == 1
    assert "2 placed there by onnxruntime's preference for shape computation" in only_shapes.describe()


def test_predicted_placement_from_the_table_alone() -> None:
    got = classify(_shape_model(), None, CUDA, _CUDA_ROWS, {})
    assert [e.split(":")[0] for e in got.classes[NO_KERNEL]] == ["'relu' (Relu-13)", "'hardmax' (Hardmax-13)"]
    assert got.classes[CPU_PREFERRED] == [] and got.on_provider == 3
    unknown = classify(_shape_model(), [Assigned("shape", "Shape", "", CPU)], CUDA, None, {})
    assert not unknown.proven  # no table: a missing kernel cannot be told from onnxruntime's preference


def test_for_cuda_without_cuda_states_the_kernel_table_not_a_proof(cuda_listed_unusable: None) -> None:
    from lowerer.backends.proof import NOT_PROVEN, prove_placement

    placement = prove_placement(_shape_model(), CUDA, available=[CUDA, CPU])
    assert placement.status == NOT_PROVEN
    assert "cannot" not in placement.detail or "libcublasLt" in placement.detail
    assert "not run here" in placement.detail and "Hardmax" in placement.detail


def test_python_is_this_interpreter() -> None:
    assert sys.executable  # the probes run children of this interpreter


def test_a_conversion_that_adds_cpu_compute_is_not_proven(monkeypatch: pytest.MonkeyPatch) -> None:
    from lowerer.backends import lowering
    from lowerer.backends.placement import Classified
    from lowerer.backends.proof import FAILED, PROVEN, Placement

    def fake(model: onnx.ModelProto, provider: str, data_dir: Any = None, **_: Any) -> Placement:
        classes = Classified(provider)
        emitted = sorted({n.op_type for n in model.graph.node} - {"Hardmax"})
        classes.add(NO_KERNEL, emitted[0], f"'n' ({emitted[0]}-13): no kernel at all")
        return Placement(PROVEN, provider, "recorded", classes)

    monkeypatch.setattr(lowering, "prove_placement", fake)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm")], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])], [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])]),
        opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    with pytest.raises(lowerer.VerificationError, match="the conversion adds compute ops"):
        lowerer.convert(model, for_backend="cuda", verify=False)
    backend = lowerer.convert(model, for_backend="cuda", verify=False, allow_fallback=True).report.backend
    assert backend is not None and backend["placement"] == FAILED and backend["cpu_compute_added"]
