"""The probes of :mod:`lowerer.cli.probes`: small models, each with inputs chosen to expose a runtime.

Each :class:`Probe` is one op-version (or one form lowerer writes) in one model of a single node or a
few, with inputs that tell a right kernel from a near miss: ties of every multiplicity (small
integers as floats), the maximum first and last in a row, rows of 64 with ties, all-equal rows,
non-last axes of the coerced-2-D ops (Softmax/LogSoftmax/Hardmax before 13), reduction axes given
as an input and as an attribute, Shape's ``start``/``end``. :func:`expansion_probes` adds the bodies
lowerer writes for Gelu-20, RMSNormalization-23, LayerNormalization-17 and Attention-23 (converted
with :func:`lowerer.convert` at run time), and :data:`LOWERED` the forms it writes for ops a lower opset lacks
(the Loop of a scatter reduction, the If of Reshape-14's ``allowzero``, HardSwish's body).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["EXPANSIONS", "LOWERED", "Probe", "base_probes", "make_model", "ties"]

_F = TensorProto.FLOAT
_I64 = TensorProto.INT64


@dataclass(frozen=True)
class Probe:
    """One probe: what it tests, its model and its inputs.

    Attributes:
        name: unique, ``Softmax-11-axis1`` (op-version and what varies).
        group: the family (``mission``, ``topk``, ``ties16``, ``reduce``, ``shape``, ``forms``, ``expansion``,
            ``reduce-forms``).
        tests: what a wrong result would mean, in a few words.
        model: the model (weights inside).
        feeds: its inputs by name.
    """

    name: str
    group: str
    tests: str
    model: onnx.ModelProto = field(repr=False)
    feeds: dict[str, np.ndarray] = field(repr=False)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[tuple[str, int, Sequence[int | str]]],
               outputs: Sequence[tuple[str, int]], opset: int,
               initializers: Sequence[onnx.TensorProto] = ()) -> onnx.ModelProto:
    """A one-graph model at ``opset`` (IR version the lowest that holds it, from 7)."""
    graph = helper.make_graph(
        list(nodes), "probe", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = max(7, helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))
    inferred = onnx.shape_inference.infer_shapes(model)
    for out, known in zip(model.graph.output, inferred.graph.output, strict=True):
        if known.type.tensor_type.HasField("shape"):
            out.CopyFrom(known)
    return model


def ties(shape: Sequence[int], seed: int, levels: int = 3) -> np.ndarray:
    """Float32 small integers in ``[0, levels)``: ties of every multiplicity; row 0 all equal where 2-D+."""
    data = np.random.default_rng(seed).integers(0, levels, size=tuple(shape)).astype(np.float32)
    if data.ndim >= 2:
        data.reshape(-1, data.shape[-1])[0] = 1.0
    return data


def _rows64() -> np.ndarray:
    """Rows of 64 with the maximum tied at first/last and at several places, and one all-equal row."""
    rows = np.zeros((6, 64), np.float32)
    rows[0, [0, 63]] = 5.0
    rows[1, [3, 17, 40, 63]] = 2.0
    rows[2, :] = 1.0
    rows[3, [62, 63]] = 7.0
    rows[4] = np.arange(64, dtype=np.float32) % 8
    rows[5, [0, 1, 2]] = -1.0
    rows[5, 3:] = -2.0
    return rows


def _rows16() -> np.ndarray:
    """Rows of 16 (the shortest rows OpenVINO 2023.0/2024.0 break ties on) with ties, as :func:`_rows64`."""
    rows = np.zeros((6, 16), np.float32)
    rows[0, [0, 15]] = 5.0
    rows[1, [3, 7, 11, 15]] = 2.0
    rows[2, :] = 1.0
    rows[3, [14, 15]] = 7.0
    rows[4] = np.arange(16, dtype=np.float32) % 4
    rows[5, [0, 1, 2]] = -1.0
    rows[5, 3:] = -2.0
    return rows


def _one(op: str, opset: int, x: np.ndarray, out_type: int = _F, name: str = "", group: str = "mission",
         tests: str = "", **attrs: Any) -> Probe:
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    detail = "-".join(f"{k}{v}" for k, v in attrs.items())
    label = name or f"{op}-{opset}" + (f"-{detail}" if detail else "")
    model = make_model([node], [("x", _F, x.shape)], [("y", out_type)], opset)
    return Probe(label, group, tests or f"{op}-{opset} {detail} on tie-heavy input", model, {"x": x})


def _mission() -> list[Probe]:
    probes: list[Probe] = []
    x3 = ties((2, 3, 4), 1)
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for opset in (1, 11, 13):
            for axis in (-1, 1, 0):
                probes.append(_one(op, opset, x3, axis=axis,
                                   tests=f"{op}-{opset} axis={axis}: " + ("last axis" if axis == -1 else
                                         "coerced 2-D rows before 13, one axis from 13")))
        for opset in (1, 11, 13):
            probes.append(_one(op, opset, _rows64(), name=f"{op}-{opset}-rows64",
                               tests=f"{op}-{opset} on rows of 64 with ties, max first and last"))
    for op in ("ArgMax", "ArgMin"):
        for opset in (1, 11, 12, 13):
            for axis in (0, 1, -1) if opset >= 11 else (0, 1):
                for keepdims in (0, 1):
                    probes.append(_one(op, opset, x3, _I64, axis=axis, keepdims=keepdims))
            if opset >= 12:
                for axis in (1, -1):
                    probes.append(_one(op, opset, x3, _I64, axis=axis, keepdims=1, select_last_index=1))
            probes.append(_one(op, opset, _rows64(), _I64, name=f"{op}-{opset}-rows64", axis=1, keepdims=1,
                               tests=f"{op}-{opset} rows of 64 with ties: first extremum"))
        probes.append(_one(op, 13, -_rows64(), _I64, name=f"{op}-13-rows64-neg", axis=1, keepdims=0,
                           select_last_index=1, tests=f"{op}-13 last extremum on rows of 64"))
    return probes


def _topk() -> list[Probe]:
    probes: list[Probe] = []
    x = np.concatenate([ties((4, 8), 2), _rows64()[:, :8]])
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    for opset in (1, 10, 11):
        for largest in ((1, 0) if opset == 11 else (1,)):
            if opset == 1:
                node = helper.make_node("TopK", ["x"], ["v", "i"], k=3, axis=-1)
                inits: list[onnx.TensorProto] = []
            else:
                extra: dict[str, Any] = {"largest": largest, "sorted": 1} if opset == 11 else {}
                node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, **extra)
                inits = [k]
            model = make_model([node], [("x", _F, x.shape)], [("v", _F), ("i", _I64)], opset, inits)
            probes.append(Probe(f"TopK-{opset}-largest{largest}", "topk",
                                f"TopK-{opset} k=3 with ties: the lower index first", model, {"x": x}))
    long_rows = np.random.default_rng(12).integers(0, 2, size=(64, 64)).astype(np.float32)
    for opset in (1, 10, 11):
        for count in (1, 3):
            if opset == 1:
                node = helper.make_node("TopK", ["x"], ["v", "i"], k=count, axis=-1)
                inits = []
            else:
                node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1)
                inits = [numpy_helper.from_array(np.array([count], np.int64), "k")]
            model = make_model([node], [("x", _F, long_rows.shape)], [("v", _F), ("i", _I64)], opset, inits)
            probes.append(Probe(f"TopK-{opset}-k{count}-rows64", "topk", f"TopK-{opset} k={count} on rows of 64 "
                                "zeros and ones: the lower index first", model, {"x": long_rows}))
    # k from 2 to 6 right, 1 and 7+ wrong on rows of 16 to 1024 with ties on OpenVINO 2023.0-2026.4 (measured)
    ties256 = np.concatenate([np.ones((2, 256), np.float32),
                              np.random.default_rng(13).integers(0, 3, size=(4, 256)).astype(np.float32)])
    for count, largest in ((2, 1), (6, 1), (7, 1), (20, 1), (3, 0), (7, 0)):
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=largest)
        inits = [numpy_helper.from_array(np.array([count], np.int64), "k")]
        model = make_model([node], [("x", _F, ties256.shape)], [("v", _F), ("i", _I64)], 11, inits)
        probes.append(Probe(f"TopK-11-k{count}-largest{largest}-ties256", "topk", f"TopK-11 k={count} on rows of 256 "
                            "all equal or in 0..2: the lower index first", model, {"x": ties256}))
    for op in ("ArgMax", "ArgMin"):
        for axis in (0, 1):
            data = long_rows if axis == 1 else np.ascontiguousarray(long_rows.T)
            model = make_model([helper.make_node(op, ["x"], ["y"], axis=axis)], [("x", _F, data.shape)],
                               [("y", _I64)], 13)
            probes.append(Probe(f"{op}-13-axis{axis}-len64", "topk", f"{op}-13 over 64 zeros and ones on axis "
                                f"{axis} ({'last' if axis else 'not last'})", model, {"x": data}))
    model = make_model([helper.make_node("GlobalMaxPool", ["x"], ["y"])], [("x", _F, (2, 3, 4, 5))], [("y", _F)], 13)
    probes.append(Probe("GlobalMaxPool-1", "topk", "GlobalMaxPool over H, W", model, {"x": ties((2, 3, 4, 5), 3)}))
    return probes


def _ties16() -> list[Probe]:
    """ArgMax/ArgMin/Hardmax over rows of 16 with ties (last axis), and Hardmax-1/11's coerced rows of 64."""
    probes: list[Probe] = []
    for op in ("ArgMax", "ArgMin"):
        for opset in (1, 11, 12, 13):
            for keepdims in (0, 1):
                probes.append(_one(op, opset, _rows16(), _I64, name=f"{op}-{opset}-rows16-keepdims{keepdims}",
                                   group="ties16", axis=1, keepdims=keepdims,
                                   tests=f"{op}-{opset} rows of 16 with ties: first extremum"))
        for opset in (12, 13):
            probes.append(_one(op, opset, _rows16(), _I64, name=f"{op}-{opset}-rows16-last", group="ties16", axis=-1,
                               keepdims=1, select_last_index=1, tests=f"{op}-{opset} last extremum on rows of 16"))
    for opset in (1, 11, 13):
        probes.append(_one("Hardmax", opset, _rows16(), name=f"Hardmax-{opset}-rows16", group="ties16", axis=1,
                           tests=f"Hardmax-{opset} on rows of 16 with ties"))
    coerced = np.stack([_rows16()[:4], _rows16()[2:]]).astype(np.float32)  # (2, 4, 16): rows of 64 from axis 1
    for opset in (1, 11):
        probes.append(_one("Hardmax", opset, coerced, name=f"Hardmax-{opset}-coerced64", group="ties16", axis=1,
                           tests=f"Hardmax-{opset} axis=1 of (2, 4, 16): coerced rows of 64 with ties"))
    return probes


