"""The mutants (see :mod:`_mutants`): at least 40 wrong rules across every family, each with its model.

Families: ``owned`` (ArgMax/ArgMin, Hardmax/Softmax/LogSoftmax rules), ``adapter`` (version steps),
``lowering``, ``expansion`` (function bodies), ``decomposition``, ``reference`` (lowerer's numpy
reference, where it judges a side onnxruntime cannot run), ``engine`` (rules that change their input).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from _mutant_checks import CHECK_MUTANTS
from _mutant_rules import RULE_MUTANTS
from _mutants import (
    Mutant,
    _drop_attr,
    _empty_axes_reduce,
    adapter,
    change_const,
    decomposition,
    drop_node,
    expansion,
    lowering,
    mutate_input,
    one_node,
    reference_op,
    replace_span,
    set_attr,
    span,
    swap_op,
    through_fp16,
)
from _wrong_rules import DropsSelectLast
from onnx import TensorProto as T

from lowerer.facts import reference
from lowerer.rules.hardmax import CoercedAxisRule
from lowerer.steps.emitter import Emitter

__all__ = ["MUTANTS", "QUICK"]


def _plus(k: int) -> Any:
    return lambda v: (v or 0) + k


def _x(shape: list[int], elem: int = T.FLOAT) -> list[tuple[str, int, list[int]]]:
    return [("x", elem, shape)]


def _ab(a: list[int], b: list[int], elem: int = T.FLOAT) -> list[tuple[str, int, list[int]]]:
    return [("a", elem, a), ("b", elem, b)]


_I64 = np.int64
_ARGMAX = {"axis": 1, "select_last_index": 1}
_SOFT3 = {"axis": 1}


class KeepsCoercedAxis(CoercedAxisRule):
    """Hardmax/Softmax/LogSoftmax 11 → 13 relabeled with its axis: the coerce-to-2-D meaning lost."""

    name = "wrong-keeps-axis"

    def rewrite(self, em: Emitter) -> None:
        em.copy_node()


class LastAxisAlways(CoercedAxisRule):
    """13 → 11 written with ``axis=-1`` whatever the axis (the move to the last axis forgotten)."""

    name = "wrong-last-axis"

    def rewrite(self, em: Emitter) -> None:
        em.copy_node(axis=-1)


def _owned() -> list[Mutant]:
    am13 = lambda: one_node("ArgMax", 13, _ARGMAX, [3, 4, 5])  # noqa: E731
    return [
        Mutant("argmax-drops-select-last", "owned", replace_span("ArgMax", DropsSelectLast()), am13, 11),
        Mutant("argmin-drops-select-last", "owned", replace_span("ArgMin", DropsSelectLast()),
               lambda: one_node("ArgMin", 12, _ARGMAX, [3, 4, 5]), 11),
        Mutant("argmax-axis-off-by-one", "owned", span("ArgMax", post=set_attr("ArgMax", "axis", _plus(1))), am13, 11),
        Mutant("argmax-keepdims-flipped", "owned", span("ArgMax", post=set_attr("ArgMax", "keepdims", lambda v: 0)),
               am13, 11),
        Mutant("argmax-flip-in-place", "engine", span("ArgMax", pre=mutate_input(_drop_attr("select_last_index"))),
               am13, 11),
        Mutant("softmax-keeps-coerced-axis", "owned", replace_span("Softmax", KeepsCoercedAxis()),
               lambda: one_node("Softmax", 11, _SOFT3, [2, 3, 4]), 13),
        Mutant("hardmax-keeps-coerced-axis", "owned", replace_span("Hardmax", KeepsCoercedAxis()),
               lambda: one_node("Hardmax", 11, _SOFT3, [2, 3, 4]), 13),
        Mutant("logsoftmax-keeps-coerced-axis", "owned", replace_span("LogSoftmax", KeepsCoercedAxis()),
               lambda: one_node("LogSoftmax", 11, _SOFT3, [2, 3, 4]), 13),
        Mutant("softmax-13-11-last-axis", "owned", replace_span("Softmax", LastAxisAlways()),
               lambda: one_node("Softmax", 13, _SOFT3, [2, 3, 4]), 11),
        Mutant("hardmax-flatten-axis-off-by-one", "owned", span("Hardmax", post=set_attr(
            "Flatten", "axis", _plus(1))), lambda: one_node("Hardmax", 11, _SOFT3, [2, 3, 4, 5]), 13),
        Mutant("softmax-transpose-not-inverted", "owned", span("Softmax", post=lambda em: [
            n.attribute[0].ints.__setitem__(slice(None), [0, 2, 3, 1]) for n in em.nodes if n.op_type == "Transpose"]),
            lambda: one_node("Softmax", 13, _SOFT3, [2, 3, 4, 5]), 11),
        Mutant("softmax-through-fp16", "owned", span("Softmax", post=through_fp16("Softmax")),
               lambda: one_node("Softmax", 13, _SOFT3, [2, 3, 4]), 11),
        Mutant("hardmax-in-place-axis", "engine", span("Hardmax", pre=mutate_input(_drop_attr("axis"))),
               lambda: one_node("Hardmax", 11, {"axis": 2}, [2, 3, 4]), 13),
    ]


def _decompositions() -> list[Mutant]:
    hm = lambda: one_node("Hardmax", 13, {"axis": 1}, [3, 4, 5])  # noqa: E731
    gmp = lambda: one_node("GlobalMaxPool", 13, None, [2, 3, 4, 5])  # noqa: E731
    return [
        Mutant("hardmax-last-maximum", "decomposition", decomposition("hardmax", set_attr(
            "ArgMax", "select_last_index", lambda v: 1)), hm, 13, {"decompose": "hardmax"}),
        Mutant("hardmax-iota-off-by-one", "decomposition", decomposition("hardmax", change_const(
            lambda v: v + 1)), hm, 13, {"decompose": "hardmax"}),
        Mutant("hardmax-iota-wrong-last", "decomposition", decomposition("hardmax", change_const(
            lambda v: np.where(np.arange(v.size).reshape(v.shape) == v.size - 1, 0, v))), hm, 13,
            {"decompose": "hardmax"}),
        Mutant("globalmaxpool-min", "decomposition", decomposition("globalmaxpool", swap_op("ReduceMax", "ReduceMin")),
               gmp, 13, {"decompose": "globalmaxpool"}),
        Mutant("globalmaxpool-keepdims-0", "decomposition", decomposition("globalmaxpool", set_attr(
            "ReduceMax", "keepdims", lambda v: 0)), gmp, 13, {"decompose": "globalmaxpool"}),
        Mutant("globalmaxpool-one-axis", "decomposition", decomposition("globalmaxpool", set_attr(
            "ReduceMax", "axes", lambda v: [2])), gmp, 13, {"decompose": "globalmaxpool"}),
        Mutant("globalmaxpool-ort-lowest", "decomposition", decomposition("globalmaxpool", lambda em: _clip_lowest(em)),
               gmp, 13, {"decompose": "globalmaxpool"}),
    ]


def _clip_lowest(em: Any) -> None:
    """After the ReduceMax: Max(y, lowest float), as onnxruntime's GlobalMaxPool kernel gives for -inf."""
    node = next(n for n in em.nodes if n.op_type == "ReduceMax")
    y = node.output[0]
    node.output[0] = y + "_raw"
    low = em.const(np.array(np.finfo(np.float32).min, dtype=np.float32), "lowest")
    em.op("Max", [y + "_raw", low], [y])


