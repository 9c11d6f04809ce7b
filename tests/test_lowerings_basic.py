"""Lowerings of ops with no function body for targets that lack them: Trilu, Mod, CumSum,
ConstantOfShape, GatherElements.

Each case converts a small model below the op's first version, runs the original and the result
in onnxruntime on the same inputs and requires bit-identical outputs (every lowering here is exact
by construction); refusals must name the node, op, versions and the failed condition.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
from lowerer.core.errors import ConversionError
from tests._convert_helpers import check_model_full, make_model, ort_run, value_info

RNG = np.random.default_rng(17)


def _bits(a: np.ndarray) -> bytes:
    """The bytes of ``a``, every NaN made the same NaN (ONNX leaves NaN payloads and signs open)."""
    a = np.array(a)
    if a.dtype.kind == "f":
        a[np.isnan(a)] = np.nan
    return a.tobytes()


def _lowered(model: onnx.ModelProto, target: int, feeds: list[dict[str, np.ndarray]], op: str) -> onnx.ModelProto:
    """``model`` converted to ``target``; outputs bit-identical to the original's on every feed; ``op`` gone."""
    result = lowerer.convert(model, target_opset=target)
    out = result.model
    assert all(n.op_type != op for n in out.graph.node)
    assert any(r.rule.endswith("_lowering") for r in result.report)
    for want, got in zip(ort_run(model, feeds), ort_run(out, feeds), strict=True):
        for w, g in zip(want, got, strict=True):
            assert w.dtype == g.dtype and w.shape == g.shape
            assert _bits(w) == _bits(g), (w, g)
    return out


def _refused(model: onnx.ModelProto, target: int, *words: str) -> str:
    with pytest.raises(ConversionError) as info:
        lowerer.convert(model, target_opset=target)
    text = str(info.value)
    for w in words:
        assert w in text, text
    return text


def _floats(shape: tuple[int, ...]) -> list[np.ndarray]:
    small = RNG.integers(-2, 3, size=shape).astype(np.float32)
    infs = small.copy()
    infs.reshape(-1)[::3] = np.inf
    infs.reshape(-1)[1::5] = -np.inf
    infs.reshape(-1)[2::7] = np.nan
    return [small, infs, np.full(shape, 1.5, np.float32)]


# -- Trilu ------------------------------------------------------------------------------------------
def _trilu(shape: list[int | str], upper: int, k: int | None, elem: int = T.FLOAT, k_input: bool = False
           ) -> onnx.ModelProto:
    inputs, inits, ins = ["x"], [], [value_info("x", elem, shape)]
    if k is not None:
        inputs.append("k")
        inits.append(helper.make_tensor("k", T.INT64, [], [k]))
    if k_input:
        inputs.append("k")
        ins.append(value_info("k", T.INT64, []))
    node = helper.make_node("Trilu", inputs, ["y"], name="tri", upper=upper)
    return make_model([node], ins, [value_info("y", elem, None)], 14, initializers=inits)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize(("shape", "k"), [((3, 4), None), ((2, 5, 3), -1), ((4, 4), 2), ((2, 2, 3, 6), 9),
                                          ((0, 3), 0)])
@pytest.mark.parametrize("target", [13, 11, 9])
def test_trilu_static(upper: int, shape: tuple[int, ...], k: int | None, target: int) -> None:
    out = _lowered(_trilu(list(shape), upper, k), target, [{"x": x} for x in _floats(shape)], "Trilu")
    assert [n.op_type for n in out.graph.node] == ["Where"]  # the mask is a constant


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("target", [13, 11])
def test_trilu_dynamic_dims_and_k(upper: int, target: int) -> None:
    model = _trilu(["b", 3, "n"], upper, None, k_input=True)
    feeds = [{"x": x, "k": np.array(k, np.int64)} for x in _floats((2, 3, 5)) for k in (-2, 0, 1, 7)]
    _lowered(model, target, feeds, "Trilu")


@pytest.mark.parametrize(("elem", "dtype"), [(T.INT64, np.int64), (T.INT32, np.int32), (T.BOOL, np.bool_)])
@pytest.mark.parametrize("target", [13, 9, 8, 7])
def test_trilu_integers_and_bool_down_to_7(elem: int, dtype: type, target: int) -> None:
    x = (RNG.integers(-3, 4, size=(2, 3, 4)) if dtype is not np.bool_ else RNG.integers(0, 2, size=(2, 3, 4)))
    _lowered(_trilu([2, 3, 4], 0, 1, elem), target, [{"x": x.astype(dtype)}], "Trilu")


