"""Lowering for a named backend (``--for BACKEND``, ``for_backend=``): profiles, forms, refusals, inspect, proof.

Each profile's entries that have an exact form are triggered by a small model built here and must
be gone after ``for_backend=``; entries without one are refused (exit 2) or, with
``allow_fallback``, kept with a warning line. The CPU profile's placement is proven here (the CPU
provider is always installed); the CUDA proof runs only where CUDAExecutionProvider is.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.backends.plan import scan
from lowerer.backends.profile import BACKENDS, REWRITES, VersionRange, load_profile, parse_profile
from lowerer.backends.proof import NOT_PROVEN, PROVEN
from lowerer.backends.runtimes import runtime_of, runtimes
from lowerer.cli import main
from lowerer.core.errors import ConversionError, InputError

F, D, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
BF16 = TensorProto.BFLOAT16


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[str], opset: int,
           initializers: list[onnx.TensorProto] | None = None,
           shapes: dict[str, tuple[int, list[int]]] | None = None) -> onnx.ModelProto:
    """A checked model; output types from shape inference, or from ``shapes`` where it cannot tell."""
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs],
                              initializer=initializers or [])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    known = {vi.name: vi for vi in inferred.graph.value_info}
    for name, (elem, dims) in (shapes or {}).items():
        known[name] = helper.make_tensor_value_info(name, elem, dims)
    del model.graph.output[:]
    model.graph.output.extend(known[o] for o in outputs)
    model.graph.value_info.extend(known[n] for n in shapes or {} if n not in outputs)
    onnx.checker.check_model(model, full_check=True)
    return model


def _const(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def _shape_of(x: str, out: str, start: int, end: int) -> list[onnx.NodeProto]:
    """``out = Shape(x)[start:end]``: a value lowerer folds when x's dims are static, not a literal constant."""
    return [helper.make_node("Shape", [x], [f"{out}_s"], start=start, end=end),
            helper.make_node("Identity", [f"{out}_s"], [out])]


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def _ties(shape: tuple[int, ...], dtype: type = np.float32) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 3, size=shape).astype(dtype)


# -- one model per backend: every entry that has a form --------------------------------------------

def _hardmax_and_argmax(opset: int, argmin: bool = True) -> onnx.ModelProto:
    """Hardmax (axis 1, not last) and, from opset 12, ArgMax/ArgMin with select_last_index=1."""
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], name="hard", axis=1)]
    outputs = ["h"]
    if opset >= 12:
        nodes.append(helper.make_node("ArgMax", ["x"], ["a"], name="amax", axis=1, select_last_index=1))
        outputs.append("a")
    if opset >= 12 and argmin:
        nodes.append(helper.make_node("ArgMin", ["x"], ["b"], name="amin", axis=-1, keepdims=0, select_last_index=1))
        outputs.append("b")
    return _model(nodes, [helper.make_tensor_value_info("x", F, [2, 3, 4])], outputs, opset)


def _cpu_model() -> onnx.ModelProto:
    nodes = [helper.make_node("Hardmax", ["xd"], ["h"], name="hard_double", axis=1),
             helper.make_node("Hardmax", ["xb"], ["hb"], name="hard_bf16", axis=-1),
             helper.make_node("GlobalMaxPool", ["pd"], ["p"], name="pool_double"),
             helper.make_node("GlobalMaxPool", ["pb"], ["pbo"], name="pool_bf16")]
    inputs = [helper.make_tensor_value_info("xd", D, [2, 3, 4]), helper.make_tensor_value_info("xb", BF16, [2, 5]),
              helper.make_tensor_value_info("pd", D, [1, 2, 3, 3]),
              helper.make_tensor_value_info("pb", BF16, [1, 2, 3, 3])]
    return _model(nodes, inputs, ["h", "hb", "p", "pbo"], 22)


