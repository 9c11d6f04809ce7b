"""The runtimes lowerer runs models on (lowerer/backends/runtimes/): one module each, and everything reads them.

A row of :data:`ROWS` per runtime: the backend profile it witnesses and its measured probe run. Adding a
runtime is its module, its profile, its measured run and its row here.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _mutants import one_node
from onnx import TensorProto, helper

import lowerer
from lowerer.backends import witnesses
from lowerer.backends.plan import scan
from lowerer.backends.probe_models import EXPANSIONS, LOWERED, base_probes
from lowerer.backends.profile import BACKENDS, _profile_data, load_profile
from lowerer.backends.runtimes import runtime_of, runtimes, witnesses_for
from lowerer.cli.probes import budget_of
from lowerer.cli.targets import targets_table
from lowerer.core.errors import ConversionError, VerificationError

BACKENDS_DIR = Path(witnesses.__file__).parent
#: runtime -> (the backend it witnesses, its measured probe runs).
ROWS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "openvino": ("openvino", ("openvino-2023.0.2", "openvino-2024.0.0", "openvino-2026.4.1")),
    "onnxruntime-openvino": ("openvino", ("onnxruntime-openvino-1.24.1",)),
    "rknn-toolkit2": ("rknn", ("rknn-toolkit2-2.5.0",)),
    "onnxruntime-qnn": ("qnn", ("onnxruntime-qnn-2.7.0",)),
    "tract": ("tract", ("tract-0.23.9",)),
    "MNN": ("mnn", ("MNN-3.6.1",)),
    "apache-tvm": ("tvm", ("apache-tvm-0.27.0.post1",)),
    "ncnn": ("ncnn", ("ncnn-1.0.20261020",)),
    "onnxruntime": (None, ()),
}


def test_every_runtime_has_a_row_and_every_row_a_runtime() -> None:
    assert set(runtimes()) == set(ROWS)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_runtime_record_profile_and_measured_run(name: str) -> None:
    record = runtimes()[name]
    backend, measured = ROWS[name]
    assert record.label and record.install and 0 < record.budget < 1 and record.budget_source
    assert record.pip and all(record.pip) and any("{version}" in arg for step in record.pip for arg in step)
    assert budget_of(name) == record.budget
    assert record.backends == (() if backend is None else (backend,))
    if backend is not None:
        assert backend in BACKENDS and record in witnesses_for(backend)
        assert load_profile(backend).runtime not in ("", "onnxruntime")
        listed = next(t for t in targets_table() if t["name"] == backend)
        assert record.label in [w["runtime"] for w in listed["witnesses"]]
    for stem in measured:
        run = json.loads((BACKENDS_DIR / "measured" / f"{stem}.json").read_text(encoding="utf-8"))
        assert run["runtime"] == name and stem == f"{name}-{run['version']}"
        assert run["budget"] == record.budget and run["date"] and run["summary"]["total"]


@pytest.mark.parametrize("backend", sorted({row[0] for row in ROWS.values() if row[0] is not None}))
def test_every_form_entry_of_a_witnessed_profile_is_exercised_by_a_probe(backend: str) -> None:
    """Each entry of a measured profile that names a form matches some probe model (its source cites probes)."""
    models = [p.model for p in base_probes()] + [build()[0] for build in EXPANSIONS.values()] + \
        [build()[0] for build, _ in LOWERED.values()]
    entries = _profile_data(backend)["entries"]
    hit = set()
    for spec in {backend, *(backend + e.backend_versions_text for e in entries if e.backend_versions_text)}:
        profile = load_profile(spec)
        hit |= {id(f.entry) for model in models for f in scan(model, profile)}
    missing = [e.describe() for e in entries if e.rewrite is not None and id(e) not in hit]
    assert missing == []


def test_every_backend_of_another_runtime_has_a_witness() -> None:
    """A profile whose runtime is not onnxruntime names a runtime some record witnesses it with."""
    for name in BACKENDS:
        profile = load_profile(name)
        if profile.runtime in ("onnxruntime", "tensorrt", "winml"):
            continue
        assert witnesses_for(name), name
        assert runtime_of(profile.runtime) is not None, (name, profile.runtime)


def test_runtime_modules_load_by_path_without_lowerer() -> None:
    """The worker loads a runtime's module by path: it imports neither lowerer nor its runtime to read it."""
    script = ("import sys; sys.path.remove(sys.path[0]) if sys.path[0] == '' else None\n"
              "import importlib.util, json\n"
              f"spec = importlib.util.spec_from_file_location('w', {str(BACKENDS_DIR / 'witness_worker.py')!r})\n"
              "w = importlib.util.module_from_spec(spec); spec.loader.exec_module(w)\n"
              f"names = {sorted(ROWS)!r}\n"
              "found = [w.runtime_module(n).NAME for n in names]\n"
              "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
              "('lowerer', 'onnx', 'onnxruntime', 'openvino', 'tract', 'MNN', 'tvm', 'rknn', 'ncnn'))\n"
              "print(json.dumps([found, heavy]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd="/")
    found, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == sorted(ROWS) and heavy == []


def test_a_runtime_not_installed_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(witnesses.WITNESS_PYTHON, raising=False)
    monkeypatch.setattr(witnesses, "_distribution", lambda name: False)
    witnesses._query.cache_clear()
    try:
        witness, why = witnesses.find_witness("tract")
    finally:
        witnesses._query.cache_clear()
    assert witness is None and "tract is not installed" in why and "pip install tract" in why


def test_onnxruntime_witness_label_and_run() -> None:
    witness, why = witnesses.find_witness("onnxruntime:CPUExecutionProvider")
    assert witness is not None, why
    assert witness.label.startswith("onnxruntime ") and witness.label.endswith(" CPUExecutionProvider")
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    onnx.checker.check_model(model)
    (y,) = witness.run(model, {"x": np.array([-1.0, 0.0, 2.0], np.float32)})
    np.testing.assert_array_equal(y, [0.0, 0.0, 2.0])


def test_release_of_a_bundling_runtime_is_the_bundled_release() -> None:
    bundled = witnesses.Witness("onnxruntime-openvino", "1.24.1 (OpenVINO 2025.4.1)")
    assert witnesses.release_of(bundled) == "2025.4.1"
    assert witnesses.release_of(witnesses.Witness("onnxruntime-qnn", "2.7.0")) == "2.7.0"


def test_a_witness_runs_in_its_own_folder_not_the_users(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rknn-toolkit2's simulator writes y_*.npy into its current directory: the worker runs in the witness's
    temporary folder, so nothing lands where the user ran lowerer; a relative LOWERER_WITNESS_PYTHON still starts."""
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\ntouch y_0.npy\nexit 3\n", encoding="utf-8")
    fake.chmod(0o755)
    monkeypatch.chdir(tmp_path)
    witness = witnesses.Witness("tract", "0", str(Path("bin") / "python"))
    with pytest.raises(witnesses.WitnessError, match="status 3"):
        witness.run(one_node("Relu", 13, None, [2]), {"x": np.zeros(2, np.float32)})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]


def test_tvm_reads_a_single_shape_output_as_one_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """TVM returns one output as itself and several as an array of them; a Shape output is a shape tuple.

    A shape tuple has a length too: the witness used to read a lone Shape output as the outputs, so the
    first dim came out as the whole answer (shape () for (3,)), and Shape-13/15 probes read as TVM's fault.
    Measured on apache-tvm 0.27.0.post1 (2026-12-01): ``main`` of a Shape-only model returns a
    ``tvm_ffi._tensor.Shape``; of Shape + Relu, a ``tvm_ffi.container.Array`` of (Shape, Tensor).
    """
    module = importlib.import_module("lowerer.backends.runtimes.tvm")

    class ShapeTuple(tuple):  # what TVM's Shape output is like: a length, no numpy()
        pass

    class Tensor:
        def __init__(self, value: np.ndarray) -> None:
            self.value = value

        def numpy(self) -> np.ndarray:
            return self.value

    fake = types.ModuleType("tvm")
    fake.runtime = types.SimpleNamespace(tensor=lambda v: v)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tvm", fake)
    feeds = {"x": np.ones((2, 3, 4), np.float32)}
    key = module._signature(feeds)
    one = {"positions": [0], "order": ["x"], "outputs": 1, key: {"main": lambda x: ShapeTuple((2, 3, 4))}}
    (shape,) = module.infer(one, feeds, None, ["x"])
    assert shape.dtype == np.int64 and shape.tolist() == [2, 3, 4]
    two = {"positions": [0, 1], "order": ["x"], "outputs": 2,
           key: {"main": lambda x: [ShapeTuple((2, 3, 4)), Tensor(np.zeros((2, 3, 4), np.float32))]}}
    shape, relu = module.infer(two, feeds, None, ["x"])
    assert shape.tolist() == [2, 3, 4] and relu.shape == (2, 3, 4)


@pytest.mark.parametrize(("op", "opset", "attrs", "rewritten"), [
    ("ArgMax", 1, {"axis": 1}, False), ("ArgMin", 1, {"axis": 0}, False), ("ArgMax", 13, {"axis": 1}, False),
    ("ArgMax", 13, {"axis": 1, "select_last_index": 1}, True), ("ArgMin", 12, {"axis": -1, "select_last_index": 1},
                                                                 True)])
def test_mnn_rewrites_the_arg_ops_only_for_select_last_index(op: str, opset: int, attrs: dict[str, int],
                                                              rewritten: bool) -> None:
    """MNN 3.6.1 ignores select_last_index=1 and is right otherwise (negative rows too, measured 2026-12-01):
    an ArgMax-1 that runs there as exported is kept as it is, not refused for a form that needs opset 11."""
    result = lowerer.convert(one_node(op, opset, attrs, [3, 16]), for_backend="mnn==3.6")
    forms = [r.rule for r in result.report.rewrites]
    assert forms == (["argmax-reduce"] if rewritten else []), forms


@pytest.mark.parametrize("backend", ["mnn==3.6", "tvm==0.27"])
def test_rotary_embedding_is_written_as_its_body_where_the_runtime_lacks_it(backend: str) -> None:
    """MNN 3.6.1's converter and TVM 0.27's frontend fail on RotaryEmbedding-23; its body runs there equal (measured
    2026-12-02); tract runs the op itself and keeps it. The body is verified like any expansion."""
    model, _ = EXPANSIONS["RotaryEmbedding-23"]()
    result = lowerer.convert(model, for_backend=backend)
    assert "RotaryEmbedding" not in {n.op_type for n in result.model.graph.node}
    assert [r.status for r in result.report.rewrites] == ["verified"]
    kept = lowerer.convert(model, for_backend="tract==0.23", verify=False).model
    assert [n.op_type for n in kept.graph.node] == ["RotaryEmbedding"]


_NAN_ROW = np.array([[np.nan, 1.0, -np.inf, np.inf, 0.0, -0.0, 3.5, -np.nan, 3.4e38, -3.4e38, 1e-45, -1e-45]])


@pytest.mark.parametrize("opset", [9, 11, 12, 13, 17, 20])
@pytest.mark.parametrize("elem", [TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_mnn_writes_isnan_as_not_at_most_infinity(opset: int, elem: int) -> None:
    """MNN 3.6.1's converter fails on IsNaN and its Equal(x, x) is true on NaN (the isnan-equal form would be
    wrong there); Not(LessOrEqual(x, +inf)) is right there (measured 2026-12-02): written, exact on NaN, ±inf, ±0,
    the largest and smallest values (below opset 12: Not(Or(Less(x, +inf), Greater(x, max))))."""
    model = one_node("IsNaN", opset, None, elem=elem, shape=list(_NAN_ROW.shape))
    result = lowerer.convert(model, for_backend="mnn==3.6")
    ops = {n.op_type for n in result.model.graph.node}
    assert "IsNaN" not in ops and "Equal" not in ops and ("LessOrEqual" in ops) == (opset >= 12)
    assert [r.status for r in result.report.rewrites] == ["verified"]
    with np.errstate(over="ignore"):
        x = _NAN_ROW.astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
    got = ort.InferenceSession(result.model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, np.isnan(x))


def _constant_of_shape(shape: onnx.TensorProto | None, value: np.ndarray) -> onnx.ModelProto:
    """ConstantOfShape of input ``s`` (an initializer when ``shape`` is given, else a graph input) times ``x``."""
    nodes = [helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill",
                              value=onnx.numpy_helper.from_array(value.reshape(1))),
             helper.make_node("Mul", ["x", "c"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    if shape is None:
        inputs.append(helper.make_tensor_value_info("s", TensorProto.INT64, [None]))
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
                              [] if shape is None else [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_mnn_writes_a_0d_constant_of_shape_as_its_value() -> None:
    """MNN 3.6.1 fills ConstantOfShape of an empty shape with garbage (measured 2026-12-02): the provably empty
    shape's output is written as a 0-d initializer (constant-fill), verified; a ConstantOfShape of a non-empty
    shape is kept; one whose shape is computed at run time (its length unknown) is refused in one line."""
    empty = onnx.numpy_helper.from_array(np.zeros(0, np.int64), "s")
    result = lowerer.convert(_constant_of_shape(empty, np.array([2.5], np.float32)), for_backend="mnn==3.6")
    assert [n.op_type for n in result.model.graph.node] == ["Identity", "Mul"]
    assert [r.status for r in result.report.rewrites] == ["verified"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ort.InferenceSession(result.model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x * np.float32(2.5))
    three = onnx.numpy_helper.from_array(np.array([3], np.int64), "s")
    kept = lowerer.convert(_constant_of_shape(three, np.array([2.5], np.float32)), for_backend="mnn==3.6").model
    assert [n.op_type for n in kept.graph.node] == ["ConstantOfShape", "Mul"]
    with pytest.raises(ConversionError, match=r"^node 'fill' \(ConstantOfShape-9.*not provably constant"):
        lowerer.convert(_constant_of_shape(None, np.array([2.5], np.float32)), for_backend="mnn==3.6")


def test_mnn_writes_the_default_fill_of_a_constant_of_shape_without_value() -> None:
    """MNN 3.6.1 leaves ConstantOfShape without value unfilled (measured 2026-12-02): written with value = float32
    0 (its default), verified; with an empty shape too, the 0-d form (constant-fill) takes it."""
    shape = helper.make_node("Shape", ["x"], ["s"])
    fill = helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill")
    add = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph([shape, fill, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    result = lowerer.convert(model, for_backend="mnn==3.6")
    (written,) = [n for n in result.model.graph.node if n.op_type == "ConstantOfShape"]
    (value,) = [a.t for a in written.attribute if a.name == "value"]
    assert value.data_type == TensorProto.FLOAT and onnx.numpy_helper.to_array(value).tolist() == [0.0]
    assert [r.status for r in result.report.rewrites] == ["verified"]
    empty = onnx.numpy_helper.from_array(np.zeros(0, np.int64), "s")
    graph = helper.make_graph([fill, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [empty])
    scalar = lowerer.convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
                             for_backend="mnn==3.6")
    assert [n.op_type for n in scalar.model.graph.node] == ["Identity", "Add"]


def test_mnn_writes_an_einsum_of_three_operands_pairwise() -> None:
    """MNN 3.6.1's converter takes Einsum of one or two operands only (measured 2026-12-02): linear attention's
    ``bshd,bshde,bsh->bshe`` is written as pairwise contractions, verified within the expansion budget; a
    two-operand Einsum is kept."""
    x = helper.make_tensor_value_info("q", TensorProto.FLOAT, [2, 3, 2, 4])
    kv = helper.make_tensor_value_info("kv", TensorProto.FLOAT, [2, 3, 2, 4, 5])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3, 2])
    three = helper.make_node("Einsum", ["q", "kv", "z"], ["y"], equation="bshd,bshde,bsh->bshe", name="mix")
    two = helper.make_node("Einsum", ["q", "q"], ["w"], equation="bshd,bshd->bsh", name="dot")
    graph = helper.make_graph([three, two], "g", [x, kv, z],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 2, 5]),
                               helper.make_tensor_value_info("w", TensorProto.FLOAT, [2, 3, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    result = lowerer.convert(model, for_backend="mnn==3.6")
    einsums = [n for n in result.model.graph.node if n.op_type == "Einsum"]
    assert [len(n.input) for n in einsums] == [2] and "MatMul" in {n.op_type for n in result.model.graph.node}
    assert [r.status for r in result.report.rewrites] == ["verified"]


def test_tvm_writes_dynamic_shape_slices_and_0d_fills() -> None:
    """TVM 0.27's frontend fails on the dynamo exports' Shape start/end of dynamic tensors and on ConstantOfShape
    of an empty shape (measured 2026-12-02): Shape + Slice and the 0-d value are written; a static Shape start/end
    is kept."""
    probes = {p.name: p.model for p in base_probes()}
    dims = lowerer.convert(probes["Shape-15-dims-Reshape"], for_backend="tvm==0.27")
    assert not [n for n in dims.model.graph.node if n.op_type == "Shape" and n.attribute]
    assert {r.status for r in dims.report.rewrites} == {"verified"}
    static = lowerer.convert(probes["Shape-15-start1"], for_backend="tvm==0.27", verify=False)
    assert static.report.rewrites == []
    empty = onnx.numpy_helper.from_array(np.zeros(0, np.int64), "s")
    scalar = lowerer.convert(_constant_of_shape(empty, np.array([2.5], np.float32)), for_backend="tvm==0.27")
    assert [n.op_type for n in scalar.model.graph.node] == ["Identity", "Mul"]


def test_tvm_keeps_a_topk_10_whose_k_is_one() -> None:
    """TVM 0.27 ignores TopK-10's k (one column comes out): right for a constant k of 1, refused otherwise."""
    def topk(k: int) -> onnx.ModelProto:
        return one_node("TopK", 10, None, inputs=[("x", TensorProto.FLOAT, [4, 8])],
                        consts={"k": np.array([k], np.int64)}, outputs=2)

    assert lowerer.convert(topk(1), for_backend="tvm==0.27").report.rewrites == []
    with pytest.raises(ConversionError, match=r"TopK-10's k \(an input\) is ignored"):
        lowerer.convert(topk(3), for_backend="tvm==0.27")


def test_tract_refuses_topk_1_and_reshape_1_with_the_opset_that_runs_there() -> None:
    """tract reads TopK's k and Reshape's shape only as inputs (TopK-1 and Reshape-1 fail to load there, measured):
    refused in one line whose remedy is the opset just past them, which converts and is what tract runs."""
    reshape = helper.make_graph([helper.make_node("Reshape", ["x"], ["y"], shape=[8, 4])], "g",
                                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])])
    models = {"TopK": (one_node("TopK", 1, {"k": 3, "axis": 1}, [4, 8], outputs=2), 10),
              "Reshape": (helper.make_model(reshape, opset_imports=[helper.make_opsetid("", 1)], ir_version=3), 5)}
    for op, (model, opset) in models.items():
        with pytest.raises(ConversionError, match=rf"--target-opset {opset} takes it to {op}-{opset}\b"):
            lowerer.convert(model, for_backend="tract==0.23", verify=False)
        out = lowerer.convert(model, for_backend="tract==0.23", target_opset=opset).model
        assert [n.op_type for n in out.graph.node if n.op_type == op] == [op]


