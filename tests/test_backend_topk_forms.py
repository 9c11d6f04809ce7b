"""The backend forms ``argmax-topk``, ``hardmax-topk`` and ``shape-slice``, driven through a test profile.

Each model holds one node per attribute combination (every axis, negative ones too, keepdims,
select_last_index, ArgMax and ArgMin, ranks 1-4); it is converted ``for_backend="openvino"`` with
a profile (monkeypatched) that names the form, to every target opset the form allows up to 23,
and the original and the result are run in onnxruntime's CPU provider on tie-heavy inputs (many
equal values, all-equal rows, ±inf or the type's extremes, maxima at every position) and
compared exactly. Deliberately wrong variants of the forms must be caught by lowerer's own
per-rewrite verification.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import lowerer
import lowerer.backends.profile as profile_module
from lowerer.cli import main
from lowerer.core.errors import ConversionError, VerificationError
from lowerer.rules import REGISTRY, topk_forms
from lowerer.rules.topk_forms import ArgTopKForm, HardmaxTopKForm, ShapeSliceForm

F, F16, D, I32, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64
BF16 = TensorProto.BFLOAT16
_DIMS = [3, 4, 2, 3]
#: Another binding of the dynamic dims (different sizes along each axis).
_OTHER_DIMS = [1, 5, 3, 2]
#: The source opset each op version is written at (ArgMax-1 at 7: onnxruntime guarantees opsets >= 7).
_ARG_SOURCES = {1: 7, 11: 11, 12: 12, 13: 13}
_HARDMAX_SOURCES = {1: 7, 11: 11, 13: 13}


def _entry(ops: list[str], rewrite: str, when: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"ops": ops, "rewrite": rewrite, "when": when or {}, "why": "breaks ties wrongly (test profile)",
            "source": "tests/test_backend_topk_forms.py"}


@pytest.fixture
def use_profile(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """``use_profile(entries)`` makes them the ``openvino`` profile for the test.

    The forms are what is tested (in onnxruntime), not OpenVINO: no deployment check runs them there.
    """
    import lowerer.backends.deployment as deployment

    original = profile_module._profile_data
    monkeypatch.setattr(deployment, "witness_for", lambda profile: (None, "a test profile: not run on the backend"))

    def install(entries: list[dict[str, Any]]) -> None:
        data = profile_module.parse_profile({"provider": "OpenVINOExecutionProvider", "entries": entries},
                                            "test-openvino.json")
        monkeypatch.setattr(profile_module, "_profile_data",
                            lambda name: data if name == "openvino" else original(name))

    yield install


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], opset: int) -> onnx.ModelProto:
    outputs = [o for n in nodes for o in n.output]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    del model.graph.output[:]
    model.graph.output.extend(inferred.graph.output)
    onnx.checker.check_model(model, full_check=True)
    return model


def _input(name: str, elem: int, rank: int, dynamic: bool) -> onnx.ValueInfoProto:
    dims: list[Any] = [f"{name}_d{i}" for i in range(rank)] if dynamic else _DIMS[:rank]
    return helper.make_tensor_value_info(name, elem, dims)


def _arg_model(version: int, elem: int, dynamic: bool, ranks: range = range(1, 5),
               ops: tuple[str, ...] = ("ArgMax", "ArgMin")) -> onnx.ModelProto:
    nodes, inputs = [], []
    for rank in ranks:
        x = f"x{rank}"
        inputs.append(_input(x, elem, rank, dynamic))
        axes = range(-rank, rank) if version >= 11 else range(rank)
        lasts = (0, 1) if version >= 12 else (0,)
        for op, axis, keepdims, last in itertools.product(ops, axes, (0, 1), lasts):
            out = f"{op}_r{rank}_a{axis}_k{keepdims}_s{last}".replace("-", "m")
            extra = {"select_last_index": last} if version >= 12 else {}
            nodes.append(helper.make_node(op, [x], [out], name=f"n_{out}", axis=axis, keepdims=keepdims, **extra))
    return _model(nodes, inputs, _ARG_SOURCES[version])


def _values(shape: tuple[int, ...], dtype: np.dtype[Any]) -> list[np.ndarray]:
    """Tie-heavy inputs: few distinct values, all equal, extremes, and maxima at every position."""
    rng = np.random.default_rng(list(shape))
    if dtype.kind == "f":
        low, high = -np.inf, np.inf
    else:
        low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    sets = [rng.integers(0, 3, size=shape) for _ in range(3)]
    sets += [np.zeros(shape), np.full(shape, high), np.full(shape, low), rng.choice([low, 0, high], size=shape),
             rng.choice([low, 1, 2], size=shape), rng.choice([0, high], size=shape)]
    index_sum = np.indices(shape).sum(axis=0) if shape else np.zeros(())
    for m in (2, 3, 4):
        for k in range(m):
            pattern = (index_sum % m == k).astype(np.int64)
            sets += [pattern, 1 - pattern]
    return [np.asarray(v).astype(dtype) for v in sets]


def _feeds(model: onnx.ModelProto, shapes: list[int]) -> list[dict[str, np.ndarray]]:
    per_input = {}
    for vi in model.graph.input:
        dims = tuple(d.dim_value if d.HasField("dim_value") else shapes[i]
                     for i, d in enumerate(vi.type.tensor_type.shape.dim))
        per_input[vi.name] = _values(dims, helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    count = max(len(v) for v in per_input.values())
    return [{name: values[i % len(values)] for name, values in per_input.items()} for i in range(count)]


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _compare(original: onnx.ModelProto, converted: onnx.ModelProto, dynamic: bool) -> int:
    """Run both on every feed (both bindings of dynamic dims); assert equal outputs; the count compared."""
    before, after = _session(original), _session(converted)
    names = [o.name for o in original.graph.output]
    compared = 0
    for shapes in (_DIMS, _OTHER_DIMS) if dynamic else (_DIMS,):
        for feed in _feeds(original, shapes):
            want, got = before.run(names, feed), after.run(names, feed)
            for name, a, b in zip(names, want, got, strict=True):
                if a.dtype != b.dtype or not np.array_equal(a, b):  # (array_equal compares shapes too)
                    np.testing.assert_array_equal(a, b, err_msg=f"{name} on {feed}", strict=True)
                compared += 1
    return compared


def _ops(model: onnx.ModelProto | onnx.GraphProto) -> set[str]:
    """The op types of a graph's nodes, those inside If branches included."""
    graph = model.graph if isinstance(model, onnx.ModelProto) else model
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found |= _ops(a.g)
    return found