def _constant_inputs_model(extra: list[onnx.NodeProto] | None = None, onehot: bool = True) -> onnx.ModelProto:
    """Reshape, OneHot, Slice, ReduceMax-18, ReduceSum, (Un)Squeeze, Expand, Tile whose parameters are computed."""
    x = helper.make_tensor_value_info("x", F, [2, 3, 4])
    ids = helper.make_tensor_value_info("ids", I64, [2])
    nodes = [
        *_shape_of("x", "shape", 0, 3),                      # [2, 3, 4]
        *_shape_of("x", "dim1", 1, 2),                       # [3]
        *_shape_of("x", "dim0", 0, 1),                       # [2]
        helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
        helper.make_node("OneHot", ["ids", "dim1", "onoff"], ["oh"], name="onehot"),
        helper.make_node("Sub", ["dim0", "dim0"], ["zero_c"]),
        helper.make_node("Add", ["zero_c", "one"], ["ax1"]),          # [1], computed
        helper.make_node("Slice", ["x", "zero", "dim1", "ax1", "one"], ["sl"], name="slice"),
        helper.make_node("ReduceMax", ["x", "ax1"], ["rm"], name="reducemax", keepdims=1),
        helper.make_node("ReduceSum", ["x", "ax1"], ["rs"], name="reducesum", keepdims=0),
        helper.make_node("Unsqueeze", ["x", "zero_c"], ["us"], name="unsqueeze"),
        helper.make_node("Squeeze", ["us", "zero_c"], ["sq"], name="squeeze"),
        helper.make_node("Expand", ["x", "shape"], ["ex"], name="expand"),
        helper.make_node("Tile", ["x", "ones3"], ["ti"], name="tile"),
        *(extra or []),
    ]
    if not onehot:
        nodes = [n for n in nodes if n.op_type != "OneHot"]
    inits = [_const("zero", [0]), _const("one", [1]), _const("ones3", [1, 1, 2]),
             numpy_helper.from_array(np.array([0, 1], dtype=np.float32), "onoff")]
    outs = ["r", *(["oh"] if onehot else []), "sl", "rm", "rs", "sq", "ex", "ti"]
    outs += [o for n in extra or [] for o in n.output]
    return _model(nodes, [x, ids], outs, 18, inits,
                  {"rm": (F, [2, 1, 4]), "rs": (F, [2, 4]), "sq": (F, [2, 3, 4]), "us": (F, [1, 2, 3, 4])})


