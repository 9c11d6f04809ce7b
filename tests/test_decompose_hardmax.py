"""Hardmax → ArgMax + one-hot (``decompose=hardmax``): exact against a numpy oracle, in onnxruntime.

Every Hardmax version (1, 11, 13), ranks 1-5, every axis, float/float16/double (bfloat16 for
13), static and symbolic dims, combined with up- and down-conversion; the two-level search for
long axes; If/Loop/Scan bodies and model-local functions; refusals; CLI and inspect.
"""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from _decompose_oracle import (
    NP_TYPES,
    bf16_as_float,
    feeds_for,
    hardmax_oracle,
    op_types_everywhere,
    session,
    single_op_model,
    tie_heavy,
)
from click.testing import CliRunner
from onnx import TensorProto, helper

import lowerer
from lowerer.cli import main as cli_main

F32, F16, F64, BF16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16

#: (version, source opset) pairs: one opset where each Hardmax version is in force.
SOURCES = {1: 9, 11: 11, 13: 13}
SHAPES = {1: (7,), 2: (3, 5), 3: (2, 3, 4), 4: (2, 3, 2, 3), 5: (2, 1, 3, 2, 2)}
TARGETS = (None, 1, 5, 6, 7, 9, 11, 12, 13, 15, 18, 21)


def _inputs(shape: tuple[int, ...], dtype: type, seed: int) -> list[np.ndarray]:
    """Tie-heavy values with +-inf and an all-equal row; standard normal; everything equal; all -inf."""
    rng = np.random.default_rng(seed + 100)
    return [
        tie_heavy(shape, dtype, seed),
        rng.standard_normal(shape).astype(dtype),
        np.full(shape, 2.0, dtype=dtype),
        np.full(shape, -np.inf, dtype=dtype),
    ]


def _expected_refusal(elem: int, target: int | None, dynamic: bool) -> str | None:
    if target is None:
        return None
    if elem == BF16 and target < 13:
        return "bfloat16"
    if dynamic and target < 7:
        return "below opset 7 the one-hot is a Gather from a constant identity table"
    if dynamic and target < 9:
        return "neither Range nor OneHot"
    return None


def _decompose(model: onnx.ModelProto, target: int | None = None) -> onnx.ModelProto:
    out = lowerer.convert(model, decompose=["hardmax"], target_opset=target, verify=False).model
    assert "Hardmax" not in op_types_everywhere(out)
    return out


def _check(model: onnx.ModelProto, inputs: list[np.ndarray], expected: list[np.ndarray], elem: int) -> None:
    """Run ``model`` on each input in onnxruntime and compare exactly (dtype included)."""
    if elem == BF16:
        model = bf16_as_float(model)
        inputs = [x.astype(np.float32) for x in inputs]
        expected = [e.astype(np.float32) for e in expected]
    sess = session(model)
    for x, want in zip(inputs, expected, strict=True):
        got = sess.run(None, feeds_for(model, x))[0]
        assert got.dtype == want.dtype
        assert got.shape == want.shape
        assert np.array_equal(got, want), (x, got, want)


_TYPE_NAMES = {F32: "float", F16: "float16", F64: "double", BF16: "bfloat16"}


