"""Mutants aimed at each check: the relabel check, the whole-model check (``verify_model``), the deployment check
(``--for openvino``, OpenVINO installed), lowerer's numpy reference, and the values a rewrite sees in its model.

A check mutant either turns the other checks off (``verify=False`` with ``verify_model=True``: only the
whole-model check can kill it), or goes wrong after the rewrites were checked (a pass that changes the
converted model: only the whole-model and deployment checks run after it), or is a wrong step-table fact
(a relabel: no rewrite is written, only the relabel check runs the node).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from _mutants import (
    Mutant,
    adapter,
    after_convert,
    change_const,
    lowering,
    one_node,
    reference_op,
    replace_span,
    same_meaning,
    swap_op,
    table_says_same,
)
from _wrong_rules import DropsSelectLast
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from lowerer.facts import reference

__all__ = ["CHECK_MUTANTS"]

F = T.FLOAT
_I64 = np.int64
MODEL_ONLY = {"verify": False, "verify_model": True}


def _graph(nodes: list[onnx.NodeProto], inputs: list[tuple[str, int, list[Any]]], outputs: list[str], opset: int,
           inits: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
                              [onnx.ValueInfoProto(name=o) for o in outputs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    return onnx.shape_inference.infer_shapes(model)


def _two_outputs(second: onnx.NodeProto, opset: int, shape: list[int], inits: dict[str, np.ndarray] | None = None
                 ) -> onnx.ModelProto:
    """``y0 = Relu(x)`` (nothing to convert) and ``y1`` = ``second`` (reading ``x``): output 1 is the one that moves."""
    return _graph([helper.make_node("Relu", ["x"], ["y0"], name="r"), second], [("x", F, shape)], ["y0", "y1"],
                  opset, inits)


def _softmaxes(shapes: list[list[int]], opset: int = 11) -> onnx.ModelProto:
    """One Softmax(axis=1) per shape, each on its own input: a relabel pattern met at several ranks."""
    nodes = [helper.make_node("Softmax", [f"x{i}"], [f"y{i}"], name=f"s{i}", axis=1) for i in range(len(shapes))]
    return _graph(nodes, [(f"x{i}", F, s) for i, s in enumerate(shapes)], [f"y{i}" for i in range(len(shapes))],
                  opset)


def _scale_output(index: int, k: float = 2.0) -> Any:
    """A pass that multiplies graph output ``index`` by ``k`` (wrong everywhere it is non-zero)."""
    def change(model: onnx.ModelProto) -> None:
        out = model.graph.output[index].name
        for n in model.graph.node:
            n.output[:] = [o + "_raw" if o == out else o for o in n.output]
        model.graph.initializer.append(numpy_helper.from_array(np.array(k, np.float32), "k_mut"))
        model.graph.node.append(helper.make_node("Mul", [out + "_raw", "k_mut"], [out]))
    return change


def _inf_only(index: int) -> Any:
    """A pass that writes output ``index`` as ``y - (x - x)``: the same for finite ``x``, NaN where ``x`` is ±inf."""
    def change(model: onnx.ModelProto) -> None:
        out = model.graph.output[index].name
        x = model.graph.input[0].name
        for n in model.graph.node:
            n.output[:] = [o + "_raw" if o == out else o for o in n.output]
        model.graph.node.append(helper.make_node("Sub", [x, x], ["zero_mut"]))
        model.graph.node.append(helper.make_node("Sub", [out + "_raw", "zero_mut"], [out]))
    return change


def _relabels() -> list[Mutant]:
    return [
        Mutant("softmax-11-13-declared-same", "relabel", same_meaning("Softmax", (11, 13)),
               lambda: one_node("Softmax", 11, {"axis": 1}, [2, 3, 4]), 13, check="relabel", area="hardmax"),
        Mutant("softmax-11-13-same-rank-hidden", "relabel", same_meaning("Softmax", (11, 13)),
               lambda: _softmaxes([[3, 4], [2, 3, 4]]), 13, check="relabel", area="hardmax", hides="rank",
               known_gap="relabel key without rank (issue 36 item 4): the 2-D Softmax is checked, the 3-D one not"),
        Mutant("hardmax-11-13-declared-same", "relabel", same_meaning("Hardmax", (11, 13)),
               lambda: one_node("Hardmax", 11, {"axis": 1}, [2, 3, 4]), 13, check="relabel", area="hardmax"),
        Mutant("logsoftmax-13-11-declared-same", "relabel", same_meaning("LogSoftmax", (13, 11)),
               lambda: one_node("LogSoftmax", 13, {"axis": 1}, [2, 3, 4]), 11, check="relabel", area="hardmax"),
        Mutant("hardmax-13-11-declared-same-dynamic", "relabel", same_meaning("Hardmax", (13, 11)),
               lambda: one_node("Hardmax", 13, {"axis": 1}, inputs=[("x", F, ["N", 3, "M"])]), 11, check="relabel",
               area="hardmax", hides="dynamic dims"),
        Mutant("onehot-11-9-negative-unchanged", "relabel", table_says_same("OneHot", 11),
               lambda: one_node("OneHot", 11, {"axis": -1}, inputs=[("i", T.INT64, [2, 3])], consts={
                   "d": np.array(5, _I64), "v": np.array([0, 1], np.float32)}), 9, check="relabel", area="table",
               # onnxruntime runs OneHot-9 and -11 with one kernel: killed by the spec's second witness
               # (departures.json lists OneHot-9's kernel; lowerer/verification/check.py _versions_by_spec)
               hides="shared kernel"),
        Mutant("gridsample-20-16-unchanged", "relabel", table_says_same("GridSample", 20),
               lambda: one_node("GridSample", 20, {"mode": "linear"}, inputs=[
                   ("x", F, [1, 1, 3, 4]), ("g", F, [1, 2, 2, 2])]), 16, check="relabel", area="table",
               hides="attribute value"),  # killed by the values of lowerer/facts/attribute_values.json
    ]


def _whole_model() -> list[Mutant]:
    trilu = helper.make_node("Trilu", ["x"], ["y1"], name="t", upper=1)
    return [
        Mutant("model-check-trilu-output-1", "lowering", lowering("Trilu", 14, change_const(lambda v: 1 - v)),
               lambda: _two_outputs(trilu, 14, [4, 5]), 13, MODEL_ONLY, check="model", area="trilu"),
        Mutant("model-check-argmax-ties", "owned", replace_span("ArgMax", DropsSelectLast()),
               lambda: one_node("ArgMax", 13, {"axis": 1, "select_last_index": 1}, [3, 5]), 11, MODEL_ONLY,
               check="model", area="argmax", hides="ties"),
        Mutant("model-check-scatter-dup-indices", "adapter", adapter("ScatterElements", 16, 13, post=swap_op(
            "Add", "Max")), lambda: one_node("ScatterElements", 16, {"axis": 0, "reduction": "add"}, inputs=[
                ("x", F, [4, 3]), ("i", T.INT64, [2, 3]), ("u", F, [2, 3])]), 13, MODEL_ONLY, check="model",
            area="scatter"),
        Mutant("model-check-pass-scales-output-1", "pass", after_convert(_scale_output(1)),
               lambda: _two_outputs(trilu, 14, [4, 5]), 13, {"verify_model": True}, check="model", area="passes"),
        Mutant("model-check-pass-inf-only", "pass", after_convert(_inf_only(0)),
               lambda: one_node("Trilu", 14, None, [4, 5]), 13, {"verify_model": True}, check="model",
               area="passes", hides="inf",
               known_gap="whole-model check uses special sets (issue 36 item 5): no ±inf set"),
    ]


def _deployment() -> list[Mutant]:
    sm = helper.make_node("Softmax", ["x"], ["y1"], name="s", axis=1)
    ov = {"for_backend": "openvino"}
    return [
        Mutant("deployment-pass-scales-output-0", "pass", after_convert(_scale_output(0)),
               lambda: one_node("Softmax", 11, {"axis": 1}, [2, 3, 4]), 11, ov, check="deployment", area="passes"),
        Mutant("deployment-pass-scales-output-1", "pass", after_convert(_scale_output(1)),
               lambda: _two_outputs(sm, 11, [2, 3, 4]), 11, ov, check="deployment", area="passes"),
        Mutant("deployment-pass-inf-only", "pass", after_convert(_inf_only(0)),
               lambda: one_node("Softmax", 11, {"axis": 1}, [2, 3, 4]), 11, ov, check="deployment", area="passes",
               hides="inf"),  # the -inf set, judged: OpenVINO's known non-finite departures do not cover it
    ]


def _legacy(op: str, fn: Any) -> Any:
    """A reference of legacy-broadcast ``op`` (below 7) computing ``fn`` instead; 7 and later right."""
    real = reference._OPS[op]

    def wrong(ins: Any, at: Any, v: int) -> Any:
        return real(ins, at, v) if v >= 7 else [np.asarray(fn(*[i for i in ins if i is not None]))]
    return wrong


def _references() -> list[Mutant]:
    bc = {"broadcast": 1}
    return [
        Mutant("reference-legacy-sub-reversed", "reference", reference_op("Sub", _legacy("Sub", lambda a, b: b - a)),
               lambda: one_node("Sub", 6, bc, inputs=[("a", F, [2, 3]), ("b", F, [3])]), 7, check="reference",
               changes_output=False),
        Mutant("reference-legacy-div-int", "reference", reference_op("Div", _legacy(
            "Div", lambda a, b: a * b)),
            lambda: one_node("Div", 6, bc, inputs=[("a", T.INT32, [2, 3]), ("b", T.INT32, [3])]), 7,
            check="reference", changes_output=False, hides="int32"),
        Mutant("reference-legacy-mul-fp16", "reference", reference_op("Mul", _legacy("Mul", lambda a, b: a * b + 1)),
               lambda: one_node("Mul", 6, bc, inputs=[("a", T.FLOAT16, [2, 3]), ("b", T.FLOAT16, [3])]), 7,
               check="reference", changes_output=False, hides="float16"),
        Mutant("reference-legacy-add-batch0", "reference", reference_op("Add", _legacy(
            "Add", lambda a, b: np.zeros((1, *a.shape[1:]), a.dtype))),
            lambda: one_node("Add", 6, bc, inputs=[("a", F, [0, 3]), ("b", F, [3])]), 7, check="reference",
            changes_output=False, hides="batch 0"),
        Mutant("reference-globalmaxpool-double-min", "reference", reference_op("GlobalMaxPool", lambda ins, at, v: [
            -reference.global_max_pool(-ins[0])]), lambda: one_node("GlobalMaxPool", 13, None, [1, 2, 3, 3],
                                                                    elem=T.DOUBLE), 13,
            {"decompose": "globalmaxpool"}, check="reference", changes_output=False, area="global_max_pool",
            hides="double"),
    ]


def _upstream() -> list[Mutant]:
    """Rewrites whose inputs are computed upstream: generated values do not fit them (issue 36 item 1)."""
    def reshape_model() -> onnx.ModelProto:
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
                 helper.make_node("Unsqueeze", ["b", "zero1"], ["b1"]),
                 helper.make_node("Concat", ["b1", "minus1"], ["shape"], axis=0),
                 helper.make_node("Reshape", ["x", "shape"], ["y"], name="r", allowzero=0)]
        return _graph(nodes, [("x", F, ["N", 3, 4])], ["y"], 14, {"zero": np.array(0, _I64), "zero1": np.array(
            [0], _I64), "minus1": np.array([-1], _I64)})

    def scatter_model() -> onnx.ModelProto:
        nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
                 helper.make_node("ScatterElements", ["z", "i", "v"], ["y"], name="sc", axis=1, reduction="max")]
        return _graph(nodes, [("x", F, [3, 6]), ("z", F, [3, 6])], ["y"], 18, {"k": np.array([2], _I64)})

    return [
        Mutant("reshape-14-13-upstream-shape", "adapter", adapter("Reshape", 14, 13, post=_reshape_wrong()),
               reshape_model, 13, area="shape_ops", hides="computed input"),
        Mutant("scatter-max-topk-indices", "adapter", adapter("ScatterElements", 18, 16, post=swap_op(
            "Greater", "Less")), scatter_model, 16, area="scatter", hides="computed input"),
    ]


def _reshape_wrong() -> Any:
    """Reshape-14 → 13 that reshapes to ``[-1, first dim]`` instead (rows and columns swapped)."""
    def post(em: Any) -> None:
        node = next(n for n in em.nodes if n.op_type == "Reshape")
        rev = em.op("Slice", [node.input[1], em.const(np.array([-1], _I64), "s"), em.const(
            np.array([-3], _I64), "e"), em.const(np.array([0], _I64), "a"), em.const(np.array([-1], _I64), "st")])
        node.input[1] = rev
        em.nodes.remove(node)
        em.nodes.append(node)
    return post


def _scan_model() -> onnx.ModelProto:
    """Scan-9 over the rows of ``x`` ([4, 3]) with a running sum as its state: ``y`` the last sum, ``ys`` each."""
    body = helper.make_graph([helper.make_node("Add", ["s", "r"], ["s2"]), helper.make_node("Identity", ["s2"], ["o"])],
                             "body", [helper.make_tensor_value_info("s", F, [3]), helper.make_tensor_value_info(
                                 "r", F, [3])], [helper.make_tensor_value_info("s2", F, [3]),
                                                 helper.make_tensor_value_info("o", F, [3])])
    node = helper.make_node("Scan", ["s0", "x"], ["y", "ys"], name="scan", body=body, num_scan_inputs=1,
                            scan_input_directions=[1])
    return _graph([node], [("s0", F, [3]), ("x", F, [4, 3])], ["y", "ys"], 9)


def _engine() -> list[Mutant]:
    return [
        Mutant("scan-9-8-reversed-direction", "adapter", adapter("Scan", 9, 8, post=lambda em: [
            a.ints.__setitem__(slice(None), [0 if v else 1 for v in a.ints]) for n in em.nodes for a in n.attribute
            if a.name == "directions"]), _scan_model, 8, area="scan"),
    ]


CHECK_MUTANTS: list[Mutant] = [*_engine(), *_relabels(), *_whole_model(), *_deployment(), *_references(), *_upstream()]