def _reduce() -> list[Probe]:
    probes: list[Probe] = []
    x = np.random.default_rng(4).standard_normal((2, 3, 4)).astype(np.float32)
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    for op in ("ReduceMean", "ReduceSum", "ReduceMax"):
        for keepdims in (0, 1):
            as_input = 13 if op == "ReduceSum" else 18
            node = helper.make_node(op, ["x", "axes"], ["y"], keepdims=keepdims)
            model = make_model([node], [("x", _F, x.shape)], [("y", _F)], as_input, [axes])
            probes.append(Probe(f"{op}-{as_input}-axes-input-keepdims{keepdims}", "reduce",
                                f"{op}-{as_input} axes=[1] as an input (not reduce-all)", model, {"x": x}))
            as_attr = 11 if op == "ReduceSum" else 13
            node = helper.make_node(op, ["x"], ["y"], axes=[1], keepdims=keepdims)
            model = make_model([node], [("x", _F, x.shape)], [("y", _F)], as_attr)
            probes.append(Probe(f"{op}-{as_attr}-axes-attribute-keepdims{keepdims}", "reduce",
                                f"{op}-{as_attr} axes=[1] as an attribute", model, {"x": x}))
        node = helper.make_node(op, ["x"], ["y"], keepdims=0)
        model = make_model([node], [("x", _F, x.shape)], [("y", _F)], 18)
        probes.append(Probe(f"{op}-18-no-axes", "reduce", f"{op}-18 without axes: reduce all", model, {"x": x}))
    return probes