@pytest.mark.parametrize(("version", "rank", "elem"), [
    pytest.param(version, rank, elem, id=f"v{version}-rank{rank}-{_TYPE_NAMES[elem]}")
    for version in (1, 11, 13) for rank in range(1, 6) for elem in (F32, F16, F64, BF16)
    if elem != BF16 or version >= 13  # Hardmax takes bfloat16 from version 13 on
])
def test_every_axis_and_target_matches_oracle(version: int, rank: int, elem: int) -> None:
    shape = SHAPES[rank]
    axes = range(-rank, rank) if version >= 11 else range(rank)
    dtype = NP_TYPES[elem]
    for axis in axes:
        inputs = _inputs(shape, dtype, seed=rank * 10 + axis)
        expected = [hardmax_oracle(x, axis, version) for x in inputs]
        for dynamic in (False, True):
            dims = [f"d{i}" for i in range(rank)] if dynamic else list(shape)
            model = single_op_model("Hardmax", elem, dims, SOURCES[version], axis=axis)
            for target in TARGETS:
                refusal = _expected_refusal(elem, target, dynamic)
                if refusal is not None:
                    with pytest.raises(lowerer.ConversionError, match=refusal):
                        _decompose(model, target)
                    continue
                out = _decompose(model, target)
                onnx.checker.check_model(out)
                if elem == F16 and target is not None and target < 6:
                    continue  # onnxruntime runs no float16 model below opset 6 (nor the original)
                _check(out, inputs, expected, elem)