def test_mnn_takes_einsum_diagonals_by_gather_and_says_its_topk_ties() -> None:
    """MNN 3.6.1 computes Einsum traces and diagonals wrongly and the einsum-diagonal form right (measured
    2026-12-01); its TopK indices on ties are wrong for k >= 2 (measured): kept, with the departure said."""
    einsum = lowerer.convert(one_node("Einsum", 12, {"equation": "ii->i"}, [4, 4]), for_backend="mnn==3.6")
    assert [r.rule for r in einsum.report.rewrites] == ["einsum-diagonal"]
    assert all(r.status == "verified" for r in einsum.report.rewrites)
    plain = lowerer.convert(one_node("Einsum", 12, {"equation": "ij->ji"}, [3, 4]), for_backend="mnn==3.6")
    assert plain.report.rewrites == []

    def topk(k: int) -> onnx.ModelProto:
        return one_node("TopK", 11, None, inputs=[("x", TensorProto.FLOAT, [4, 8])],
                        consts={"k": np.array([k], np.int64)}, outputs=2)

    said = lowerer.convert(topk(3), for_backend="mnn==3.6", verify=False).report.backend
    assert [d["node"] for d in said["departures"]] == ["n0"] and "ties" in said["departures"][0]["why"]
    assert not lowerer.convert(topk(1), for_backend="mnn==3.6", verify=False).report.backend.get("departures")