def _cases() -> list[tuple[str, str, onnx.ModelProto]]:
    """(case id, backend spec, model): together they trigger every profile entry that has a form."""
    hardmax_dynamic = _model([helper.make_node("Hardmax", ["x"], ["h"], name="hard_dyn", axis=-1)],
                             [helper.make_tensor_value_info("x", F, [2, "n"])], ["h"], 18)
    softmaxes = _model([helper.make_node("LogSoftmax", ["x"], ["l"], name="logsoftmax", axis=1),
                        helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=1),
                        helper.make_node("GlobalMaxPool", ["p"], ["g"], name="pool3d")],
                       [helper.make_tensor_value_info("x", F, [2, 3, 4]),
                        helper.make_tensor_value_info("p", F, [1, 2, 5])], ["l", "s", "g"], 13)
    pool5 = _model([helper.make_node("GlobalMaxPool", ["p"], ["g"], name="pool5d"),
                    helper.make_node("Hardmax", ["x"], ["h"], name="hard", axis=1),
                    helper.make_node("LogSoftmax", ["x"], ["l"], name="logsoftmax", axis=0)],
                   [helper.make_tensor_value_info("p", F, [1, 2, 2, 3, 2]),
                    helper.make_tensor_value_info("x", F, [2, 3, 4])], ["g", "h", "l"], 18)
    softmax_2d_meaning = _model([helper.make_node("Softmax", ["x"], ["s"], name="softmax_static", axis=1),
                                 helper.make_node("Softmax", ["d"], ["t"], name="softmax_dynamic", axis=0)],
                                [helper.make_tensor_value_info("x", F, [2, 3, 4]),
                                 helper.make_tensor_value_info("d", F, ["n", 3])], ["s", "t"], 11)
    below_2025 = _hardmax_and_argmax(15)  # OpenVINO < 2025: the reduce forms, Shape start/end as Shape + Slice
    below_2025.graph.node.append(helper.make_node("Shape", ["x"], ["s"], name="shape_tail", start=1))
    below_2025.graph.output.append(helper.make_tensor_value_info("s", I64, [2]))
    cuda_bf16_pool = _model([helper.make_node("GlobalMaxPool", ["p"], ["g"], name="pool_bf16")],
                            [helper.make_tensor_value_info("p", BF16, [1, 2, 3, 3])], ["g"], 22)
    return [
        ("cpu", "cpu", _cpu_model()),
        ("cuda-7", "cuda", _hardmax_and_argmax(7)),
        ("cuda-11", "cuda", _hardmax_and_argmax(11)),
        ("cuda-13", "cuda", _hardmax_and_argmax(13)),
        ("cuda-bf16-pool", "cuda", cuda_bf16_pool),
        ("dml", "dml", _constant_inputs_model()),
        ("tensorrt<10.3", "tensorrt<10.3", _constant_inputs_model([helper.make_node("Hardmax", ["x"], ["h"],
                                                                                    name="hard", axis=1)])),
        ("tensorrt<9.2", "tensorrt<9.2", _hardmax_and_argmax(11)),
        ("tensorrt>=9.2", "tensorrt>=9.2", hardmax_dynamic),
        ("openvino", "openvino", _hardmax_and_argmax(7)),
        ("openvino-softmax-2d-meaning", "openvino==2026.4", softmax_2d_meaning),
        ("openvino<2025", "openvino==2024.0", below_2025),
        ("openvino<2024-isnan", "openvino==2023.0", _model([helper.make_node("IsNaN", ["x"], ["n"], name="nan")],
                                                           [helper.make_tensor_value_info("x", F, [2, 3])], ["n"],
                                                           17)),
        ("coreml-softmaxes", "coreml", softmaxes),
        ("coreml-argmax", "coreml", _hardmax_and_argmax(13, argmin=False)),
        ("qnn<1.17", "qnn<1.17", _model([helper.make_node("GlobalMaxPool", ["p"], ["g"], name="pool"),
                               helper.make_node("Hardmax", ["x"], ["h"], name="hard", axis=0)],
                              [helper.make_tensor_value_info("p", F, [1, 2, 3, 3]),
                               helper.make_tensor_value_info("x", F, [2, 3])], ["g", "h"], 13)),
        ("webgpu", "webgpu", pool5),
        ("webgpu<1.20", "webgpu<1.20", softmaxes),
        ("webgpu<1.20-opset11", "webgpu<1.20", softmax_2d_meaning),
        ("webnn-constants", "webnn", _constant_inputs_model([helper.make_node("Hardmax", ["x"], ["h"], name="hard",
                                                                               axis=1)], onehot=False)),
        ("webnn-pool", "webnn", pool5),
    ]


CASES = _cases()
#: The profiles with a witness: their form entries are checked against the probe models (tests/test_runtimes.py).
MEASURED = {backend for runtime in runtimes().values() for backend in runtime.backends}


