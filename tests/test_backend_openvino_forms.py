"""OpenVINO 2023.0's IsNaN: written as Not(Equal(x, x)) there (its CPU plugin fails to compile the IsNaN of a
transformer's attention mask, measured), exact on NaN, ±inf and ±0; left as it is for the newer releases."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lowerer
from lowerer.core.errors import ConversionError


def _isnan(opset: int = 17) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])
    y = helper.make_tensor_value_info("y", TensorProto.BOOL, ["n", 8])
    nodes = [helper.make_node("Softmax", ["x"], ["s"], axis=-1), helper.make_node("IsNaN", ["s"], ["y"], name="nan")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8)


def test_isnan_becomes_equal_and_not_for_openvino_2023() -> None:
    model = _isnan()
    out = lowerer.convert(model, for_backend="openvino==2023.0").model
    assert [n.op_type for n in out.graph.node] == ["Softmax", "Equal", "Not"]
    x = np.array([[np.nan, 1, np.inf, -np.inf, 0, -0.0, np.nan, 3], [1e30, -1e30, 0, 0, 1, 2, 3, 4]], np.float32)
    want, got = (ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
                 for m in (model, out))
    assert want.dtype == got.dtype and np.array_equal(want, got)


def test_isnan_stays_for_newer_openvino() -> None:
    out = lowerer.convert(_isnan(), for_backend="openvino==2024.0", verify=False).model
    assert "IsNaN" in [n.op_type for n in out.graph.node]


_DIAGONALS = {"ii->": [(4, 4)], "ii->i": [(4, 4)], "bii->bi": [(2, 3, 3)], "bii->b": [(2, 3, 3)],
              "iij->ji": [(3, 3, 2)], "ii,j->ij": [(3, 3), (2,)], "ij,jj->i": [(2, 3), (3, 3)], "iii->i": [(3, 3, 3)],
              "...ii->...i": [(2, 2, 3, 3)]}


def _einsum(equation: str, shapes: list[tuple[int | str, ...]], elem: int = TensorProto.FLOAT) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info(f"x{i}", elem, s) for i, s in enumerate(shapes)]
    node = helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], name="e", equation=equation)
    static = all(isinstance(d, int) for s in shapes for d in s)
    shape = np.einsum(equation, *(np.zeros(s) for s in shapes)).shape if static else shapes[0][:1]
    y = helper.make_tensor_value_info("y", elem, shape)
    return helper.make_model(helper.make_graph([node], "g", inputs, [y]), opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=8)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                      .run(None, feeds)[0])


@pytest.mark.parametrize("equation", list(_DIAGONALS))
def test_einsum_diagonal_taken_by_gather_for_openvino_2024(equation: str) -> None:
    shapes = _DIAGONALS[equation]
    model = _einsum(equation, list(shapes))
    out = lowerer.convert(model, for_backend="openvino==2024.0").model
    for node in out.graph.node:
        if node.op_type == "Einsum":
            terms = onnx.helper.get_attribute_value(node.attribute[0]).decode().split("->")[0].split(",")
            assert all(len(set(t)) == len(t) for t in terms), terms
    rng = np.random.default_rng(7)
    for special in (False, True):
        feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
        if special:  # ±inf and NaN off the diagonal must not reach the result (no mask multiply)
            feeds["x0"].reshape(-1)[1::2] = np.array([np.inf, -np.inf, np.nan], np.float32)[
                np.arange(feeds["x0"].size // 2) % 3]
        want, got = _run(model, feeds), _run(out, feeds)
        assert want.shape == got.shape and np.array_equal(want, got, equal_nan=True), equation


def test_einsum_diagonal_int64_exact_and_kept_for_newer_openvino() -> None:
    model = _einsum("bii->bi", [(2, 5, 5)], TensorProto.INT64)
    out = lowerer.convert(model, for_backend="openvino==2023.0").model
    x = np.arange(50, dtype=np.int64).reshape(2, 5, 5)
    assert np.array_equal(_run(model, {"x0": x}), _run(out, {"x0": x}))
    kept = lowerer.convert(model, for_backend="openvino==2026.4", verify=False).model
    assert [n.op_type for n in kept.graph.node] == ["Einsum"]


def test_einsum_diagonal_of_dynamic_size_refused_in_one_line() -> None:
    with pytest.raises(ConversionError) as e:
        lowerer.convert(_einsum("ii->i", [("n", "n")]), for_backend="openvino==2023.0")
    line = str(e.value)
    assert "\n" not in line and "Einsum" in line and "'i'" in line and "static" in line


def test_gelu_as_mul_form_for_openvino_2023_within_its_budget() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])
    graphs = {a: helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], name="g", approximate=a)], "g", [x], [y])
              for a in ("none", "tanh")}
    models = {a: helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
              for a, g in graphs.items()}
    result = lowerer.convert(models["none"], for_backend="openvino==2023.0")
    assert [n.op_type for n in result.model.graph.node] == ["Mul", "Erf", "Add", "Mul", "Mul"]
    assert [r.rule for r in result.report.rewrites] == ["gelu-mul"]
    feeds = {"x": np.linspace(-6, 6, 256, dtype=np.float32).reshape(4, 64)}
    want, got = _run(models["none"], feeds), _run(result.model, feeds)
    assert np.abs(want - got).max() <= 1e-6 * np.abs(want).max()
    tanh = lowerer.convert(models["tanh"], for_backend="openvino==2023.0").model
    assert "Tanh" in [n.op_type for n in tanh.graph.node]  # its function body
    newer = lowerer.convert(models["none"], for_backend="openvino==2024.0").model
    assert "Div" in [n.op_type for n in newer.graph.node]  # the body: 2024.0 computes it right


def test_onnxruntime_openvino_compile_failures_expanded_or_refused_in_one_line() -> None:
    """onnxruntime-openvino 1.24.1 (``openvino==2025.4``) takes and then fails Attention-23 (expanded here),
    ScatterND with a reduction and GridSample-20 linear in a model of more than one node (refused, naming the opset
    that runs where one does; see test_gridsample_20_for_onnxruntime_openvino_where_its_provider_takes_it)."""
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, 2, 4, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 8])
    attention = helper.make_model(helper.make_graph([helper.make_node("Attention", ["q", "q", "q"], ["y"])], "g",
                                                    [q], [y]), opset_imports=[helper.make_opsetid("", 23)])
    out = lowerer.convert(attention, for_backend="openvino==2025.4", verify=False).model
    assert "Attention" not in [n.op_type for n in out.graph.node]
    kept = lowerer.convert(attention, for_backend="openvino==2026.4", verify=False).model
    assert [n.op_type for n in kept.graph.node] == ["Attention"]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 6])
    grid = helper.make_tensor_value_info("g", TensorProto.FLOAT, [1, 3, 4, 2])
    sampled = helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, 2, 3, 4])
    gridsample = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                                                      helper.make_node("GridSample", ["r", "g"], ["s"], name="gs")],
                                                     "g", [x, grid], [sampled]),
                                   opset_imports=[helper.make_opsetid("", 20)])
    with pytest.raises(ConversionError) as e:
        lowerer.convert(gridsample, for_backend="openvino==2025.4", verify=False)
    assert "\n" not in str(e.value) and "'gs' (GridSample-20" in str(e.value) and "--target-opset 19" in str(e.value)
    u = helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3])
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])
    d = helper.make_tensor_value_info("d", TensorProto.FLOAT, [4, 3])
    o = helper.make_tensor_value_info("o", TensorProto.FLOAT, [4, 3])
    scatter = helper.make_model(helper.make_graph([helper.make_node("ScatterND", ["d", "i", "u"], ["o"], name="sc",
                                                                    reduction="max")], "g", [d, i, u], [o]),
                                opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ConversionError) as e:
        lowerer.convert(scatter, for_backend="openvino==2025.4", verify=False)
    assert "\n" not in str(e.value) and "'sc' (ScatterND-18" in str(e.value) and "no option makes" in str(e.value)


def _gridsample(mode: str, rank: int = 4, before: str | None = None, constant_grid: bool = False) -> onnx.ModelProto:
    """GridSample-20 on X of ``rank`` (after a ``before`` node when given), the grid an input or a Constant node."""
    dims = [1, 2, 5, 6, 7][:rank]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * rank)
    grid_dims = [*[1, 3, 4, 2][:rank - 1], rank - 2]
    nodes, inputs, source = [], [x], "x"
    if before is not None:
        nodes.append(helper.make_node(before, ["x"], ["b"]))
        source = "b"
    if constant_grid:
        grid = np.linspace(-1.2, 1.2, int(np.prod(grid_dims)), dtype=np.float32).reshape(grid_dims)
        nodes.append(helper.make_node("Constant", [], ["g"], value=onnx.numpy_helper.from_array(grid)))
    else:
        inputs.append(helper.make_tensor_value_info("g", TensorProto.FLOAT, grid_dims))
    nodes.append(helper.make_node("GridSample", [source, "g"], ["y"], name="gs", mode=mode))
    return helper.make_model(helper.make_graph(nodes, "g", inputs, [y]), opset_imports=[helper.make_opsetid("", 20)],
                             ir_version=9)


@pytest.mark.parametrize("mode", ["linear", "cubic", "nearest"])
def test_gridsample_20_for_onnxruntime_openvino_where_its_provider_takes_it(mode: str) -> None:
    """Measured on onnxruntime-openvino 1.24.1: its provider fails GridSample-20 linear/cubic (any X) and any mode on X
    not 4-D wherever it takes the node; it takes none of a model whose only node is the GridSample (onnxruntime's CPU
    provider runs it, right), so such a model is written as it is (a Constant grid is an initializer there)."""
    for sole in (_gridsample(mode), _gridsample(mode, constant_grid=True), _gridsample(mode, rank=5)):
        out = lowerer.convert(sole, for_backend="openvino==2025.4", verify=False).model
        assert [n.op_type for n in out.graph.node if n.op_type != "Constant"] == ["GridSample"]
    taken = _gridsample(mode, before="Relu")
    if mode == "nearest":  # runs right where the provider takes it (4-D)
        out = lowerer.convert(taken, for_backend="openvino==2025.4", verify=False).model
        assert [n.op_type for n in out.graph.node] == ["Relu", "GridSample"]
    else:
        with pytest.raises(ConversionError) as e:
            lowerer.convert(taken, for_backend="openvino==2025.4", verify=False)
        said = str(e.value)
        assert "\n" not in said and "'gs' (GridSample-20" in said and "--target-opset 19" in said
    with pytest.raises(ConversionError) as e:  # X of rank 5: OpenVINO's GridSample is 4-D only, and so is GridSample-16
        lowerer.convert(_gridsample(mode, rank=5, before="Relu"), for_backend="openvino==2025.4", verify=False)
    assert "\n" not in str(e.value) and "'gs' (GridSample-20" in str(e.value) and "no option makes" in str(e.value)
    for other in ("openvino==2024.0", "openvino==2026.4"):  # the entries are onnxruntime-openvino's alone
        assert lowerer.convert(taken, for_backend=other, verify=False).model is not None
    for rank5 in (_gridsample(mode, rank=5), _gridsample(mode, rank=5, before="Relu")):  # OpenVINO 2026.4: 4-D only
        with pytest.raises(ConversionError) as e:
            lowerer.convert(rank5, for_backend="openvino==2026.4", verify=False)
        assert "'gs' (GridSample-20" in str(e.value) and "4D" in str(e.value)


def test_gelu_tanh_without_pow_for_ncnn_within_its_budget() -> None:
    """ncnn's Pow is wrong on negative bases (exponent 3): Gelu-20 tanh is written with x * x * x there."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], name="g", approximate="tanh")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    result = lowerer.convert(model, for_backend="ncnn")
    ops = [n.op_type for n in result.model.graph.node]
    assert "Pow" not in ops and "Tanh" in ops, ops
    assert [(r.rule, r.status) for r in result.report.rewrites] == [("gelu-tanh-cube", "verified")]
    feeds = {"x": np.linspace(-6, 6, 256, dtype=np.float32).reshape(4, 64)}
    want, got = _run(model, feeds), _run(result.model, feeds)
    assert np.abs(want - got).max() <= 1e-6 * np.abs(want).max()
    none = lowerer.convert(_gelu_model("none"), for_backend="ncnn").model
    assert "Erf" in [n.op_type for n in none.graph.node]  # approximate='none': its body (no Pow there)