@pytest.mark.parametrize("target", [8, 7])
def test_trilu_floats_below_9_through_the_where_lowering(target: int) -> None:
    """A fully static float Trilu below 9: Where on a constant mask, itself lowered to a Gather (exact)."""
    out = _lowered(_trilu([2, 3, 4], 0, 1), target, [{"x": x} for x in _floats((2, 3, 4))], "Trilu")
    assert "Where" not in [n.op_type for n in out.graph.node]


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize(("elem", "dtype"), [(T.FLOAT, np.float32), (T.INT64, np.int64), (T.INT32, np.int32),
                                             (T.BOOL, np.bool_)])
@pytest.mark.parametrize("target", [10, 9, 8, 7])
def test_trilu_static_dims_and_run_time_k_below_11(upper: int, elem: int, dtype: type, target: int) -> None:
    """onnx's tril/triu node tests: static dims, k fed at run time; j - i is a constant compared with k.

    Below 9 the comparison is in doubles (Less-7 takes floats only): k of 2**62 or -2**62 still compares
    as the int64 does.
    """
    model = _trilu([2, 3, 5], upper, None, elem, k_input=True)
    xs = _floats((2, 3, 5)) if dtype is np.float32 else \
        [RNG.integers(-3, 4, size=(2, 3, 5)).astype(dtype), RNG.integers(0, 2, size=(2, 3, 5)).astype(dtype)]
    ks = (-7, -2, -1, 0, 1, 4, 2**62, -(2**62))
    out = _lowered(model, target, [{"x": x, "k": np.array(k, np.int64)} for x in xs for k in ks], "Trilu")
    assert "Range" not in [n.op_type for n in out.graph.node]


def test_trilu_refusals() -> None:
    text = _refused(_trilu(["b", 3, 4], 0, None), 8, "tri", "Trilu-14", "opset 8", "no Where", "inf and NaN")
    assert "choose a target opset >= 9" in text
    _refused(_trilu(["b", 4, "n"], 1, None), 10, "Trilu-14", "not static", "Range (opset >= 11)")


