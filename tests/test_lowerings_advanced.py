"""Lowerings of Einsum below 12 (one or two operands; three or more: ``test_lowerings_einsum_nary.py``), and the
reductions of ScatterElements/ScatterND below 16 and 18.

Each model is converted by ``lowerer.convert`` (its per-rewrite verification on), then the original and
the result run in onnxruntime on tie-heavy inputs (small integers as floats, ±inf, all-equal) and
compare: integers and exact-by-construction floats exactly, Einsum's float sums within the expansion
budget (:data:`lowerer.verification.compare.EXPANSION_ULPS`). Refusals name the node, op, versions and
the condition that failed.
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

F32 = np.dtype(np.float32)
F32_BUDGET = EXPANSION_ULPS[np.dtype(np.float32)]
_ELEM = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float64): TensorProto.DOUBLE}


def _ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def _check_same(original: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
                max_ulp: float = 0.0) -> None:
    want = ort_run(original, feeds)
    got = ort_run(converted, feeds)
    for g, w in zip(got, want, strict=True):
        result = compare(g, w, max_ulp=max_ulp)
        assert result.same, result.detail


def _feeds(shapes: dict[str, Sequence[int]], dtype: np.dtype, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    per_input = {name: tie_inputs(shape, dtype, rng) for name, shape in shapes.items()}
    count = min(len(v) for v in per_input.values())
    feeds = [{name: values[i] for name, values in per_input.items()} for i in range(count)]
    if np.dtype(dtype).kind == "f":  # random floats too: sums that round
        feeds.append({name: rng.standard_normal(shape).astype(dtype) for name, shape in shapes.items()})
    return feeds


# -- Einsum ---------------------------------------------------------------------------------------------
def _einsum_model(equation: str, shapes: Sequence[Sequence[int | str]], dtype: np.dtype = F32,
                  opset: int = 12) -> onnx.ModelProto:
    elem = _ELEM[np.dtype(dtype)]
    inputs = [helper.make_tensor_value_info(f"x{i}", elem, list(s)) for i, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [i.name for i in inputs], ["y"], name="ein", equation=equation)
    return make_model([node], inputs, [helper.make_tensor_value_info("y", elem, None)], opset)


EINSUM_CASES = [
    ("bhqd,bhkd->bhqk", [[2, 3, 4, 5], [2, 3, 6, 5]]),
    ("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]]),
    ("ij,jk->ik", [[3, 4], [4, 5]]),
    ("bhqk,bhkd->bhqd", [[2, 3, 4, 6], [2, 3, 6, 5]]),
    ("ij->ji", [[3, 4]]),
    ("bhqd->bqhd", [[2, 3, 4, 5]]),
    ("ij->i", [[3, 4]]),
    ("ij->", [[3, 4]]),
    ("i,j->ij", [[3], [4]]),
    ("ij,ij->ij", [[3, 4], [3, 4]]),
    ("i,i->", [[5], [5]]),
    ("...ij,...jk->...ik", [[2, 3, 4], [2, 4, 5]]),
    ("bij,bkj", [[2, 3, 4], [2, 5, 4]]),  # implicit output "ik": b summed too
    ("abcd,cdef->abef", [[2, 3, 4, 5], [4, 5, 3, 2]]),  # groups of two letters: reshaped
    ("ij,jk->ki", [[3, 4], [4, 5]]),
]


@pytest.mark.parametrize("target", [11, 9, 7])
@pytest.mark.parametrize(("equation", "shapes"), EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_float_within_budget(equation: str, shapes: list[list[int]], target: int) -> None:
    model = _einsum_model(equation, shapes)
    result = lowerer.convert(model, target_opset=target)
    assert "Einsum" not in _ops(result.model)
    assert result.model.opset_import[0].version == target
    feeds = _feeds({f"x{i}": s for i, s in enumerate(shapes)}, np.dtype(np.float32))
    _check_same(model, result.model, feeds, max_ulp=F32_BUDGET)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize(("equation", "shapes"), EINSUM_CASES[:10], ids=[c[0] for c in EINSUM_CASES[:10]])
def test_einsum_integers_exact(equation: str, shapes: list[list[int]], dtype: type) -> None:
    model = _einsum_model(equation, shapes, np.dtype(dtype))
    result = lowerer.convert(model, target_opset=9)
    feeds = _feeds({f"x{i}": s for i, s in enumerate(shapes)}, np.dtype(dtype))
    _check_same(model, result.model, feeds)


def test_einsum_exact_forms_are_bit_identical_on_floats() -> None:
    """Transposes and broadcast products round once, as the kernel does: no difference at all."""
    for equation, shapes in (("bhqd->bqhd", [[2, 3, 4, 5]]), ("i,j->ij", [[3], [4]]), ("ij,ij->ij", [[3, 4], [3, 4]])):
        model = _einsum_model(equation, shapes)
        result = lowerer.convert(model, target_opset=11)
        _check_same(model, result.model, _feeds({f"x{i}": s for i, s in enumerate(shapes)}, np.dtype(np.float32)))


def test_einsum_from_its_newest_version() -> None:
    model = _einsum_model("bij,bjk->bik", [[2, 3, 4], [2, 4, 5]], opset=onnx.defs.onnx_opset_version())
    result = lowerer.convert(model, target_opset=11)
    assert "MatMul" in _ops(result.model)


def test_einsum_dynamic_batch() -> None:
    model = _einsum_model("bqd,bkd->bqk", [["N", 4, 5], ["N", 6, 5]])
    result = lowerer.convert(model, target_opset=11)
    for n in (1, 3):
        _check_same(model, result.model, _feeds({"x0": [n, 4, 5], "x1": [n, 6, 5]}, np.dtype(np.float32)),
                    max_ulp=F32_BUDGET)


def test_einsum_dynamic_single_group_reshaped_with_minus_one() -> None:
    model = _einsum_model("i,i->", [["N"], ["N"]])
    result = lowerer.convert(model, target_opset=11)
    _check_same(model, result.model, _feeds({"x0": [7], "x1": [7]}, np.dtype(np.float32)), max_ulp=F32_BUDGET)


def test_einsum_inside_if_body() -> None:
    elem = TensorProto.FLOAT
    a = helper.make_tensor_value_info("a", elem, [3, 4])
    b = helper.make_tensor_value_info("b", elem, [4, 5])
    out = helper.make_tensor_value_info("o", elem, [3, 5])

    def branch(eq: str, name: str) -> onnx.GraphProto:
        node = helper.make_node("Einsum", ["a", "b"], ["o"], name=name, equation=eq)
        return helper.make_graph([node], name, [], [out])

    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("ij,jk->ik", "then"),
                            else_branch=branch("ij,jk->ik", "else"))
    model = make_model([node], [cond, a, b], [helper.make_tensor_value_info("y", elem, [3, 5])], 12)
    result = lowerer.convert(model, target_opset=11)
    assert not any(n.op_type == "Einsum" for g in ("then_branch", "else_branch")
                   for n in helper.get_attribute_value(result.model.graph.node[0].attribute[
                       [x.name for x in result.model.graph.node[0].attribute].index(g)]).node)
    rng = np.random.default_rng(3)
    feeds = [{"c": np.array(c), "a": rng.integers(-2, 3, (3, 4)).astype(np.float32),
              "b": rng.integers(-2, 3, (4, 5)).astype(np.float32)} for c in (True, False)]
    _check_same(model, result.model, feeds)


@pytest.mark.parametrize(("equation", "shapes", "dtype", "needle"), [
    ("ii->i", [[3, 3]], np.float32, "a letter repeats within 'ii' (a diagonal or trace)"),
    ("abcd,cdef->abef", [["A", 3, "C", 5], ["C", 5, 3, 2]], np.float32, "needs the sizes of the letters"),
])
def test_einsum_refusals(equation: str, shapes: list[list[int | str]], dtype: type, needle: str) -> None:
    model = _einsum_model(equation, shapes, np.dtype(dtype))
    with pytest.raises(ConversionError) as info:
        lowerer.convert(model, target_opset=11)
    message = str(info.value)
    assert "node 'ein' (Einsum-12" in message and "opset 11" in message
    assert needle in message
    assert "\n" not in message


def test_einsum_refuses_types_the_emitted_ops_lack() -> None:
    elem = TensorProto.INT8
    inputs = [helper.make_tensor_value_info("x0", elem, [3, 4]), helper.make_tensor_value_info("x1", elem, [4, 5])]
    node = helper.make_node("Einsum", ["x0", "x1"], ["y"], name="ein", equation="ij,jk->ik")
    model = make_model([node], inputs, [helper.make_tensor_value_info("y", elem, None)], 12)
    with pytest.raises(ConversionError, match=r"Einsum-12.*input 'x0' is int8, and the lowering takes"):
        lowerer.convert(model, target_opset=11)


# -- ScatterElements / ScatterND reductions ---------------------------------------------------------------
def _scatter_model(op: str, data: Sequence[int], indices: np.ndarray | None, updates: Sequence[int], opset: int,
                   reduction: str, axis: int | None = None, dtype: np.dtype = F32
                   ) -> onnx.ModelProto:
    elem = _ELEM[np.dtype(dtype)]
    inputs = [helper.make_tensor_value_info("d", elem, list(data)),
              helper.make_tensor_value_info("u", elem, list(updates))]
    inits = []
    if indices is None:  # a graph input: not a constant
        inputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1]))
    else:
        inits.append(numpy_helper.from_array(np.asarray(indices, dtype=np.int64), "i"))
    attrs: dict[str, object] = {"reduction": reduction}
    if axis is not None:
        attrs["axis"] = axis
    node = helper.make_node(op, ["d", "i", "u"], ["y"], name="sc", **attrs)
    return make_model([node], inputs, [helper.make_tensor_value_info("y", elem, None)], opset, initializers=inits)


SCATTER_CASES = [
    ("ScatterElements", [3, 4], [[0, 2, 1, -1], [2, 0, 0, 1]], [2, 4], 0),
    ("ScatterElements", [3, 4], [[0, 2], [3, -2], [1, 2]], [3, 2], 1),
    ("ScatterElements", [2, 3, 4], [[[0], [2], [1]], [[3], [3], [0]]], [2, 3, 1], -1),
    ("ScatterND", [4, 3], [[1], [-1]], [2, 3], None),
    ("ScatterND", [4, 3, 2], [[1, 0], [3, 2], [0, -1]], [3, 2], None),
    ("ScatterND", [4, 3], [[1, 2], [0, 0]], [2], None),
]


@pytest.mark.parametrize(("version", "reduction"), [(16, "add"), (16, "mul"), (18, "add"), (18, "mul"),
                                                   (18, "max"), (18, "min")])
@pytest.mark.parametrize(("op", "data", "indices", "updates", "axis"), SCATTER_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SCATTER_CASES)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_scatter_reduction_exact(op: str, data: list[int], indices: list[int], updates: list[int], axis: int | None,
                                 version: int, reduction: str, dtype: type) -> None:
    model = _scatter_model(op, data, np.array(indices), updates, version, reduction, axis, np.dtype(dtype))
    feeds = _feeds({"d": data, "u": updates}, np.dtype(dtype))
    for target in (15, 13, 11):
        if reduction in ("add", "mul") and version == 18 and target >= 16:
            continue
        result = lowerer.convert(model, target_opset=target)
        assert _ops(result.model)[-1] == op and _ops(result.model)[0] in ("GatherElements", "GatherND")
        _check_same(model, result.model, feeds)


def test_scatter_reduction_none_and_add_crossing_18_to_16_stay_one_node() -> None:
    model = _scatter_model("ScatterElements", [3, 4], np.array([[0, 0]]), [1, 2], 18, "add", 0)
    assert _ops(lowerer.convert(model, target_opset=16).model) == ["ScatterElements"]
    model = _scatter_model("ScatterND", [4, 3], np.array([[1], [1]]), [2, 3], 18, "none")
    assert _ops(lowerer.convert(model, target_opset=13).model) == ["ScatterND"]


@pytest.mark.parametrize(("op", "data", "indices", "updates", "axis"), [
    ("ScatterElements", [3, 4], [[0, 2], [3, -1], [1, 2]], [3, 2], 1),  # writes a position twice
    ("ScatterND", [4, 3], [[1], [-3]], [2, 3], None),  # addresses a slice twice
    ("ScatterElements", [3, 4], None, [2, 1], 0),  # not a constant
])
def test_scatter_reduction_not_unique_constant_takes_the_loop(op: str, data: list[int], indices: list[int] | None,
                                                              updates: list[int], axis: int | None) -> None:
    """The Loop form (``test_lowerings_scatter_loop.py`` has its cases): exact, duplicates included."""
    model = _scatter_model(op, data, None if indices is None else np.array(indices), updates, 18, "max", axis)
    result = lowerer.convert(model, target_opset=13)
    assert "Loop" in _ops(result.model)
    feeds = _feeds({"d": data, "u": updates}, F32)
    if indices is None:
        feeds = [{**f, "i": np.array([[2], [2]], dtype=np.int64)} for f in feeds]
    _check_same(model, result.model, feeds)
