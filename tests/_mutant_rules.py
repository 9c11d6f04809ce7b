"""More mutants, by rule area: backend forms, scatter, gather, einsum, resize, trilu, mod, cumsum, deform_conv,
grid_sample, widening, shape ops, scan, bodies, function bodies; several hide behind a dtype, dynamic dims,
an empty batch, a body, NaN or an explicit default attribute (``Mutant.hides``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from _mutants import (
    Mutant,
    adapter,
    change_const,
    decomposition,
    drop_node,
    expansion,
    form,
    has_attr,
    lowering,
    one_node,
    replace_span,
    set_attr,
    span,
    swap_op,
    when,
)
from _wrong_rules import DropsSelectLast
from onnx import TensorProto as T
from onnx import helper, numpy_helper

__all__ = ["RULE_MUTANTS"]

_I64 = np.int64
F = T.FLOAT
OV_OLD = {"for_backend": "openvino==2024.0"}
OV = {"for_backend": "openvino"}
RKNN = {"for_backend": "rknn"}
NCNN = {"for_backend": "ncnn"}


def _find(em: Any, op: str) -> onnx.NodeProto:
    from _mutants import _first
    return _first(em, op)


def negate_as(old: str, new: str) -> Any:
    """The first emitted ``old`` comparison written ``Not(new(...))`` (``a < b`` as ``Not(a >= b)``: wrong on NaN)."""
    def post(em: Any) -> None:
        node = _find(em, old)
        y = node.output[0]
        node.op_type, node.output[0] = new, y + "_neg"
        for graph_nodes in _containers(em):
            if node in graph_nodes:
                graph_nodes.insert(list(graph_nodes).index(node) + 1, helper.make_node("Not", [y + "_neg"], [y]))
                return
        raise AssertionError("node not found")
    return post


def _containers(em: Any) -> list[Any]:
    out: list[Any] = [em.nodes]
    stack = list(em.nodes)
    while stack:
        n = stack.pop()
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                out.append(a.g.node)
                stack.extend(a.g.node)
    return out


def swap_inputs(op: str) -> Any:
    """The first emitted ``op`` node's two inputs swapped."""
    def post(em: Any) -> None:
        node = _find(em, op)
        node.input[0], node.input[1] = node.input[1], node.input[0]
    return post


def _if_fp16(post: Any) -> Any:
    """``post`` only where the node's first input is float16 (a rule wrong for one dtype)."""
    def guarded(em: Any) -> None:
        if em.elem_type(em.node.input[0]) == T.FLOAT16:
            post(em)
    return guarded


def _dyn(shape: list[Any], elem: int = F) -> list[tuple[str, int, list[Any]]]:
    return [("x", elem, shape)]