def test_trilu_inside_if_body() -> None:
    tri = helper.make_node("Trilu", ["x"], ["t"], name="inner", upper=1)
    then = helper.make_graph([tri], "then", [], [value_info("t", T.FLOAT, [3, 3])])
    neg = helper.make_node("Neg", ["x"], ["e"])
    other = helper.make_graph([neg], "else", [], [value_info("e", T.FLOAT, [3, 3])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    model = make_model([node], [value_info("c", T.BOOL, []), value_info("x", T.FLOAT, [3, 3])],
                       [value_info("y", T.FLOAT, [3, 3])], 14)
    feeds = [{"c": np.array(c), "x": x} for c in (True, False) for x in _floats((3, 3))]
    out = lowerer.convert(model, target_opset=11).model
    (then,) = [a.g for a in out.graph.node[0].attribute if a.name == "then_branch"]
    ops = {n.op_type for n in then.node}
    assert "Trilu" not in ops and "Where" in ops
    for want, got in zip(ort_run(model, feeds), ort_run(out, feeds), strict=True):
        assert _bits(want[0]) == _bits(got[0])


# -- Mod --------------------------------------------------------------------------------------------
def _mod(elem: int, fmod: int, shapes: tuple[list[int], list[int]] = ([2, 6], [6])) -> onnx.ModelProto:
    node = helper.make_node("Mod", ["a", "b"], ["y"], name="m", fmod=fmod)
    return make_model([node], [value_info("a", elem, shapes[0]), value_info("b", elem, shapes[1])],
                      [value_info("y", elem, None)], 13)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("target", [9, 7])
def test_mod_integers(dtype: str, fmod: int, target: int) -> None:
    info = np.iinfo(dtype)
    signed = info.min < 0
    a = np.array([[info.min, 7, -7 if signed else 9, 0, info.max, 5],
                  [-5 if signed else 6, 3, info.max, info.min, 1, -1 if signed else 2]], dtype)
    b = np.array([-1 if signed else 1, 3, -3 if signed else 4, 2, info.max, -7 if signed else 7], dtype)
    small = RNG.integers(-4 if signed else 0, 5, size=(2, 6)).astype(dtype)
    divisors = RNG.integers(1, 4, size=6).astype(dtype) * (np.array([1, -1] * 3, dtype) if signed else 1)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    _lowered(_mod(elem, fmod), target, [{"a": a, "b": b}, {"a": small, "b": divisors}], "Mod")


def test_mod_refuses_floats() -> None:
    _refused(_mod(T.FLOAT, 1), 9, "m", "Mod-13", "opset 9", "float32", "no exact form")


# -- CumSum -----------------------------------------------------------------------------------------
def _cumsum(elem: int, shape: list[int | str], axis: int, exclusive: int, reverse: int, axis_input: bool = False,
            op: str = "CumSum", opset: int = 11) -> onnx.ModelProto:
    node = helper.make_node(op, ["x", "axis"], ["y"], name="cs", exclusive=exclusive, reverse=reverse)
    ins = [value_info("x", elem, shape)]
    inits = []
    if axis_input:
        ins.append(value_info("axis", T.INT64, []))
    else:
        inits.append(helper.make_tensor("axis", T.INT64, [], [axis]))
    return make_model([node], ins, [value_info("y", elem, None)], opset, initializers=inits)


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(("shape", "axis"), [((3, 40), 1), ((5, 2, 4), -3), ((6,), 0), ((2, 1), 1)])
@pytest.mark.parametrize("target", [10, 9, 7])
def test_cumsum_floats_bit_identical(exclusive: int, reverse: int, shape: tuple[int, ...], axis: int,
                                     target: int) -> None:
    wide = (RNG.standard_normal(shape) * 10.0 ** RNG.integers(-4, 5, size=shape)).astype(np.float32)
    wide.reshape(-1)[0] = -0.0
    feeds = [{"x": x} for x in [wide, *_floats(shape)]]
    _lowered(_cumsum(T.FLOAT, list(shape), axis, exclusive, reverse), target, feeds, "CumSum")


@pytest.mark.parametrize(("elem", "dtype"), [(T.INT64, np.int64), (T.INT32, np.int32), (T.DOUBLE, np.float64)])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 1)])
def test_cumsum_types_and_dynamic_dim(elem: int, dtype: type, exclusive: int, reverse: int) -> None:
    model = _cumsum(elem, ["n", 7], 1, exclusive, reverse)
    feeds = [{"x": RNG.integers(-100, 100, size=(n, 7)).astype(dtype)} for n in (1, 3)]
    _lowered(model, 9, feeds, "CumSum")


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(("elem", "dtype"), [(T.FLOAT, np.float32), (T.INT64, np.int64)])
@pytest.mark.parametrize("target", [25, 13, 9])
def test_cumprod_is_the_same_chain_with_mul(exclusive: int, reverse: int, elem: int, dtype: type, target: int) -> None:
    """CumProd-26 (onnxruntime 1.32 has no kernel for it: outputs compared with numpy's cumprod)."""
    model = _cumsum(elem, [3, 6], 1, exclusive, reverse, op="CumProd", opset=26)
    x = RNG.integers(-3, 4, size=(3, 6)).astype(dtype)
    out = lowerer.convert(model, target_opset=target).model
    assert "CumProd" not in [n.op_type for n in out.graph.node]
    (got,) = ort_run(out, [{"x": x}])[0]
    src = x[:, ::-1] if reverse else x
    want = np.cumprod(np.concatenate([np.ones((3, 1), dtype), src[:, :-1]], axis=1) if exclusive else src, axis=1)
    np.testing.assert_array_equal(got, want[:, ::-1] if reverse else want)


def test_cumsum_refusals() -> None:
    _refused(_cumsum(T.FLOAT, [2, 65], 1, 0, 0), 10, "cs", "CumSum-11", "is 65", "up to 64")
    _refused(_cumsum(T.FLOAT, [2, "n"], 1, 0, 0), 10, "CumSum-11", "not static")
    _refused(_cumsum(T.FLOAT, ["n", 3], 1, 0, 0, axis_input=True), 10, "axis input", "not a constant",
             "every dim", "static")
    _refused(_cumsum(T.FLOAT, ["n", 3], 1, 1, 0), 7, "dynamic dim", "Expand (opset >= 8)")


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 1)])
@pytest.mark.parametrize(("op", "opset"), [("CumSum", 11), ("CumProd", 26)])
@pytest.mark.parametrize("target", [10, 7])
def test_cumulative_along_a_run_time_axis(exclusive: int, reverse: int, op: str, opset: int, target: int) -> None:
    """A run-time axis: nested Ifs, one unrolled chain per axis; the branch taken is the constant-axis chain."""
    model = _cumsum(T.FLOAT, [2, 3, 4], 0, exclusive, reverse, axis_input=True, op=op, opset=opset)
    out = lowerer.convert(model, target_opset=target).model
    check_model_full(out)
    assert [n.op_type for n in out.graph.node].count("If") == 1
    xs = [RNG.integers(-3, 4, size=(2, 3, 4)).astype(np.float32), *_floats((2, 3, 4))]
    feeds = [{"x": x, "axis": np.array(a, np.int64)} for x in xs for a in (0, 1, 2, -1, -2, -3)]
    for feed, (got,) in zip(feeds, ort_run(out, feeds), strict=True):
        x, axis = feed["x"], int(feed["axis"])
        src = np.flip(x, axis) if reverse else x
        fn = np.cumsum if op == "CumSum" else np.cumprod
        with np.errstate(all="ignore"):  # inf * 0, inf - inf
            want = fn(src, axis=axis, dtype=np.float32)
        if exclusive:
            want = np.concatenate([np.full_like(np.take(src, [0], axis), 0.0 if op == "CumSum" else 1.0),
                                   np.take(want, range(src.shape[axis] - 1), axis)], axis=axis)
        want = np.flip(want, axis) if reverse else want
        assert _bits(np.asarray(got)) == _bits(want.astype(np.float32)), (axis, got, want)