def _feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        dims = tuple(d.dim_value if d.dim_value else 3 for d in t.shape.dim)
        if t.elem_type == I64:
            feeds[vi.name] = np.array([0, 2], dtype=np.int64)[: dims[0]]
        else:
            feeds[vi.name] = _ties(dims, onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    return feeds


def _sides_ort_cannot_run(model: onnx.ModelProto, node_name: str) -> list[str]:
    """Which sides of a rewrite of ``node_name`` onnxruntime's CPU provider cannot run, found independently.

    bfloat16 inputs: neither side (onnxruntime's Python API exchanges no bfloat16 arrays); otherwise the
    original when a session of the node alone does not open (no CPU kernel for its op and type).
    """
    node = next(n for n in model.graph.node if n.name == node_name)
    typed = {vi.name: vi for vi in [*model.graph.input, *onnx.shape_inference.infer_shapes(model).graph.value_info]}
    consts = {t.name: t for t in model.graph.initializer}
    inputs = [typed[i] for i in node.input if i and i not in consts]
    if any(vi.type.tensor_type.elem_type == BF16 for vi in inputs):
        return ["original", "replacement"]
    alone = helper.make_model(helper.make_graph(
        [node], "alone", inputs, [helper.make_empty_tensor_value_info(o) for o in node.output],
        initializer=[consts[i] for i in node.input if i in consts]), opset_imports=model.opset_import,
        ir_version=model.ir_version)
    try:
        ort.InferenceSession(alone.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:  # onnxruntime raises several kinds for a missing kernel
        return ["original"]
    return []


@pytest.mark.parametrize(("spec", "model"), [(spec, model) for _, spec, model in CASES],
                         ids=[case for case, _, _ in CASES])
def test_profile_entries_triggered_and_removed(spec: str, model: onnx.ModelProto) -> None:
    profile = load_profile(spec)
    named = scan(model, profile)
    assert named, f"the {spec} model triggers no entry of its profile"
    assert all(f.entry.rewrite is not None for f in named)
    result = lowerer.convert(model, for_backend=spec)
    assert scan(result.model, profile) == []
    record = result.report.backend
    assert record is not None and record["backend"] == profile.name and record["left"] == []
    assert record["rewritten"] == len(named)
    assert {r.node for r in result.report.rewrites} == {f.node for f in named}
    for r in result.report.rewrites:  # reference-only exactly where onnxruntime cannot run a side
        alone = _sides_ort_cannot_run(model, r.node)
        assert r.status == ("reference-only" if alone else "verified"), (r.node, r.status, r.reason)
        assert r.details.get("reference_only", []) == alone, (r.node, r.details)
    assert {r.rule for r in result.report.rewrites} <= {"hardmax-decomposition", "globalmaxpool-decomposition",
                                                         "argmax-flip", "last-axis", "constant-inputs",
                                                         "function-expansion", "argmax-reduce", "hardmax-reduce",
                                                         "shape-slice", "isnan-equal"}
    if any(vi.type.tensor_type.elem_type == BF16 for vi in model.graph.input):
        return  # onnxruntime's Python API exchanges no bfloat16: each rewrite was checked on the numpy reference
    feeds = _feeds(model)
    expected, got = _ort(model, feeds), _ort(result.model, feeds)
    for name, a, b in zip([o.name for o in model.graph.output], expected, got, strict=True):
        if name == "l":  # LogSoftmax expanded into its body: rounds like the body (the ulp budget)
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)


def test_cpu_placement_proven() -> None:
    model = _cpu_model()
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        _ort(model, {})
    result = lowerer.convert(model, for_backend="cpu")
    assert result.report.backend is not None
    assert result.report.backend["placement"] == PROVEN
    ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])  # it opens


@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason="CUDAExecutionProvider is not installed")
@pytest.mark.parametrize("opset", [7, 11, 13])
def test_cuda_placement_proven(opset: int) -> None:
    """On a CUDA machine: Hardmax of every version and ArgMax select_last_index=1 open with CPU fallback disabled."""
    model = _hardmax_and_argmax(opset)
    result = lowerer.convert(model, for_backend="cuda", providers=["cuda", "cpu"], verify_model=True)
    assert result.report.backend is not None
    assert result.report.backend["placement"] == PROVEN, result.report.backend["placement_detail"]
    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    session = ort.InferenceSession(result.model.SerializeToString(), options, providers=["CUDAExecutionProvider"])
    feeds = _feeds(model)
    for a, b in zip(_ort(model, feeds), session.run(None, feeds), strict=True):
        np.testing.assert_array_equal(a, b)


def test_not_installed_provider_is_not_proven() -> None:
    result = lowerer.convert(_hardmax_and_argmax(7), for_backend="openvino", verify=False)
    assert result.report.backend is not None
    if "OpenVINOExecutionProvider" not in ort.get_available_providers():
        assert result.report.backend["placement"] == NOT_PROVEN
        assert "not installed" in result.report.backend["placement_detail"]


def test_target_opset_combines_with_for() -> None:
    result = lowerer.convert(_hardmax_and_argmax(13), target_opset=11, for_backend="cuda")
    assert result.model.opset_import[0].version == 11
    assert not any(n.op_type == "Hardmax" or any(a.name == "select_last_index" for a in n.attribute)
                   for n in result.model.graph.node)
    feeds = _feeds(result.model)
    for a, b in zip(_ort(_hardmax_and_argmax(13), feeds), _ort(result.model, feeds), strict=True):
        np.testing.assert_array_equal(a, b)