def _forms() -> list[Mutant]:
    am = lambda **a: (lambda: one_node("ArgMax", 13, {"axis": 1, **a}, [3, 20]))  # noqa: E731
    return [
        Mutant("argmax-reduce-fill-n", "form", form("argmax-reduce", change_const(lambda v: v + 1, which=1)),
               am(), 13, OV_OLD, area="reduce_forms", hides="NaN"),
        Mutant("argmax-reduce-last-min", "form", form("argmax-reduce", swap_op("ReduceMax", "ReduceMin")),
               am(select_last_index=1), 13, OV_OLD, area="reduce_forms"),
        Mutant("argmax-reduce-keepdims", "form", form("argmax-reduce", set_attr("ReduceMin", "keepdims",
                                                                                 lambda v: 1)),
               am(keepdims=0), 13, OV_OLD, area="reduce_forms", hides="explicit default"),
        Mutant("hardmax-reduce-outer-max", "form", form("hardmax-reduce", swap_op("ReduceMin", "ReduceMax")),
               lambda: one_node("Hardmax", 13, {"axis": 1}, [3, 20]), 13, OV_OLD, area="reduce_forms"),
        Mutant("argmax-reduce-below-11-greater", "form", form("argmax-reduce", swap_op("Less", "Greater")),
               lambda: one_node("ArgMax", 1, {"axis": 1}, [3, 20]), 10, OV_OLD, area="reduce_forms"),
        Mutant("argmin-topk-largest", "form", form("argmax-reduce", set_attr("TopK", "largest", lambda v: 1),
                                                   like="argmax-topk"),
               lambda: one_node("ArgMin", 13, {"axis": 1}, [3, 20]), 13, OV_OLD, area="topk_forms"),
        Mutant("argmax-topk-no-pad", "form", form("argmax-reduce", drop_node("Pad"), like="argmax-topk"),
               lambda: one_node("ArgMax", 13, {"axis": 1}, inputs=_dyn(["N", "K"])), 13, OV_OLD,
               area="topk_forms", hides="batch 0"),
        Mutant("hardmax-topk-smallest", "form", form("hardmax-reduce", set_attr("TopK", "largest", lambda v: 0),
                                                     like="hardmax-topk"),
               lambda: one_node("Hardmax", 13, {"axis": 1}, [3, 20]), 13, OV_OLD, area="topk_forms"),
        Mutant("shape-slice-start", "form", form("shape-slice", change_const(lambda v: v + 1)),
               lambda: one_node("Shape", 15, {"start": 1}, [2, 3, 4, 5]), 15, OV_OLD, area="topk_forms"),
        Mutant("shape-slice-dynamic-end", "form", form("shape-slice", change_const(lambda v: v - 1, which=1)),
               lambda: one_node("Shape", 15, {"end": -1}, inputs=_dyn(["N", 3, "M"])), 15, OV_OLD,
               area="topk_forms", hides="dynamic dims"),
        Mutant("last-axis-flatten-axis", "form", form("last-axis", set_attr("Flatten", "axis", lambda v: (v or 1) + 1)),
               lambda: one_node("Softmax", 11, {"axis": 1}, [2, 3, 4]), 11, OV, area="backend_forms"),
        Mutant("argmax-flip-not-mapped-back", "form", form("argmax-flip", change_const(np.sort)),
               lambda: one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}, [3, 5]), 13,
               {"for_backend": "coreml"}, area="backend_forms"),
        Mutant("isnan-ordered-strict", "form", form("isnan-ordered", swap_op("LessOrEqual", "Less")),
               lambda: one_node("IsNaN", 13, None, [3, 8]), 13, {"for_backend": "mnn"}, area="backend_forms",
               hides="inf"),
        Mutant("constant-fill-value-nudged", "form", form("constant-fill", change_const(lambda v: v + 1)),
               lambda: one_node("ConstantOfShape", 9, {"value": onnx.numpy_helper.from_array(np.array([2.5],
                                                                                            np.float32))},
                                consts={"s": np.zeros(0, np.int64)}, inputs=[]), 13, {"for_backend": "mnn"},
               area="backend_forms"),
        # tract<0.23.9: a release no witness is (tract computes a wholly masked row as NaN: a departure)
        Mutant("attention-float-mask-dropped", "form", form("attention-float-mask", change_const(np.zeros_like,
                                                                                                 which=1)),
               lambda: one_node("Attention", 23, None, inputs=[(n, T.FLOAT, [2, 2, 4, 8]) for n in "qkv"]
                                + [("m", T.BOOL, [2, 1, 4, 4])]),
               23, {"for_backend": "tract<0.23.9"}, area="backend_forms"),
        Mutant("gelu-mul-constant-nudged", "form", form("gelu-mul", change_const(lambda v: v * 1.001)),
               lambda: one_node("Gelu", 20, {"approximate": "none"}, [4, 16]), 17,
               {"for_backend": "openvino==2023.0"}, area="backend_forms"),
        Mutant("gelu-tanh-cube-c0-nudged", "form", form("gelu-tanh-cube", change_const(lambda v: v * 1.01, which=1)),
               lambda: one_node("Gelu", 20, {"approximate": "tanh"}, [4, 16]), 17, {"for_backend": "ncnn"},
               area="backend_forms"),
        Mutant("einsum-diagonal-off-diagonal", "form", form("einsum-diagonal", change_const(lambda v: v[::-1],
                                                                                           which=-1)),
               lambda: one_node("Einsum", 12, {"equation": "ii->i"}, [4, 4]), 12, OV_OLD, area="backend_forms"),
        Mutant("attention-scale-after-divided", "form", form("attention-scale-after", swap_op("Mul", "Div")),
               _gqa, 19, RKNN, area="backend_forms"),
        Mutant("attention-scale-after-unscaled", "form", form("attention-scale-after", drop_node("Mul")),
               _gqa, 19, RKNN, area="backend_forms"),
        Mutant("gather-slices-start-off-by-one", "form", form("gather-slices", change_const(lambda v: v - 1, which=3)),
               lambda: one_node("Gather", 13, {"axis": 1}, inputs=[("x", F, [2, 3, 4])],
                                consts={"g": np.array([2, 1], _I64)}), 13, NCNN, area="backend_forms"),
        Mutant("attention-trilu-isinf-diagonal-masked", "form", form("attention-trilu-isinf", _trilu_k_less),
               _causal, 19, {"for_backend": "tvm"}, area="backend_forms"),
        Mutant("attention-trilu-isinf-guard-missed", "form", form("attention-trilu-isinf", _guard_never),
               lambda: one_node("Attention", 23, None, inputs=[(n, T.FLOAT, [2, 2, 4, 8]) for n in "qkv"]
                                + [("m", T.BOOL, [2, 1, 4, 4])]), 19, {"for_backend": "tvm"}, area="backend_forms"),
        Mutant("where-constant-other-branch", "form", form("where-constant", _other_branch), _constant_where, 16, NCNN,
               area="backend_forms"),
    ]


