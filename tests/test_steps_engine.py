"""The version-step engine: each kind of change crossed (or refused) exactly, run in onnxruntime.

Every conversion here is checked three ways: onnx's full checker on the result, onnxruntime's
outputs of the converted model against the original's (exact: these steps move no arithmetic),
and the refusal message where no exact form exists.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from _convert_helpers import check_model_full, make_model, ort_run, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.rules import REGISTRY

explain = REGISTRY.explain

F, I64, I8, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT8, TensorProto.BOOL
BF = TensorProto.BFLOAT16


def convert_and_compare(model: onnx.ModelProto, target: int, feeds: list[dict[str, np.ndarray]],
                        verify: bool = True) -> onnx.ModelProto:
    """Convert, check it fully, and compare every output with the original's in onnxruntime (bit for bit)."""
    check_model_full(model)
    result = lowerer.convert(model, target_opset=target, verify=verify)
    converted = result.model
    check_model_full(converted)
    for got, want in zip(ort_run(converted, feeds), ort_run(model, feeds), strict=True):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert np.array_equal(g, w, equal_nan=True)
            if g.dtype.kind == "f":  # signed zeros too
                assert np.array_equal(np.signbit(g), np.signbit(w))
    return converted


def ops(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def attrs(node: onnx.NodeProto) -> dict[str, object]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


RNG = np.random.default_rng(0)


def floats(*shape: int) -> np.ndarray:
    return RNG.integers(-3, 4, size=shape).astype(np.float32)


# -- types ----------------------------------------------------------------------------------------

def test_types_relabel_checks_each_input() -> None:
    add = helper.make_node("Add", ["a", "b"], ["c"], name="add")
    # (int8 Add below 14 is computed in int64: test_narrow_integer_arithmetic_below_14.)
    for elem, target, ok in ((F, 11, True), (TensorProto.BFLOAT16, 12, False)):
        model = make_model([add], [value_info("a", elem, [2]), value_info("b", elem, [2])],
                           [value_info("c", elem, [2])], 14)
        if ok:
            result = lowerer.convert(model, target_opset=target)
            assert not result.report.rewrites and ops(result.model) == ["Add"]  # a relabel, no record
        else:
            with pytest.raises(lowerer.ConversionError, match=rf"'add' \(Add-14.*opset {target}"):
                lowerer.convert(model, target_opset=target)


def test_shared_type_binding_is_checked() -> None:
    """Pow-12 lets base and exponent differ; Pow-7 binds them to one type."""
    model = make_model([helper.make_node("Pow", ["a", "b"], ["c"], name="pow")],
                       [value_info("a", F, [3]), value_info("b", TensorProto.FLOAT16, [3])],
                       [value_info("c", F, [3])], 13)
    with pytest.raises(lowerer.ConversionError, match="must share one type"):
        lowerer.convert(model, target_opset=11)


# -- attributes added / removed --------------------------------------------------------------------

def test_neutral_added_attributes_are_dropped() -> None:
    """ReduceMean-18 with noop_with_empty_axes=0 written out, Reshape-14 allowzero=0, Cast-19 saturate=1 on
    a non-float8 cast, AveragePool-19 dilations of ones: all dropped going down (kept, they are invalid)."""
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1, noop_with_empty_axes=0),
             helper.make_node("Reshape", ["m", "shape"], ["r"], allowzero=0),
             helper.make_node("Cast", ["r"], ["i"], to=TensorProto.INT32, saturate=1),
             helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[2, 2], dilations=[1, 1])]
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axes"),
             numpy_helper.from_array(np.array([2, 4, 4], np.int64), "shape")]
    model = make_model(nodes, [value_info("x", F, [2, 3, 4, 4])],
                       [value_info("i", TensorProto.INT32, [2, 4, 4]), value_info("p", F, [2, 3, 3, 3])], 19,
                       initializers=inits)
    out = convert_and_compare(model, 11, [{"x": floats(2, 3, 4, 4)}])
    for node in out.graph.node:
        assert not set(attrs(node)) & {"noop_with_empty_axes", "allowzero", "saturate", "dilations"}, node