def _shape() -> list[Probe]:
    probes: list[Probe] = []
    x = np.zeros((2, 3, 4, 5), np.float32)
    shapes: tuple[tuple[int, dict[str, Any]], ...] = (
        (13, {}), (15, {}), (15, {"start": 1}), (15, {"start": 1, "end": -1}), (15, {"end": 2}), (15, {"start": -2}))
    for opset, attrs in shapes:
        node = helper.make_node("Shape", ["x"], ["y"], **attrs)
        model = make_model([node], [("x", _F, x.shape)], [("y", _I64)], opset)
        detail = "-".join(f"{k}{v}" for k, v in attrs.items())
        probes.append(Probe(f"Shape-{opset}" + (f"-{detail}" if detail else ""), "shape",
                            f"Shape-{opset} {detail or 'whole shape'}", model, {"x": x}))
    # Shape start/end feeding a Reshape: the shape-validation failure of the dynamo exports
    shape = helper.make_node("Shape", ["x"], ["s"], start=0, end=2)
    minus = numpy_helper.from_array(np.array([-1], np.int64), "minus")
    cat = helper.make_node("Concat", ["s", "minus"], ["t"], axis=0)
    reshape = helper.make_node("Reshape", ["x", "t"], ["y"])
    model = make_model([shape, cat, reshape], [("x", _F, ("N", 3, 4, 5))], [("y", _F)], 15, [minus])
    probes.append(Probe("Shape-15-end2-Reshape", "shape", "Shape-15 end=2 drives a Reshape (dynamic batch)",
                        model, {"x": np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)}))
    # Each dim by its own Shape start/end, concatenated with constants into a Reshape's shape (torch dynamo's views)
    first = helper.make_node("Shape", ["x"], ["a"], start=0, end=1)
    second = helper.make_node("Shape", ["x"], ["b"], start=1, end=2)
    split = numpy_helper.from_array(np.array([2, 2], np.int64), "split")
    cat = helper.make_node("Concat", ["a", "b", "split"], ["t"], axis=0)
    reshape = helper.make_node("Reshape", ["x", "t"], ["y"], allowzero=1)
    model = make_model([first, second, cat, reshape], [("x", _F, ("N", "S", 4))], [("y", _F)], 15, [split])
    probes.append(Probe("Shape-15-dims-Reshape", "shape", "Shape-15 start/end of each dynamic dim, concatenated into a "
                        "Reshape's shape (torch dynamo's view)", model,
                        {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}))
    return probes