def test_mnn_says_its_scatternd_reductions_and_cubic_half_pixel_resize() -> None:
    """MNN 3.6.1 computes ScatterND and ScatterElements with a reduction and cubic half_pixel Resize wrongly (measured
    2026-12-01 and 2026-12-02), and lowerer has no form MNN runs for them: kept as they are, the departure said; the
    right variants say nothing."""
    def scatter(reduction: str | None) -> onnx.ModelProto:
        return one_node("ScatterND", 18, {"reduction": reduction} if reduction else None,
                        inputs=[("x", TensorProto.FLOAT, [4, 3]), ("u", TensorProto.FLOAT, [2, 3])],
                        consts={"i": np.array([[1], [3]], np.int64)}, order=["x", "i", "u"])

    def resize(mode: str) -> onnx.ModelProto:
        return one_node("Resize", 19, {"mode": "cubic", "coordinate_transformation_mode": mode},
                        inputs=[("x", TensorProto.FLOAT, [1, 1, 4, 4])],
                        consts={"roi": np.array([], np.float32), "scales": np.array([1, 1, 2, 2], np.float32)},
                        order=["x", "roi", "scales"])

    def elements(reduction: str | None, opset: int = 18) -> onnx.ModelProto:
        attrs = {"axis": 1, **({"reduction": reduction} if reduction else {})}
        return one_node("ScatterElements", opset, attrs,
                        inputs=[("x", TensorProto.FLOAT, [2, 6]), ("u", TensorProto.FLOAT, [2, 3])],
                        consts={"i": np.array([[0, 5, 3], [2, 4, 1]], np.int64)}, order=["x", "i", "u"])

    cases = ((scatter("max"), True), (scatter("add"), True), (scatter(None), False), (resize("half_pixel"), True),
             (resize("pytorch_half_pixel"), True), (resize("asymmetric"), False), (elements("min"), True),
             (elements("mul", 16), True), (elements(None), False), (elements(None, 13), False))
    for model, said in cases:
        backend = lowerer.convert(model, for_backend="mnn==3.6", verify=False).report.backend
        assert bool(backend.get("departures")) == said, (model.graph.node[0].attribute, backend.get("departures"))