def test_non_neutral_added_attribute_is_refused() -> None:
    node = helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[2, 2], dilations=[2, 2], name="pool")
    model = make_model([node], [value_info("x", F, [1, 1, 5, 5])], [value_info("p", F, [1, 1, 3, 3])], 19)
    with pytest.raises(lowerer.ConversionError, match=r"'pool' \(AveragePool-19.*dilations=\[2, 2\]"):
        lowerer.convert(model, target_opset=18)


def test_legacy_broadcast_axis_goes_up_with_an_unsqueeze() -> None:
    """Add-6 broadcast=1 axis=1 aligns b [3] at axis 1 of a [2, 3, 4]; numpy broadcasting needs [3, 1]."""
    node = helper.make_node("Add", ["a", "b"], ["c"], broadcast=1, axis=1)
    model = make_model([node], [value_info("a", F, [2, 3, 4]), value_info("b", F, [3])],
                       [value_info("c", F, [2, 3, 4])], 6)
    out = lowerer.convert(model, target_opset=7).model
    check_model_full(out)
    assert ops(out) == ["Unsqueeze", "Add"]
    a, b = floats(2, 3, 4), floats(3)
    got = ort_run(out, [{"a": a, "b": b}])[0][0]
    assert np.array_equal(got, a + b[None, :, None])


# -- attributes moved to inputs --------------------------------------------------------------------

@pytest.mark.parametrize(("src", "target"), [(18, 11), (11, 18), (13, 11), (11, 13), (18, 9)])
def test_axes_move_between_attribute_and_input(src: int, target: int) -> None:
    as_input = src >= 13
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "ax")] if as_input else []
    unsq_inits = [numpy_helper.from_array(np.array([0], np.int64), "uax")] if as_input else []
    nodes = [helper.make_node("ReduceSum", ["x", "ax"] if as_input else ["x"], ["s"], keepdims=0,
                              **({} if as_input else {"axes": [-1]})),
             helper.make_node("Unsqueeze", ["s", "uax"] if as_input else ["s"], ["u"],
                              **({} if as_input else {"axes": [0]}))]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("u", F, [1, 2])], src,
                       initializers=inits + unsq_inits)
    out = convert_and_compare(model, target, [{"x": floats(2, 3)}])
    reduce = out.graph.node[0]
    if target < 13:
        assert len(reduce.input) == 1 and attrs(reduce)["axes"] == ([1] if target < 11 else [-1])
    else:
        assert len(reduce.input) == 2


def test_overridable_initializer_is_not_baked_in() -> None:
    """An initializer that is also a graph input may be fed at run time: not a constant."""
    axes = numpy_helper.from_array(np.array([1], np.int64), "ax")
    model = make_model([helper.make_node("ReduceSum", ["x", "ax"], ["s"], name="rs")],
                       [value_info("x", F, [2, 3]), value_info("ax", I64, [1])], [value_info("s", F, [2, 1])], 13,
                       initializers=[axes])
    with pytest.raises(lowerer.ConversionError, match=r"'rs'.*input 'ax' is not a constant"):
        lowerer.convert(model, target_opset=9)
    # From 11: one branch per axis the fed value may name, picked at run time (If-11 takes branches of
    # different shapes); the initializer's value is not baked in.
    feeds = [{"x": floats(2, 3), "ax": np.array([a], np.int64)} for a in (1, -1)]
    out = convert_and_compare(model, 11, feeds)
    assert "If" in ops(out)


def test_reduction_over_run_time_axes_from_11() -> None:
    model = make_model([helper.make_node("ReduceMax", ["x", "ax"], ["m"], keepdims=0)],
                       [value_info("x", F, [2, 3, 4]), value_info("ax", I64, [2])], [value_info("m", F, ["d"])], 18)
    feeds = [{"x": floats(2, 3, 4), "ax": np.array(a, np.int64)} for a in ([0, 1], [2, -3], [-1, 1], [1, 2])]
    out = convert_and_compare(model, 11, feeds)
    assert ops(out).count("If") == 1
    with pytest.raises(lowerer.ConversionError, match=r"If branches of different shapes \(from If-11\)"):
        lowerer.convert(model, target_opset=10)


