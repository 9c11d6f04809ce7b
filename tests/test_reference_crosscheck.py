"""lowerer's numpy reference cross-checked: every op and version it implements, against onnxruntime and onnx.reference.

For each (op, since-version) of ``lowerer.facts.reference`` (its ``_VERSIONS``), generated one-node cases (ranks,
axes, dtypes, attributes; tie-heavy values, ±inf, ±0, NaN) run through the reference, onnxruntime's CPU
provider (where it has the op at that version: opset >= 7, and a kernel for the type) and
``onnx.reference``. Outputs must agree bit for bit (NaN equal to NaN, +0 and -0 apart) — Softmax and
LogSoftmax within a few ulp (each engine rounds exp and sums its own way). Every disagreement left is listed
in :data:`KNOWN` with its source; a listed one that no longer shows fails too, so the list stays true.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from lowerer.facts import reference

_SO = ort.SessionOptions()
_SO.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
_SO.intra_op_num_threads = 1
_SO.log_severity_level = 4
_F32, _F64, _I64, _I32 = np.float32, np.float64, np.int64, np.int32
_RNG = np.random.default_rng(0)


@dataclass
class Case:
    """One node at one opset, its inputs (graph inputs, in order; None: omitted), and a tag for KNOWN."""

    op: str
    version: int
    attrs: dict[str, Any]
    inputs: list[np.ndarray | None]
    tag: str = ""
    graphs: dict[str, onnx.GraphProto] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.op}-{self.version}{':' + self.tag if self.tag else ''}"


def _ties(shape: tuple[int, ...], dtype: type = _F32) -> np.ndarray:
    """Small integers (many ties), and for floats one ±inf, one -0.0 and one NaN where there is room."""
    x = _RNG.integers(-2, 3, size=shape).astype(dtype)
    if np.dtype(dtype).kind == "f" and x.size >= 4:
        flat = x.reshape(-1)
        flat[0], flat[1], flat[-1] = np.inf, -0.0, -np.inf
    return x


def _with_nan(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    if y.size >= 3:
        y.reshape(-1)[2] = np.nan
    return y


# -- cases per op -----------------------------------------------------------------------------------------------

def _arg(op: str, v: int) -> Iterator[Case]:
    for shape, dtype in (((4,), _F32), ((3, 4), _F32), ((2, 3, 4), _F64), ((3, 4), _I32)):
        for axis, keep, last in itertools.product(range(-len(shape), len(shape)), (0, 1), (0, 1)):
            if (axis < 0 and v < 11) or (last and v < 12):
                continue
            attrs = {"axis": axis, "keepdims": keep, **({"select_last_index": last} if v >= 12 else {})}
            yield Case(op, v, attrs, [_ties(shape, dtype)], f"{len(shape)}d")


def _coerced(op: str, v: int) -> Iterator[Case]:
    for shape, axis in (((3, 4), None), ((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), 2), ((2, 3, 4), -1)):
        if axis is not None and axis < 0 and v < 11:
            continue
        x = _ties(shape) if op == "Hardmax" else _RNG.standard_normal(shape).astype(_F32)
        yield Case(op, v, {} if axis is None else {"axis": axis}, [x], "ties" if op == "Hardmax" else "normal")
        if op == "Hardmax":
            yield Case(op, v, {} if axis is None else {"axis": axis}, [np.full(shape, -np.inf, _F32)], "all-inf")


def _global_max_pool(v: int) -> Iterator[Case]:
    x = _RNG.standard_normal((2, 3, 2, 2)).astype(_F32)
    yield Case("GlobalMaxPool", v, {}, [x], "normal")
    y = x.copy()
    y[0, 1] = -np.inf
    yield Case("GlobalMaxPool", v, {}, [y], "all-inf-plane")
    yield Case("GlobalMaxPool", v, {}, [_ties((1, 2, 3), _F64)], "ties")


def _reduce_max(v: int) -> Iterator[Case]:
    x = _ties((2, 3, 4))
    for axes, keep in itertools.product((None, [], [0], [-1], [0, 2]), (0, 1)):
        if axes is not None and any(a < 0 for a in axes) and v < 11:
            continue
        if v >= 18:
            for noop in (0, 1):
                yield Case("ReduceMax", v, {"keepdims": keep, "noop_with_empty_axes": noop},
                           [x, None if axes is None else np.array(axes, _I64)], f"axes={axes}")
        else:
            yield Case("ReduceMax", v, {"keepdims": keep, **({} if axes is None else {"axes": axes})}, [x],
                       f"axes={axes}")
    if v >= 12:
        yield Case("ReduceMax", v, {"keepdims": 0}, [_ties((3, 4), _I64)], "int64")


def _movement(op: str, v: int) -> Iterator[Case]:
    x = _ties((2, 3, 4))
    if op == "Transpose":
        yield from (Case(op, v, {} if p is None else {"perm": p}, [x]) for p in (None, [1, 0, 2], [2, 0, 1]))
    elif op == "Flatten":
        yield from (Case(op, v, {"axis": a}, [x]) for a in (0, 1, 3, -1) if a >= 0 or v >= 11)
    elif op == "Reshape":
        for shape, zero in (([6, 4], 0), ([0, -1], 0), ([-1], 0), ([2, 0, 4], 0), ([4, 0, 3], 1)):
            if v < 5:  # Reshape-1 takes the shape as an attribute (no 0 or -1 there)
                if -1 not in shape and 0 not in shape:
                    yield Case(op, v, {"shape": shape}, [x], f"{shape}")
                continue
            if zero and v < 14:
                continue
            given = x if not zero or 0 not in shape else np.zeros((4, 0, 3), _F32)
            yield Case(op, v, {"allowzero": zero} if v >= 14 else {}, [given, np.array(shape, _I64)], f"{shape}")
    elif op == "Shape":
        for start, end in ((None, None), (1, None), (-2, -1), (0, 10)):
            if v < 15 and (start is not None or end is not None):
                continue
            attrs = {k: val for k, val in (("start", start), ("end", end)) if val is not None}
            yield Case(op, v, attrs, [x], f"{start}:{end}")
    elif op == "Gather":
        for axis, idx in ((0, [1, -1]), (1, [[0, 2], [-3, 1]]), (-1, [3]), (1, [[0, 2], [1, 1]])):
            if (axis < 0 or min(np.array(idx).reshape(-1)) < 0) and v < 11:
                continue
            yield Case(op, v, {"axis": axis}, [x, np.array(idx, _I64)], f"axis={axis}")
    elif op == "Size":
        yield Case(op, v, {}, [x])
    elif op == "Identity":
        yield Case(op, v, {}, [_with_nan(x)])


def _slice(v: int) -> Iterator[Case]:
    x = _ties((5, 4))
    specs = [([1], [4], [0], [1]), ([-1], [-6], [0], [-1]), ([-10], [10], [1], [2]), ([4], [-10], [0], [-2]),
             ([0, 1], [3, 9], [0, 1], [1, 1]), ([-7], [3], [0], [-1])]
    for starts, ends, axes, steps in specs:
        if v < 10:
            if any(s != 1 for s in steps):
                continue
            yield Case("Slice", v, {"starts": starts, "ends": ends, "axes": axes}, [x], f"{starts}:{ends}")
        else:
            yield Case("Slice", v, {}, [x, *(np.array(t, _I64) for t in (starts, ends, axes, steps))],
                       f"{starts}:{ends}:{steps}")


def _binary(op: str, v: int) -> Iterator[Case]:
    a, b = _ties((2, 3)), _ties((2, 3))
    b.reshape(-1)[3] = 0.0  # a division by +0.0 (Div), and a -0.0 sum
    if v >= 7:
        yield Case(op, v, {}, [a, b], "same")
        yield Case(op, v, {}, [_ties((2, 3, 4)), _ties((3, 1))], "numpy-broadcast")
        yield Case(op, v, {}, [_ties((3, 4), _I64), _ties((4,), _I64) + (3 if op == "Div" else 0)], "int64")
    else:
        yield Case(op, v, {}, [a, b], "same")
        yield Case(op, v, {"broadcast": 1}, [_ties((2, 3, 4)), _ties((4,))], "suffix")
        yield Case(op, v, {"broadcast": 1, "axis": 1}, [_ties((2, 3, 4)), _ties((3,))], "legacy-axis")


def _equal(v: int) -> Iterator[Case]:
    yield Case("Equal", v, {}, [_ties((3, 4), _I64), _ties((4,), _I64)], "int64")
    if v >= 11:
        yield Case("Equal", v, {}, [_with_nan(_ties((2, 3))), _with_nan(_ties((2, 3)))], "float-nan")


def _comparison(op: str, v: int) -> Iterator[Case]:
    if op in ("And", "Or"):
        a, b = _RNG.integers(0, 2, (2, 3)).astype(bool), _RNG.integers(0, 2, (2, 3)).astype(bool)
        yield Case(op, v, {}, [a, b], "same")
        if v >= 7:
            yield Case(op, v, {}, [_RNG.integers(0, 2, (2, 3, 4)).astype(bool), np.array([True, False, True, False])],
                       "numpy-broadcast")
        return
    yield Case(op, v, {}, [_ties((2, 3)), _ties((2, 3))], "same")
    if v >= 7:
        yield Case(op, v, {}, [_ties((3, 4), _I64), _ties((4,), _I64)], "int64")
        yield Case(op, v, {}, [_with_nan(_ties((2, 3))), _ties((3,))], "float-nan")


def _trilu(v: int) -> Iterator[Case]:
    for upper in (0, 1):
        for k in (-1, 0, 2):
            yield Case("Trilu", v, {"upper": upper}, [_ties((2, 3, 4)), np.array(k, _I64)], f"upper={upper},k={k}")
        yield Case("Trilu", v, {"upper": upper}, [_ties((4, 3), _I64), None], f"upper={upper},int64")


def _one_hot(v: int) -> Iterator[Case]:
    for axis, idx, depth in ((-1, [0, 2, -1], 4), (0, [[1, 0], [3, -4]], [4])):
        yield Case("OneHot", v, {"axis": axis}, [np.array(idx, _I64), np.array(depth, _I64),
                                                  np.array([0.0, 1.0], _F32)], f"depth={depth}")


def _cast(v: int) -> Iterator[Case]:
    x = np.array([0.0, -0.0, 1.5, -2.5, 65504.0, 1e5, np.inf, -np.inf, 3.0e-8], _F32)
    for to in (T.FLOAT16, T.DOUBLE, T.INT32, T.BOOL):
        given = x if to not in (T.INT32,) else x[[0, 1, 2, 3, 4, 5]]
        attr: Any = T.DataType.Name(to).lower() if v < 6 else to
        yield Case("Cast", v, {"to": attr}, [given], T.DataType.Name(to).lower())


def _shape_ops(op: str, v: int) -> Iterator[Case]:
    x = _ties((2, 1, 3))
    if op == "Unsqueeze":
        for axes in ([0], [1, -1], [3, 0]):
            if any(a < 0 for a in axes) and v < 11:
                continue
            yield Case(op, v, {} if v >= 13 else {"axes": axes}, [x, np.array(axes, _I64)] if v >= 13 else [x],
                       f"{axes}")
    elif op == "Squeeze":
        for axes in (None, [1], [-2]):
            if axes and any(a < 0 for a in axes) and v < 11:
                continue
            if v >= 13:
                yield Case(op, v, {}, [x] if axes is None else [x, np.array(axes, _I64)], f"{axes}")
            else:
                yield Case(op, v, {} if axes is None else {"axes": axes}, [x], f"{axes}")
    elif op == "Concat":
        for axis in (0, 2, -1):
            if axis < 0 and v < 11:
                continue
            yield Case(op, v, {"axis": axis}, [x, _ties((2, 1, 3))], f"axis={axis}")
    elif op == "Expand":
        yield Case(op, v, {}, [_ties((3, 1)), np.array([2, 3, 4], _I64)], "grow")
        yield Case(op, v, {}, [_ties((3, 4)), np.array([1, 1], _I64)], "keep")
    elif op == "Where":
        cond = np.array([[True, True, False], [False, True, False]])
        yield Case(op, v, {}, [cond, _with_nan(_ties((2, 3))), np.full((3,), -0.0, _F32)], "x-minus-zero")
        yield Case(op, v, {}, [cond, _ties((2, 3), _I64), np.array(7, _I64)], "int64")
    elif op == "Range":
        for args in ((0, 5, 1), (5, 0, -2), (1, 1, 1), (0.5, 2.0, 0.5)):
            dtype = _F32 if isinstance(args[0], float) else _I64
            yield Case(op, v, {}, [np.array(a, dtype) for a in args], f"{args}")


def _constant(v: int) -> Iterator[Case]:
    yield Case("Constant", v, {"value": numpy_helper.from_array(np.array([1.0, -0.0], _F32), "c")}, [], "tensor")
    if v >= 12:
        yield Case("Constant", v, {"value_floats": [1.5, -0.0]}, [], "floats")
        yield Case("Constant", v, {"value_int": 7}, [], "int")


def _if(v: int) -> Iterator[Case]:
    def branch(name: str, source: str) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Identity", [source], [f"{name}_y"])], name, [],
                                 [helper.make_tensor_value_info(f"{name}_y", T.FLOAT, None)])
    for cond in (True, False):
        yield Case("If", v, {}, [np.array(cond), _ties((2, 3)), _ties((2, 3))], f"{cond}",
                   {"then_branch": branch("then", "in1"), "else_branch": branch("else", "in2")})


_MAKERS: dict[str, Callable[[int], Iterator[Case]]] = {
    "ArgMax": lambda v: _arg("ArgMax", v), "ArgMin": lambda v: _arg("ArgMin", v),
    "Hardmax": lambda v: _coerced("Hardmax", v), "Softmax": lambda v: _coerced("Softmax", v),
    "LogSoftmax": lambda v: _coerced("LogSoftmax", v), "GlobalMaxPool": _global_max_pool, "ReduceMax": _reduce_max,
    **{op: partial(_movement, op) for op in ("Transpose", "Flatten", "Reshape", "Shape", "Gather", "Size",
                                              "Identity")},
    "Slice": _slice, **{op: partial(_binary, op) for op in ("Add", "Sub", "Mul", "Div")},
    "Equal": _equal, "OneHot": _one_hot, "Trilu": _trilu, "Not": lambda v: iter(
        [Case("Not", v, {}, [_RNG.integers(0, 2, (2, 3)).astype(bool)])]),
    **{op: partial(_comparison, op) for op in ("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or")},
    "Cast": _cast, "Constant": _constant, "If": _if,
    **{op: partial(_shape_ops, op) for op in ("Unsqueeze", "Squeeze", "Concat", "Expand", "Where", "Range")},
}


def cases() -> list[Case]:
    """Every case, for every (op, since-version) the reference implements (the same values whatever runs first)."""
    global _RNG
    out = []
    for op, versions in sorted(reference._VERSIONS.items()):
        for v in versions:
            _RNG = np.random.default_rng(v)
            out.extend(_MAKERS[op](v))
    return out


def _model(case: Case) -> onnx.ModelProto:
    names = [f"in{i}" if x is not None else "" for i, x in enumerate(case.inputs)]
    attrs = [helper.make_attribute(k, v, attr_type=onnx.AttributeProto.INTS) if v == [] else
             helper.make_attribute(k, v) for k, v in {**case.attrs, **case.graphs}.items()]
    node = helper.make_node(case.op, names[:1] if case.op == "If" else names, ["y"])  # If reads the rest in scope
    node.attribute.extend(attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))
              for n, x in zip(names, case.inputs, strict=True) if x is not None]
    graph = helper.make_graph([node], "g", inputs, [helper.make_empty_tensor_value_info("y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.version)], ir_version=8)


Outcome = list[np.ndarray] | str | None  # outputs, "raises: ...", or None (the engine cannot run it)


def _feeds(case: Case) -> dict[str, np.ndarray]:
    return {f"in{i}": x for i, x in enumerate(case.inputs) if x is not None}


def run_reference(case: Case, model: onnx.ModelProto) -> Outcome:
    try:
        return [np.asarray(v) for v in reference.evaluate(list(model.graph.node), case.version, _feeds(case), ["y"])]
    except reference.ReferenceEvalError as e:
        return f"raises: {e}"


def run_ort(case: Case, model: onnx.ModelProto) -> Outcome:
    if case.version < 7:
        return None  # onnxruntime runs opset 7 on
    try:
        session = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    except Exception:  # no kernel for this op, version or type (or an opset newer than the release)
        return None
    try:
        return [np.asarray(v) for v in session.run(None, _feeds(case))]
    except Exception as e:
        return f"raises: {str(e)[:80]}"


def run_onnx_reference(case: Case, model: onnx.ModelProto) -> Outcome:
    try:
        evaluator = ReferenceEvaluator(model)
    except Exception:
        return None
    try:
        return [np.asarray(v) for v in evaluator.run(None, _feeds(case))]
    except Exception as e:
        return f"raises: {str(e)[:80]}"


def differ(op: str, a: Outcome, b: Outcome) -> str | None:
    """How two outcomes differ (None: they agree, or one engine cannot run the case)."""
    if a is None or b is None:
        return None
    if isinstance(a, str) or isinstance(b, str):
        return None if isinstance(a, str) and isinstance(b, str) else f"{a if isinstance(a, str) else 'runs'} / " \
                                                                       f"{b if isinstance(b, str) else 'runs'}"
    for x, y in zip(a, b, strict=True):
        if x.shape != y.shape:
            return f"shapes {list(x.shape)} / {list(y.shape)}"
        if x.dtype != y.dtype:
            return f"types {x.dtype} / {y.dtype}"
        if x.dtype.kind != "f":
            if not np.array_equal(x, y):
                return f"values {x.reshape(-1)[:6].tolist()} / {y.reshape(-1)[:6].tolist()}"
            continue
        nan = np.isnan(x) & np.isnan(y)
        if op in ("Softmax", "LogSoftmax"):  # exp and the row's sum rounded by each engine its own way
            eps = float(np.finfo(x.dtype).eps)
            atol = 8 * eps * max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(x), x, 0))))) if x.size else 0.0
            same = nan | np.isclose(x, y, rtol=4 * eps, atol=atol if op == "LogSoftmax" else 0.0) | (x == y)
        else:
            same = nan | ((x == y) & (np.signbit(x) == np.signbit(y)))
        if not same.all():
            i = int(np.argwhere(~same.reshape(-1))[0][0])
            return f"values at {i}: {x.reshape(-1)[i]!r} / {y.reshape(-1)[i]!r}"
    return None


def disagreements(case: Case) -> dict[str, str]:
    """The engines that disagree with lowerer's reference on ``case``, and how."""
    model = _model(case)
    ours = run_reference(case, model)
    found = {}
    for engine, run in (("onnxruntime", run_ort), ("onnx.reference", run_onnx_reference)):
        how = differ(case.op, ours, run(case, model))
        if how is not None:
            found[engine] = how
    return found