def _other_branch(em: Any) -> None:
    """The where-constant form passing the branch its condition does not take."""
    node = _find(em, "Identity")
    branches = list(em.node.input[1:3])
    node.input[0] = branches[1] if node.input[0] == branches[0] else branches[0]


def _constant_where() -> onnx.ModelProto:
    """Where(c, a, b) with c a constant all false (the guard of Attention-23's body on a constant bias)."""
    return one_node("Where", 16, None, inputs=[("a", F, [2, 3]), ("b", F, [2, 3])],
                    consts={"c": np.zeros((2, 3), np.bool_)}, order=["c", "a", "b"])


def _guard_never(em: Any) -> None:
    """The attention-trilu-isinf form whose guard never fires (IsInf of +inf only): a wholly masked row is NaN."""
    node = _find(em, "IsInf")
    del node.attribute[:]
    node.attribute.extend([onnx.helper.make_attribute("detect_positive", 1),
                           onnx.helper.make_attribute("detect_negative", 0)])


def _trilu_k_less(em: Any) -> None:
    """The attention-trilu-isinf form masking the diagonal too (Trilu's k one less: each row's own key masked)."""
    trilu = _find(em, "Trilu")
    (k,) = [n for n in em.nodes if n.op_type == "Constant" and n.output[0] == trilu.input[1]]
    k.attribute[0].t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(k.attribute[0].t) - 1, k.output[0]))


def _causal() -> onnx.ModelProto:
    """Causal Attention-23 on dynamic batch and sequence dims (2 heads of 8)."""
    dims = ["B", 2, "S", 8]
    return one_node("Attention", 23, {"is_causal": 1}, inputs=[("q", F, dims), ("k", F, dims), ("v", F, dims)])


def _gqa() -> onnx.ModelProto:
    """Non-causal grouped-query Attention-23: 4 query heads, 2 key/value heads, batch 1."""
    return one_node("Attention", 23, {"is_causal": 0}, inputs=[("q", F, [1, 4, 4, 8]), ("k", F, [1, 2, 4, 8]),
                                                                ("v", F, [1, 2, 4, 8])])


