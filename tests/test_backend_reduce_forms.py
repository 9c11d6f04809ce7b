"""The backend forms ``argmax-reduce`` and ``hardmax-reduce``, driven through a test profile.

As ``tests/test_backend_topk_forms.py`` (whose models, inputs and comparison this reuses): one node
per attribute combination (every axis, negative ones too, keepdims, select_last_index, ArgMax and
ArgMin, ranks 1-4), converted ``for_backend="openvino"`` with a profile naming the form, to every
target opset the form allows up to 23, and the original and the result run in onnxruntime's CPU
provider on tie-heavy inputs and compared exactly. No ArgMax, ArgMin or TopK may be left. At opset 9
and 10 floats are compared by Not(Less)/Not(Greater) (no Equal on floats there); below 9 (no Where) the
form refuses in one line. Deliberately wrong
variants must be caught by lowerer's own per-rewrite verification.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

import lowerer
from lowerer.cli import main
from lowerer.core.errors import ConversionError
from lowerer.rules import REGISTRY, reduce_forms
from lowerer.rules.reduce_forms import ArgReduceForm, HardmaxReduceForm
from tests import test_backend_topk_forms
from tests.test_backend_topk_forms import (
    _VERIFIED_AT,
    _arg_model,
    _assert_verified,
    _compare,
    _entry,
    _hardmax_model,
    _input,
    _model,
    _ops,
    _session,
    assert_wrong_variant_fails,
)

F, F16, D, I32, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64
I8, U8, I16, U16, U32, U64 = (TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16,
                              TensorProto.UINT32, TensorProto.UINT64)
_NOT_LEFT = {"ArgMax", "ArgMin", "TopK", "Hardmax"}
#: ``use_profile(entries)`` makes them the ``openvino`` profile for the test (the fixture of the topk forms' tests).
use_profile = test_backend_topk_forms.use_profile

# -- argmax-reduce ---------------------------------------------------------------------------------

_ARG_CASES = [(version, target) for version in (1, 11, 12, 13) for target in range(1, 24)
              if target >= 9 and (version == 1 or target >= version - 2)]


@pytest.mark.parametrize(("version", "target"), _ARG_CASES, ids=[f"v{v}-to{t}" for v, t in _ARG_CASES])
def test_argmax_reduce_every_target(use_profile: Any, version: int, target: int) -> None:
    """float32 (Not(Less) at 9-10), ranks 1-4, every axis, keepdims 0/1, select_last_index 0/1."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-reduce")])
    elem = F
    dynamic = target >= 11 and target % 2 == 0
    model = _arg_model(version, elem, dynamic)
    verify = target in _VERIFIED_AT
    result = lowerer.convert(model, target_opset=target, for_backend="openvino", verify=verify)
    assert not _ops(result.model) & _NOT_LEFT
    compared = {"Equal"} if target >= 11 else {"Not", "Less", "Greater"}  # no Equal on floats below 11
    assert {"ReduceMin", "Where"} | compared <= _ops(result.model)
    assert target >= 11 or "Equal" not in _ops(result.model)
    if verify:
        _assert_verified(result, "argmax-reduce")
    assert _compare(model, result.model, dynamic) > 0


@pytest.mark.parametrize("target", [1, 7, 8, 9, 10])
def test_argmax_reduce_below_11(use_profile: Any, target: int) -> None:
    """Below 9 refused (no Where); at 9 and 10 floats of every width and ints written, exact."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-reduce")])
    for elem in (F, F16, D, I32, I8):
        model = _arg_model(1, elem, False, range(2, 4))
        if target < 9:
            with pytest.raises(ConversionError, match=r"ArgMax-1.*Where needs opset 9; target opset >= 9"):
                lowerer.convert(model, target_opset=target, for_backend="openvino")
            continue
        result = lowerer.convert(model, target_opset=target, for_backend="openvino")
        assert not _ops(result.model) & _NOT_LEFT
        assert ("Equal" in _ops(result.model)) == (elem in (I32, I8))
        if elem != F16:  # onnxruntime has no ArgMax-1 kernel for float16: judged by lowerer's numpy reference
            _assert_verified(result, "argmax-reduce")
            assert _compare(model, result.model, False) > 0
    dynamic = _arg_model(1, I32, True, range(2, 3))
    if 9 <= target < 11:
        with pytest.raises(ConversionError, match=r"dynamic, and below opset 11 there is no Range"):
            lowerer.convert(dynamic, target_opset=target, for_backend="openvino")


_TYPE_CASES = [(version, target, elem, dynamic)
               for version in (1, 13) for target in (11, 12, 13, 18, 23)
               for elem in (F16, D, I8, U8, I16, U16, I32, I64, U32) for dynamic in (False, True)
               if target >= version]


@pytest.mark.parametrize(("version", "target", "elem", "dynamic"), _TYPE_CASES,
                         ids=[f"v{v}-to{t}-{TensorProto.DataType.Name(e)}-{'dyn' if d else 'static'}"
                              for v, t, e, d in _TYPE_CASES])
def test_argmax_reduce_types(use_profile: Any, version: int, target: int, elem: int, dynamic: bool) -> None:
    """Every type ArgMax takes but uint64: as it is, or widened exactly (int8/16, uint8/16 → int32; uint32 → int64)."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-reduce")])
    model = _arg_model(version, elem, dynamic, ranks=range(1, 4))
    result = lowerer.convert(model, target_opset=target, for_backend="openvino")
    assert not _ops(result.model) & _NOT_LEFT
    widened = elem in (I16, U16, U32) or (elem in (I8, U8) and target < 12)
    assert ("Cast" in _ops(result.model)) == widened
    if elem in (I16, U16, U32):  # onnxruntime has no ArgMax kernel for them: judged by lowerer's numpy reference
        assert {r.status for r in result.report.rewrites} == {"reference-only"}
        return
    _assert_verified(result, "argmax-reduce")
    assert _compare(model, result.model, dynamic) > 0