def _attention_with_mask(elem: int, opset: int, mask_dims: list[int], causal: int = 0,
                         q_heads: int = 2) -> onnx.ModelProto:
    ins = [helper.make_tensor_value_info("q", elem, [2, q_heads, 4, 8]),
           helper.make_tensor_value_info("k", elem, [2, 2, 4, 8]),
           helper.make_tensor_value_info("v", elem, [2, 2, 4, 8]),
           helper.make_tensor_value_info("m", TensorProto.BOOL, mask_dims)]
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], name="attn", is_causal=causal)
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", elem, [2, q_heads, 4, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=11)


@pytest.mark.parametrize(("elem", "opset", "mask_dims", "causal", "q_heads"), [
    (TensorProto.FLOAT, 23, [2, 1, 4, 4], 0, 2), (TensorProto.FLOAT, 23, [4, 4], 1, 4),
    (TensorProto.FLOAT16, 23, [2, 2, 4, 4], 0, 2), (TensorProto.DOUBLE, 23, [1, 1, 4, 4], 0, 2),
    (TensorProto.FLOAT, 24, [2, 1, 4, 4], 0, 2)])
def test_tract_gets_attention_a_float_mask(elem: int, opset: int, mask_dims: list[int], causal: int,
                                           q_heads: int) -> None:
    """tract 0.23.9 fails to build Attention with a bool attn_mask ('Mask must be floating point', measured
    2026-12-02): the mask is given as Where(mask, 0, -inf) in Q's type, the bias onnx's body makes of it; compared
    exactly with the original in onnxruntime on masks with fully masked rows, causal, grouped-query, float16 and
    double; verified at conversion (written for tract<0.23.9, a release no witness is: tract computes a fully
    masked row as NaN, a departure its profile says). A float mask is kept; a mask of unknown type is
    refused in one line."""
    model = _attention_with_mask(elem, opset, mask_dims, causal, q_heads)
    result = lowerer.convert(model, for_backend="tract<0.23.9")
    nodes = result.model.graph.node
    assert [n.op_type for n in nodes] == ["Where", "Attention"] and nodes[1].input[3] == nodes[0].output[0]
    assert [r.status for r in result.report.rewrites] == ["verified"]
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(5)
    feeds = {n: rng.standard_normal(s).astype(dtype) for n, s in
             (("q", (2, q_heads, 4, 8)), ("k", (2, 2, 4, 8)), ("v", (2, 2, 4, 8)))}
    mask = rng.random(mask_dims) < 0.5
    mask[..., 1, :] = False  # a fully masked row
    feeds["m"] = mask
    before = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    after = ort.InferenceSession(result.model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(after, before)
    floated = model.__deepcopy__()
    floated.graph.input[3].type.tensor_type.elem_type = elem
    kept = lowerer.convert(floated, for_backend="tract<0.23.9")
    assert [n.op_type for n in kept.model.graph.node] == ["Attention"]
    assert {r.rule for r in kept.report.rewrites} <= {"attention_24_23"}  # tract loads opsets up to 23
    unknown = model.__deepcopy__()
    unknown.graph.input[3].type.tensor_type.elem_type = TensorProto.UNDEFINED
    unknown.graph.input[3].type.tensor_type.ClearField("shape")
    with pytest.raises(ConversionError, match=r"^node 'attn' \(Attention-2[34].*(bool|type of 'm' is unknown)"):
        lowerer.convert(unknown, for_backend="tract<0.23.9")


@pytest.mark.parametrize("mask", ["bool", "float", "causal"])
def test_tvm_gets_the_masked_row_guard_of_attention_by_isinf(mask: str) -> None:
    """TVM 0.27's ReduceMax of a row of -inf gives the lowest float (measured, 2026-12-02), so the body's guard
    Equal(ReduceMax(bias), -inf) missed a wholly masked row, which came out NaN there (decoder.dynamo.opset23's
    deployment check, its ties set): the guard is written as ReduceMin of IsInf. Bit for bit the plain body's
    outputs in onnxruntime, wholly masked rows included; no ReduceMax left."""
    causal = mask == "causal"
    model = _attention_with_mask(TensorProto.FLOAT, 23, [2, 1, 4, 4], int(causal), 2)
    if causal:
        del model.graph.input[3]
        del model.graph.node[0].input[3]
    elif mask == "float":
        model.graph.input[3].type.tensor_type.elem_type = TensorProto.FLOAT
    result = lowerer.convert(model, for_backend="tvm==0.27")
    ops = [n.op_type for n in result.model.graph.node]
    assert "IsInf" in ops and "ReduceMin" in ops and "ReduceMax" not in ops, ops
    assert [(r.rule, r.status) for r in result.report.rewrites] == [("attention-trilu-isinf", "verified")]
    body = lowerer.convert(model, decompose=["attention"], verify=False).model
    rng = np.random.default_rng(11)
    feeds = {n: rng.standard_normal((2, 2, 4, 8)).astype(np.float32) for n in ("q", "k", "v")}
    if not causal:
        hidden = rng.random((2, 1, 4, 4)) < 0.5
        hidden[:, :, 1, :] = False  # wholly masked rows
        feeds["m"] = hidden if mask == "bool" else np.where(hidden, 0, -np.inf).astype(np.float32)
    got = ort.InferenceSession(result.model.SerializeToString()).run(None, feeds)[0]
    np.testing.assert_array_equal(got, ort.InferenceSession(body.SerializeToString()).run(None, feeds)[0])
    assert not np.isnan(got).any()


def test_tract_runs_the_decoder_export_given_a_float_mask() -> None:
    """The torch dynamo decoder export (Attention-23 with a bool mask) fails to build on tract 0.23.9 as exported;
    converted --for tract it runs there and matches onnxruntime (the deployment check, where tract is installed)."""
    fixtures = Path(__file__).parent / "fixtures" / "real"
    model = onnx.load(str(fixtures / "decoder.dynamo.opset23.onnx"))
    result = lowerer.convert(model, for_backend="tract==0.23")
    assert [r.rule for r in result.report.rewrites] == ["attention-float-mask"]
    deployment = result.report.backend["deployment"]
    if witnesses.find_witness("tract")[0] is None:
        pytest.skip("tract is not installed")
    assert deployment["status"] == "equal", deployment


def _hidden_key_model(mask_type: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One query, two keys: the visible one scores -inf, the hidden one 1 (the departure's measured case)."""
    ins = [helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 1, 1, 1]),
           helper.make_tensor_value_info("k", TensorProto.FLOAT, [1, 1, 2, 1]),
           helper.make_tensor_value_info("v", TensorProto.FLOAT, [1, 1, 2, 1]),
           helper.make_tensor_value_info("m", mask_type, [1, 1, 1, 2])]
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])
    graph = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, 1])])
    mask = np.array([True, False]).reshape(1, 1, 1, 2)
    feeds = {"q": np.ones((1, 1, 1, 1), np.float32), "k": np.array([-np.inf, 1], np.float32).reshape(1, 1, 2, 1),
             "v": np.array([5, 7], np.float32).reshape(1, 1, 2, 1),
             "m": mask if mask_type == TensorProto.BOOL else np.where(mask, 0, -np.inf).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=11), feeds