def test_clip_bounds_and_constant_node_forms() -> None:
    """Clip-11's min/max inputs from Constant(value_float=...) (a Constant-12 form) back to attributes at 6."""
    nodes = [helper.make_node("Constant", [], ["lo"], value_float=-1.5),
             helper.make_node("Constant", [], ["hi"], value=numpy_helper.from_array(np.array(2.0, np.float32))),
             helper.make_node("Clip", ["x", "lo", "hi"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4])], 12)
    out = convert_and_compare(model, 6, [{"x": np.array([-3, -1, 1, 3], np.float32)}])
    clip = next(n for n in out.graph.node if n.op_type == "Clip")
    assert attrs(clip)["min"] == -1.5 and attrs(clip)["max"] == 2.0 and len(clip.input) == 1


def test_concat_default_axis_written_out_going_up() -> None:
    model = make_model([helper.make_node("Concat", ["a", "b"], ["c"])],
                       [value_info("a", F, [2, 2]), value_info("b", F, [2, 2])], [value_info("c", F, [2, 4])], 1)
    out = lowerer.convert(model, target_opset=4).model
    assert attrs(out.graph.node[0])["axis"] == 1


# -- negative values, broadcasting ----------------------------------------------------------------

def test_negative_axis_made_non_negative() -> None:
    model = make_model([helper.make_node("Flatten", ["x"], ["y"], axis=-1)], [value_info("x", F, [2, 3, 4])],
                       [value_info("y", F, [6, 4])], 13)
    out = convert_and_compare(model, 9, [{"x": floats(2, 3, 4)}])
    assert attrs(out.graph.node[0])["axis"] == 2


def test_gather_negative_indices_constant_and_guarded() -> None:
    idx = numpy_helper.from_array(np.array([-1, 0, -3], np.int64), "idx")
    nodes = [helper.make_node("Gather", ["x", "idx"], ["g1"], axis=1),
             helper.make_node("Gather", ["x", "ids"], ["g2"], axis=0)]
    model = make_model(nodes, [value_info("x", F, [3, 4]), value_info("ids", I64, [5])],
                       [value_info("g1", F, [3, 3]), value_info("g2", F, [5, 4])], 13, initializers=[idx])
    ids = np.array([-1, -3, 0, 2, -2], np.int64)
    out = convert_and_compare(model, 9, [{"x": floats(3, 4), "ids": ids}])
    assert "Where" in ops(out)  # the run-time indices are guarded
    for target in (8, 7):  # no Where, no integer Less: indices + size * (Cast(indices, double) < 0)
        out = convert_and_compare(model, target, [{"x": floats(3, 4), "ids": ids}])
        assert "Where" not in ops(out)


@pytest.mark.parametrize("target", [9, 8, 7])
def test_gather_int32_run_time_indices_guarded_below_11(target: int) -> None:
    nodes = [helper.make_node("Gather", ["x", "ids"], ["g"], axis=-1)]
    model = make_model(nodes, [value_info("x", F, [3, 4]), value_info("ids", TensorProto.INT32, [2, 3])],
                       [value_info("g", F, [3, 2, 3])], 13)
    ids = np.array([[-1, -4, 0], [3, -2, 1]], np.int32)
    convert_and_compare(model, target, [{"x": floats(3, 4), "ids": ids}])