def _adapters() -> list[Mutant]:
    add6 = lambda: one_node("Add", 6, {"broadcast": 1, "axis": 1}, inputs=_ab([2, 3, 4], [3]))  # noqa: E731
    return [
        Mutant("add-6-7-no-unsqueeze", "adapter", adapter("Add", 6, 7, post=drop_node("Unsqueeze")), add6, 7),
        Mutant("sub-6-7-unsqueeze-axis", "adapter", adapter("Sub", 6, 7, post=set_attr(
            "Unsqueeze", "axes", lambda v: [0])), lambda: one_node(
            "Sub", 6, {"broadcast": 1, "axis": 1}, inputs=_ab([2, 3, 4], [3])), 7),
        Mutant("mul-6-7-swapped", "adapter", adapter("Mul", 6, 7, post=swap_op("Mul", "Add")), lambda: one_node(
            "Mul", 6, {"broadcast": 1, "axis": 0}, inputs=_ab([2, 3, 4], [2])), 7),
        Mutant("reducemax-18-13-keepdims", "adapter", adapter("ReduceMax", 18, 13, post=set_attr(
            "ReduceMax", "keepdims", lambda v: 0)),
            lambda: one_node("ReduceMax", 18, None, [2, 3, 4], consts={"axes": np.array([1], _I64)}), 13),
        Mutant("reducemax-18-13-axes-off", "adapter", adapter("ReduceMax", 18, 13, post=set_attr(
            "ReduceMax", "axes", lambda v: [a + 1 for a in v])),
            lambda: one_node("ReduceMax", 18, None, [2, 3, 4], consts={"axes": np.array([1], _I64)}), 13),
        Mutant("reducesum-13-11-axes", "adapter", adapter("ReduceSum", 13, 11, post=set_attr(
            "ReduceSum", "axes", lambda v: [0])),
            lambda: one_node("ReduceSum", 13, None, [2, 3, 4], consts={"axes": np.array([2], _I64)}), 11),
        Mutant("split-13-11-sizes", "adapter", adapter("Split", 13, 11, post=set_attr(
            "Split", "split", lambda v: list(reversed(v)))),
            lambda: one_node("Split", 13, {"axis": 1}, [2, 5], consts={"split": np.array([2, 3], _I64)}, outputs=2),
            11),
        Mutant("unsqueeze-13-11-axes", "adapter", adapter("Unsqueeze", 13, 11, post=set_attr(
            "Unsqueeze", "axes", lambda v: [a + 1 for a in v])),
            lambda: one_node("Unsqueeze", 13, None, [2, 3], consts={"axes": np.array([0], _I64)}), 11),
        Mutant("squeeze-13-11-axes", "adapter", adapter("Squeeze", 13, 11, post=set_attr(
            "Squeeze", "axes", lambda v: None)),
            lambda: one_node("Squeeze", 13, None, [1, 3, 1], consts={"axes": np.array([0], _I64)}), 11),
        Mutant("slice-10-1-ends", "adapter", adapter("Slice", 10, 1, post=set_attr(
            "Slice", "ends", lambda v: [e - 1 for e in v])),
            lambda: one_node("Slice", 10, None, [6, 4], consts={"s": np.array([1], _I64), "e": np.array([5], _I64),
                                                               "a": np.array([0], _I64)}), 9),
        Mutant("unsqueeze-11-1-axes", "adapter", adapter("Unsqueeze", 11, 1, post=set_attr(
            "Unsqueeze", "axes", lambda v: [0])), lambda: one_node("Unsqueeze", 11, {"axes": [-1]}, [2, 3]), 9),
        Mutant("pad-18-13-pads", "adapter", adapter("Pad", 18, 13, post=change_const(lambda v: v[::-1].copy())),
               lambda: one_node("Pad", 18, None, [2, 3], consts={"pads": np.array([1, 2], _I64), "v": np.array(
                   0.0, np.float32), "axes": np.array([1], _I64)}), 13),
        Mutant("gemm-11-9-c-plus-zero", "adapter", adapter("Gemm", 11, 9, post=change_const(lambda v: np.abs(v))),
               lambda: one_node("Gemm", 11, None, inputs=_ab([2, 3], [3, 4])), 9),
        Mutant("scatter-max-ge", "adapter", adapter("ScatterElements", 18, 16, post=swap_op("Greater",
                                                                                             "GreaterOrEqual")),
               lambda: one_node("ScatterElements", 18, {"axis": 0, "reduction": "max"}, inputs=[
                   ("x", T.FLOAT, [4, 3]), ("u", T.FLOAT, [2, 3])], consts={"i": np.array(
                       [[1, 0, 3], [2, 1, 0]], _I64)}, order=["x", "i", "u"]), 16),
        Mutant("max-12-8-swapped", "adapter", adapter("Max", 12, 8, post=swap_op("Max", "Min")),
               lambda: one_node("Max", 12, None, inputs=_ab([2, 3], [2, 3], T.INT32)), 8),
        Mutant("equal-11-7-not", "adapter", adapter("Equal", 11, 7, post=swap_op("Or", "And")),
               lambda: one_node("Equal", 11, None, inputs=_ab([2, 3], [2, 3], T.FLOAT)), 7),
        Mutant("shape-15-13-slice", "adapter", adapter("Shape", 15, 13, post=change_const(lambda v: v + 1)),
               lambda: one_node("Shape", 15, {"start": 1}, [2, 3, 4]), 13),
        Mutant("onehot-11-9-depth", "adapter", adapter("OneHot", 11, 9, post=swap_op("Add", "Sub")),
               lambda: one_node("OneHot", 11, {"axis": -1}, inputs=[("x", T.INT64, [2, 3])], consts={
                   "d": np.array(5, _I64), "v": np.array([0, 1], np.float32)}), 9),
        Mutant("reducemax-13-18-noop", "adapter", _noop_reduce(), _empty_axes_reduce("ReduceMax", 13), 18),
    ]