def test_onnxruntimes_attention_departs_as_listed_where_a_key_is_hidden() -> None:
    """onnxruntime's CPU Attention hides a key of a bool mask, or a causal one, with the lowest finite float,
    where onnx's body adds -inf (lowerer/verification/departures.json): measured on the installed release, the
    entry's condition met there and not on the inputs it does not depart on."""
    from lowerer.verification.blame import CONDITIONS, departure_met

    ran = {}
    for kind in (TensorProto.BOOL, TensorProto.FLOAT):
        model, feeds = _hidden_key_model(kind)
        ran[kind] = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0].item()
        body = lowerer.convert(model, decompose=["attention"], verify=False).model
        assert np.isnan(ort.InferenceSession(body.SerializeToString()).run(None, feeds)[0].item())  # the spec
    assert ran[TensorProto.BOOL] == 7.0 and np.isnan(ran[TensorProto.FLOAT])
    model, feeds = _hidden_key_model(TensorProto.BOOL)
    assert "node 'Attention#0' (Attention) meets a listed departure" in str(departure_met(model, None, feeds,
                                                                                         "CPUExecutionProvider"))
    met = CONDITIONS["hidden_key_beside_nonfinite"]
    q, k, v, m = feeds["q"], feeds["k"], feeds["v"], feeds["m"]
    assert met([q, k, v, m], None) and met([q, np.ones_like(k), v, m, np.full((1, 1, 1, 1), np.nan, np.float32)],
                                           None)
    assert not met([q, np.ones_like(k), v, m], None)  # finite scores: no departure
    assert not met([q, k, v, np.ones_like(m)], None)  # no key hidden
    assert not met([q, k, v, np.where(m, 0, -np.inf).astype(np.float32)], None)  # a float mask: onnxruntime adds it
    # is_causal=1: query 0 sees key 0 only (score -inf); onnxruntime gives it the hidden key 1's value
    causal = model.__deepcopy__()
    del causal.graph.input[3]
    del causal.graph.node[0].input[3]
    causal.graph.node[0].attribute.append(helper.make_attribute("is_causal", 1))
    for value in (*causal.graph.input[:1], causal.graph.output[0]):
        value.type.tensor_type.shape.dim[2].dim_value = 2
    feeds = {"q": np.ones((1, 1, 2, 1), np.float32), "k": k, "v": v}
    got = ort.InferenceSession(causal.SerializeToString()).run(None, feeds)[0].ravel()
    body = lowerer.convert(causal, decompose=["attention"], verify=False).model
    spec = ort.InferenceSession(body.SerializeToString()).run(None, feeds)[0].ravel()
    assert got.tolist() == [7.0, 7.0] and np.isnan(spec[0]) and spec[1] == 7.0
    assert met([feeds["q"], k, v], causal.graph.node[0]) and not met([feeds["q"], k, v], model.graph.node[0])
    assert "meets a listed departure" in str(departure_met(causal, None, feeds, "CPUExecutionProvider"))