def test_default_axis_of_each_version() -> None:
    x = tie_heavy((2, 3, 4), np.float32, seed=3)
    for version, opset in SOURCES.items():
        graph = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"])], "g",
                                  [helper.make_tensor_value_info("x", F32, [2, 3, 4])],
                                  [helper.make_tensor_value_info("y", F32, [2, 3, 4])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
        default_axis = 1 if version < 13 else -1
        _check(_decompose(model), [x], [hardmax_oracle(x, default_axis, version)], F32)


def _long_axis_inputs(shape: tuple[int, ...], axis_size: int, dtype: type) -> list[np.ndarray]:
    """Inputs that stress the block search: ties across blocks, maxima at block edges and at the end."""
    rng = np.random.default_rng(5)
    rows = math.prod(shape) // axis_size
    edges = np.zeros((rows, axis_size))
    for r in range(rows):  # the maximum twice, at positions that are often block boundaries
        first, second = sorted(rng.choice(axis_size, 2, replace=False))
        edges[r, [first, second]] = 7
    last = np.zeros((rows, axis_size))
    last[:, -1] = 1
    signed_zeros = np.where(rng.random((rows, axis_size)) < 0.5, -0.0, 0.0) - (rng.random((rows, axis_size)) < 0.3)
    return [
        tie_heavy(shape, dtype, seed=1),
        signed_zeros.reshape(shape).astype(dtype),  # the maximum is 0, as -0.0 and +0.0 (equal)
        rng.standard_normal(shape).astype(dtype),
        edges.reshape(shape).astype(dtype),
        last.reshape(shape).astype(dtype),
        np.full(shape, -np.inf, dtype=dtype),
    ]


@pytest.mark.parametrize(("version", "shape", "axis", "axis_size", "two_level"), [
    (13, (3, 1000), -1, 1000, True),  # blocks of 40
    (13, (2, 3, 4096), 2, 4096, True),  # blocks of 64
    (13, (4, 1031), -1, 1031, False),  # a prime: no block size, plain ArgMax
    (13, (3, 128), -1, 128, True),  # the smallest two-level size
    (13, (2, 70000), -1, 70000, True),  # the iota is a Range, not a constant
    (13, (1, 70000, 2), 1, 70000, False),  # not the last axis: ArgMax, Range iota reshaped along the axis
    (11, (2, 8, 16, 16), 1, 2048, True),  # coerced to [2, 2048]: two levels straight from x, no Flatten
    (11, (2, 8, 16, 16), -3, 2048, True),
    (1, (3, 300), 0, 900, True),  # coerced to [1, 900]
])
def test_long_axis_two_level_search(version: int, shape: tuple[int, ...], axis: int, axis_size: int,
                                    two_level: bool) -> None:
    for elem in (F32, F16, F64, BF16):
        if elem == BF16 and version < 13:
            continue
        inputs = _long_axis_inputs(shape, axis_size, NP_TYPES[elem])
        expected = [hardmax_oracle(x, axis, version) for x in inputs]
        for dynamic in (False, True):
            dims: list[int | str] = ["batch", *shape[1:]] if dynamic else list(shape)
            # The block search needs a static size along the (coerced) axis; axis 0 takes in the batch.
            static_size = two_level and not (dynamic and axis == 0)
            model = single_op_model("Hardmax", elem, dims, SOURCES[version], axis=axis)
            for target in (None, 11, 12, 18):
                if elem == BF16 and target is not None and target < 13:
                    continue
                out = _decompose(model, target)
                ops = op_types_everywhere(out)
                opset = target or SOURCES[version]
                if static_size and opset >= 11:
                    assert "ReduceMax" in ops
                    assert ("GatherND" if opset >= 12 else "GatherElements") in ops
                else:
                    assert "ReduceMax" not in ops
                _check(out, inputs, expected, elem)


def test_double_hardmax_runs_after_decomposition() -> None:
    """onnxruntime has no double Hardmax kernel; the decomposition runs."""
    model = single_op_model("Hardmax", F64, [2, 5], 13, axis=-1)
    with pytest.raises(Exception, match=r"NOT_IMPLEMENTED|Could not find an implementation"):
        session(model)
    x = tie_heavy((2, 5), np.float64, seed=2)
    _check(_decompose(model), [x], [hardmax_oracle(x, -1, 13)], F64)


def test_forms_chosen() -> None:
    def ops(version: int, dims: list[int | str], axis: int, target: int | None = None) -> list[str]:
        model = single_op_model("Hardmax", F32, dims, SOURCES[version], axis=axis)
        nodes = list(_decompose(model, target).graph.node)
        if [n.op_type for n in nodes] == ["Size", "Equal", "If"]:  # may be empty: If(Size(x) == 0)
            branches = {a.name: a.g for a in nodes[-1].attribute}
            assert [n.op_type for n in branches["then_branch"].node] == ["Identity"]
            return ["If(empty)", *(n.op_type for n in branches["else_branch"].node)]
        return [n.op_type for n in nodes]

    assert ops(13, [2, 3, 4], 1) == ["ArgMax", "Cast", "Equal", "Cast"]  # constant iota
    assert ops(13, ["a", "b", "c"], 1) == ["If(empty)", "ArgMax", "Shape", "Gather", "Range", "Reshape", "Equal",
                                           "Cast"]
    assert ops(13, ["a", "b", "c"], 1, target=9) == ["If(empty)", "ArgMax", "Shape", "Gather", "OneHot", "Shape",
                                                     "Reshape"]
    assert ops(11, [2, 3, 4], 1) == ["Flatten", "ArgMax", "Cast", "Equal", "Reshape", "Cast"]
    assert ops(11, [2, 3, 4], 2) == ["ArgMax", "Cast", "Equal", "Cast"]  # the last axis: no Flatten
    assert ops(13, [2, 3, 4], 1, target=6) == ["ArgMax", "Gather", "Transpose"]
    assert ops(11, [2, 3, 4], 1, target=1) == ["Flatten", "ArgMax", "Gather", "Reshape"]


@pytest.mark.parametrize(("version", "dims", "axis", "target", "guarded"), [
    (13, ["n", 3, 4], 1, None, False),    # only the batch may be empty: no If(Size(x) == 0)
    (13, ["n", 3, 4], -1, None, False),
    (11, ["n", 3, 4], 2, None, False),    # the last axis: no Flatten, no Reshape
    (11, ["n", 3, 4], 1, 14, False),      # Reshape-14 back with allowzero=1 keeps the zero dim
    (11, ["n", 3, 4], 1, None, True),     # Reshape-5 back would read the zero dim as "copy"
    (13, [3, "n", 4], 1, None, True),     # the reduced axis itself may be empty
    (13, ["n", 3, 4], 1, 9, False),       # opset 9: the iota is a constant (the size along the axis is static)
    (13, ["n", 4096], 1, None, True),     # the two-level search
])
def test_guard_only_where_empty_needs_it(version: int, dims: list[int | str], axis: int, target: int | None,
                                         guarded: bool) -> None:
    """The If(Size(x) == 0) guard is emitted only where the unguarded nodes would fail or differ on empty input."""
    model = single_op_model("Hardmax", F32, dims, SOURCES[version], axis=axis)
    out = _decompose(model, target)
    assert ("If" in [n.op_type for n in out.graph.node]) is guarded
    sess = session(out)
    for size in (0, 2):
        shape = tuple(size if isinstance(d, str) else d for d in dims)
        x = tie_heavy(shape, np.float32, seed=size) if size else np.zeros(shape, np.float32)
        (got,) = sess.run(None, {"x": x})
        expected = hardmax_oracle(x, axis, version) if x.size else x
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)