def _noop_reduce() -> Any:
    """ReduceMax-13 → 18 writing ``noop_with_empty_axes=1`` (issue 31's example; wrong for ``axes=[]``)."""
    def patch(mp: Any) -> None:
        import lowerer.steps.generic as generic

        real = generic.cross

        def wrong(em: Any, step: Any, direction: str, *args: Any, **kwargs: Any) -> None:
            real(em, step, direction, *args, **kwargs)
            for n in em.nodes:
                if n.op_type == "ReduceMax":
                    n.attribute.extend([__import__("onnx").helper.make_attribute("noop_with_empty_axes", 1)])

        mp.setattr(generic, "cross", wrong)
    return patch


def _lowerings() -> list[Mutant]:
    return [
        Mutant("trilu-upper-flipped", "lowering", lowering("Trilu", 14, change_const(lambda v: 1 - v)),
               lambda: one_node("Trilu", 14, {"upper": 1}, [4, 5]), 13),
        Mutant("mod-fmod-sign", "lowering", lowering("Mod", 13, swap_op("Less", "Greater")),
               lambda: one_node("Mod", 13, None, inputs=_ab([3, 4], [3, 4], T.INT32)), 9),
        Mutant("cumsum-exclusive", "lowering", lowering("CumSum", 14, swap_op("Add", "Sub")),
               lambda: one_node("CumSum", 14, None, [3, 4], consts={"axis": np.array(1, _I64)}), 10),
        Mutant("constantofshape-value", "lowering", lowering("ConstantOfShape", 9, change_const(lambda v: v + 1)),
               lambda: one_node("ConstantOfShape", 9, {"value": __import__("onnx").numpy_helper.from_array(
                   np.array([2.0], np.float32))}, inputs=[], consts={"s": np.array([2, 3], _I64)}), 8),
        Mutant("gatherelements-axis", "lowering", lowering("GatherElements", 11, set_attr(
            "Gather", "axis", lambda v: 1 - (v or 0))), lambda: one_node(
                "GatherElements", 11, {"axis": 0}, [3, 3], consts={"i": np.array([[0, 2, 1], [1, 0, 2]], _I64)}), 10),
        Mutant("where-9-lowering-swapped", "lowering", lowering("Where", 9, swap_op("Mul", "Add")), lambda: one_node(
            "Where", 9, None, inputs=[("c", T.BOOL, [2, 3]), ("a", T.FLOAT, [2, 3]), ("b", T.FLOAT, [2, 3])]), 8),
        Mutant("expand-8-lowering-constant", "lowering", lowering("Expand", 8, swap_op("Mul", "Add")),
               lambda: one_node("Expand", 8, None, [1, 3], consts={"s": np.array([2, 3], _I64)}), 7),
    ]