def test_the_references_bool_mask_departure_is_recorded_on_the_inf_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one-node bool-mask Attention --for tract, run by onnxruntime CPU as the witness (the form's values as
    onnxruntime computes them): on the -inf set of seed 0 a query's visible keys all score -inf, so onnxruntime on the
    original (the reference) weights the hidden ones where the spec gives NaN: recorded as the reference's listed
    departure, not judged. Without that entry in departures.json the same check fails: the set is let through by the
    listed departure only. On tract itself (where installed) the ties set's wholly masked rows meet tract's own
    departure first (NaN there), said as such."""
    from lowerer.backends import deployment
    from lowerer.verification import blame

    model, _ = EXPANSIONS["Attention-23-bool-mask"]()
    tract = witnesses.find_witness("tract")[0]
    if tract is not None:
        there = lowerer.convert(model, for_backend="tract==0.23", seed=0).report.backend["deployment"]
        assert there["status"] in ("equal", "departs-as-original"), there
    monkeypatch.setattr(deployment, "witness_for", lambda p: (witnesses.Witness("onnxruntime:CPUExecutionProvider",
                                                                                "cpu"), ""))
    found = lowerer.convert(model, for_backend="tract==0.23", seed=0).report.backend["deployment"]
    assert found["status"] == "equal", found
    assert "the reference, onnxruntime CPU, departs from the spec there: node 'Attention#0' (Attention) meets a " \
           "listed departure: onnxruntime's CPU Attention hides a key" in found["reason"]
    listed = blame.departures()
    monkeypatch.setattr(blame, "departures", lambda: tuple(d for d in listed if d.op != "Attention"))
    with pytest.raises(VerificationError, match=r"output 'y' differs .*input set -inf"):
        lowerer.convert(model, for_backend="tract==0.23", seed=0)


def _causal_attention(past: bool) -> onnx.ModelProto:
    dims = ["B", 2, "S", 8]
    names = ["q", "k", "v", *(["", "pk", "pv"] if past else [])]
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("q", "k", "v")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)]
    if past:
        ins += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 2, "P", 8]) for n in ("pk", "pv")]
        outs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 2, "T", 8]) for n in ("ok", "ov")]
    node = helper.make_node("Attention", names, [o.name for o in outs], name="attn", is_causal=1)
    graph = helper.make_graph([node], "g", ins, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=11)


def test_tvm_gets_the_causal_mask_of_attention_as_trilu() -> None:
    """TVM 0.27's VM codegen fails on the Attention body's causal mask over dynamic dims (Range rows and columns,
    measured on decoder.dynamo.opset23, 2026-12-02): the body is written with the mask as Trilu of a -inf fill,
    verified; its outputs equal the plain body's in onnxruntime bit for bit (the same bias), and the original's within
    the expansion budget, on rows of 1 to 6 positions. A past key (its length not a constant) keeps the body's Where;
    a non-causal one has no mask to write."""
    model = _causal_attention(past=False)
    result = lowerer.convert(model, for_backend="tvm==0.27")
    ops = [n.op_type for n in result.model.graph.node]
    assert "Trilu" in ops and "Less" not in ops and "Range" not in ops
    assert [(r.rule, r.status) for r in result.report.rewrites] == [("attention-trilu-isinf", "verified")]
    body = lowerer.convert(model, target_opset=22).model
    rng = np.random.default_rng(3)
    for s in (1, 2, 6):
        feeds = {n: rng.standard_normal((2, 2, s, 8)).astype(np.float32) for n in ("q", "k", "v")}
        got = ort.InferenceSession(result.model.SerializeToString()).run(None, feeds)[0]
        np.testing.assert_array_equal(got, ort.InferenceSession(body.SerializeToString()).run(None, feeds)[0])
        want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=8 * np.finfo(np.float32).eps * np.abs(want).max())
    past = lowerer.convert(_causal_attention(past=True), for_backend="tvm==0.27")
    assert {"Less", "Range"} <= {n.op_type for n in past.model.graph.node}
    assert [r.status for r in past.report.rewrites] == ["verified"]
    noncausal = lowerer.convert(EXPANSIONS["Attention-23-noncausal"]()[0], for_backend="tvm==0.27")
    assert "Trilu" not in {n.op_type for n in noncausal.model.graph.node}
