"""ScatterElements/ScatterND with a reduction below 16 (add, mul) and 18 (max, min), indices not a unique constant.

Indices computed at run time (TopK's, in mixture-of-experts routing) or a constant that writes some position
twice: a Loop applies the updates one at a time in the kernel's order. Every case holds duplicates; the
original and the result run in onnxruntime on the same inputs (random normal floats, so that the order of
additions shows; tie-heavy ones; NaN and signed zeros for max/min) and must be equal bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from _compare import compare
from _convert_helpers import make_model, ort_run, tie_inputs
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError
from lowerer.verification.compare import EXPANSION_ULPS

_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
         np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
         np.dtype(np.bool_): TensorProto.BOOL}
_FIRST = {"add": 16, "mul": 16, "max": 18, "min": 18}


def _model(op: str, data: Sequence[int], indices: np.ndarray, updates: Sequence[int], opset: int, reduction: str,
           axis: int | None = None, dtype: type = np.float32, constant: bool = False) -> onnx.ModelProto:
    elem = _ELEM[np.dtype(dtype)]
    vi = helper.make_tensor_value_info
    inputs = [vi("d", elem, list(data)), vi("u", elem, list(updates))]
    inits = []
    if constant:
        inits.append(numpy_helper.from_array(indices, "i"))
    else:
        inputs.append(vi("i", _ELEM[indices.dtype], list(indices.shape)))
    attrs: dict[str, object] = {"reduction": reduction}
    if axis is not None:
        attrs["axis"] = axis
    node = helper.make_node(op, ["d", "i", "u"], ["y"], name="sc", **attrs)
    return make_model([node], inputs, [vi("y", elem, list(data))], opset, initializers=inits)


def _feeds(data: Sequence[int], updates: Sequence[int], indices: np.ndarray | None, dtype: type,
           seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        sets = [(rng.random(data) < 0.5, rng.random(updates) < 0.5) for _ in range(3)]
    else:
        sets = list(zip(tie_inputs(data, dt, rng, with_inf=False), tie_inputs(updates, dt, rng, with_inf=False),
                        strict=False))
        if dt.kind == "f":
            sets += [(rng.standard_normal(data).astype(dt), rng.standard_normal(updates).astype(dt) * 100)
                     for _ in range(3)]
    feeds = [{"d": d, "u": u} for d, u in sets]
    if indices is not None:
        for f in feeds:
            f["i"] = indices
    return feeds


def _check(model: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> None:
    for got, want in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        result = compare(got, want)
        assert result.same and result.exact, result.detail


def _loops(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == "Loop"]


ELEMENT_CASES = [  # (data, indices, axis): duplicates in every case, negative ones in some
    ([3, 4], [[0, 0, 2, 0], [0, 1, 0, 2], [2, 2, 2, 2]], 0),
    ([3, 4], [[1, 1, 1], [3, -1, 0], [0, 0, 0]], 1),
    ([2, 3, 4], [[[0, 3], [3, 3], [1, -4]], [[2, 2], [0, 0], [3, 1]]], -1),
    ([5], [4, 4, 0, -1, 4, 1], 0),
]
ND_CASES = [  # (data, indices, updates shape)
    ([4, 3], [[1], [1], [3], [1]], [4, 3]),  # rows of the data, one written three times
    ([4, 3], [[1, 2], [0, 0], [1, 2], [-3, -1]], [4]),  # elements
    ([2, 3, 4], [[[0, 1], [1, 2]], [[0, 1], [0, 1]]], [2, 2, 4]),  # indices of rank 3
    ([4, 3], [2], [3]),  # indices of rank 1: one row
]


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize(("data", "indices", "axis"), ELEMENT_CASES, ids=[f"elements-{i}" for i in range(4)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_elements_run_time_indices(data: list[int], indices: list[int], axis: int, reduction: str,
                                           dtype: type) -> None:
    idx = np.array(indices, dtype=np.int64)
    model = _model("ScatterElements", data, idx, list(idx.shape), 18, reduction, axis, dtype)
    feeds = _feeds(data, list(idx.shape), idx, dtype)
    for target in (17, 15, 13, 11):
        if target >= _FIRST[reduction]:
            continue
        result = lowerer.convert(model, target_opset=target)
        assert len(_loops(result.model)) == 1
        _check(model, result.model, feeds)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize(("data", "indices", "updates"), ND_CASES, ids=[f"nd-{i}" for i in range(4)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scatter_nd_run_time_indices(data: list[int], indices: list[int], updates: list[int], reduction: str,
                                     dtype: type) -> None:
    idx = np.array(indices, dtype=np.int64)
    model = _model("ScatterND", data, idx, updates, 18, reduction, None, dtype)
    feeds = _feeds(data, updates, idx, dtype)
    for target in (17, 13, 11):
        if target >= _FIRST[reduction]:
            continue
        result = lowerer.convert(model, target_opset=target)
        assert len(_loops(result.model)) == 1
        _check(model, result.model, feeds)


@pytest.mark.parametrize("op", ["ScatterElements", "ScatterND"])
def test_from_version_16_and_int32_indices(op: str) -> None:
    if op == "ScatterElements":
        idx, data, updates, axis = np.array([[1, 1, 0], [1, 1, 1]], dtype=np.int32), [3, 3], [2, 3], 0
    else:
        idx, data, updates, axis = np.array([[0], [0], [2]], dtype=np.int64), [3, 2], [3, 2], None
    for reduction in ("add", "mul"):
        model = _model(op, data, idx, updates, 16, reduction, axis)
        result = lowerer.convert(model, target_opset=13)
        assert len(_loops(result.model)) == 1
        _check(model, result.model, _feeds(data, updates, idx, np.float32))


def test_many_duplicates_add_in_the_kernels_order() -> None:
    """Forty updates into two positions: floats added in any other order would differ."""
    rng = np.random.default_rng(5)
    idx = rng.integers(0, 2, (40, 1)).astype(np.int64)
    model = _model("ScatterElements", [2, 1], idx, [40, 1], 16, "add", 0)
    result = lowerer.convert(model, target_opset=13)
    feeds = [{"d": rng.standard_normal((2, 1)).astype(np.float32),
              "u": (rng.standard_normal((40, 1)) * 10.0 ** rng.integers(-3, 4, (40, 1))).astype(np.float32),
              "i": idx} for _ in range(5)]
    _check(model, result.model, feeds)
    shuffled = [{**f, "u": f["u"][::-1].copy(), "i": f["i"][::-1].copy()} for f in feeds]
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(ort_run(model, feeds), ort_run(model, shuffled),
                                                             strict=True))


@pytest.mark.parametrize(("op", "reduction"), [("ScatterElements", "max"), ("ScatterElements", "min"),
                                               ("ScatterND", "max"), ("ScatterND", "min")])
def test_max_min_nan_and_signed_zeros_as_the_kernel(op: str, reduction: str) -> None:
    """The kernels compute ``a > b ? a : b``: an update of NaN wins, a NaN already there loses, and of
    ``+0``/``-0`` the update is kept. Both forms (a unique constant, and the Loop) do the same."""
    data = np.array([np.nan, 1.0, 0.0, -0.0, 2.0], dtype=np.float32)
    updates = np.array([1.0, np.nan, -0.0, 0.0, np.nan], dtype=np.float32)
    idx = np.arange(5, dtype=np.int64) if op == "ScatterElements" else np.arange(5, dtype=np.int64).reshape(5, 1)
    for constant in (True, False):
        model = _model(op, [5], idx, [5], 18, reduction, 0 if op == "ScatterElements" else None, constant=constant)
        result = lowerer.convert(model, target_opset=13)
        assert bool(_loops(result.model)) != constant
        feeds = [{"d": data, "u": updates, **({} if constant else {"i": idx})}]
        (got,), (want,) = ort_run(result.model, feeds)[0], ort_run(model, feeds)[0]
        assert np.array_equal(np.signbit(got), np.signbit(want)) and np.array_equal(got, want, equal_nan=True)


def test_constant_indices_that_write_a_position_twice_take_the_loop() -> None:
    idx = np.array([[0, 2], [3, -1], [1, 2]], dtype=np.int64)
    model = _model("ScatterElements", [3, 4], idx, [3, 2], 18, "max", 1, constant=True)
    result = lowerer.convert(model, target_opset=13)
    assert len(_loops(result.model)) == 1
    _check(model, result.model, [{k: v for k, v in f.items() if k != "i"} for f in _feeds([3, 4], [3, 2], idx,
                                                                                          np.float32)])


def test_empty_indices_leave_the_data() -> None:
    idx = np.zeros((0, 1), dtype=np.int64)
    model = _model("ScatterND", [4, 3], idx, [0, 3], 18, "add")
    result = lowerer.convert(model, target_opset=13)
    _check(model, result.model, _feeds([4, 3], [0, 3], idx, np.float32))


def test_bool_add_and_mul_are_or_and_and() -> None:
    idx = np.array([[1], [1], [0]], dtype=np.int64)
    for reduction in ("add", "mul"):
        model = _model("ScatterND", [3, 2], idx, [3, 2], 16, reduction, dtype=np.bool_)
        result = lowerer.convert(model, target_opset=13)
        ops = {n.op_type for n in _loops(result.model)[0].attribute[0].g.node}
        assert ("Or" if reduction == "add" else "And") in ops
        _check(model, result.model, _feeds([3, 2], [3, 2], idx, np.bool_))


def test_the_loop_runs_once_per_update() -> None:
    """The slower form: as many iterations as update elements (ScatterElements) or index rows (ScatterND)."""
    idx = np.array([[0, 1, 1], [2, 2, 0]], dtype=np.int64)
    model = _model("ScatterElements", [3, 3], idx, [2, 3], 18, "add", 0)
    result = lowerer.convert(model, target_opset=13)
    (loop,) = _loops(result.model)
    body = loop.attribute[0].g
    assert [n.op_type for n in body.node].count("ScatterND") == 1
    rewrite = result.report.rewrites[0]
    assert rewrite.emitted[-1] == "Loop" and "scatterelements_16_13" in rewrite.rule


@pytest.mark.parametrize(("op", "dtype", "reduction", "needle"), [
    ("ScatterND", np.bool_, "max", "data 'd' is bool, for which reduction='max' has no meaning"),
])
def test_refusals(op: str, dtype: type, reduction: str, needle: str) -> None:
    idx = np.array([[1], [0]], dtype=np.int64)
    model = _model(op, [3, 2], idx, [2, 2], 18, reduction, dtype=dtype)
    with pytest.raises(ConversionError) as info:
        lowerer.convert(model, target_opset=13)
    message = str(info.value)
    assert f"node 'sc' ({op}-18" in message and "opset 13" in message and needle in message
    assert "\n" not in message


def _routing_model(opset: int) -> onnx.ModelProto:
    """Mixture-of-experts routing as exporters write it: TopK's indices into scatter reductions, and a
    three-operand Einsum. ``weights = scatter_reduce(zeros, 1, topi, topv, "sum")``, ``counts =
    index_add(zeros, 0, topi.flatten(), ones)`` (ScatterND add), ``peak = scatter_reduce(-inf, 0,
    topi.flatten(), topv.flatten(), "amax")``, ``mixed = einsum("te,td,edf->tf", weights, x, w)``."""
    vi = helper.make_tensor_value_info
    f32 = TensorProto.FLOAT
    tokens, experts, width, out = 6, 4, 3, 2
    inits = [numpy_helper.from_array(np.zeros((tokens, experts), np.float32), "zeros_te"),
             numpy_helper.from_array(np.zeros((experts,), np.float32), "zeros_e"),
             numpy_helper.from_array(np.full((experts,), -np.inf, np.float32), "ninf_e"),
             numpy_helper.from_array(np.ones((tokens * 2,), np.float32), "ones"),
             numpy_helper.from_array(np.array([2], np.int64), "k"),
             numpy_helper.from_array(np.array([-1], np.int64), "flat"),
             numpy_helper.from_array(np.array([-1, 1], np.int64), "column"),
             numpy_helper.from_array(np.random.default_rng(0).standard_normal((experts, width, out)).astype(np.float32),
                                     "w")]
    nodes = [
        helper.make_node("TopK", ["logits", "k"], ["topv", "topi"], axis=1),
        helper.make_node("ScatterElements", ["zeros_te", "topi", "topv"], ["weights"], axis=1, reduction="add"),
        helper.make_node("Reshape", ["topi", "flat"], ["flat_i"]),
        helper.make_node("Reshape", ["topv", "flat"], ["flat_v"]),
        helper.make_node("Reshape", ["topi", "column"], ["rows_i"]),
        helper.make_node("ScatterND", ["zeros_e", "rows_i", "ones"], ["counts"], reduction="add"),
        helper.make_node("ScatterElements", ["ninf_e", "flat_i", "flat_v"], ["peak"], axis=0, reduction="max"),
        helper.make_node("Einsum", ["weights", "x", "w"], ["mixed"], equation="te,td,edf->tf"),
    ]
    graph = helper.make_graph(
        nodes, "routing", [vi("logits", f32, [tokens, experts]), vi("x", f32, [tokens, width])],
        [vi("weights", f32, [tokens, experts]), vi("counts", f32, [experts]), vi("peak", f32, [experts]),
         vi("mixed", f32, [tokens, out])], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=10 if opset >= 21 else 8)


@pytest.mark.parametrize("opset", [18, 23])
def test_routing_with_top_k_indices(opset: int) -> None:
    """Converted to 17, 13 and 11: the scatters with TopK's indices become Loops (at 17 only ``amax``), the Einsum
    MatMuls below 12; every output equal to the original's (the Einsum within the expansion budget), ties among
    the logits too."""
    model = _routing_model(opset)
    rng = np.random.default_rng(1)
    feeds = [{"logits": rng.standard_normal((6, 4)).astype(np.float32),
              "x": rng.standard_normal((6, 3)).astype(np.float32)} for _ in range(4)]
    feeds.append({"logits": np.tile(np.array([[1, 1, 0, 0]], np.float32), (6, 1)), "x": feeds[0]["x"]})
    want = ort_run(model, feeds)
    for target in (17, 13, 11):
        converted = lowerer.convert(model, target_opset=target).model
        ops = [n.op_type for n in converted.graph.node]
        assert ("Einsum" in ops) == (target >= 12) and ops.count("Loop") == (1 if target >= 16 else 3), ops
        for got_set, want_set in zip(ort_run(converted, feeds), want, strict=True):
            for got, expected in zip(got_set[:3], want_set[:3], strict=True):
                result = compare(got, expected)
                assert result.same and result.exact, result.detail
            assert compare(got_set[3], want_set[3], max_ulp=EXPANSION_ULPS[np.dtype(np.float32)]).same