def _scatter_gather() -> list[Mutant]:
    sc = lambda op, v, red, ins, consts=None, order=None: (lambda: one_node(  # noqa: E731
        op, v, {"reduction": red, **({"axis": 0} if op == "ScatterElements" else {})}, inputs=ins, consts=consts,
        order=order))
    loop_in = [("x", F, [4, 3]), ("i", T.INT64, [2, 3]), ("u", F, [2, 3])]
    return [
        Mutant("scatter-max-loop-ge", "adapter", adapter("ScatterElements", 18, 16, post=swap_op(
            "Greater", "GreaterOrEqual")), sc("ScatterElements", 18, "max", loop_in), 16, area="scatter",
            hides="-0.0"),
        Mutant("scatter-min-loop-not-ge", "adapter", adapter("ScatterElements", 18, 16, post=negate_as(
            "Less", "GreaterOrEqual")), sc("ScatterElements", 18, "min", loop_in), 16, area="scatter", hides="NaN"),
        Mutant("scatter-add-loop-mul", "adapter", adapter("ScatterElements", 16, 13, post=swap_op("Add", "Mul")),
               sc("ScatterElements", 16, "add", loop_in), 13, area="scatter", hides="body"),
        Mutant("scatternd-mul-const-add", "adapter", adapter("ScatterND", 16, 13, post=swap_op("Mul", "Add")),
               sc("ScatterND", 16, "mul", [("x", F, [4, 3]), ("u", F, [2, 3])], {"i": np.array([[1], [3]], _I64)},
                  ["x", "i", "u"]), 13, area="scatter"),
        Mutant("scatternd-min-loop-greater", "adapter", adapter("ScatterND", 18, 16, post=swap_op("Less", "Greater")),
               sc("ScatterND", 18, "min", [("x", F, [4, 3]), ("i", T.INT64, [2, 1]), ("u", F, [2, 3])]), 16,
               area="scatter", hides="body"),
        Mutant("scatter-max-loop-fp16", "adapter", adapter("ScatterElements", 18, 16, post=swap_op(
            "Greater", "Less")), sc("ScatterElements", 18, "max", [("x", T.FLOAT16, [4, 3]), ("i", T.INT64, [2, 3]),
                                                                     ("u", T.FLOAT16, [2, 3])]), 16,
            area="scatter", hides="float16"),
        Mutant("scatter-9-11-axis", "adapter", adapter("Scatter", 9, 11, post=set_attr(
            "ScatterElements", "axis", lambda v: 0)), lambda: one_node(
                "Scatter", 9, {"axis": 1}, inputs=[("x", F, [4, 4]), ("u", F, [4, 2])], consts={"i": np.array(
                    [[1, 0], [3, 2], [0, 3], [2, 1]], _I64)}, order=["x", "i", "u"]), 11, area="scatter"),
        Mutant("gather-11-1-negative", "adapter", adapter("Gather", 11, 1, post=change_const(
            lambda v: v[::-1].copy())), lambda: one_node("Gather", 11, {"axis": 1}, [3, 4], consts={
                "i": np.array([-1, 0], _I64)}), 9, area="shape_ops"),
        Mutant("gatherelements-13-flat-index", "lowering", lowering("GatherElements", 13, change_const(
            lambda v: v[::-1].copy())), lambda: one_node("GatherElements", 13, {"axis": 1}, [3, 3], consts={
                "i": np.array([[0, 2, 1], [1, 0, 2]], _I64)}), 10, area="gather_elements"),
        Mutant("gatherelements-11-uint8", "lowering", lowering("GatherElements", 11, change_const(
            lambda v: np.roll(v, 1))), lambda: one_node("GatherElements", 11, {"axis": 0}, [3, 3], elem=T.UINT8,
                                                        consts={"i": np.array([[2, 0, 1]], _I64)}), 10,
            area="gather_elements", hides="uint8"),
    ]