def test_broadcasting_down_to_legacy_forms() -> None:
    add = make_model([helper.make_node("Add", ["a", "b"], ["c"])], [value_info("a", F, [2, 3]),
                     value_info("b", F, [3])], [value_info("c", F, [2, 3])], 13)
    result = lowerer.convert(add, target_opset=6)  # onnxruntime runs opset 7 on: judged by the reference alone
    check_model_full(result.model)
    assert attrs(result.model.graph.node[0]) == {"broadcast": 1}
    assert [(r.status, r.details["reference_only"]) for r in result.report.rewrites] == [
        ("reference-only", ["replacement"])]
    flipped = make_model([helper.make_node("Add", ["b", "a"], ["c"], name="flip")], [value_info("a", F, [2, 3]),
                         value_info("b", F, [3])], [value_info("c", F, [2, 3])], 13)
    with pytest.raises(lowerer.ConversionError, match=r"'flip'.*suffix of the first"):
        lowerer.convert(flipped, target_opset=6)
    mx = make_model([helper.make_node("Max", ["a", "b"], ["c"], name="mx")], [value_info("a", F, [2, 3]),
                    value_info("b", F, [3])], [value_info("c", F, [2, 3])], 13)
    with pytest.raises(lowerer.ConversionError, match=r"'mx'.*same static shape"):
        lowerer.convert(mx, target_opset=7)


# -- optional inputs, added inputs and outputs, new values -----------------------------------------

def test_gemm_without_c_gets_a_signed_zero() -> None:
    model = make_model([helper.make_node("Gemm", ["a", "b"], ["c"], beta=2.0)],
                       [value_info("a", F, [2, 3]), value_info("b", F, [3, 2])], [value_info("c", F, [2, 2])], 13)
    a = np.array([[0.0, -0.0, 1], [-1, 0, 0]], np.float32)
    b = np.array([[-0.0, 1], [0.0, -1], [0, 0]], np.float32)
    out = convert_and_compare(model, 9, [{"a": a, "b": b}])
    assert len(out.graph.node[0].input) == 3


def test_pad_axes_and_slice_steps_folded() -> None:
    inits = [numpy_helper.from_array(np.array([1, 2], np.int64), "pads"),
             numpy_helper.from_array(np.array([-1], np.int64), "axes"),
             numpy_helper.from_array(np.array([0], np.int64), "s0"),
             numpy_helper.from_array(np.array([2], np.int64), "s1"),
             numpy_helper.from_array(np.array([1], np.int64), "sax"),
             numpy_helper.from_array(np.array([1], np.int64), "step")]
    nodes = [helper.make_node("Pad", ["x", "pads", "", "axes"], ["p"]),
             helper.make_node("Slice", ["p", "s0", "s1", "sax", "step"], ["y"])]
    model = make_model(nodes, [value_info("x", F, [2, 3])], [value_info("y", F, [2, 2])], 18, initializers=inits)
    convert_and_compare(model, 9, [{"x": floats(2, 3)}])


def test_unused_new_output_dropped_used_one_refused() -> None:
    def model(used: bool) -> onnx.ModelProto:
        outputs = [value_info("y", F, [1, 1, 3, 3])] + ([value_info("i", I64, [1, 1, 3, 3])] if used else [])
        node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], name="mp")
        return make_model([node], [value_info("x", F, [1, 1, 4, 4])], outputs, 8)

    out = lowerer.convert(model(False), target_opset=7).model
    assert list(out.graph.node[0].output) == ["y"]
    with pytest.raises(lowerer.ConversionError, match=r"'mp'.*output 'i' is used"):
        lowerer.convert(model(True), target_opset=7)


def test_new_attribute_value_refused() -> None:
    model = make_model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap", name="pw")],
                       [value_info("x", F, [4])], [value_info("y", F, [6])], 19,
                       initializers=[numpy_helper.from_array(np.array([1, 1], np.int64), "pads")])
    with pytest.raises(lowerer.ConversionError, match=r"'pw'.*mode='wrap'"):
        lowerer.convert(model, target_opset=18)


def test_semantics_step_without_adapter_is_refused_in_words() -> None:
    model = make_model([helper.make_node("Tile", ["x", "repeats"], ["y"], name="tl")],
                       [value_info("x", F, [2, 2])], [value_info("y", F, [2, 4])], 6,
                       initializers=[numpy_helper.from_array(np.array([1, 2], np.int64), "repeats")])
    with pytest.raises(lowerer.ConversionError, match=r"'tl' \(Tile-6.*opset 5: Tile changed meaning"):
        lowerer.convert(model, target_opset=5)


# -- structural adapters -----------------------------------------------------------------------------