def _consts(**arrays: np.ndarray) -> list[onnx.TensorProto]:
    return [numpy_helper.from_array(v, k) for k, v in arrays.items()]


def _filled_and_split(add: Callable[..., None]) -> None:
    """ConstantOfShape with and without ``value``, and a Split with an empty part (plain forms every runtime reads)."""
    n = helper.make_node
    add("ConstantOfShape-9", "ConstantOfShape from Shape, value 2",
        [n("Shape", ["x"], ["s"]), n("ConstantOfShape", ["s"], ["c"],
                                     value=numpy_helper.from_array(np.array([2.0], np.float32))),
         n("Mul", ["x", "c"], ["y"])], 13, [])
    add("ConstantOfShape-9-no-value", "ConstantOfShape without value (ONNX's default: float32 0)",
        [n("Shape", ["x"], ["s"]), n("ConstantOfShape", ["s"], ["c"]), n("Add", ["x", "c"], ["y"])], 13, [])
    add("ConstantOfShape-9-bool", "ConstantOfShape from Shape filled with bool true, a Where's condition",
        [n("Shape", ["x"], ["s"]), n("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([True]))),
         n("Neg", ["x"], ["m"]), n("Where", ["c", "x", "m"], ["y"])], 13, [])
    add("ConstantOfShape-9-bool-constant-shape", "ConstantOfShape of a constant shape filled with bool true, a Where's "
        "condition", [n("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([True]))),
                      n("Neg", ["x"], ["m"]), n("Where", ["c", "x", "m"], ["y"])], 13,
        _consts(s=np.array([2, 3, 4], np.int64)))
    add("ConstantOfShape-9-bool-and", "ConstantOfShape of a constant shape filled with bool true, And x > -1e30, a "
        "Where's condition", [n("ConstantOfShape", ["s"], ["c"], value=numpy_helper.from_array(np.array([True]))),
                              n("Greater", ["x", "low"], ["g"]), n("And", ["c", "g"], ["k"]), n("Neg", ["x"], ["m"]),
                              n("Where", ["k", "x", "m"], ["y"])], 13,
        _consts(s=np.array([2, 3, 4], np.int64), low=np.array(-1e30, np.float32)))
    add("ConstantOfShape-9-scalar", "ConstantOfShape of an empty shape (a 0-d output), value 2.5, times x",
        [n("ConstantOfShape", ["e"], ["c"], value=numpy_helper.from_array(np.array([2.5], np.float32))),
         n("Mul", ["x", "c"], ["y"])], 13, _consts(e=np.zeros(0, np.int64)))
    add("Split-13-empty-part", "Split into 2, 0 and 2 along the last axis, the parts concatenated back",
        [n("Split", ["x", "sp"], ["a", "b", "c"], axis=2), n("Concat", ["c", "b", "a"], ["y"], axis=2)], 13,
        _consts(sp=np.array([2, 0, 2], np.int64)))


def _gathers_and_wheres(add: Callable[..., None]) -> None:
    """Gather over constant indices (negative, a list, a 2-D list, a scalar); Where (constant condition, broadcast)."""
    n = helper.make_node
    add("Gather-13-negative", "Gather with negative indices", [n("Gather", ["x", "g"], ["y"], axis=2)], 13,
        _consts(g=np.array([-1, 0, -4], np.int64)))
    add("Gather-13-list", "Gather with a constant list of non-negative indices",
        [n("Gather", ["x", "g"], ["y"], axis=1)], 13, _consts(g=np.array([2, 0], np.int64)))
    add("Gather-13-list-2d", "Gather with a constant 2-D list of indices", [n("Gather", ["x", "g"], ["y"], axis=2)],
        13, _consts(g=np.array([[3, 0], [1, -2]], np.int64)))
    add("Gather-13-scalar-negative", "Gather with a constant scalar index -1", [n("Gather", ["x", "g"], ["y"], axis=2)],
        13, _consts(g=np.array(-1, np.int64)))
    add("Where-16-constant-condition", "Where whose condition is a constant all false (Attention-23's guard)",
        [n("Add", ["x", "x"], ["s"]), n("Where", ["c", "z", "s"], ["y"])], 16,
        _consts(c=np.zeros((3, 1), np.bool_), z=np.array([0.0], np.float32)))
    add("Where-16", "Where broadcast", [n("Greater", ["x", "c"], ["b"]), n("Where", ["b", "x", "c"], ["y"])], 16,
        _consts(c=np.array([1.0], np.float32)))


def _forms() -> list[Probe]:
    """The ops lowerer's rewrites write (one-hot, iota, reshapes, control flow)."""
    x = ties((2, 3, 4), 5)
    xi = np.array([[0, 2, 1], [3, 0, 2]], np.int64)
    p: list[Probe] = []

    def add(name: str, tests: str, nodes: list[onnx.NodeProto], opset: int, inits: list[onnx.TensorProto],
            out_type: int = _F, feeds: dict[str, np.ndarray] | None = None) -> None:
        feeds = feeds if feeds is not None else {"x": x}
        types = {np.dtype(np.float32): _F, np.dtype(np.int64): _I64, np.dtype(np.bool_): TensorProto.BOOL}
        inputs = [(n, types[v.dtype], v.shape) for n, v in feeds.items()]
        p.append(Probe(name, "forms", tests, make_model(nodes, inputs, [("y", out_type)], opset, inits), feeds))

    n = helper.make_node
    for opset in (9, 11):
        add(f"OneHot-{opset}", "OneHot depth 4, values [0, 1], last axis",
            [n("OneHot", ["i", "depth", "values"], ["y"], axis=-1)], opset,
            _consts(depth=np.array([4], np.int64), values=np.array([0, 1], np.float32)), feeds={"i": xi})
    add("Equal-iota-Cast-13", "one-hot as Equal against an iota + Cast (the hardmax form)",
        [n("ArgMax", ["x"], ["a"], axis=-1, keepdims=1), n("Equal", ["a", "iota"], ["e"]),
         n("Cast", ["e"], ["y"], to=_F)], 13, _consts(iota=np.arange(4, dtype=np.int64)))
    for opset in (1, 9, 11, 13):
        add(f"Flatten-{opset}-axis2", "Flatten axis=2", [n("Flatten", ["x"], ["y"], axis=2)], opset, [])
    nan_x = np.array([[np.nan, 1, np.inf, -np.inf], [0, -0.0, np.nan, 3]], np.float32)
    add("IsNaN-13", "IsNaN on NaN, ±inf, ±0 and finite values (isnan-equal writes Not(Equal(x, x)))",
        [n("IsNaN", ["x"], ["y"])], 13, [], TensorProto.BOOL, {"x": nan_x})
    add("Reshape-1-attribute", "Reshape-1 (shape as an attribute)", [n("Reshape", ["x"], ["y"], shape=[6, 4])], 1,
        [])
    p[-1].model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", _F, [6, 4]))
    for opset in (5, 13):
        add(f"Reshape-{opset}-zero-minus1", "Reshape 0 copies the dim, -1 infers",
            [n("Reshape", ["x", "s"], ["y"])], opset, _consts(s=np.array([0, -1], np.int64)))
    add("Reshape-14-allowzero1", "Reshape-14 allowzero=1 without zeros",
        [n("Reshape", ["x", "s"], ["y"], allowzero=1)], 14, _consts(s=np.array([4, 6], np.int64)))
    add("Reshape-14-allowzero0", "Reshape-14 allowzero=0 with a 0 (copy)",
        [n("Reshape", ["x", "s"], ["y"], allowzero=0)], 14, _consts(s=np.array([2, 0, -1], np.int64)))
    add("Transpose-13", "Transpose perm 2,0,1", [n("Transpose", ["x"], ["y"], perm=[2, 0, 1])], 13, [])
    add("Slice-13-negative-step", "Slice-13 with negative step and clamped ends",
        [n("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], 13,
        _consts(st=np.array([-1, 0], np.int64), en=np.array([-1000, 100], np.int64), ax=np.array([2, 1], np.int64),
                sp=np.array([-1, 2], np.int64)))
    _gathers_and_wheres(add)
    add("Range-11", "Range(0, 7, 2) cast", [n("Range", ["a", "b", "d"], ["r"]), n("Cast", ["r"], ["y"], to=_F)],
        11, _consts(a=np.array(0, np.int64), b=np.array(7, np.int64), d=np.array(2, np.int64)),
        feeds={})
    add("Expand-13", "Expand [3,1] to [2,3,4]", [n("Expand", ["c", "s"], ["e"]), n("Add", ["x", "e"], ["y"])], 13,
        _consts(c=np.array([[1.0], [2.0], [3.0]], np.float32), s=np.array([2, 3, 4], np.int64)))
    _filled_and_split(add)
    p.extend(_hardswish_bodies())
    p.extend(_control_flow(x))
    p.extend(_toolkit_forms(x))
    return p


def _toolkit_forms(x: np.ndarray) -> list[Probe]:
    """Forms a whole model holds that a build may refuse: coerced axes sharing a tensor, NMS, cubic Resize."""
    n = helper.make_node
    shared = make_model([n("Softmax", ["x"], ["s"], axis=1), n("Hardmax", ["x"], ["h"], axis=1),
                         n("Add", ["s", "h"], ["y"])], [("x", _F, x.shape)], [("y", _F)], 11)
    probes = [Probe("Softmax-Hardmax-11-shared-axis1", "forms", "Softmax-11 and Hardmax-11 on axis 1 (coerced to "
                    "2-D) reading one tensor", shared, {"x": x})]
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 0.9, 1, 1.9], [0, 3, 1, 4], [0, 3.05, 1, 4.05],
                       [0, 6, 1, 7]]], np.float32)
    scores = np.array([[[0.9, 0.75, 0.6, 0.95, 0.5, 0.3]]], np.float32)
    nms = make_model([n("NonMaxSuppression", ["b", "s", "m", "iou"], ["y"])],
                     [("b", _F, boxes.shape), ("s", _F, scores.shape)], [("y", _I64)], 11,
                     _consts(m=np.array([3], np.int64), iou=np.array([0.3], np.float32)))
    probes.append(Probe("NonMaxSuppression-11-inputs", "forms", "NonMaxSuppression on boxes and scores given at run "
                        "time", nms, {"b": boxes, "s": scores}))
    image = np.linspace(-1, 1, 2 * 3 * 5 * 5, dtype=np.float32).reshape(2, 3, 5, 5)
    for opset, mode, where in ((19, "cubic", "half_pixel"), (13, "cubic", "align_corners"),
                               (19, "linear", "half_pixel")):
        resize = make_model([n("Resize", ["x", "", "sc"], ["y"], mode=mode, coordinate_transformation_mode=where)],
                            [("x", _F, image.shape)], [("y", _F)], opset,
                            _consts(sc=np.array([1, 1, 2, 2], np.float32)))
        probes.append(Probe(f"Resize-{opset}-{mode}-{where}", "forms", f"Resize x2, mode {mode}, {where}", resize,
                            {"x": image}))
    return probes