def test_argmax_reduce_uint64_refused_in_one_line(use_profile: Any, tmp_path: Path) -> None:
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-reduce")])
    source = tmp_path / "m.onnx"
    onnx.save(_arg_model(13, U64, False, ranks=range(2, 3)), source)
    report = tmp_path / "r.json"
    run = CliRunner().invoke(main, ["convert", str(source), "-o", str(tmp_path / "o.onnx"), "--for", "openvino",
                                    "--report", str(report)])
    assert run.exit_code == 2
    assert run.stderr.count("\n") == 1 and len(run.stderr.strip()) <= 200 and "ArgMax-13" in run.stderr
    assert "not uint64" in report.read_text()  # the refusal in full: the report


def test_argmax_reduce_nan_and_empty(use_profile: Any) -> None:
    """A NaN row gives an index in range; an empty input the empty result ArgMax gives."""
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-reduce")])
    model = _arg_model(13, F, True, ranks=range(2, 3))
    result = lowerer.convert(model, target_opset=13, for_backend="openvino")
    session = _session(result.model)
    rows = np.array([[np.nan] * 5, [1, np.nan, 3, 3, np.nan], [np.nan, -np.inf, 2, 0, 2]], np.float32)
    names = [o.name for o in result.model.graph.output]
    for name, got in zip(names, session.run(names, {"x2": rows}), strict=True):
        axis = int(name.split("_a")[1].split("_")[0].replace("m", "-"))
        assert got.min() >= 0 and got.max() < rows.shape[axis], (name, got)
    empty = {"x2": np.zeros((0, 0), np.float32)}  # (with one dim non-empty onnxruntime's ArgMax fails on axis 0)
    want, got = _session(model).run(None, empty), session.run(None, empty)
    assert [a.shape for a in want] == [b.shape for b in got]


# -- hardmax-reduce --------------------------------------------------------------------------------

_HARDMAX_CASES = [(version, target) for version in (1, 11, 13) for target in range(9, 24)]


@pytest.mark.parametrize(("version", "target"), _HARDMAX_CASES, ids=[f"v{v}-to{t}" for v, t in _HARDMAX_CASES])
def test_hardmax_reduce_every_target(use_profile: Any, version: int, target: int) -> None:
    use_profile([_entry(["Hardmax"], "hardmax-reduce")])
    dynamic = target % 2 == 1 and target >= 11  # below 11 no Range: a dynamic size is refused
    model = _hardmax_model(version, dynamic, long_axis=True)
    verify = target in _VERIFIED_AT
    result = lowerer.convert(model, target_opset=target, for_backend="openvino", verify=verify)
    assert not _ops(result.model) & _NOT_LEFT
    assert {"ReduceMin", "Where"} <= _ops(result.model)
    if verify:
        _assert_verified(result, "hardmax-reduce")
    assert _compare(model, result.model, dynamic) > 0
    feed = {vi.name: np.zeros([d.dim_value or 2 for d in vi.type.tensor_type.shape.dim], np.float32)
            for vi in model.graph.input}
    feed["long"] = np.tile(np.array([0, 7, 7, 1] * 64, dtype=np.float32), (3, 1))
    feed["long"][1, 200] = feed["long"][1, 255] = 9
    feed["long"][2, :] = -np.inf
    want, got = _session(model).run(["h_long"], feed), _session(result.model).run(["h_long"], feed)
    np.testing.assert_array_equal(want[0], got[0])