def _lowerings() -> list[Mutant]:
    sq = lambda eq, a, b=None, elem=F: (lambda: one_node(  # noqa: E731
        "Einsum", 12, {"equation": eq}, inputs=[("a", elem, a)] + ([("b", elem, b)] if b else [])))
    return [
        Mutant("einsum-bmm-swapped", "lowering", lowering("Einsum", 12, swap_inputs("MatMul")),
               sq("bij,bjk->bik", [2, 3, 3], [2, 3, 3]), 11, area="einsum"),
        Mutant("einsum-transpose-identity", "lowering", lowering("Einsum", 12, set_attr(
            "Transpose", "perm", lambda v: list(range(len(v))))), sq("ij->ji", [3, 3]), 11, area="einsum"),
        Mutant("einsum-sum-as-max", "lowering", lowering("Einsum", 12, swap_op("ReduceSum", "ReduceMax")),
               sq("ij->i", [3, 4]), 11, area="einsum"),
        Mutant("einsum-fp16-swapped", "lowering", lowering("Einsum", 12, swap_inputs("MatMul")),
               sq("ij,jk->ik", [3, 3], [3, 3], T.FLOAT16), 11, area="einsum", hides="float16"),
        Mutant("resize-13-11-coordinates", "adapter", adapter("Resize", 13, 11, post=set_attr(
            "Resize", "coordinate_transformation_mode", lambda v: "asymmetric")), lambda: one_node(
                "Resize", 13, {"mode": "linear"}, [1, 1, 2, 3], consts={"r": np.array([], np.float32), "s": np.array(
                    [1, 1, 2, 2], np.float32)}), 11, area="resize"),
        Mutant("resize-13-11-explicit-nearest-mode", "adapter", adapter("Resize", 13, 11, post=when(
            has_attr("nearest_mode"), set_attr("Resize", "nearest_mode", lambda v: "floor"))), lambda: one_node(
                "Resize", 13, {"mode": "nearest", "nearest_mode": "round_prefer_floor"}, [1, 1, 2, 3], consts={
                    "r": np.array([], np.float32), "s": np.array([1, 1, 2, 2], np.float32)}), 11,
            area="resize", hides="explicit default"),
        Mutant("resize-11-10-mode", "adapter", adapter("Resize", 11, 10, post=set_attr(
            "Resize", "mode", lambda v: "linear")), lambda: one_node(
                "Resize", 11, {"mode": "nearest"}, [1, 1, 2, 3], consts={"r": np.array([], np.float32),
                                                                         "s": np.array([1, 1, 2, 2], np.float32)}),
            10, area="resize"),
        Mutant("resize-10-upsample-mode", "lowering", lowering("Resize", 10, set_attr(
            "Upsample", "mode", lambda v: "linear")), lambda: one_node(
                "Resize", 10, {"mode": "nearest"}, [1, 1, 2, 3], consts={"s": np.array([1, 1, 2, 2], np.float32)}), 9,
            area="upsample"),
        Mutant("trilu-lower-k-rolled", "lowering", lowering("Trilu", 14, change_const(
            lambda v: np.roll(v, 1, axis=-1))), lambda: one_node("Trilu", 14, {"upper": 0}, [4, 5], consts={
                "k": np.array(1, _I64)}), 13, area="trilu"),
        Mutant("trilu-bool-flipped", "lowering", lowering("Trilu", 14, change_const(lambda v: 1 - v)),
               lambda: one_node("Trilu", 14, None, [4, 5], elem=T.BOOL), 13, area="trilu", hides="bool"),
        Mutant("trilu-batch0-int8", "lowering", lowering("Trilu", 14, change_const(lambda v: 1 - v)),
               lambda: one_node("Trilu", 14, None, inputs=_dyn(["N", 4, 5], T.INT8)), 13, area="trilu",
               hides="int8, dynamic dims"),
        Mutant("mod-10-int-sub-add", "lowering", lowering("Mod", 10, swap_op("Sub", "Add")),
               lambda: one_node("Mod", 10, None, inputs=[("a", T.INT32, [3, 4]), ("b", T.INT32, [3, 4])]), 9,
               area="mod"),
        Mutant("mod-13-uint8", "lowering", lowering("Mod", 13, swap_op("Sub", "Add")),
               lambda: one_node("Mod", 13, None, inputs=[("a", T.UINT8, [3, 4]), ("b", T.UINT8, [3, 4])]), 9,
               area="mod", hides="uint8"),
        Mutant("cumsum-11-add-max", "lowering", lowering("CumSum", 11, swap_op("Add", "Max")),
               lambda: one_node("CumSum", 11, None, [3, 4], consts={"axis": np.array(1, _I64)}), 10, area="cumsum"),
        Mutant("cumsum-14-reverse-concat", "lowering", lowering("CumSum", 14, set_attr(
            "Concat", "axis", lambda v: 0)), lambda: one_node("CumSum", 14, {"reverse": 1, "exclusive": 1}, [4, 4],
                                                            consts={"axis": np.array(1, _I64)}), 10, area="cumsum"),
        Mutant("deformconv-boundary-inclusive", "lowering", lowering("DeformConv", 19, swap_op(
            "Greater", "GreaterOrEqual")), lambda: one_node("DeformConv", 19, None, inputs=[
                ("x", F, [1, 1, 4, 4]), ("w", F, [1, 1, 2, 2]), ("o", F, [1, 8, 3, 3])]), 18, area="deform_conv",
            hides="offset on -1"),
        Mutant("deformconv-offset-subtracted", "lowering", lowering("DeformConv", 19, swap_op("Add", "Sub")),
               lambda: one_node("DeformConv", 19, None, inputs=[
                   ("x", F, [1, 1, 4, 4]), ("w", F, [1, 1, 2, 2]), ("o", F, [1, 8, 3, 3])]), 18, area="deform_conv"),
        Mutant("gridsample-16-align-corners", "lowering", lowering("GridSample", 16, swap_op("Sub", "Add")),
               lambda: one_node("GridSample", 16, {"mode": "bilinear", "align_corners": 1}, inputs=[
                   ("x", F, [1, 1, 3, 4]), ("g", F, [1, 2, 2, 2])]), 15, area="grid_sample"),
        Mutant("gridsample-16-border-inclusive", "lowering", lowering("GridSample", 16, swap_op("Less", "LessOrEqual")),
               lambda: one_node("GridSample", 16, {"mode": "nearest", "padding_mode": "zeros"}, inputs=[
                   ("x", F, [1, 1, 3, 4]), ("g", F, [1, 2, 2, 2])]), 15, area="grid_sample",
               # the first Less is the coordinate limit's (|x| < the float after 2**62): killed by the grid
               # coordinates on 2**62 and just beyond (lowerer/verification/sampling.py)
               hides="point on border"),
        Mutant("gridsample-20-16-mode", "adapter", adapter("GridSample", 20, 16, post=set_attr(
            "GridSample", "mode", lambda v: "nearest")), lambda: one_node("GridSample", 20, {"mode": "linear"}, inputs=[
                ("x", F, [1, 1, 3, 4]), ("g", F, [1, 2, 2, 2])]), 16, area="grid_sample"),
    ]