def _assert_verified(result: Any, form: str) -> None:
    """Some rewrite applied ``form`` (as its rule or on the way), and every rewrite was verified."""
    picked = [r for r in result.report.rewrites if r.rule == form or any(c.entry == form for c in r.crossings)]
    assert picked, [(r.rule, [c.entry for c in r.crossings]) for r in result.report.rewrites]
    bad = [(r.node, r.status, r.reason) for r in result.report.rewrites if r.status != "verified"]
    assert not bad, bad


# -- argmax-topk -----------------------------------------------------------------------------------

_ARG_CASES = [(version, target) for version in _ARG_SOURCES for target in range(1, 24)]


#: Targets where lowerer's own verification runs too (elsewhere the exact comparison below is the check).
_VERIFIED_AT = frozenset({1, 6, 9, 10, 11, 12, 13, 18, 23})


@pytest.mark.parametrize(("version", "target"), _ARG_CASES, ids=[f"v{v}-to{t}" for v, t in _ARG_CASES])
def test_argmax_topk_every_target(use_profile: Any, version: int, target: int) -> None:
    """float32, ranks 1-4, every axis, keepdims 0/1, select_last_index 0/1; dynamic dims from opset 10."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-topk")])
    dynamic = target >= 10 and target % 2 == 0
    ops = ("ArgMax", "ArgMin") if target >= 6 else ("ArgMax",)
    model = _arg_model(version, F, dynamic, ops=ops)
    verify = target in _VERIFIED_AT
    result = lowerer.convert(model, target_opset=target, for_backend="openvino", verify=verify)
    assert not _ops(result.model) & {"ArgMax", "ArgMin"}
    assert "TopK" in _ops(result.model)
    if verify:
        _assert_verified(result, "argmax-topk")
    assert _compare(model, result.model, dynamic) > 0
    if target < 6:  # ArgMin: TopK-1 has no 'largest', and onnxruntime has no Neg-1 to verify Neg(x) with
        with pytest.raises(ConversionError, match=r"ArgMin-\d+.*Neg below opset 6 .*target opset >= 6"):
            lowerer.convert(_arg_model(version, F, False, range(2, 3), ("ArgMin",)), target_opset=target,
                            for_backend="openvino")


_TYPE_CASES = [(version, target, elem, dynamic)
               for version in (1, 13) for target in (6, 9, 10, 11, 13, 23)
               for elem in (F16, D, I32, I64) for dynamic in (False, True)
               if not (dynamic and target < 10)]


@pytest.mark.parametrize(("version", "target", "elem", "dynamic"), _TYPE_CASES,
                         ids=[f"v{v}-to{t}-{TensorProto.DataType.Name(e)}-{'dyn' if d else 'static'}"
                              for v, t, e, d in _TYPE_CASES])
def test_argmax_topk_types(use_profile: Any, version: int, target: int, elem: int, dynamic: bool) -> None:
    """float16/double/int32/int64: converted where TopK at the target takes the type or a widening is exact."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-topk")])
    model = _arg_model(version, elem, dynamic, ranks=range(1, 4))
    if elem == I64 and target < 11:  # TopK-1/10 take only float types, and double does not hold every int64
        with pytest.raises(ConversionError, match=r"TopK-(1|10) \(opset \d+\), which takes double, float, float16, "
                                                  r"not int64"):
            lowerer.convert(model, target_opset=target, for_backend="openvino")
        return
    result = lowerer.convert(model, target_opset=target, for_backend="openvino")
    assert "TopK" in _ops(result.model) and not _ops(result.model) & {"ArgMax", "ArgMin"}
    if elem == I32 and target < 11:
        assert "Cast" in _ops(result.model)  # widened to double
    _assert_verified(result, "argmax-topk")
    assert _compare(model, result.model, dynamic) > 0