def test_hardmax_reduce_refused_below_9(use_profile: Any) -> None:
    use_profile([_entry(["Hardmax"], "hardmax-reduce")])
    model = _model([helper.make_node("Hardmax", ["x"], ["y"], name="h", axis=1)], [_input("x", F, 2, False)], 7)
    with pytest.raises(ConversionError, match=r"node 'h' \(Hardmax-1.*Where needs opset 9; target opset >= 9"):
        lowerer.convert(model, target_opset=8, for_backend="openvino")


def test_hardmax_shares_the_decomposition_body() -> None:
    assert issubclass(HardmaxReduceForm, lowerer.rules.hardmax_decomposition.HardmaxDecomposition)
    assert HardmaxReduceForm.first_max is not lowerer.rules.hardmax_decomposition.HardmaxDecomposition.first_max
    for op, form in (("ArgMax", "argmax-reduce"), ("ArgMin", "argmax-reduce"), ("Hardmax", "hardmax-reduce")):
        resolution = REGISTRY.resolve(op, 13, 17, form=form)
        assert resolution is not None and f"[form '{form}'" in resolution.describe()


# -- the checks can fail ----------------------------------------------------------------------------

def _wrong_last(self: ArgReduceForm, em: Any, v: str, axis: int, keepdims: int | None,
                outputs: list[str] | None = None) -> str:
    return reduce_forms.extremum_index_reduce(em, v, axis, keepdims, em.node.op_type == "ArgMax", True, outputs)


def _wrong_largest(self: ArgReduceForm, em: Any, v: str, axis: int, keepdims: int | None,
                   outputs: list[str] | None = None) -> str:
    return reduce_forms.extremum_index_reduce(em, v, axis, keepdims, em.node.op_type != "ArgMax", outputs=outputs)


def _wrong_hardmax(self: HardmaxReduceForm, em: Any, v: str, axis: int, keepdims: int = 1) -> str:
    return reduce_forms.extremum_index_reduce(em, v, axis, keepdims, largest=True, last=True)


@pytest.mark.parametrize(("cls", "method", "wrong", "op", "attrs"), [
    (ArgReduceForm, "_first_extremum", _wrong_last, "ArgMax", {"axis": 1}),
    (ArgReduceForm, "_first_extremum", _wrong_largest, "ArgMin", {"axis": -1, "keepdims": 0}),
    (HardmaxReduceForm, "first_max", _wrong_hardmax, "Hardmax", {"axis": 1}),
], ids=["last-not-first", "largest-flipped", "hardmax-last"])
def test_wrong_variants_fail_verification(use_profile: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                          cls: type, method: str, wrong: Any, op: str, attrs: dict[str, int]) -> None:
    form = "hardmax-reduce" if op == "Hardmax" else "argmax-reduce"
    use_profile([_entry([op], form)])
    model = _model([helper.make_node(op, ["x"], ["y"], name="n", **attrs)], [_input("x", F, 3, False)], 17)
    assert_wrong_variant_fails(model, form, monkeypatch, tmp_path, cls, method, wrong)


# -- the shipped openvino profile ----------------------------------------------------------------------

def test_openvino_below_2025_takes_the_reduce_forms_at_opset_17() -> None:
    nodes = [helper.make_node("ArgMax", ["x"], ["a"], name="amax", axis=-1, keepdims=0),
             helper.make_node("ArgMin", ["x"], ["b"], name="amin", axis=1, select_last_index=1),
             helper.make_node("Hardmax", ["x"], ["h"], name="hmax", axis=-1),
             helper.make_node("Shape", ["x"], ["s"], name="shp", start=1)]
    model = _model(nodes, [_input("x", F, 3, True)], 20)
    for spec in ("openvino==2023.0", "openvino==2024.0"):
        result = lowerer.convert(model, for_backend=spec)
        assert result.model.opset_import[0].version == 17
        assert not _ops(result.model) & (_NOT_LEFT - {"ArgMin"})  # the last axis, of a size not known: rewritten
        assert [n.name for n in result.model.graph.node if n.op_type == "ArgMin"] == ["amin"]  # axis 1 is right
        assert not [n for n in result.model.graph.node if n.op_type == "Shape" and n.attribute]
        assert all(r.status == "verified" for r in result.report.rewrites), result.report.rewrites
        assert _compare(model, result.model, True) > 0


def _rows(op: str, shape: list[int], opset: int, **attrs: int) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], ["y"], name="n", **attrs)
    x = helper.make_tensor_value_info("x", F, shape)
    return _model([node], [x], opset)