# -- no exact form: refusal, or --allow-fallback ----------------------------------------------------

def _no_form_model() -> onnx.ModelProto:
    return _model([helper.make_node("ArgMin", ["x"], ["a"], name="argmin", axis=1),
                   helper.make_node("Hardmax", ["x"], ["h"], name="hard", axis=1)],
                  [helper.make_tensor_value_info("x", F, [2, 3, 4])], ["a", "h"], 13)


def test_no_exact_form_is_refused() -> None:
    with pytest.raises(ConversionError, match=r"node 'argmin' \(ArgMin-13, in graph\): coreml cannot run it: "
                                              r".*no exact form.*--allow-fallback"):
        lowerer.convert(_no_form_model(), for_backend="coreml")


def test_allow_fallback_keeps_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="lowerer"):
        result = lowerer.convert(_no_form_model(), for_backend="coreml", allow_fallback=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("node 'argmin' (ArgMin-13, in graph) stays as it is" in w for w in warnings)
    assert [n.op_type for n in result.model.graph.node].count("ArgMin") == 1
    assert "Hardmax" not in [n.op_type for n in result.model.graph.node]
    assert result.report.backend is not None
    assert [k["node"] for k in result.report.backend["left"]] == ["argmin"]


def test_form_that_refuses_is_refused_or_kept() -> None:
    """A Reshape whose shape is fed at run time cannot be made constant: refused, or kept with --allow-fallback."""
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")],
                   [helper.make_tensor_value_info("x", F, [2, 6]), helper.make_tensor_value_info("s", I64, [2])],
                   ["y"], 14)
    with pytest.raises(ConversionError, match=r"dml wants its input 1 \('s'\) constant, and lowerer cannot prove it"):
        lowerer.convert(model, for_backend="dml")
    result = lowerer.convert(model, for_backend="dml", allow_fallback=True)
    assert result.report.backend is not None
    (left,) = result.report.backend["left"]
    assert left["node"] == "reshape" and "cannot prove it constant" in left["reason"]


def test_cpu_fallback_then_placement_not_proven() -> None:
    model = _model([helper.make_node("ArgMax", ["x"], ["a"], name="argmax_bf16", axis=0)],
                   [helper.make_tensor_value_info("x", BF16, [2, 3])], ["a"], 13)
    with pytest.raises(ConversionError, match="cpu cannot run it"):
        lowerer.convert(model, for_backend="cpu", verify=False)
    result = lowerer.convert(model, for_backend="cpu", verify=False, allow_fallback=True)
    assert result.report.backend is not None
    assert result.report.backend["placement"] == "placement not proven"


def test_every_entry_with_a_form_is_exercised() -> None:
    from lowerer.backends.profile import _profile_data

    hit = {(load_profile(spec).name, id(f.entry)) for _, spec, model in CASES for f in scan(model, load_profile(spec))}
    # a measured profile's entries are exercised by the probe models (tests/test_runtimes.py)
    missing = [f"{name}: {e.describe()}" for name in BACKENDS for e in _profile_data(name)["entries"]
               if e.rewrite is not None and (name, id(e)) not in hit and name not in MEASURED]
    assert missing == []


# -- profiles as data ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", BACKENDS)
def test_every_profile_loads_with_sources(name: str) -> None:
    path = Path(lowerer.__file__).parent / "backends" / f"{name}.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    data = parse_profile(raw, path.name)
    assert data["provider"].endswith("ExecutionProvider") or runtime_of(data["runtime"]) is not None
    for entry in data["entries"]:
        assert entry.source and entry.why
        assert entry.rewrite is None or entry.rewrite in REWRITES
        assert entry.confirmed or entry.note, f"{name}: an unconfirmed entry must say what was not confirmed"