def _widening_shape() -> list[Mutant]:
    return [
        Mutant("isinf-20-10-fp16-sign", "adapter", adapter("IsInf", 20, 10, post=set_attr(
            "IsInf", "detect_negative", lambda v: 1 - (1 if v is None else v))),
            lambda: one_node("IsInf", 20, {"detect_negative": 0}, [3, 4], elem=T.FLOAT16), 10, area="widening",
            hides="float16, inf"),
        Mutant("maxpool-12-11-int8-average", "adapter", adapter("MaxPool", 12, 11, post=swap_op(
            "MaxPool", "AveragePool")), lambda: one_node("MaxPool", 12, {"kernel_shape": [2, 2]}, [1, 1, 4, 4],
                                                       elem=T.INT8), 11, area="widening", hides="int8"),
        Mutant("reducemax-20-18-bool-less", "adapter", adapter("ReduceMax", 20, 18, post=swap_op(
            "Greater", "Less")), lambda: one_node("ReduceMax", 20, {"keepdims": 1}, [3, 4], elem=T.BOOL, consts={
                "a": np.array([1], _I64)}), 18, area="widening", hides="bool"),
        Mutant("reducemin-20-18-bool-max", "adapter", adapter("ReduceMin", 20, 18, post=swap_op(
            "ReduceMin", "ReduceMax")), lambda: one_node("ReduceMin", 20, {"keepdims": 0}, [3, 4], elem=T.BOOL,
                                                        consts={"a": np.array([1], _I64)}), 18, area="widening",
            hides="bool"),
        Mutant("shape-15-13-dynamic", "adapter", adapter("Shape", 15, 13, post=change_const(lambda v: v + 1)),
               lambda: one_node("Shape", 15, {"start": -2}, inputs=_dyn(["N", 3, 4])), 13, area="shape_ops",
               hides="dynamic dims"),
        Mutant("squeeze-13-11-batch0", "adapter", adapter("Squeeze", 13, 11, post=set_attr(
            "Squeeze", "axes", lambda v: None)), lambda: one_node("Squeeze", 13, None, [0, 1, 1, 3], consts={
                "axes": np.array([1], _I64)}), 11, area="reduction", hides="batch 0"),
        Mutant("slice-10-1-dynamic", "adapter", adapter("Slice", 10, 1, post=set_attr(
            "Slice", "starts", lambda v: [s + 1 for s in v])), lambda: one_node("Slice", 10, None, inputs=_dyn(
                ["N", 6]), consts={"s": np.array([1], _I64), "e": np.array([5], _I64), "a": np.array([1], _I64)}),
            9, area="shape_ops", hides="dynamic dims"),
        Mutant("split-18-13-num-outputs", "adapter", adapter("Split", 18, 13, post=change_const(
            lambda v: v[::-1].copy())), lambda: one_node("Split", 18, {"axis": 1, "num_outputs": 2}, [2, 5],
                                                         outputs=2), 13, area="shape_ops"),
        Mutant("pad-18-13-negative-axes", "adapter", adapter("Pad", 18, 13, post=change_const(
            lambda v: np.roll(v, 1))), lambda: one_node("Pad", 18, {"mode": "edge"}, [2, 3, 4], consts={
                "pads": np.array([1, 2], _I64), "axes": np.array([-1], _I64)}, order=["x", "pads", "", "axes"]),
            13, area="shape_ops"),
        Mutant("reducemax-18-13-explicit-noop", "adapter", adapter("ReduceMax", 18, 13, post=when(
            has_attr("noop_with_empty_axes"), set_attr("ReduceMax", "keepdims", lambda v: 0))),
            lambda: one_node("ReduceMax", 18, {"noop_with_empty_axes": 0, "keepdims": 1}, [2, 3, 4], consts={
                "axes": np.array([1], _I64)}), 13, area="reduction", hides="explicit default"),
        Mutant("reducel2-18-13-dynamic", "adapter", adapter("ReduceL2", 18, 13, post=set_attr(
            "ReduceL2", "axes", lambda v: [0])), lambda: one_node("ReduceL2", 18, None, inputs=_dyn(["N", 4]),
                                                               consts={"axes": np.array([1], _I64)}), 13,
            area="reduction", hides="dynamic dims"),
    ]