def _gelu_model(approximate: str) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)


def _if_model() -> onnx.ModelProto:
    """A model's own If on dynamic dims (then Neg, else Abs): OpenVINO 2023.0/2024.0 may repeat a stale branch."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    branch = [helper.make_graph([helper.make_node(op, ["x"], [out])], name, [],
                                [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["n", 4])])
              for op, out, name in (("Neg", "t", "then"), ("Abs", "e", "else"))]
    node = helper.make_node("If", ["c"], ["y"], name="own_if", then_branch=branch[0], else_branch=branch[1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, [1]), x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def _reduce_sum_run_time_axes() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=0, name="rs")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                               helper.make_tensor_value_info("a", TensorProto.INT64, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_an_if_chain_is_refused_for_openvino_2023_and_the_empty_input_if_is_kept() -> None:
    """2023.0/2024.0 repeat a stale branch when an If's condition flips at the same dynamic input shapes (measured):
    lowerer's If chain of run-time axes meets it and is refused there; its empty-input If cannot, and is written."""
    model = _reduce_sum_run_time_axes()
    for release in ("2023.0", "2024.0"):
        with pytest.raises(ConversionError, match=r"If-11.*the previous branch's result"):
            lowerer.convert(model, target_opset=11, for_backend=f"openvino=={release}", verify=False)
    out = lowerer.convert(model, target_opset=11, for_backend="openvino==2026.4", verify=False).model
    assert "If" in [n.op_type for n in out.graph.node]
    hardmax = helper.make_model(helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], axis=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "m", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "m", 4])]),
        opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
    written = lowerer.convert(hardmax, target_opset=13, for_backend="openvino==2023.0").model
    assert "If" in [n.op_type for n in written.graph.node]  # the empty-input guard of the coerced-axis step


def test_a_models_own_if_is_kept_with_the_departure_said_for_openvino_2023() -> None:
    result = lowerer.convert(_if_model(), for_backend="openvino==2023.0", verify=False)
    (named,) = result.report.backend["named"]
    assert named["node"] == "own_if" and "previous branch's result" in named["why"]
    assert [n.op_type for n in result.model.graph.node] == ["If"]
    with pytest.raises(ConversionError, match="own_if"):
        lowerer.convert(_if_model(), for_backend="openvino==2023.0", verify=False, strict_backend=True)
    assert not lowerer.convert(_if_model(), for_backend="openvino==2026.4", verify=False).report.backend["named"]