# -- ConstantOfShape --------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [None, np.array([2.5], np.float32), np.array([-7], np.int64),
                                   np.array([np.inf], np.float64), np.array([True])])
@pytest.mark.parametrize(("length", "shape"), [(3, [2, 3, 1]), (0, []), (2, [4, 0])])
@pytest.mark.parametrize("target", [8, 7])
def test_constant_of_shape(value: np.ndarray | None, length: int, shape: list[int], target: int) -> None:
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    elem = T.FLOAT if value is None else helper.np_dtype_to_tensor_dtype(value.dtype)
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos", **attrs)
    model = make_model([node], [value_info("s", T.INT64, [length])], [value_info("y", elem, None)], 9)
    _lowered(model, target, [{"s": np.array(shape, np.int64)}], "ConstantOfShape")


def test_constant_of_shape_from_shape_and_refusal() -> None:
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")]
    model = make_model(nodes, [value_info("x", T.FLOAT, ["a", 3])], [value_info("y", T.FLOAT, None)], 9)
    _lowered(model, 7, [{"x": np.zeros((n, 3), np.float32)} for n in (0, 2)], "ConstantOfShape")
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos")
    model = make_model([node], [value_info("s", T.INT64, None)], [value_info("y", T.FLOAT, None)], 9)
    _refused(model, 7, "cos", "ConstantOfShape-9", "not static", "opset >= 8")


# -- GatherElements ---------------------------------------------------------------------------------
def _gather_elements(dshape: list[int | str], ishape: list[int | str], axis: int, ielem: int = T.INT64,
                     delem: int = T.FLOAT, indices: np.ndarray | None = None) -> onnx.ModelProto:
    node = helper.make_node("GatherElements", ["d", "i"], ["y"], name="ge", axis=axis)
    ins = [value_info("d", delem, dshape)]
    inits = []
    if indices is None:
        ins.append(value_info("i", ielem, ishape))
    else:
        inits.append(numpy_helper.from_array(indices, "i"))
    return make_model([node], ins, [value_info("y", delem, None)], 13, initializers=inits)


@pytest.mark.parametrize(("ielem", "idtype"), [(T.INT64, np.int64), (T.INT32, np.int32)])
@pytest.mark.parametrize(("dshape", "ishape", "axis"), [((3, 4), (2, 4), 0), ((3, 4), (3, 6), -1),
                                                        ((2, 3, 4), (2, 5, 4), 1), ((5,), (7,), 0),
                                                        ((2, 3), (0, 3), 0)])
@pytest.mark.parametrize("target", [10, 9, 8, 7])
def test_gather_elements_runtime_indices(ielem: int, idtype: type, dshape: tuple[int, ...],
                                         ishape: tuple[int, ...], axis: int, target: int) -> None:
    n = dshape[axis]
    feeds = [{"d": x.reshape(dshape) if x.size else x, "i": RNG.integers(-n, n, size=ishape).astype(idtype)}
             for x in _floats(dshape)]
    _lowered(_gather_elements(list(dshape), list(ishape), axis, ielem), target, feeds, "GatherElements")


@pytest.mark.parametrize("target", [10, 7])
def test_gather_elements_constant_indices(target: int) -> None:
    model = _gather_elements([2, 3], [2, 2], 1, delem=T.INT64, indices=np.array([[0, -1], [2, -3]], np.int64))
    out = _lowered(model, target, [{"d": np.arange(6, dtype=np.int64).reshape(2, 3)}], "GatherElements")
    assert sorted(n.op_type for n in out.graph.node) == ["Gather", "Reshape"]


def test_gather_elements_refusals() -> None:
    _refused(_gather_elements(["n", 4], [2, 4], 0), 10, "ge", "GatherElements-13", "not static")