def test_shape_start_end_becomes_a_slice() -> None:
    model = make_model([helper.make_node("Shape", ["x"], ["s"], start=1, end=-1)], [value_info("x", F, [2, 3, 4, 5])],
                       [value_info("s", I64, [2])], 15)
    out = convert_and_compare(model, 11, [{"x": floats(2, 3, 4, 5)}])
    assert ops(out) == ["Shape", "Slice"]


@pytest.mark.parametrize("static", [True, False])
def test_split_num_outputs(static: bool) -> None:
    dim: int | str = 7 if static else "n"
    model = make_model([helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0, num_outputs=3, name="sp")],
                       [value_info("x", F, [dim, 2])],
                       [value_info("a", F, [3, 2]), value_info("b", F, [3, 2]), value_info("c", F, [1, 2])]
                       if static else [value_info(o, F, [None, 2]) for o in "abc"], 18)
    feeds = [{"x": floats(7, 2)}] if static else [{"x": floats(n, 2)} for n in (7, 9, 3)]
    convert_and_compare(model, 13, feeds)
    convert_and_compare(model, 11, feeds)  # dynamic: the sizes computed at run time, one Slice per part
    if not static:
        with pytest.raises(lowerer.ConversionError, match="not a constant"):
            lowerer.convert(model, target_opset=9)


def test_constant_forms_going_down() -> None:
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 7.0], np.float32), "v"),
                                       numpy_helper.from_array(np.array([1, 3], np.int64), "i"), [4])
    nodes = [helper.make_node("Constant", [], ["k"], value_ints=[1, 2]),
             helper.make_node("Constant", [], ["sp"], sparse_value=sparse),
             helper.make_node("Add", ["x", "sp"], ["y"]),
             helper.make_node("Identity", ["k"], ["kk"])]
    model = make_model(nodes, [value_info("x", F, [4])], [value_info("y", F, [4]), value_info("kk", I64, [2])], 12)
    out = convert_and_compare(model, 9, [{"x": floats(4)}])
    assert all(list(attrs(n)) == ["value"] for n in out.graph.node if n.op_type == "Constant")
    low = lowerer.convert(model, target_opset=6).model  # Constant-1 holds no int64: an initializer
    check_model_full(low)
    assert "k" in {t.name for t in low.graph.initializer}


def test_replacements_keep_metadata_props() -> None:
    node = helper.make_node("Shape", ["x"], ["s"], start=1, name="sh")
    entry = node.metadata_props.add()
    entry.key, entry.value = "source", "model.py:12"
    model = make_model([node], [value_info("x", F, [2, 3])], [value_info("s", I64, [1])], 15, ir_version=10)
    out = lowerer.convert(model, target_opset=13).model
    assert all([(p.key, p.value) for p in n.metadata_props] == [("source", "model.py:12")] for n in out.graph.node)


def test_explain_lists_each_step_and_its_handler() -> None:
    lines = explain("ReduceSum", 13, 1)
    assert len(lines) == 2 and "adapter reducesum_13_11" in lines[0] and "generic" in lines[1]
    assert all("rule 'coerced-axis'" in line for line in explain("Softmax", 13, 1))


# -- facts belong to scopes (issue: sibling branches reusing a name) ---------------------------------

def test_sibling_branches_reusing_a_name_keep_their_own_ranks() -> None:
    """Each If branch defines ``t``: rank 2 in one, rank 4 in the other; each feeds a Hardmax-11 (axis 1)."""
    then_b = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s2"], ["t"]), helper.make_node("Hardmax", ["t"], ["h"], axis=1),
         helper.make_node("Reshape", ["h", "back"], ["o1"])], "then", [], [value_info("o1", F, [2, 3, 2, 2])],
        [numpy_helper.from_array(np.array([2, 12], np.int64), "s2")])
    else_b = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["t"]), helper.make_node("Hardmax", ["t"], ["o2"], axis=1)],
        "else", [], [value_info("o2", F, [2, 3, 2, 2])])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=then_b, else_branch=else_b)],
                       [value_info("x", F, [2, 3, 2, 2]), value_info("c", B, [])],
                       [value_info("y", F, [2, 3, 2, 2])], 11,
                       initializers=[numpy_helper.from_array(np.array([2, 3, 2, 2], np.int64), "back")])
    x = RNG.integers(-2, 3, size=(2, 3, 2, 2)).astype(np.float32)
    convert_and_compare(model, 13, [{"x": x, "c": np.array(True)}, {"x": x, "c": np.array(False)}])