@pytest.mark.parametrize("spec", ["openvino==2023.0", "openvino==2024.0"])
def test_openvino_names_only_innermost_rows_of_16_or_more(spec: str) -> None:
    """Measured (benchmarks/openvino_ties.py): rows of 2..15 and every non-last axis right; 16 or more wrong."""
    kept = [_rows("ArgMax", [64, 15], 13, axis=-1), _rows("ArgMin", [64, 64], 13, axis=0),
            _rows("ArgMax", [8, 100, 1], 13, axis=1), _rows("Hardmax", [4, 15], 13),
            _rows("Hardmax", [64, 4], 13, axis=0), _rows("Hardmax", [2, 3, 5], 11, axis=1)]
    for model in kept:
        result = lowerer.convert(model, for_backend=spec, verify=False)
        assert _ops(result.model) == _ops(model) and not result.report.rewrites
    named = [_rows("ArgMax", [64, 16], 13, axis=-1), _rows("ArgMin", [4, 64], 12, axis=1, select_last_index=1),
             _rows("Hardmax", [2, 4, 4], 11, axis=1), _rows("Hardmax", [2, 16], 13)]
    for model in named:
        result = lowerer.convert(model, for_backend=spec)
        assert not _ops(result.model) & _NOT_LEFT
        assert all(r.status == "verified" for r in result.report.rewrites)
        assert _compare(model, result.model, False) > 0


@pytest.mark.parametrize(("opset", "written"), [(9, True), (10, True), (8, False), (1, False)])
def test_openvino_below_opset_9_keeps_the_users_node_as_a_departure(opset: int, written: bool,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """At 9 and 10 the reduce forms are written (Not(Less)); below, the user's own node is kept and said."""
    for op in ("ArgMax", "ArgMin", "Hardmax"):
        model = _rows(op, [8, 16], opset, axis=1)
        with caplog.at_level(logging.WARNING):
            caplog.clear()
            result = lowerer.convert(model, for_backend="openvino==2023.0")
        assert (op in _ops(result.model)) != written, (op, opset)
        departures = (result.report.backend or {}).get("departures", [])
        said = [r.getMessage() for r in caplog.records if "departs there too" in r.getMessage()]
        if written:
            assert not departures and not said and result.report.rewrites[0].status == "verified"
            assert _compare(model, result.model, False) > 0
            continue
        assert [d["node"] for d in departures] == ["n"] and "Where needs opset 9" in departures[0]["reason"]
        assert len(said) == 1 and "openvino==2023.0" in said[0] and "target opset >= 9" in said[0]
        refused = rf"node 'n' \({op}-1.*cannot be converted to opset {opset}.*target opset >= 9"
        with pytest.raises(ConversionError, match=refused):
            lowerer.convert(model, for_backend="openvino==2023.0", strict_backend=True)


def _topk_model(k: np.ndarray | None) -> onnx.ModelProto:
    """TopK-11 over rows of 8; ``k`` a Constant node's value, or (None) an input computed at run time."""
    nodes = [] if k is None else [helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(k))]
    nodes.append(helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top", axis=-1))
    inputs = [helper.make_tensor_value_info("x", F, [3, 8])]
    inputs += [helper.make_tensor_value_info("k", I64, [1])] if k is None else []
    return _model(nodes, inputs, 13)


@pytest.mark.parametrize("spec", ["openvino==2024.0", "openvino==2026.4"])
def test_topk_departure_unless_k_is_a_constant_from_2_to_6(spec: str) -> None:
    # The user's own TopK: OpenVINO breaks its ties another way and lowerer has no form that fixes it, so it
    # is kept and said (report.backend.departures); --strict-backend refuses it.
    for k in (2, 6):
        written = lowerer.convert(_topk_model(np.array([k], np.int64)), for_backend=spec, verify=False)
        assert "TopK" in _ops(written.model) and not written.report.backend.get("departures")
    for k in (1, 7, None):
        model = _topk_model(None if k is None else np.array([k], np.int64))  # None: k computed at run time
        kept = lowerer.convert(model, for_backend=spec, verify=False)
        assert "TopK" in _ops(kept.model)
        assert [d["node"] for d in kept.report.backend["departures"]] == ["top"]
        with pytest.raises(ConversionError, match=r"node 'top' \(TopK-11.*openvino==[0-9.]+ cannot run it"):
            lowerer.convert(model, for_backend=spec, verify=False, strict_backend=True)
    assert lowerer.convert(_topk_model(None), for_backend="openvino==2025.4", verify=False).model is not None


def test_input_values_outside_is_checked() -> None:
    import lowerer.backends.profile as profile_module

    entry = {"op": "TopK", "when": {"input_values_outside": {"1": "2"}}, "why": "w", "source": "s"}
    with pytest.raises(lowerer.core.errors.InputError, match="'input_values_outside' must map input positions"):
        profile_module.parse_profile({"provider": "P", "entries": [entry]}, "bad.json")