def test_backend_versions_select_entries() -> None:
    def hardmax_entries(spec: str) -> list[str]:
        return [e.describe() for e in load_profile(spec).entries if "Hardmax" in e.ops]

    assert hardmax_entries("tensorrt") == ["Hardmax with a dynamic size along the axis (backend versions >=9.2)"]
    assert hardmax_entries("tensorrt<9.2") == ["Hardmax (backend versions <9.2)"]
    assert hardmax_entries("tensorrt==8.6") == ["Hardmax (backend versions <9.2)"]
    assert hardmax_entries("TRT<=9.2") == ["Hardmax (backend versions <9.2)",
                                           "Hardmax with a dynamic size along the axis (backend versions >=9.2)"]
    assert load_profile("directml").name == "dml"
    assert VersionRange.parse("<", "9.2").overlaps(VersionRange.parse("==", "9.1.9"))
    assert not VersionRange.parse("<", "9.2").overlaps(VersionRange.parse(">=", "9.2"))
    assert VersionRange.parse("<=", "9.2").overlaps(VersionRange.parse(">=", "9.2.0"))


@pytest.mark.parametrize("spec, message", [("tpu", "unknown backend 'tpu'"), ("cuda<<1", "cannot read backend"),
                                           ("", "cannot read backend")])
def test_bad_backend_is_an_input_error(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        lowerer.convert(_hardmax_and_argmax(13), for_backend=spec)


def test_bad_profile_data_is_refused() -> None:
    with pytest.raises(InputError, match="unknown rewrite 'magic'"):
        parse_profile({"provider": "X", "entries": [{"op": "Hardmax", "rewrite": "magic", "why": "w",
                                                     "source": "s"}]}, "x.json")
    with pytest.raises(InputError, match="'source' must be a non-empty string"):
        parse_profile({"provider": "X", "entries": [{"op": "Hardmax", "why": "w"}]}, "x.json")


# -- command line ----------------------------------------------------------------------------------

def _example() -> Path:
    return Path(__file__).resolve().parents[1] / "examples" / "example_opset11.onnx"


def test_cli_convert_for_and_refusal(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "out.onnx"
    done = runner.invoke(main, ["convert", str(_example()), "-o", str(out), "--for", "cuda"])
    assert done.exit_code == 0, done.output
    assert "backend cuda (CUDAExecutionProvider): 1 node(s) rewritten for it" in done.stderr
    assert "Hardmax" not in [n.op_type for n in onnx.load(out).graph.node]
    refused = runner.invoke(main, ["convert", str(_example()), "-o", str(tmp_path / "cm.onnx"), "--for", "coreml"])
    assert refused.exit_code == 2
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("lowerer: error: node 'softmax_axis2'")
    assert not (tmp_path / "cm.onnx").exists()
    kept = runner.invoke(main, ["convert", str(_example()), "-o", str(tmp_path / "cm.onnx"), "--for", "coreml",
                                "--allow-fallback"])
    assert kept.exit_code == 0
    assert "lowerer: warning: node 'softmax_axis2' (Softmax-11, in graph) stays as it is" in kept.stderr
    unknown = runner.invoke(main, ["convert", str(_example()), "-o", str(out), "--for", "tpu"])
    assert unknown.exit_code == 2 and "unknown backend 'tpu'" in unknown.stderr
    usage = runner.invoke(main, ["convert", str(_example()), "-o", str(out), "--allow-fallback"])
    assert usage.exit_code == 2 and "--allow-fallback goes with --for" in usage.stderr


def test_cli_inspect_for_table_and_json() -> None:
    runner = CliRunner()
    text = runner.invoke(main, ["inspect", str(_example()), "--for", "qnn<1.17"])
    assert text.exit_code == 0, text.output
    lines = text.stdout.splitlines()
    assert lines[:2] == ["backend: qnn<1.17 (QNNExecutionProvider)", "nodes it cannot run: 2"]
    assert lines[2].split() == ["node", "op", "lowerer", "why", "[source]"]
    assert lines[3].startswith("pool") and "globalmaxpool: ReduceMax" in lines[3]
    assert lines[4].startswith("hardmax_axis1") and "hardmax: " in lines[4] and "ArgMax" in lines[4]
    assert lines[5].startswith("[1] microsoft/onnxruntime")
    data = json.loads(runner.invoke(main, ["inspect", str(_example()), "--for", "coreml", "--json"]).stdout)
    assert [(n["node"], n["rewrite"]) for n in data["nodes"]] == [("hardmax_axis1", "hardmax"),
                                                                  ("softmax_axis2", None)]
    assert data["nodes"][1]["lowerer"].startswith("keeps it")
    none = runner.invoke(main, ["inspect", str(_example()), "--for", "dml"])
    assert none.stdout.splitlines()[1] == "nodes it cannot run: none (per its profile)"


def test_report_records_backend(tmp_path: Path) -> None:
    from _json_schema import validate

    runner = CliRunner()
    report = tmp_path / "r.json"
    done = runner.invoke(main, ["convert", str(_example()), "-o", str(tmp_path / "o.onnx"), "--for", "cpu",
                                "--report", str(report)])
    assert done.exit_code == 0, done.output
    data = json.loads(report.read_text())
    schema = json.loads((Path(lowerer.__file__).parent / "core" / "report.schema.json").read_text())
    validate(data, schema)
    assert data["summary"]["backend"]["placement"] == PROVEN


def test_strict_session_leaves_the_cpu_provider_out() -> None:
    """onnxruntime refuses CPU in the provider list together with disabled fallback; the strict session omits it."""
    from types import SimpleNamespace

    from lowerer.verification.runner import SessionMaker

    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(Exception, match="Conflicting session configuration"):
        ort.InferenceSession(_hardmax_and_argmax(13).SerializeToString(), options,
                             providers=["CPUExecutionProvider"])
    seen: list[list[str]] = []

    class Options:
        def __init__(self) -> None:
            self.entries: dict[str, str] = {}

        def add_session_config_entry(self, key: str, value: str) -> None:
            self.entries[key] = value

    def session(data: bytes, so: Options, providers: list[str | tuple[str, dict[str, str]]]) -> object:
        seen.append([p if isinstance(p, str) else p[0] for p in providers])
        if so.entries.get("session.disable_cpu_ep_fallback") == "1" and "CPUExecutionProvider" in seen[-1]:
            raise RuntimeError("Conflicting session configuration")
        return object()

    maker = SessionMaker(["CUDAExecutionProvider", "CPUExecutionProvider"])
    maker._ort = SimpleNamespace(SessionOptions=Options, InferenceSession=session,
                                 GraphOptimizationLevel=SimpleNamespace(ORT_DISABLE_ALL=0))
    engine = maker.create(b"model")
    assert not isinstance(engine, str)
    assert engine.placement is None and seen == [["CUDAExecutionProvider"]]


def test_opset_onnxruntime_does_not_load_is_not_proven() -> None:
    result = lowerer.convert(_hardmax_and_argmax(13), target_opset=6, for_backend="cpu")
    assert result.report.backend is not None
    assert result.report.backend["placement"] == NOT_PROVEN
    assert "not 6" in result.report.backend["placement_detail"]


@pytest.mark.parametrize("name", BACKENDS)
def test_no_entry_names_only_versions_the_runtime_never_keeps(name: str) -> None:
    """A refusing entry for op versions above every opset the runtime loads never fires: the node is converted below.

    (An entry with a form does: the engine asks the profile where the target lacks the op.)

    (An ncnn entry refusing Gelu-20 did nothing: Gelu-20 is expanded below 18 whatever an entry says. What
    breaks there must be named by the ops the output holds: ncnn's Pow.)
    """
    raw = json.loads((Path(lowerer.__file__).parent / "backends" / f"{name}.json").read_text())
    rows = [r for r in raw.get("loads", []) if isinstance(r, dict) and r.get("max_opset")]
    if not rows:
        return
    highest = max(int(r["max_opset"]) for r in rows)
    dead = [e.get("ops") or e.get("op") for e in raw.get("entries", []) if e.get("rewrite") is None
            and (e.get("versions") or [None])[0] is not None and int(e["versions"][0]) > highest]
    assert not dead, f"{name}: entries for versions above opset {highest} (never kept there): {dead}"