def _expansions() -> list[Mutant]:
    return [
        Mutant("hardswish-alpha", "expansion", expansion(set_attr("HardSigmoid", "alpha", lambda v: v * 2)),
               lambda: one_node("HardSwish", 14, None, [3, 4]), 13),
        Mutant("layernorm-sub-add", "expansion", expansion(swap_op("Sub", "Add")),
               lambda: one_node("LayerNormalization", 17, {"axis": -1}, inputs=[
                   ("x", T.FLOAT, [2, 3, 4]), ("s", T.FLOAT, [4]), ("b", T.FLOAT, [4])]), 13),
        Mutant("gelu-constant", "expansion", expansion(_first_float_const(lambda v: v + 0.25)),
               lambda: one_node("Gelu", 20, None, [3, 4]), 13),
    ]


def _first_float_const(fn: Any) -> Any:
    """The first float constant an expansion made (an attribute value written as a constant) changed."""
    import onnx
    from onnx import numpy_helper

    def post(em: Any) -> None:
        for n in em.nodes:
            for a in n.attribute:
                if a.name == "value" and a.t.data_type in (T.FLOAT, T.DOUBLE):
                    v = numpy_helper.to_array(a.t)
                    a.t.CopyFrom(numpy_helper.from_array(np.asarray(fn(v)).astype(v.dtype), a.t.name))
                    return
                if a.name == "value_float":
                    a.f = float(fn(a.f))
                    return
            if n.op_type == "CastLike" or n.op_type == "Constant":
                continue
        for t in em.constants:
            if t.data_type in (T.FLOAT, T.DOUBLE):
                v = numpy_helper.to_array(t)
                t.CopyFrom(numpy_helper.from_array(np.asarray(fn(v)).astype(v.dtype), t.name))
                return
        raise AssertionError(f"no float constant in {[n.op_type for n in em.nodes]} ({onnx.__version__})")
    return post