def test_argmax_topk_bfloat16_widened(use_profile: Any) -> None:
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-topk")])
    model = _arg_model(13, BF16, False, ranks=range(2, 3))
    result = lowerer.convert(model, target_opset=13, for_backend="openvino")
    casts = [n for n in result.model.graph.node if n.op_type == "Cast"]
    assert casts and all(a.i == F for n in casts for a in n.attribute if a.name == "to")
    # onnxruntime's Python API exchanges no bfloat16 and lowerer's reference has no TopK: not run, never failed
    # (the widening to float32 is exact; the float32 form is run above).
    assert {r.status for r in result.report.rewrites} == {"unverified"}
    assert all("bfloat16" in r.reason for r in result.report.rewrites)
    at_24 = lowerer.convert(model, target_opset=24, for_backend="openvino", verify=False)
    assert "Cast" not in _ops(at_24.model)  # TopK-24 takes bfloat16


def test_argmax_topk_possibly_empty_axis_has_no_if(use_profile: Any) -> None:
    """A dynamic axis (may be 0, with another dim 0 ArgMax gives an empty result): Pad, never If."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-topk")])
    for target in (9, 11, 18):
        model = _arg_model(13 if target >= 13 else 1, F, True, ranks=range(2, 3))
        result = lowerer.convert(model, target_opset=target, for_backend="openvino")
        assert "If" not in _ops(result.model) and "Pad" in _ops(result.model)
        _assert_verified(result, "argmax-topk")
        empty = {"x2": np.zeros((0, 0), np.float32)}
        want, got = _session(model).run(None, empty), _session(result.model).run(None, empty)
        assert [a.shape for a in want] == [b.shape for b in got]
    static = lowerer.convert(_arg_model(13, F, False), target_opset=13, for_backend="openvino")
    assert "Pad" not in _ops(static.model)


# -- hardmax-topk ----------------------------------------------------------------------------------

def _hardmax_model(version: int, dynamic: bool, long_axis: bool) -> onnx.ModelProto:
    nodes, inputs = [], []
    for rank in range(1, 5):
        x = f"x{rank}"
        inputs.append(_input(x, F, rank, dynamic))
        for axis in range(-rank, rank) if version >= 11 else range(rank):
            out = f"h_r{rank}_a{axis}".replace("-", "m")
            nodes.append(helper.make_node("Hardmax", [x], [out], name=f"n_{out}", axis=axis))
    if long_axis:  # the two-level search (static last axis >= 128): every ArgMax of it is a TopK too
        inputs.append(helper.make_tensor_value_info("long", F, [3, 256]))
        nodes.append(helper.make_node("Hardmax", ["long"], ["h_long"], name="n_long", axis=-1 if version >= 11 else 1))
    return _model(nodes, inputs, _HARDMAX_SOURCES[version])


_HARDMAX_CASES = [(version, target) for version in _HARDMAX_SOURCES for target in range(1, 24)]


@pytest.mark.parametrize(("version", "target"), _HARDMAX_CASES, ids=[f"v{v}-to{t}" for v, t in _HARDMAX_CASES])
def test_hardmax_topk_every_target(use_profile: Any, version: int, target: int) -> None:
    use_profile([_entry(["Hardmax"], "hardmax-topk")])
    dynamic = target >= 9 and target % 2 == 1  # at 9: OneHot with the depth from Shape (no Range below 11)
    long_axis = target >= 11
    model = _hardmax_model(version, dynamic, long_axis)
    verify = target in _VERIFIED_AT
    result = lowerer.convert(model, target_opset=target, for_backend="openvino", verify=verify)
    assert "Hardmax" not in _ops(result.model) and "ArgMax" not in _ops(result.model)
    assert "TopK" in _ops(result.model)
    if verify:
        _assert_verified(result, "hardmax-topk")
    assert _compare(model, result.model, dynamic) > 0
    if long_axis:
        feed = {vi.name: np.zeros([d.dim_value or 2 for d in vi.type.tensor_type.shape.dim], np.float32)
                for vi in model.graph.input}
        feed["long"] = np.tile(np.array([0, 7, 7, 1] * 64, dtype=np.float32), (3, 1))
        feed["long"][1, 200] = feed["long"][1, 255] = 9
        feed["long"][2, :] = -np.inf
        want, got = _session(model).run(["h_long"], feed), _session(result.model).run(["h_long"], feed)
        np.testing.assert_array_equal(want[0], got[0])


def test_hardmax_shares_the_decomposition_body() -> None:
    assert issubclass(HardmaxTopKForm, lowerer.rules.hardmax_decomposition.HardmaxDecomposition)
    assert HardmaxTopKForm.first_max is not lowerer.rules.hardmax_decomposition.HardmaxDecomposition.first_max


# -- shape-slice -----------------------------------------------------------------------------------

_BOUNDS = [(0, None), (1, None), (-1, None), (-2, None), (0, 2), (1, 3), (-3, -1), (2, 1), (-9, 9), (5, None),
           (0, -9), (None, 2), (None, -1)]


def _shape_model(opset: int, dynamic: bool) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    nodes, inputs, whens = [], [], []
    for rank in range(0, 5):
        x = f"x{rank}"
        inputs.append(_input(x, F, rank, dynamic))
        for start, end in _BOUNDS:
            attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
            out = f"s_r{rank}_{start}_{end}".replace("-", "m")
            nodes.append(helper.make_node("Shape", [x], [out], name=f"n_{out}", **attrs))
            if attrs and attrs != {"start": 0} and attrs not in whens:
                whens.append(attrs)
    return _model(nodes, inputs, opset), whens


@pytest.mark.parametrize("source", [15, 19, 21, 23])
@pytest.mark.parametrize("target", list(range(15, 24)))
def test_shape_slice(use_profile: Any, source: int, target: int) -> None:
    if target < source and source > 15 and target % 2 == 0:
        pytest.skip("down-conversions sampled at odd targets")
    dynamic = target % 2 == 1
    model, whens = _shape_model(source, dynamic)
    use_profile([_entry(["Shape"], "shape-slice", {"attribute": when}) for when in whens])
    result = lowerer.convert(model, target_opset=target, for_backend="openvino")
    kept = [n for n in result.model.graph.node if n.op_type == "Shape"]
    # start=0 alone means no bounds: left as it is (its entry names none of them)
    assert all(all(a.name == "start" and a.i == 0 for a in n.attribute) for n in kept), kept
    assert "Slice" in _ops(result.model)
    _assert_verified(result, "shape-slice")
    assert _compare(model, result.model, dynamic) > 0


def test_shape_without_bounds_is_left_as_it_is(use_profile: Any) -> None:
    use_profile([_entry(["Shape"], "shape-slice")])
    model = _model([helper.make_node("Shape", ["x"], ["s"], name="plain")], [_input("x", F, 3, True)], 18)
    # A profile entry with no condition names every Shape: the one left as it is stays named (refused unless
    # allow_fallback); profiles name Shape by its bounds (``attribute``), as the tests above do.
    with pytest.raises(ConversionError, match="still there after its form"):
        lowerer.convert(model, for_backend="openvino", verify=False)
    made = lowerer.convert(model, for_backend="openvino", verify=False, allow_fallback=True).model
    assert [n.op_type for n in made.graph.node] == ["Shape"] and not made.graph.node[0].attribute


# -- the checks can fail ----------------------------------------------------------------------------

def _wrong_largest(self: ArgTopKForm, em: Any, v: str, axis: int, keepdims: int | None,
                   outputs: list[str] | None = None) -> str:
    return topk_forms.first_extremum_topk(em, v, axis, keepdims, em.node.op_type != "ArgMax", outputs)


def _wrong_keepdims(self: ArgTopKForm, em: Any, v: str, axis: int, keepdims: int | None,
                    outputs: list[str] | None = None) -> str:
    return topk_forms.first_extremum_topk(em, v, axis, 1, em.node.op_type == "ArgMax", outputs)


def _wrong_hardmax(self: HardmaxTopKForm, em: Any, v: str, axis: int, keepdims: int = 1) -> str:
    return topk_forms.first_extremum_topk(em, v, axis, keepdims, largest=False)


def _wrong_slice(self: ShapeSliceForm, em: Any) -> None:
    em.copy_node(start=None, end=None)


@pytest.mark.parametrize(("cls", "method", "wrong", "op", "attrs"), [
    (ArgTopKForm, "_first_extremum", _wrong_largest, "ArgMax", {"axis": 1}),
    (ArgTopKForm, "_first_extremum", _wrong_keepdims, "ArgMin", {"axis": -1, "keepdims": 0}),
    (HardmaxTopKForm, "first_max", _wrong_hardmax, "Hardmax", {"axis": 1}),
    (ShapeSliceForm, "rewrite", _wrong_slice, "Shape", {"start": 1}),
], ids=["largest-flipped", "keepdims-lost", "hardmax-smallest", "shape-bounds-dropped"])
def test_wrong_variants_fail_verification(use_profile: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          cls: type, method: str, wrong: Any, op: str, attrs: dict[str, int]) -> None:
    form = {"ArgMax": "argmax-topk", "ArgMin": "argmax-topk", "Hardmax": "hardmax-topk", "Shape": "shape-slice"}[op]
    use_profile([_entry([op], form, {"attribute": {"start": 1}} if op == "Shape" else None)])
    model = _model([helper.make_node(op, ["x"], ["y"], name="n", **attrs)], [_input("x", F, 3, False)], 18)
    assert_wrong_variant_fails(model, form, monkeypatch, tmp_path, cls, method, wrong)


def assert_wrong_variant_fails(model: onnx.ModelProto, form: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                               cls: type, method: str, wrong: Any) -> None:
    """The form verifies as it is; with ``cls.method`` made ``wrong``, verification fails (API) and exit 1 (CLI)."""
    assert lowerer.convert(model, for_backend="openvino").report.rewrites[0].status == "verified"
    monkeypatch.setattr(cls, method, wrong)
    with pytest.raises(VerificationError, match=f"by rule '{form}'"):
        lowerer.convert(model, for_backend="openvino")
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    run = CliRunner().invoke(main, ["convert", str(source), "-o", str(tmp_path / "out.onnx"), "--for", "openvino"])
    assert run.exit_code == 1, run.output


def test_cli_refusal_exits_2(use_profile: Any, tmp_path: Path) -> None:
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-topk")])
    model = _arg_model(1, I64, False, ranks=range(2, 3))
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    report = tmp_path / "r.json"
    run = CliRunner().invoke(main, ["convert", str(source), "-o", str(tmp_path / "o.onnx"), "--target-opset", "10",
                                    "--for", "openvino", "--report", str(report)])
    assert run.exit_code == 2
    assert run.stderr.count("\n") == 1 and len(run.stderr.strip()) <= 200 and "ArgMax-1" in run.stderr
    full = report.read_text()  # the refusal in full: the report
    assert "TopK-10" in full and "int64" in full


# -- explain / inspect -------------------------------------------------------------------------------

def test_forms_resolve_and_show_in_inspect(use_profile: Any, tmp_path: Path) -> None:
    for op, version, form in (("ArgMax", 13, "argmax-topk"), ("ArgMin", 1, "argmax-topk"),
                              ("Hardmax", 13, "hardmax-topk"), ("Shape", 15, "shape-slice")):
        resolution = REGISTRY.resolve(op, version, 18, form=form)
        assert resolution is not None and f"[form '{form}': the backend profile names it]" in resolution.describe()
    assert {"argmax-topk", "hardmax-topk", "shape-slice"} <= set(profile_module.REWRITES)
    use_profile([_entry(["ArgMax"], "argmax-topk"), _entry(["Hardmax"], "hardmax-topk"),
                 _entry(["Shape"], "shape-slice", {"attribute": {"start": 1}})])
    model = _model([helper.make_node("ArgMax", ["x"], ["a"], name="amax", axis=1),
                    helper.make_node("Hardmax", ["x"], ["h"], name="hmax", axis=1),
                    helper.make_node("Shape", ["x"], ["s"], name="shp", start=1)], [_input("x", F, 3, False)], 18)
    source = tmp_path / "m.onnx"
    onnx.save(model, source)
    text = CliRunner().invoke(main, ["inspect", str(source), "--for", "openvino"])
    assert text.exit_code == 0, text.output
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[3:] if line.split()}
    assert "argmax-topk: TopK" in lines["amax"]
    assert "hardmax-topk: TopK" in lines["hmax"]
    assert "shape-slice: Shape + Slice" in lines["shp"]


# -- last-axis below Reshape-14: no If where a dynamic batch is the only dim that may be 0 ----------------

@pytest.mark.parametrize("op", ["Hardmax", "Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("version", "target"), [(1, 9), (11, 11), (11, 12), (11, 13)])
@pytest.mark.parametrize("axis", [1, 2, -2])
def test_last_axis_with_a_dynamic_batch_has_no_if(use_profile: Any, op: str, version: int, target: int,
                                                  axis: int) -> None:
    """Flatten(axis >= 1) → op → Reshape-13 to Shape(x): a 0 batch copies the view's 0, so no guard is needed."""
    if version < 11 and axis < 0:
        return
    use_profile([_entry([op], "last-axis", {"axis_not_last": True})])
    model = _model([helper.make_node(op, ["x"], ["y"], name="n", axis=axis)],
                   [helper.make_tensor_value_info("x", F, ["N", 3, 4, 2])], _HARDMAX_SOURCES[version])
    result = lowerer.convert(model, target_opset=target, for_backend="openvino")
    assert "If" not in _ops(result.model) and "Reshape" in _ops(result.model), _ops(result.model)
    _assert_verified(result, "last-axis" if target < 13 else "coerced-axis")
    before, after = _session(model), _session(result.model)
    for n in (0, 1, 2):
        for feed in _values((n, 3, 4, 2), np.dtype(np.float32)):
            want, got = before.run(None, {"x": feed}), after.run(None, {"x": feed})
            assert want[0].shape == got[0].shape
            if op == "Hardmax":
                np.testing.assert_array_equal(want[0], got[0])
            else:  # the same op on a view; onnxruntime may vectorise the rows differently
                np.testing.assert_allclose(want[0], got[0], rtol=1e-6, atol=1e-6)


def test_last_axis_keeps_its_guard_where_another_dim_may_be_zero(use_profile: Any) -> None:
    use_profile([_entry(["Hardmax"], "last-axis", {"axis_not_last": True})])
    model = _model([helper.make_node("Hardmax", ["x"], ["y"], name="n", axis=2)],
                   [helper.make_tensor_value_info("x", F, ["N", "C", 4, 2])], 11)
    result = lowerer.convert(model, target_opset=11, for_backend="openvino")
    assert "If" in _ops(result.model)
    _assert_verified(result, "last-axis")
