"""Idempotence and round trips: converting to the model's own opset changes nothing; up-then-down
and down-then-up conversions stay exactly equivalent in onnxruntime."""

from __future__ import annotations

import dataclasses
import re

import _fuzz_oracle as oracle
import numpy as np
import onnx
import pytest
from _convert_helpers import complete_outputs
from hypothesis import event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from test_fuzz import _PROFILE, BF16, F16, Case, _allowed_refusal, _run, build, cases, expected, feeds

import lowerer
from lowerer.core.errors import ConversionError, InputError
from lowerer.core.opsets import MAX_OPSET

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _same_meaning(case: Case, out: onnx.ModelProto) -> None:
    f = feeds(case)
    got = _run(out, f)
    for spec, g, w in zip(case.ops, got, expected(case, f), strict=True):
        if spec.op in ("Softmax", "LogSoftmax"):
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-2 if g.dtype == np.float16 else 1e-4,
                                       atol=1e-4)
        else:
            np.testing.assert_array_equal(g, w)


def _nodes(model: onnx.ModelProto) -> list[bytes]:
    out = [n.SerializeToString(deterministic=True) for n in model.graph.node]
    for fn in model.functions:
        out.extend(n.SerializeToString(deterministic=True) for n in fn.node)
    return out


def _valid(model: onnx.ModelProto) -> bool:
    """Whether the generated model passes onnx's full check (lowerer refuses it as bad input otherwise)."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    return True


@settings(_PROFILE)
@given(cases())
def test_converting_to_own_opset_changes_nothing(case: Case) -> None:
    case = dataclasses.replace(case, target=case.source, model_opset=None, decompose=[])
    model = build(case)
    if not _valid(model):  # e.g. an If or Loop below 16 carrying bfloat16: refused as bad input
        with pytest.raises(InputError, match="fails onnx's full check"):
            lowerer.convert(model, target_opset=case.source)
        return
    out = lowerer.convert(model, target_opset=case.source).model
    assert _nodes(out) == _nodes(model)
    assert list(out.graph.initializer) == list(model.graph.initializer)
    assert list(out.opset_import) == list(model.opset_import)
    if case.dtype != BF16 and not (case.dtype == F16 and case.source < 7):
        _same_meaning(case, out)


@settings(_PROFILE)
@given(cases(), st.integers(1, MAX_OPSET))
def test_there_and_back_again(case: Case, mid: int) -> None:
    """source -> mid -> source: same meaning (oracle), and bit-exact vs the original where it runs."""
    case = dataclasses.replace(case, target=mid, model_opset=None, decompose=[])
    model = build(case)
    if not _valid(model):
        event("invalid input (refused as bad input)")
        return
    try:
        there = lowerer.convert(model, target_opset=mid, verify=False).model
    except ConversionError as e:
        kind = _allowed_refusal(case, str(e))
        assert kind is not None, f"unexpected refusal: {e}"
        event(f"refused on the way there: {kind}")
        return
    back_case = dataclasses.replace(case, target=case.source)
    try:
        back = lowerer.convert(there, target_opset=case.source, verify=False).model
    except ConversionError as e:
        # the way back may need what the way there introduced (e.g. Transpose downgraded across 13);
        # inside a function the values lowerer introduced carry no type (functions state types only
        # through value_info), so a rule that needs one there refuses
        if "function" in case.has and re.search(r"the (rank|element type|shape) of input '[^']+' is unknown", str(e)):
            event("refused on the way back: untyped intermediate in a function")
            return
        # Reshape-14's allowzero=1 (which the way up writes for exactness on empty inputs) has an exact
        # form down to opset 8 only (an empty tensor of a run-time shape needs ConstantOfShape or Expand)
        if case.source < 8 and (case.shape_mode != "static" or 0 in case.dims) \
                and "allowzero=1 with a shape that may hold a 0" in str(e):
            event("refused on the way back: allowzero below opset 8")
            return
        # a node the way there made (lowerer names them ``...__lwN``), e.g. a Reshape to a run-time shape in the
        # empty-input guard below 14, may have no form at the source: the way back needs what the way there made
        if case.source < mid and re.match(r"node '[^']*__lw\d+' ", str(e)):
            event("refused on the way back: a node the way there made")
            return
        kind = _allowed_refusal(dataclasses.replace(back_case, source=mid), str(e))
        assert kind is not None, f"unexpected refusal on the way back: {e}"
        event(f"refused on the way back: {kind}")
        return
    assert [o.version for o in back.opset_import if o.domain == ""] == [case.source]
    if case.dtype == BF16 or (case.dtype == F16 and min(case.source, mid) < 7):
        event("not run")
        return
    _same_meaning(case, back)
    f = feeds(case)
    try:
        original = _run(model, f)
    except Exception:
        event("checked against the oracle only")
        return
    for g, w in zip(_run(back, f), original, strict=True):
        np.testing.assert_array_equal(g, w)
    event("round trip exact")


def _single(op: str, opset: int, shape: list[int], **attrs: int) -> onnx.ModelProto:
    out_type = I64 if op.startswith("Arg") else F
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="n", **attrs)], "g",
                              [helper.make_tensor_value_info("x", F, shape)],
                              [helper.make_tensor_value_info("y", out_type, None)])
    return complete_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7))


@pytest.mark.parametrize(("op", "attrs", "path"), [
    ("Softmax", {"axis": 1}, [11, 13, 11]),
    ("Softmax", {"axis": 1}, [13, 11, 13]),
    ("LogSoftmax", {"axis": 0}, [13, 7, 13]),
    ("Hardmax", {"axis": 2}, [11, 13, 11]),
    ("Hardmax", {"axis": -2}, [13, 10, 18, 11, 13]),
    ("ArgMax", {"axis": -1, "select_last_index": 1}, [12, 11, 12]),
    ("ArgMin", {"axis": -2, "select_last_index": 1, "keepdims": 0}, [13, 7, 21, 13]),
    ("ArgMax", {"axis": 1}, [7, 18, 7]),
])
def test_round_trip_paths(op: str, attrs: dict[str, int], path: list[int]) -> None:
    model = _single(op, path[0], [2, 3, 4], **attrs)
    x = np.random.default_rng(0).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    want = _run(model, {"x": x})[0]
    current = model
    for opset in path[1:]:
        current = lowerer.convert(current, target_opset=opset).model
        np.testing.assert_array_equal(_run(current, {"x": x})[0], want)
    since = 13 if path[0] >= 13 else (12 if path[0] >= 12 and op.startswith("Arg") else (11 if path[0] >= 11 else 1))
    if op in ("Hardmax",):
        np.testing.assert_array_equal(want, oracle.coerced_family(op, x, attrs.get("axis"), since))