def _hardswish_bodies() -> list[Probe]:
    """HardSwish's body HardSigmoid(x) * x: named as lowerer names it or not, Mul(x, hs) or Mul(hs, x)."""
    x = np.linspace(-4, 4, 16, dtype=np.float32).reshape(2, 8)
    probes = []
    for label, names, operands in (("named-x-hs", ("hs/HardSigmoid__lw2", "hs/Mul__lw3"), ["x", "h"]),
                                   ("unnamed-x-hs", ("", ""), ["x", "h"]),
                                   ("named-hs-x", ("hs/HardSigmoid__lw2", "hs/Mul__lw3"), ["h", "x"])):
        nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], name=names[0], alpha=1 / 6, beta=0.5),
                 helper.make_node("Mul", operands, ["y"], name=names[1])]
        probes.append(Probe(f"HardSigmoid-Mul-13-{label}", "forms", "HardSwish's body as written: HardSigmoid then "
                            f"Mul({', '.join(operands)}), {'named' if names[0] else 'unnamed'}",
                            make_model(nodes, [("x", _F, x.shape)], [("y", _F)], 13), {"x": x}))
    return probes


def _control_flow(x: np.ndarray) -> list[Probe]:
    n = helper.make_node
    then = helper.make_graph([n("Neg", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", _F, None)])
    other = helper.make_graph([n("Abs", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", _F, None)])
    probes = []
    for flag in (True, False):
        model = make_model([n("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                           [("x", _F, x.shape), ("c", TensorProto.BOOL, ())], [("y", _F)], 13)
        probes.append(Probe(f"If-13-{'then' if flag else 'else'}", "forms", "If on a run-time condition",
                            model, {"x": x, "c": np.array(flag)}))
    body = helper.make_graph(
        [n("Identity", ["cond_in"], ["cond_out"]), n("Add", ["acc_in", "x"], ["acc_out"])], "body",
        [helper.make_tensor_value_info("i", _I64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", _F, x.shape)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", _F, x.shape)])
    model = make_model([n("Loop", ["trips", "", "x"], ["y"], body=body)], [("x", _F, x.shape)], [("y", _F)], 13,
                       _consts(trips=np.array(3, np.int64)))
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", _F, x.shape))
    probes.append(Probe("Loop-13", "forms", "Loop of 3 trips adding x", model, {"x": x}))
    return probes


def _limits() -> list[Probe]:
    """One Relu at each IR version from 7 to onnx's newest (opset 13), each opset 13..23 (IR 9): what loads."""
    x = np.linspace(-2, 2, 6, dtype=np.float32)
    probes = []
    for ir in range(7, onnx.IR_VERSION + 1):
        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", _F, x.shape)], [("y", _F)], 13)
        model.ir_version = ir
        probes.append(Probe(f"IR-{ir}", "limits", f"a model of IR version {ir} loads", model, {"x": x}))
    for opset in range(13, 24):
        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", _F, x.shape)], [("y", _F)], opset)
        model.ir_version = 9
        probes.append(Probe(f"opset-{opset}", "limits", f"a model importing opset {opset} loads", model, {"x": x}))
    return probes


def _entry_sources() -> list[Probe]:
    """The ops whose profile forms write them otherwise: Einsum diagonals, Gelu-20, GroupNormalization-21."""
    square = np.arange(32, dtype=np.float32).reshape(2, 4, 4) * 1.5 - 20
    p = []
    for label, equation in (("trace", "ii->"), ("diagonal", "ii->i"), ("batch-diagonal", "bii->bi")):
        x = square if equation.startswith("b") else square[0]
        model = make_model([helper.make_node("Einsum", ["x"], ["y"], equation=equation)], [("x", _F, x.shape)],
                           [("y", _F)], 12)
        p.append(Probe(f"Einsum-12-{label}", "forms", f"Einsum {equation} (einsum-diagonal writes Gather of the "
                       "diagonal + Einsum)", model, {"x": x}))
    rng = np.random.default_rng(12)
    q, kv, z = (rng.normal(size=s).astype(np.float32) for s in ((2, 3, 2, 4), (2, 3, 2, 4, 5), (2, 3, 2)))
    model = make_model([helper.make_node("Einsum", ["q", "kv", "z"], ["y"], equation="bshd,bshde,bsh->bshe")],
                       [("q", _F, q.shape), ("kv", _F, kv.shape), ("z", _F, z.shape)], [("y", _F)], 12)
    p.append(Probe("Einsum-12-three-operands", "forms", "Einsum bshd,bshde,bsh->bshe (linear attention's; "
                   "einsum-pairwise writes pairwise contractions)", model, {"q": q, "kv": kv, "z": z}))
    x = np.linspace(-6, 6, 64, dtype=np.float32).reshape(4, 16)
    model = make_model([helper.make_node("Gelu", ["x"], ["y"])], [("x", _F, x.shape)], [("y", _F)], 20)
    p.append(Probe("Gelu-20-none-wide", "forms", "Gelu-20 approximate=none over [-6, 6] (gelu-mul writes "
                   "Erf(x * 1/sqrt 2))", model, {"x": x}))
    return p + _group_norms()


def _group_norms() -> list[Probe]:
    """GroupNormalization-21 on a static rank-4 input, a dynamic batch and a rank-3 input (expand writes its body)."""
    rng = np.random.default_rng(15)
    p = []
    for label, shape, dims in (("static", (2, 16, 8, 8), (2, 16, 8, 8)), ("dynamic", (2, 16, 8, 8), ("N", 16, 8, 8)),
                               ("rank3", (2, 16, 50), (2, 16, 50))):
        x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
        inits = _consts(scale=np.linspace(0.5, 1.5, 16, dtype=np.float32),
                        bias=np.linspace(-1, 1, 16, dtype=np.float32))
        node = helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=4, epsilon=1e-5)
        model = make_model([node], [("x", _F, dims)], [("y", _F)], 21, inits)
        model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", _F, list(dims)))  # onnx infers none
        p.append(Probe(f"GroupNormalization-21-{label}", "forms", f"GroupNormalization-21, 4 groups of 16 channels, "
                       f"input {'x'.join(map(str, dims))} (expand writes its function body)", model, {"x": x}))
    return p


def base_probes() -> list[Probe]:
    """Every probe but the expansion bodies (no lowerer conversion needed)."""
    return [*_mission(), *_topk(), *_ties16(), *_reduce(), *_shape(), *_forms(), *_entry_sources(), *_limits()]


#: One-node models whose expansion bodies lowerer writes, and the targets they are written for.
EXPANSIONS: dict[str, Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]]] = {}


def _gelu(approximate: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = np.random.default_rng(6).standard_normal((2, 8)).astype(np.float32) * 3
    node = helper.make_node("Gelu", ["x"], ["y"], approximate=approximate)
    return make_model([node], [("x", _F, x.shape)], [("y", _F)], 20), {"x": x}


def _rms() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = np.random.default_rng(7).standard_normal((2, 3, 8)).astype(np.float32)
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 8, dtype=np.float32), "scale")
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-5)
    return make_model([node], [("x", _F, x.shape)], [("y", _F)], 23, [scale]), {"x": x}


def _layernorm() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = np.random.default_rng(8).standard_normal((2, 3, 8)).astype(np.float32)
    inits = _consts(scale=np.linspace(0.5, 1.5, 8, dtype=np.float32), bias=np.linspace(-1, 1, 8, dtype=np.float32))
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5)
    return make_model([node], [("x", _F, x.shape)], [("y", _F)], 17, inits), {"x": x}


def _attention(q_heads: int = 2, causal: int = 1, mask: bool = False) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Attention-23, 2 key/value heads and ``q_heads`` query heads (4: grouped-query attention), batch 1.

    ``mask``: a bool attn_mask input (batch 2, one mask per batch broadcast over the heads), random with every
    query row keeping at least its own position (no row fully masked).
    """
    rng = np.random.default_rng(9)
    batch = 2 if mask else 1
    shapes = {"q": (batch, q_heads, 4, 8), "k": (batch, 2, 4, 8), "v": (batch, 2, 4, 8)}
    feeds: dict[str, np.ndarray] = {name: rng.standard_normal(shape).astype(np.float32)
                                    for name, shape in shapes.items()}
    inputs = [(name, _F, shape) for name, shape in shapes.items()]
    if mask:
        feeds["m"] = (rng.random((batch, 1, 4, 4)) < 0.5) | np.eye(4, dtype=bool)
        inputs.append(("m", onnx.TensorProto.BOOL, (batch, 1, 4, 4)))
    node = helper.make_node("Attention", [name for name, _, _ in inputs], ["y"], is_causal=causal)
    return make_model([node], inputs, [("y", _F)], 23), feeds


def _rotary() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """RotaryEmbedding-23 on (batch, sequence, heads x 8), its cos/sin caches and position ids constants."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 4, 16)).astype(np.float32)
    angles = np.arange(16, dtype=np.float32)[:, None] * np.array([1.0, 0.1, 0.01, 0.001], np.float32)
    inits = _consts(cos=np.cos(angles), sin=np.sin(angles), pos=np.array([[0, 1, 2, 3], [5, 9, 9, 15]], np.int64))
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=2)
    return make_model([node], [("x", _F, x.shape)], [("y", _F)], 23, inits), {"x": x}


EXPANSIONS.update({"Gelu-20-none": lambda: _gelu("none"), "Gelu-20-tanh": lambda: _gelu("tanh"),
                   "RMSNormalization-23": _rms, "LayerNormalization-17": _layernorm, "Attention-23": _attention,
                   "Attention-23-gqa": lambda: _attention(4, 0), "Attention-23-noncausal": lambda: _attention(2, 0),
                   "Attention-23-bool-mask": lambda: _attention(2, 0, mask=True), "RotaryEmbedding-23": _rotary})


def _scatter_elements() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = ties((2, 6), 10)
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="max")
    feeds = {"x": x, "i": np.array([[0, 5, 0], [2, 2, 1]], np.int64), "u": ties((2, 3), 11) + 1}
    return make_model([node], [("x", _F, (2, 6)), ("i", _I64, (2, 3)), ("u", _F, (2, 3))], [("y", _F)], 18), feeds


def _scatter_nd() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="max")
    feeds = {"x": ties((4, 3), 12), "i": np.array([[1], [1]], np.int64), "u": ties((2, 3), 13) + 1}
    return make_model([node], [("x", _F, (4, 3)), ("i", _I64, (2, 1)), ("u", _F, (2, 3))], [("y", _F)], 18), feeds


def _reshape_allowzero() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    node = helper.make_node("Reshape", ["x", "s"], ["y"], allowzero=1)
    feeds = {"x": ties((2, 3, 4), 14), "s": np.array([4, 6], np.int64)}
    return make_model([node], [("x", _F, ("N", 3, 4)), ("s", _I64, (2,))], [("y", _F)], 14), feeds


def _hardswish() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    x = np.linspace(-4, 4, 16, dtype=np.float32).reshape(2, 8)
    return make_model([helper.make_node("HardSwish", ["x"], ["y"], name="hs")], [("x", _F, x.shape)], [("y", _F)],
                      14), {"x": x}


#: One-node models whose lowered forms lowerer writes (a Loop, an If, a body), and the targets they are written for.
LOWERED: dict[str, tuple[Callable[[], tuple[onnx.ModelProto, dict[str, np.ndarray]]], tuple[int, ...]]] = {
    "ScatterElements-18-max": (_scatter_elements, (17,)), "ScatterND-18-max": (_scatter_nd, (17,)),
    "Reshape-14-allowzero1-dynamic": (_reshape_allowzero, (13,)), "HardSwish-14": (_hardswish, (13,))}