def _loop_body(inner: onnx.NodeProto, x_shape: list[int], y_elem: int, y_shape: list[int],
               opset: int = 13) -> onnx.ModelProto:
    """A Loop of 2 trips whose body applies ``inner`` (reading ``xb``, writing ``yb``) to the outer ``x``."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["xb"]), inner, helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("c", T.BOOL, [])],
        [helper.make_tensor_value_info("c_out", T.BOOL, []), helper.make_tensor_value_info("yb", y_elem, y_shape)])
    loop = helper.make_node("Loop", ["n", ""], ["ys"], body=body)
    graph = helper.make_graph([loop], "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("ys", y_elem, [2, *y_shape])],
                              initializer=[onnx.numpy_helper.from_array(np.array(2, _I64), "n")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _if_body(inner: onnx.NodeProto, x_shape: list[int], y_elem: int, y_shape: list[int],
             opset: int) -> onnx.ModelProto:
    """An If whose then-branch applies ``inner`` (reading ``x``, writing ``yb``) and else-branch is Identity(z)."""
    out = [helper.make_tensor_value_info("yb", y_elem, y_shape)]
    then = helper.make_graph([inner], "then", [], out)
    other = helper.make_graph([helper.make_node("Identity", ["z"], ["yb"])], "else", [], out)
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", T.BOOL, []),
                                            helper.make_tensor_value_info("x", F, x_shape),
                                            helper.make_tensor_value_info("z", y_elem, y_shape)],
                              [helper.make_tensor_value_info("y", y_elem, y_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def _function_call(inner: onnx.NodeProto, x_shape: list[int], opset: int) -> onnx.ModelProto:
    """A model calling a local function whose body is ``inner`` (``x`` → ``yb``)."""
    fn = helper.make_function("local", "F", ["x"], ["yb"], [inner], [helper.make_opsetid("", opset)])
    node = helper.make_node("F", ["x"], ["y"], domain="local")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x_shape)],
                              [helper.make_tensor_value_info("y", F, x_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)],
                             functions=[fn], ir_version=8)


def _bodies() -> list[Mutant]:
    am = helper.make_node("ArgMax", ["x"], ["yb"], axis=1, select_last_index=1)
    am_b = helper.make_node("ArgMax", ["xb"], ["yb"], axis=1, select_last_index=1)
    from lowerer.rules.hardmax import CoercedAxisRule

    class KeepsAxis(CoercedAxisRule):
        name = "wrong-keeps-axis-in-body"

        def rewrite(self, em: Any) -> None:
            em.copy_node()

    return [
        Mutant("argmax-in-if-branch", "owned", replace_span("ArgMax", DropsSelectLast()),
               lambda: _if_body(am, [3, 4], T.INT64, [3, 1], 13), 11, area="argmax", hides="body"),
        Mutant("argmax-in-loop-body", "owned", replace_span("ArgMax", DropsSelectLast()),
               lambda: _loop_body(am_b, [3, 4], T.INT64, [3, 1]), 11, area="argmax", hides="body"),
        Mutant("hardmax-in-function", "owned", replace_span("Hardmax", KeepsAxis()),
               lambda: _function_call(helper.make_node("Hardmax", ["x"], ["yb"], axis=1), [2, 3, 4], 11), 13,
               area="hardmax", hides="function"),
        Mutant("hardswish-in-loop-body", "expansion", expansion(set_attr("HardSigmoid", "alpha", lambda v: v * 2)),
               lambda: _loop_body(helper.make_node("HardSwish", ["xb"], ["yb"]), [3, 4], F, [3, 4], 14), 13,
               area="expansion", hides="body"),
        Mutant("mish-expansion-tanh", "expansion", expansion(swap_op("Tanh", "Sigmoid")),
               lambda: one_node("Mish", 18, None, [3, 4]), 17, area="expansion"),
        Mutant("celu-explicit-alpha", "expansion", expansion(_scale_first_float(2.0)),
               lambda: one_node("Celu", 12, {"alpha": 1.0}, [3, 4]), 11, area="expansion", hides="explicit default"),
        Mutant("layernorm-dynamic-add", "expansion", expansion(swap_op("Sub", "Add")),
               lambda: one_node("LayerNormalization", 17, {"axis": -1}, inputs=[
                   ("x", F, ["N", 3, 4]), ("s", F, [4]), ("b", F, [4])]), 13, area="expansion", hides="dynamic dims"),
        Mutant("hardmax-decomposition-bf16", "decomposition", decomposition("hardmax", swap_op("Equal", "Greater")),
               lambda: one_node("Hardmax", 13, {"axis": 1}, [3, 5], elem=T.BFLOAT16), 13, {"decompose": "hardmax"},
               area="hardmax_decomposition", hides="bfloat16"),
        Mutant("softmax-fp16-axis", "owned", span("Softmax", post=_if_fp16(set_attr("Softmax", "axis", lambda v: 0))),
            lambda: one_node("Softmax", 13, {"axis": 1}, [2, 3, 4], elem=T.FLOAT16), 11, area="hardmax",
            hides="float16"),
        Mutant("argmax-explicit-default-last", "owned", replace_span("ArgMax", _ExplicitMeansLast()),
               lambda: one_node("ArgMax", 13, {"axis": 1, "select_last_index": 0}, [3, 5]), 11, area="argmax",
               hides="explicit default"),
    ]


def _scale_first_float(k: float) -> Any:
    def post(em: Any) -> None:
        from _mutant_list import _first_float_const  # imported late: _mutant_list imports this module
        _first_float_const(lambda v: v * k)(em)
    return post


class _ExplicitMeansLast(DropsSelectLast):
    """ArgMax that reads an explicit ``select_last_index`` (any value) as 1: the last maximum."""

    name = "wrong-explicit-select-last"

    def rewrite(self, em: Any) -> None:
        from lowerer.rules.argmax import ArgExtremumRule

        if has_attr("select_last_index")(em.node):
            node = onnx.NodeProto()
            node.CopyFrom(em.node)
            for a in node.attribute:
                if a.name == "select_last_index":
                    a.i = 1
            em.node = node
        ArgExtremumRule().rewrite(em)


RULE_MUTANTS: list[Mutant] = [*_forms(), *_scatter_gather(), *_lowerings(), *_widening_shape(), *_bodies()]