def test_loop_scan_output_type_checked_on_the_way_down() -> None:
    """A Loop's scan outputs have no input to share a type with: each is checked against the target's schema."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["s"])], "body",
        [value_info("i", I64, []), value_info("cond", B, [])], [value_info("cond", B, []), value_info("s", BF, [2])])
    loop = helper.make_node("Loop", ["n", ""], ["y"], name="loop", body=body)
    model = make_model([loop], [value_info("x", BF, [2]), value_info("n", I64, [])], [value_info("y", BF, [1, 2])],
                       16)
    check_model_full(model)
    with pytest.raises(lowerer.ConversionError, match=r"node 'loop' \(Loop-16, in graph\) cannot be converted to "
                       r"opset 13: .*output 'y' is tensor\(bfloat16\), which Loop does not accept there"):
        lowerer.convert(model, target_opset=13)


@pytest.mark.parametrize(("op", "elem", "dtype", "target"), [
    ("Max", TensorProto.INT16, np.int16, 7), ("Min", TensorProto.UINT8, np.uint8, 7),
    ("Max", TensorProto.INT32, np.int32, 8), ("Min", TensorProto.UINT32, np.uint32, 8),
    ("Greater", TensorProto.INT32, np.int32, 7), ("Less", TensorProto.UINT32, np.uint32, 7),
    ("Less", TensorProto.INT8, np.int8, 7), ("Equal", TensorProto.UINT16, np.uint16, 7),
    ("Equal", TensorProto.UINT32, np.uint32, 9), ("Equal", TensorProto.INT8, np.int8, 7),
])
def test_small_integers_below_their_integer_versions(op: str, elem: int, dtype: type, target: int) -> None:
    """(u)int8/16/32 where the target's op takes floats (or int32/int64) only: widened exactly, extremes kept."""
    out_elem = elem if op in ("Max", "Min") else TensorProto.BOOL
    model = make_model([helper.make_node(op, ["a", "b"], ["c"])],
                       [value_info("a", elem, [6]), value_info("b", elem, [6])], [value_info("c", out_elem, [6])], 13)
    info = np.iinfo(dtype)
    a = np.array([info.min, info.max, info.max - 1, 0, 1, info.min + 1], dtype)
    b = np.array([info.min + 1, info.max - 1, info.max, 0, info.max, info.min], dtype)
    feeds = [{"a": a, "b": b}, {"a": b, "b": a}, {"a": a, "b": a}]
    out = lowerer.convert(model, target_opset=target).model  # onnxruntime has no kernel for some originals
    check_model_full(out)
    assert "Where" not in ops(out)
    fn = {"Max": np.maximum, "Min": np.minimum, "Greater": np.greater, "Less": np.less, "Equal": np.equal}[op]
    for feed, (got,) in zip(feeds, ort_run(out, feeds), strict=True):
        want = fn(feed["a"], feed["b"])
        assert got.dtype == want.dtype and np.array_equal(got, want), (feed, got, want)


def test_max_of_32_bit_integers_at_7_is_refused() -> None:
    model = make_model([helper.make_node("Max", ["a", "b"], ["c"], name="mx")],
                       [value_info("a", TensorProto.INT32, [3]), value_info("b", TensorProto.INT32, [3])],
                       [value_info("c", TensorProto.INT32, [3])], 13)
    with pytest.raises(lowerer.ConversionError, match=r"'mx'.*\(u\)int8/16 only"):
        lowerer.convert(model, target_opset=7)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize(("elem", "dtype"), [(TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8),
                                             (TensorProto.INT16, np.int16), (TensorProto.UINT16, np.uint16)])