@dataclass(frozen=True)
class Known:
    """A disagreement left, with where it comes from: ``op`` at ``versions``, cases whose tag starts ``tag``."""

    op: str
    versions: tuple[int, ...]
    tag: str
    engine: str
    source: str


_COERCED = ("the spec of {op}-1/11: 'The input does not need to explicitly be a 2D vector; rather, it will be "
            "coerced into one' (axis splits the dims into rows and columns); onnxruntime agrees with lowerer. "
            "onnx.reference (onnx 1.23.2) computes {op}-1/11 along the one axis, as {op}-13 does{ties}")
_LEGACY = ("the spec of {op}-1/6: with broadcast=1, 'axis: If set, defines the broadcast dimensions' (B's dims "
           "matched from that axis of A, not from the end); onnx.reference (onnx 1.23.2) broadcasts numpy's way "
           "and raises: operands could not be broadcast together (issue 31, item 3)")

#: Every disagreement left between lowerer's reference and another engine, each with its source.
KNOWN: tuple[Known, ...] = (
    Known("GlobalMaxPool", (22,), "all-inf-plane", "onnxruntime",
          "onnxruntime's CPU GlobalMaxPool gives the lowest float, not -inf, for an all -inf plane "
          "(lowerer/verification/departures.json: onnxruntime/core/providers/cpu/nn/pool_base.h starts the maximum "
          "at std::numeric_limits<float>::lowest())"),
    *(Known("GlobalMaxPool", (v,), "ties", "onnx.reference",
            "the spec: 'The output tensor has the same rank as the input. The first two dimensions of output shape "
            "are the same as the input (N x C), while the other dimensions are all 1'; onnx.reference (onnx 1.23.2) "
            "gives [1, 1] for a (1, 2, 3) input") for v in (1, 22)),
    *(Known("Hardmax", (v,), tag, "onnx.reference",
            _COERCED.format(op="Hardmax", ties=", and marks every maximum of a row, not the first")) for v in (1, 11)
      for tag in ("ties", "all-inf")),
    *(Known(op, (v,), "normal", "onnx.reference", _COERCED.format(op=op, ties="")) for op in ("Softmax", "LogSoftmax")
      for v in (1, 11)),
    *(Known(op, (v,), "legacy-axis", "onnx.reference", _LEGACY.format(op=op)) for op in ("Add", "Sub", "Mul", "Div")
      for v in (1, 6)),
    *(Known("Cast", (1,), tag, "onnx.reference",
            "Cast-1 names the target type in a string attribute ('to': 'float16'); onnx.reference (onnx 1.23.2) "
            "takes only the enum and raises") for tag in ("float16", "double", "int32", "bool")),
    *(Known("OneHot", (v,), "depth=[4]", "onnx.reference",
            "the spec of OneHot: 'depth: Scalar or Rank 1 tensor containing exactly one element'; onnx.reference "
            "(onnx 1.23.2) raises on the rank-1 form") for v in (9, 11)),
    *(Known("OneHot", (9,), tag, engine,
            "the spec of OneHot-9: 'Any entries in the 'indices' input tensor with values outside the range [0, depth) "
            f"will result in one-hot representation with all 'off_value' values'; {engine} counts a negative index "
            "from the back as at OneHot-11 (lowerer/verification/departures.json)")
      for tag, engine in (("depth=", "onnxruntime"), ("depth=4", "onnx.reference"))),
    *(Known("Where", (v,), "x-minus-zero", "onnxruntime",
            "the spec of Where: 'Return elements, either from X or Y, depending on condition'; onnxruntime's CPU "
            "Where (onnxruntime/core/providers/cpu/tensor/where_op.cc) merges cond ? X : 0 and !cond ? Y : 0 with "
            "x != 0 ? x : y, so a -0.0 chosen from X comes out +0.0 (measured on onnxruntime 1.32.0; lowerer's "
            "scatter and Trilu lowerings avoid it)") for v in (9, 16)),
    *(Known("Unsqueeze", (v,), "[3, 0]", "onnx.reference",
            "the spec of Unsqueeze-1/11: 'The order of values in axes does not matter' (each names a position of "
            "the output); onnx.reference (onnx 1.23.2) inserts them in the order given") for v in (1, 11)),
)