def test_zero_sized_input_is_identity() -> None:
    model = single_op_model("Hardmax", F32, [2, 0, 3], 13, axis=1)
    out = _decompose(model)
    assert [n.op_type for n in out.graph.node] == ["Identity"]
    x = np.zeros((2, 0, 3), np.float32)
    assert session(out).run(None, {"x": x})[0].shape == (2, 0, 3)


@pytest.mark.parametrize(("version", "dims", "axis", "elem", "target", "message"), [
    (13, [2, 3], 2, F32, None, r"axis 2 is out of range for input 'x' of rank 2"),
    (11, [4], 1, F32, None, r"axis 1 is out of range"),  # the default axis 1 of a 1-D input
    (13, [2, 3], -1, BF16, 11, "bfloat16"),
    (13, [2, 2000], -1, F32, 6, r"2000x2000 identity table"),
    (13, [2, "n"], -1, F32, 6, "below opset 7"),
    (13, ["a", "n"], 1, F32, 8, "neither Range nor OneHot"),
    (11, ["a", "b", 4], 2, F32, 4, "more than one dynamic dim"),
    (11, ["a", 3, 4], -2, F32, 9, None),  # fine: the rank is known
])
def test_refusals(version: int, dims: list[int | str], axis: int, elem: int, target: int | None,
                  message: str | None) -> None:
    model = single_op_model("Hardmax", elem, dims, SOURCES[version], axis=axis)
    if message is None:
        _decompose(model, target)
        return
    with pytest.raises(lowerer.ConversionError, match=message) as info:
        _decompose(model, target)
    assert "Hardmax" in str(info.value)
    assert "\n" not in str(info.value)