def _wrong_reference_hardmax(ins: Any, at: Any, v: int) -> Any:
    """Hardmax-11 giving 1 at every maximum (not only the first); version 13 stays right."""
    x = ins[0]
    if v >= 13:
        return [reference.hardmax(x, version=v, axis=at.get("axis"))]
    rows = x.reshape(x.shape[0], -1)
    return [(rows == rows.max(axis=1, keepdims=True)).astype(x.dtype).reshape(x.shape)]


def _reference() -> list[Mutant]:
    return [
        Mutant("reference-legacy-add-wrong", "reference", reference_op("Add", _legacy_add_wrong),
               lambda: one_node("Add", 6, {"broadcast": 1, "axis": 1}, inputs=_ab([2, 3, 4], [3])), 7),
        Mutant("reference-hardmax-last", "reference", reference_op("Hardmax", _wrong_reference_hardmax),
               lambda: one_node("Hardmax", 11, {"axis": 1}, [3, 4], elem=T.DOUBLE), 13),
        Mutant("reference-softmax-axis", "reference", reference_op("Softmax", lambda ins, at, v: [
            reference.coerced_softmax(ins[0], op="Softmax", version=v, axis=0 if v < 13 else at.get("axis"))]),
            lambda: one_node("Softmax", 11, {"axis": 1}, [3, 4], elem=T.BFLOAT16), 13),
    ]


def _legacy_add_wrong(ins: Any, at: Any, v: int) -> Any:
    """Add-6 with ``axis`` aligning B at the last dims instead (only below 7: Add-7 stays right)."""
    a, b = ins[0], ins[1]
    if v >= 7 or b.ndim == a.ndim:
        return [np.asarray(a + b)]
    moved = np.moveaxis(a, int(at.get("axis", 0)), -1) + b
    return [np.asarray(np.moveaxis(moved, -1, int(at.get("axis", 0))) * 2)]


#: The rule area of an op (a module of ``lowerer/rules``), for the mutants that do not name theirs.
_AREA = {"ArgMax": "argmax", "ArgMin": "argmax", "Hardmax": "hardmax", "Softmax": "hardmax", "LogSoftmax": "hardmax",
         "GlobalMaxPool": "global_max_pool", "Add": "elementwise", "Sub": "elementwise", "Mul": "elementwise",
         "Div": "elementwise",
         "Max": "elementwise", "Equal": "elementwise", "Gemm": "elementwise", "ReduceMax": "reduction",
         "ReduceSum": "reduction", "Squeeze": "reduction", "Unsqueeze": "reduction", "Split": "shape_ops",
         "Slice": "shape_ops", "Pad": "shape_ops", "Shape": "shape_ops", "OneHot": "shape_ops",
         "ScatterElements": "scatter", "Trilu": "trilu", "Mod": "mod", "CumSum": "cumsum",
         "ConstantOfShape": "constant_of_shape", "GatherElements": "gather_elements", "Where": "expand_where",
         "Expand": "expand_where"}
_CHECK = {"reference": "reference", "engine": "engine"}


def _placed(mutants: list[Mutant]) -> list[Mutant]:
    """The mutants with their area (from the model's op where not given) and check (from the family)."""
    for m in mutants:
        if not m.area:
            m.area = "expansion" if m.family == "expansion" else _AREA[m.model().graph.node[0].op_type]
        if m.check == "rewrite":
            m.check = _CHECK.get(m.family, "reference" if m.model().opset_import[0].version < 7 else "rewrite")
        if m.family == "reference":
            m.changes_output = False
    return mutants


MUTANTS: list[Mutant] = _placed([*_owned(), *_decompositions(), *_adapters(), *_lowerings(), *_expansions(),
                                 *_reference(), *RULE_MUTANTS, *CHECK_MUTANTS])

#: The CI subset: one per family (kind of entry patched) and per check, quick ones.
QUICK = ("argmax-drops-select-last", "argmax-flip-in-place", "hardmax-last-maximum", "add-6-7-no-unsqueeze",
         "reducemax-13-18-noop", "scatter-max-ge", "trilu-upper-flipped", "layernorm-sub-add",
         "reference-legacy-add-wrong", "shape-slice-start", "scatter-add-loop-mul", "argmax-in-loop-body",
         "softmax-11-13-declared-same", "model-check-trilu-output-1", "model-check-pass-scales-output-1",
         "deployment-pass-scales-output-1", "reference-globalmaxpool-double-min", "scan-9-8-reversed-direction")