def _known(case: Case, engine: str) -> Known | None:
    return next((k for k in KNOWN if k.op == case.op and case.version in k.versions and case.tag.startswith(k.tag)
                 and k.engine == engine), None)


@pytest.mark.parametrize("op", sorted(reference._VERSIONS))
def test_the_reference_agrees_with_onnxruntime_and_onnx_reference(op: str) -> None:
    ran, unexplained, seen = 0, [], set()
    for case in (c for c in cases() if c.op == op):
        ran += 1
        for engine, how in disagreements(case).items():
            known = _known(case, engine)
            if known is None:
                unexplained.append(f"{case.name} {case.attrs}: {engine}: {how}")
            else:
                seen.add(known)
    assert ran, f"no case generated for {op}"
    assert not unexplained, "\n".join(unexplained)
    stale = [k for k in KNOWN if k.op == op and k not in seen]
    assert not stale, f"listed disagreements that no longer show: {stale}"


def test_every_version_is_generated_and_most_run_in_onnxruntime() -> None:
    generated = {(c.op, c.version) for c in cases()}
    assert generated == {(op, v) for op, vs in reference._VERSIONS.items() for v in vs}
    ran_ort = {(c.op, c.version) for c in cases() if c.version >= 7 and isinstance(run_ort(c, _model(c)), list)}
    assert len(ran_ort) >= 0.8 * len({g for g in generated if g[1] >= 7}), sorted(generated - ran_ort)