def test_unknown_rank_and_type() -> None:
    """Unknown rank: Range/OneHot need no rank. Unknown type: CastLike (opset >= 15), refused below."""
    x = tie_heavy((2, 3, 4), np.float32, seed=9)
    for axis, version in ((-1, 13), (1, 13), (1, 11), (-2, 11)):
        model = single_op_model("Hardmax", F32, None, SOURCES[version], axis=axis, rank=3)
        _check(_decompose(model), [x], [hardmax_oracle(x, axis, version)], F32)
    graph = helper.make_graph([helper.make_node("Hardmax", ["x"], ["y"], axis=-1)], "g",
                              [helper.make_tensor_value_info("x", F32, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", F32, [2, 3, 4])])
    graph.node.insert(0, helper.make_node("Identity", ["x"], ["x_untyped"]))
    graph.node[1].input[0] = "x_untyped"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    # Shape inference gives the type here; a function body below has none.
    _check(_decompose(model), [x], [hardmax_oracle(x, -1, 13)], F32)


# -- control flow and functions ------------------------------------------------------------------
def _hardmax_body(name: str, axis: int, inp: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Hardmax", [inp], [out], name=name, axis=axis)


def _control_flow_model(opset: int, axis: int) -> onnx.ModelProto:
    """``y = If(c, Hardmax(x), Loop(2){acc = Hardmax(If(d, Hardmax(acc), acc))})``; ``z = Scan(Hardmax)``."""
    vi = helper.make_tensor_value_info
    shape = [2, 3, 4]
    inner_if = helper.make_node(
        "If", ["d"], ["inner"], name="inner_if",
        then_branch=helper.make_graph([_hardmax_body("hm_nested", axis, "acc_in", "t_nested")], "then_nested", [],
                                      [vi("t_nested", F32, shape)]),
        else_branch=helper.make_graph([helper.make_node("Identity", ["acc_in"], ["e_nested"])], "else_nested", [],
                                      [vi("e_nested", F32, shape)]),
    )
    loop_body = helper.make_graph(
        [inner_if, _hardmax_body("hm_loop", axis, "inner", "acc_out"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "loop_body",
        [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("acc_in", F32, shape)],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F32, shape)],
    )
    trips = helper.make_tensor("trips", TensorProto.INT64, [], [2])
    then_g = helper.make_graph([_hardmax_body("hm_then", axis, "x", "t")], "then", [], [vi("t", F32, shape)])
    else_g = helper.make_graph([helper.make_node("Loop", ["trips", "", "x"], ["l"], name="loop", body=loop_body)],
                               "else", [], [vi("l", F32, shape)])
    scan_body = helper.make_graph([_hardmax_body("hm_scan", -1 if opset >= 13 else 1, "row", "row_out")],
                                  "scan_body", [vi("row", F32, shape[1:])], [vi("row_out", F32, shape[1:])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], name="top_if", then_branch=then_g, else_branch=else_g),
         helper.make_node("Scan", ["x"], ["z"], name="scan", body=scan_body, num_scan_inputs=1)],
        "g", [vi("x", F32, shape), vi("c", TensorProto.BOOL, []), vi("d", TensorProto.BOOL, [])],
        [vi("y", F32, shape), vi("z", F32, shape)],
        initializer=[trips],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


@pytest.mark.parametrize(("opset", "axis", "target"), [(13, 1, None), (11, 1, 13), (13, -1, 11), (11, 2, 18)])
def test_inside_if_loop_scan(opset: int, axis: int, target: int | None) -> None:
    version = 13 if opset >= 13 else 11
    out = _decompose(_control_flow_model(opset, axis), target)
    sess = session(out)
    for seed in range(3):
        x = tie_heavy((2, 3, 4), np.float32, seed)
        want = hardmax_oracle(x, axis, version)  # Hardmax of a one-hot is the same one-hot
        scan_want = np.stack([hardmax_oracle(row, -1 if opset >= 13 else 1, version) for row in x])
        for c, d in ((True, False), (False, True), (False, False)):
            y, z = sess.run(None, {"x": x, "c": np.array(c), "d": np.array(d)})
            assert np.array_equal(y, want)
            assert np.array_equal(z, scan_want)


def _function_model(opset: int, axis: int, typed: bool) -> onnx.ModelProto:
    """``y = HM(x)`` with HM a local function holding Hardmax.

    Untyped, HM is also called on a double ``x64``: its input type is then unknown even to
    inference from the call sites.
    """
    vi = helper.make_tensor_value_info
    body = [helper.make_node("Hardmax", ["a"], ["b"], name="hm_fn", axis=axis)]
    fn = helper.make_function("pkg", "HM", ["a"], ["b"], body, [helper.make_opsetid("", opset)])
    nodes = [helper.make_node("HM", ["x"], ["y"], domain="pkg")]
    inputs, outputs = [vi("x", F32, [2, 3, 4])], [vi("y", F32, [2, 3, 4])]
    if typed:
        fn.value_info.extend([vi("a", F32, [2, 3, 4])])
    else:
        nodes.append(helper.make_node("HM", ["x64"], ["y64"], domain="pkg"))
        inputs.append(vi("x64", F64, [2, 3, 4]))
        outputs.append(vi("y64", F64, [2, 3, 4]))
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, functions=[fn], ir_version=10,
                             opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("pkg", 1)])


@pytest.mark.parametrize(("opset", "axis", "typed", "target"), [
    (13, 1, True, None), (13, -1, False, 15), (11, 1, False, 18), (11, -2, True, 11), (13, 0, True, 9),
])
def test_inside_model_local_function(opset: int, axis: int, typed: bool, target: int | None) -> None:
    version = 13 if opset >= 13 else 11
    out = _decompose(_function_model(opset, axis, typed), target)
    ops = op_types_everywhere(out)  # the function body may sit in an If(empty) branch
    assert ("Constant" in ops) if typed else ("CastLike" in ops)
    x = tie_heavy((2, 3, 4), np.float32, seed=4)
    feeds = {"x": x} if typed else {"x": x, "x64": x.astype(np.float64)}
    results = session(out).run(None, feeds)
    for got, x_in in zip(results, feeds.values(), strict=True):
        want = hardmax_oracle(x_in, axis, version)
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_function_without_types_below_castlike_is_refused() -> None:
    with pytest.raises(lowerer.ConversionError, match=r"element type of input 'a' is unknown.*CastLike"):
        _decompose(_function_model(13, 1, typed=False))


# -- interfaces ----------------------------------------------------------------------------------
def test_cli_convert_and_inspect(tmp_path) -> None:
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_control_flow_model(11, 1), src)
    runner = CliRunner()
    result = runner.invoke(cli_main, ["convert", str(src), "-o", str(dst), "--decompose", "hardmax",
                                      "--target-opset", "13", "--no-verify"])
    assert result.exit_code == 0, result.output
    assert "Hardmax" not in op_types_everywhere(onnx.load(dst))
    result = runner.invoke(cli_main, ["convert", str(src), "-o", str(dst), "--decompose", "hardmx"])
    assert result.exit_code == 2
    assert "globalmaxpool" in result.output and "hardmax" in result.output
    result = runner.invoke(cli_main, ["inspect", str(src), "--decompose", "all", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["plan"]
    assert plan["refused"] is None
    assert len(plan["rewrites"]) == 4  # every Hardmax: If branch, Loop body, If in the Loop, Scan body
    assert {r["rule"] for r in plan["rewrites"]} == {"hardmax-decomposition"}


def test_two_level_search_inside_function_and_loop() -> None:
    """The block search in a function (constants become Constant nodes) and in a Loop body."""
    vi = helper.make_tensor_value_info
    shape = [3, 512]
    fn = helper.make_function("pkg", "HM", ["a"], ["b"], [helper.make_node("Hardmax", ["a"], ["b"], axis=-1)],
                              [helper.make_opsetid("", 13)])
    fn.value_info.extend([vi("a", F32, shape)])
    loop_body = helper.make_graph(
        [helper.make_node("Hardmax", ["acc_in"], ["acc_out"], axis=-1),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "loop_body", [vi("iter", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("acc_in", F32, shape)],
        [vi("cond_out", TensorProto.BOOL, []), vi("acc_out", F32, shape)],
    )
    graph = helper.make_graph(
        [helper.make_node("HM", ["x"], ["y"], domain="pkg"),
         helper.make_node("Loop", ["trips", "", "x"], ["z"], body=loop_body)],
        "g", [vi("x", F32, shape)], [vi("y", F32, shape), vi("z", F32, shape)],
        initializer=[helper.make_tensor("trips", TensorProto.INT64, [], [1])],
    )
    model = helper.make_model(graph, functions=[fn], ir_version=10,
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("pkg", 1)])
    out = _decompose(model)
    assert "GatherND" in [n.op_type for n in out.functions[0].node]
    assert "GatherND" in [n.op_type for n in out.graph.node[1].attribute[0].g.node]
    sess = session(out)
    for x in _long_axis_inputs((3, 512), 512, np.float32):
        y, z = sess.run(None, {"x": x})
        assert np.array_equal(y, hardmax_oracle(x, -1, 13))
        assert np.array_equal(z, hardmax_oracle(x, -1, 13))