@pytest.mark.parametrize("target", [13, 7])
def test_narrow_integer_arithmetic_below_14(op: str, elem: int, dtype: type, target: int) -> None:
    """(u)int8/16 Add/Sub/Mul/Div (new at 14) in int64 and cast back: wrap-around and truncation as the original's."""
    model = make_model([helper.make_node(op, ["a", "b"], ["c"])],
                       [value_info("a", elem, [6]), value_info("b", elem, [6])], [value_info("c", elem, [6])], 14)
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max // 2 + 3, 7, info.max - 1, 0 if info.min == 0 else -7], dtype)
    b = np.array([info.max, 3, info.max // 3, 2 if info.min == 0 else -2, 5, 1], dtype)
    out = convert_and_compare(model, target, [{"a": a, "b": b}, {"a": b, "b": np.maximum(a, 1).astype(dtype)}])
    assert op in ops(out) and "Cast" in ops(out)


def test_split_by_run_time_sizes_from_10() -> None:
    """Split-13's sizes fed at run time: one Slice per part (Slice takes run-time bounds from 10)."""
    model = make_model([helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], axis=-1, name="sp")],
                       [value_info("x", F, [2, 6]), value_info("sizes", I64, [3])],
                       [value_info("a", F, [2, "p"]), value_info("b", F, [2, "q"]), value_info("c", F, [2, "r"])], 13)
    feeds = [{"x": floats(2, 6), "sizes": np.array(s, np.int64)} for s in ([1, 2, 3], [0, 6, 0], [3, 3, 0])]
    out = convert_and_compare(model, 11, feeds)
    assert "Split" not in ops(out)
    with pytest.raises(lowerer.ConversionError, match=r"'sp'.*input 'sizes' is not a constant"):
        lowerer.convert(model, target_opset=9)


def test_pad_axes_with_run_time_pads_from_11() -> None:
    """Pad-18's constant axes folded into run-time pads: each axis's entries sliced into place, zeros elsewhere."""
    axes = numpy_helper.from_array(np.array([2, -2], np.int64), "axes")
    model = make_model([helper.make_node("Pad", ["x", "pads", "", "axes"], ["y"], name="pad")],
                       [value_info("x", F, [2, 3, 4]), value_info("pads", I64, [4])],
                       [value_info("y", F, ["a", "b", "c"])], 18, initializers=[axes])
    pads = ([1, 0, 2, 3], [0, 2, 0, 0], [-1, 1, 1, -2])
    feeds = [{"x": floats(2, 3, 4), "pads": np.array(p, np.int64)} for p in pads]
    out = convert_and_compare(model, 11, feeds)
    assert all(len(n.input) < 4 for n in out.graph.node if n.op_type == "Pad")
    with pytest.raises(lowerer.ConversionError, match=r"'pad'.*constant pads below Pad-11"):
        lowerer.convert(model, target_opset=10)


def test_unsqueeze_and_squeeze_by_run_time_axes_from_11() -> None:
    """Axes fed at run time: one branch per set of positions they may name (Squeeze: only dims that may be 1)."""
    unsq = make_model([helper.make_node("Unsqueeze", ["x", "ax"], ["y"])],
                      [value_info("x", F, [3, 4]), value_info("ax", I64, [2])],
                      [value_info("y", F, ["a", "b", "c", "d"])], 13)
    feeds = [{"x": floats(3, 4), "ax": np.array(a, np.int64)} for a in ([0, 1], [3, -2], [-4, 2], [1, 3])]
    assert ops(convert_and_compare(unsq, 11, feeds)).count("If") == 1
    sq = make_model([helper.make_node("Squeeze", ["x", "ax"], ["y"])],
                    [value_info("x", F, [1, 3, 1]), value_info("ax", I64, [1])], [value_info("y", F, ["a", "b"])], 13)
    feeds = [{"x": floats(1, 3, 1), "ax": np.array(a, np.int64)} for a in ([0], [2], [-1], [-3])]
    convert_and_compare(sq, 11, feeds)
    with pytest.raises(lowerer.ConversionError, match="picking the squeezed axes at run time needs If"):
        lowerer.convert(sq, target_opset=10)
