"""Property tests: random small graphs with the owned ops, random versions, targets and decompositions.

Every generated model is converted with :func:`lowerer.convert`; the result must either run in
onnxruntime and compute exactly what the SOURCE model means (a numpy oracle, ``_fuzz_oracle``;
Softmax/LogSoftmax also bit for bit against the original model run in onnxruntime), or be a
clear refusal (a ``ConversionError`` with one of the documented reasons, only where the case
allows it). Anything else fails: a traceback, an ``InternalError``, an unexpected refusal.

CI runs a bounded, derandomized number of examples; ``LOWERER_FUZZ_EXAMPLES=N`` runs N random ones;
``LOWERER_FUZZ_SIBLINGS=1`` makes every case hold If branches defining the same names at different ranks.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import _fuzz_oracle as oracle
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import lowerer
from lowerer.core.errors import ConversionError, InputError, VerificationError
from lowerer.core.opsets import MAX_OPSET, since_version
from lowerer.rules import REGISTRY

DECOMPOSITIONS = REGISTRY.decompositions

_LONG = int(os.environ.get("LOWERER_FUZZ_EXAMPLES", "0") or 0)
#: LOWERER_FUZZ_VERIFY=0 turns lowerer's own per-rewrite verification off (on in a quarter of cases)
_VERIFY = os.environ.get("LOWERER_FUZZ_VERIFY", "1") != "0"
#: LOWERER_FUZZ_SIBLINGS=1 makes every case hold If branches that define the same names at different ranks
_SIBLINGS = os.environ.get("LOWERER_FUZZ_SIBLINGS", "0") == "1"
settings.register_profile(
    "lowerer-fuzz-ci", max_examples=150, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
settings.register_profile(
    "lowerer-fuzz-long", max_examples=max(_LONG, 1), deadline=None, derandomize=False, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
_PROFILE = settings.get_profile("lowerer-fuzz-long" if _LONG else "lowerer-fuzz-ci")

_SO = ort.SessionOptions()
_SO.log_severity_level = 3

F32, F64, F16, BF16 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16
I8, U8, I32, I64 = TensorProto.INT8, TensorProto.UINT8, TensorProto.INT32, TensorProto.INT64
_NP = {F32: np.float32, F64: np.float64, F16: np.float16, I8: np.int8, U8: np.uint8, I32: np.int32,
       I64: np.int64}

COERCED = ("Hardmax", "Softmax", "LogSoftmax")
ARG = ("ArgMax", "ArgMin")
OPS = (*COERCED, *ARG, "GlobalMaxPool")


def _dtypes(op: str, source_opset: int) -> list[int]:
    """Element types onnxruntime's CPU kernels take for ``op`` at the source opset."""
    f16 = [F16] if source_opset >= 7 else []
    if op == "Hardmax" or op == "GlobalMaxPool":
        return [F32, *f16]
    if op in ("Softmax", "LogSoftmax"):
        return [F32, F64, *f16]
    return [F32, F64, I8, U8, I32, I64, *f16]


@dataclass
class OpSpec:
    """One owned node: op, attributes (None = omitted) and the since-version at the source."""

    op: str
    since: int
    axis: int | None = None
    keepdims: int | None = None
    select_last: int | None = None

    def attrs(self) -> dict[str, int]:
        out = {"axis": self.axis, "keepdims": self.keepdims, "select_last_index": self.select_last}
        return {k: v for k, v in out.items() if v is not None}


@dataclass
class Case:
    """A generated model description.

    ``levels`` wrap the owned nodes, outermost first: ``pre`` (an Identity before them),
    ``if`` (both branches hold them; the else branch reads ``x2``; with ``shared_if`` both define the
    same names, at different ranks), ``loop`` (a one-trip Loop
    body; outputs gain a leading 1), ``scan`` (the same with a one-step Scan) and ``function``
    (a model-local function, nested ones calling each other). Inner scopes read the outer-scope input directly.
    """

    source: int
    target: int
    dtype: int
    dims: list[int]
    shape_mode: str  # static | dynamic | none
    levels: list[str]
    ops: list[OpSpec]
    decompose: list[str]
    verify: bool
    ints: bool
    seed: int
    dynamic_axes: list[int] = field(default_factory=list)
    chain: bool = False
    model_opset: int | None = None  # the model's default opset when the outer function's differs
    ref_attrs: bool = False  # the ops (directly in a function body) take axis from a function attribute
    #: Sibling scopes reusing names: each If's two branches define the same names (``<tag>_x``, the ops'
    #: intermediate values and outputs), the else branch's ``<tag>_x`` with this many more leading dims of
    #: size 1 than the then branch's (a different rank under the same name); 0: names differ per branch.
    shared_if: int = 0

    @property
    def has(self) -> set[str]:
        """The kinds of levels present."""
        return set(self.levels)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    source = draw(st.integers(11 if _SIBLINGS else 1, MAX_OPSET))
    target = draw(st.integers(1, MAX_OPSET))
    first = draw(st.sampled_from(OPS))
    n_ops = draw(st.integers(1, 2))
    op_names = [first] + [draw(st.sampled_from([o for o in OPS if _dtype_compatible(o, first, source)]))
                          for _ in range(n_ops - 1)]
    common = set(_dtypes(op_names[0], source))
    for o in op_names[1:]:
        common &= set(_dtypes(o, source))
    dtype = draw(st.sampled_from(sorted(common)))
    if dtype != F64 and draw(st.integers(0, 19)) == 0 and all(
            (since_version(o, source) or 0) >= 13 for o in op_names) and source >= 13:
        dtype = BF16
    min_rank = 3 if "GlobalMaxPool" in op_names else 1
    rank = draw(st.integers(min_rank, 4 if _SIBLINGS else 5))
    dims = [draw(st.integers(1, 4)) for _ in range(rank)]
    shape_mode = draw(st.sampled_from(["static", "static", "dynamic", "none"]))
    dynamic_axes = ([i for i in range(rank) if draw(st.booleans())] if shape_mode == "dynamic" else [])
    n_levels = draw(st.sampled_from([0, 1, 1, 1, 2, 3]))
    levels = [draw(st.sampled_from(["pre", "if", "loop", "scan", "function"])) for _ in range(n_levels)]
    if _SIBLINGS:
        levels = [kind for kind in levels if kind in ("pre", "if", "loop")]
        if "if" not in levels:
            levels.insert(draw(st.integers(0, len(levels))), "if")
    if source < 9:  # Scan-8 has another signature (batch axis, sequence_lens): use a Loop there
        levels = ["loop" if kind == "scan" else kind for kind in levels]
    ops = []
    for o in op_names:
        since = since_version(o, source)
        assert since is not None
        spec = OpSpec(o, since)
        if o in COERCED:
            omit_ok = not (since < 13 and rank < 2)
            if not omit_ok or draw(st.integers(0, 3)) > 0:
                spec.axis = draw(st.integers(-rank, rank - 1))
        elif o in ARG:
            if draw(st.integers(0, 3)) > 0:
                spec.axis = draw(st.integers(-rank, rank - 1))
            spec.keepdims = draw(st.sampled_from([None, 0, 1]))
            if since >= 12:
                spec.select_last = draw(st.sampled_from([None, 0, 1, 1]))
        ops.append(spec)
    chain = n_ops == 2 and first == "Hardmax" and draw(st.booleans())
    if "GlobalMaxPool" not in op_names and draw(st.integers(0, 11)) == 0:
        # an empty tensor: any dim but the one an ArgMax/ArgMin reduces over (no extremum there)
        reduced = {(s.axis or 0) % rank for s in ops if s.op in ARG}
        free = [i for i in range(rank) if i not in reduced]
        if free:
            dims[draw(st.sampled_from(free))] = 0
    model_opset = None
    if levels and levels[0] == "function" and draw(st.integers(0, 3)) == 0:
        model_opset = draw(st.integers(1, MAX_OPSET))
    names = sorted(DECOMPOSITIONS)
    decompose = [n for n in names if draw(st.booleans())]
    # sibling scopes sharing names (not with functions: a branch built twice would define one twice)
    # (from opset 11: If below 11 wants both branches to yield the same shape)
    # (at most rank 5 in the else branch: onnxruntime pools over at most 3 spatial dims; not in a Scan,
    # whose body onnxruntime wants every output's shape stated)
    shared_if = draw(st.sampled_from([0, 1, 1, 2])) if "if" in levels and not {"function", "scan"} & set(levels) \
        and source >= 11 else 0
    shared_if = max(shared_if, 1) if _SIBLINGS else shared_if
    shared_if = min(shared_if, 5 - rank)
    if shared_if and any(s.op in ARG for s in ops):
        # a non-negative axis names another dim in the else branch, perhaps the empty one: no extremum there
        dims = [d or 1 for d in dims]
    return Case(source=source, target=target, dtype=dtype, dims=dims, shape_mode=shape_mode, levels=levels,
                ops=ops, decompose=decompose, verify=draw(st.integers(0, 3)) == 0 and _VERIFY, ints=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31 - 1)), dynamic_axes=dynamic_axes, chain=chain,
                model_opset=model_opset, shared_if=shared_if,
                ref_attrs=bool(levels) and levels[-1] == "function" and draw(st.integers(0, 2)) == 0)


def _dtype_compatible(op: str, first: str, source: int) -> bool:
    return bool(set(_dtypes(op, source)) & set(_dtypes(first, source)))


# -- building the model ------------------------------------------------------------------------
def _out_elem(spec: OpSpec, dtype: int) -> int:
    return I64 if spec.op in ARG else dtype


def _out_dims(spec: OpSpec, dims: list[int]) -> list[int]:
    if spec.op in ARG:
        axis = 0 if spec.axis is None else spec.axis
        axis = axis + len(dims) if axis < 0 else axis
        if spec.keepdims is None or spec.keepdims:
            return [1 if i == axis else d for i, d in enumerate(dims)]
        return [d for i, d in enumerate(dims) if i != axis]
    if spec.op == "GlobalMaxPool":
        return [*dims[:2], *([1] * (len(dims) - 2))]
    return list(dims)


def _hides_rank(case: Case) -> bool:
    """Whether the case's inputs reach its ops through a Reshape to a run-time shape (rank unknown there).

    onnx's checker wants a shape on every graph input, so an unknown rank is made the way real
    models get one; Reshape takes its shape as an input from opset 5 on.
    """
    model_opset = case.model_opset if case.model_opset is not None else case.source
    return case.shape_mode == "none" and min(case.source, case.target, model_opset) >= 5


def _in_vi(case: Case, name: str) -> onnx.ValueInfoProto:
    if case.shape_mode == "none":
        if name in ("x", "x2"):  # graph inputs: a shape is required (the rank is hidden behind a Reshape)
            return helper.make_tensor_value_info(name, case.dtype, list(case.dims))
        return helper.make_tensor_value_info(name, case.dtype, None)
    shape: list[int | str] = [f"d{i}" if i in case.dynamic_axes else d for i, d in enumerate(case.dims)]
    return helper.make_tensor_value_info(name, case.dtype, shape)


def _out_vi(case: Case, name: str, spec: OpSpec, prefix: int = 0, main: bool = False) -> onnx.ValueInfoProto:
    if case.shared_if:
        # The branches' ranks differ: a body's outputs are stated by type only; the model's (which
        # need a shape) by the then branch's rank, every dim symbolic (onnxruntime only warns).
        rank = prefix + len(_out_dims(spec, case.dims))
        dims = [f"{name}_d{i}" for i in range(rank)] if main else None
        return helper.make_tensor_value_info(name, _out_elem(spec, case.dtype), dims)
    dims: list[int | str] = [*([1] * prefix), *_out_dims(spec, case.dims)]
    return helper.make_tensor_value_info(name, _out_elem(spec, case.dtype), dims)


class _Builder:
    def __init__(self, case: Case) -> None:
        self.case = case
        self.functions: list[onnx.FunctionProto] = []
        self.counter = 0

    def tag(self, kind: str) -> str:
        self.counter += 1
        return f"{kind}{self.counter}"

    def core(self, x: str, tag: str, out_names: list[str] | None) -> tuple[list[onnx.NodeProto], list[str]]:
        nodes: list[onnx.NodeProto] = []
        outs: list[str] = []
        for i, spec in enumerate(self.case.ops):
            src = outs[0] if self.case.chain and i == 1 else x
            out = out_names[i] if out_names else f"{tag}_y{i}"
            attrs = spec.attrs()
            ref = self.case.ref_attrs and "axis" in attrs
            if ref:
                del attrs["axis"]
            node = helper.make_node(spec.op, [src], [out], name=f"{tag}_{spec.op}_{i}", **attrs)
            if ref:  # axis = @ax<i>: the call site gives the value
                a = node.attribute.add()
                a.name, a.ref_attr_name, a.type = "axis", f"ax{i}", onnx.AttributeProto.INT
            nodes.append(node)
            outs.append(out)
        return nodes, outs

    def _rank_up(self, src: str, out: str, tag: str, extra: int) -> list[onnx.NodeProto]:
        """``out`` = ``src`` with ``extra`` leading dims of size 1 (``Identity`` when 0)."""
        if not extra:
            return [helper.make_node("Identity", [src], [out], name=f"{tag}_same")]
        axes = list(range(extra))
        if self.case.source < 13:
            return [helper.make_node("Unsqueeze", [src], [out], name=f"{tag}_up", axes=axes)]
        const = helper.make_node("Constant", [], [f"{tag}_axes"], name=f"{tag}_axes",
                                 value=helper.make_tensor(f"{tag}_axes", I64, [extra], axes))
        return [const, helper.make_node("Unsqueeze", [src, f"{tag}_axes"], [out], name=f"{tag}_up")]

    def wrap(self, level: int, env: dict[str, str], out_names: list[str] | None = None,
             ) -> tuple[list[onnx.NodeProto], list[str], int]:
        """Nodes computing the ops inside ``levels[level:]``; returns (nodes, outputs, loop depth).

        ``env`` maps the logical inputs (x, x2, trip, keep, c<level>) to names visible here.
        """
        case = self.case
        if level == len(case.levels):
            nodes, outs = self.core(env["x"], self.tag("core"), out_names)
            return nodes, outs, 0
        kind = case.levels[level]
        tag = self.tag(kind)
        outs = out_names or [f"{tag}_y{i}" for i in range(len(case.ops))]
        if kind == "pre":
            inner_nodes, outs, depth = self.wrap(level + 1, {**env, "x": f"{tag}_x"}, out_names)
            return [helper.make_node("Identity", [env["x"]], [f"{tag}_x"], name=tag), *inner_nodes], outs, depth
        if kind == "if":
            branches = []
            depth = 0
            counter = self.counter
            for name, src in (("then", env["x"]), ("else", env["x2"])):
                if case.shared_if:  # both branches define <tag>_x and every name after it: the same names
                    self.counter = counter
                    shared = f"{tag}_x"
                    body, inner_outs, depth = self.wrap(level + 1, {**env, "x": shared})
                    body = [*self._rank_up(src, shared, tag, case.shared_if if name == "else" else 0), *body]
                else:
                    body, inner_outs, depth = self.wrap(level + 1, {**env, "x": src})
                branches.append(helper.make_graph(
                    body, f"{tag}_{name}", [],
                    [_out_vi(case, o, s, depth) for o, s in zip(inner_outs, case.ops, strict=True)]))
            node = helper.make_node("If", [env[f"c{level}"]], outs, name=tag, then_branch=branches[0],
                                    else_branch=branches[1])
            return [node], outs, depth
        if kind == "scan":
            body, inner_outs, depth = self.wrap(level + 1, env)
            # one iteration over a [1] sequence; the carried state passes straight through
            graph = helper.make_graph(
                body, f"{tag}_body",
                [helper.make_tensor_value_info(f"{tag}_state", I64, []),
                 helper.make_tensor_value_info(f"{tag}_elem", F32, [])],
                [helper.make_tensor_value_info(f"{tag}_state", I64, []),
                 *[_out_vi(case, o, s, depth) for o, s in zip(inner_outs, case.ops, strict=True)]])
            node = helper.make_node("Scan", [env["trip"], env["seq"]], [f"{tag}_state_out", *outs], name=tag,
                                    body=graph, num_scan_inputs=1)
            return [node], outs, depth + 1
        if kind == "loop":
            body, inner_outs, depth = self.wrap(level + 1, env)
            # cond and carry pass straight through (no node: onnx cannot downgrade Identity-13)
            graph = helper.make_graph(
                body, f"{tag}_body",
                [helper.make_tensor_value_info(f"{tag}_iter", I64, []),
                 helper.make_tensor_value_info(f"{tag}_cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info(f"{tag}_carry", I64, [])],
                [helper.make_tensor_value_info(f"{tag}_cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info(f"{tag}_carry", I64, []),
                 *[_out_vi(case, o, s, depth) for o, s in zip(inner_outs, case.ops, strict=True)]])
            node = helper.make_node("Loop", [env["trip"], env["keep"], env["trip"]], [f"{tag}_carried", *outs],
                                    name=tag, body=graph)
            return [node], outs, depth + 1
        # a model-local function whose inputs are every logical input
        keys = sorted(env)
        inner_env = {k: f"{tag}_{k}" for k in keys}
        body, inner_outs, depth = self.wrap(level + 1, inner_env)
        refs = {f"ax{i}": s.axis for i, s in enumerate(case.ops) if s.axis is not None} \
            if case.ref_attrs and level == len(case.levels) - 1 else {}
        fn = helper.make_function("fuzz.local", f"F_{tag}", [inner_env[k] for k in keys], inner_outs, body,
                                  [helper.make_opsetid("", case.source), helper.make_opsetid("fuzz.local", 1)],
                                  attributes=sorted(refs))
        if case.shape_mode != "none":
            fn.value_info.extend([_in_vi(case, inner_env["x"]), _in_vi(case, inner_env["x2"])])
        self.functions.append(fn)
        node = helper.make_node(f"F_{tag}", [env[k] for k in keys], outs, name=f"call_{tag}", domain="fuzz.local",
                                **refs)
        return [node], outs, depth


def build(case: Case) -> onnx.ModelProto:
    """The ONNX model a case describes (inputs x, x2, trip, keep, c<level>; outputs y0..yN-1)."""
    b = _Builder(case)
    env = {"x": "x", "x2": "x2", "trip": "trip", "keep": "keep", "seq": "seq"}
    env.update({f"c{i}": f"c{i}" for i, kind in enumerate(case.levels) if kind == "if"})
    hidden: list[onnx.NodeProto] = []
    if _hides_rank(case):
        hidden = [helper.make_node("Reshape", ["x", "xs"], ["x_u"], name="hide_x"),
                  helper.make_node("Reshape", ["x2", "xs"], ["x2_u"], name="hide_x2")]
        env.update({"x": "x_u", "x2": "x2_u"})
    nodes, _, depth = b.wrap(0, env, [f"y{i}" for i in range(len(case.ops))])
    nodes = [*hidden, *nodes]
    inputs = [_in_vi(case, "x"), _in_vi(case, "x2"), helper.make_tensor_value_info("seq", F32, [1]),
              helper.make_tensor_value_info("trip", I64, []),
              helper.make_tensor_value_info("keep", TensorProto.BOOL, [])]
    inputs += [helper.make_tensor_value_info(k, TensorProto.BOOL, []) for k in env if k.startswith("c")]
    if hidden:
        inputs.append(helper.make_tensor_value_info("xs", I64, ["r"]))
    outputs = [_out_vi(case, f"y{i}", s, depth, main=True) for i, s in enumerate(case.ops)]
    model_opset = case.model_opset if case.model_opset is not None else case.source
    opsets = [helper.make_opsetid("", model_opset)]
    if b.functions:
        opsets.append(helper.make_opsetid("fuzz.local", 1))
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs)
    ir = max(onnx.helper.find_min_ir_version_for(opsets, ignore_unknown=True), 10 if b.functions else 3)
    return helper.make_model(graph, opset_imports=opsets, functions=b.functions[::-1], ir_version=ir,
                             producer_name="fuzz")


def feeds(case: Case) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(case.seed)

    def value() -> np.ndarray:
        if case.dtype == BF16:
            return rng.integers(-3, 4, size=case.dims).astype(np.float32)
        np_t = _NP[case.dtype]
        if case.ints or np.issubdtype(np_t, np.integer):
            lo = 0 if np_t == np.uint8 else -3
            return rng.integers(lo, 4, size=case.dims).astype(np_t)
        return rng.standard_normal(case.dims).astype(np_t)

    out = {"x": value(), "x2": value(), "trip": np.array(1, dtype=np.int64), "keep": np.array(True),
           "seq": np.zeros(1, dtype=np.float32), "xs": np.array(case.dims, dtype=np.int64)}
    for i in range(len(case.levels)):
        out[f"c{i}"] = np.array(bool(rng.integers(0, 2)))
    return out


def expected(case: Case, f: dict[str, np.ndarray]) -> list[np.ndarray]:
    conds = [bool(f[f"c{i}"]) for i, kind in enumerate(case.levels) if kind == "if"]
    x = f["x"] if all(conds) else f["x2"].reshape((1,) * case.shared_if + f["x2"].shape)
    depth = case.levels.count("loop") + case.levels.count("scan")
    outs: list[np.ndarray] = []
    for i, spec in enumerate(case.ops):
        src = outs[0] if case.chain and i == 1 else x
        if spec.op in COERCED:
            y = oracle.coerced_family(spec.op, src, spec.axis, spec.since)
            y = y.astype(src.dtype) if spec.op == "Hardmax" else y
        elif spec.op in ARG:
            y = oracle.arg_extremum(spec.op, src, spec.axis, spec.keepdims, spec.select_last, spec.since)
        else:
            y = oracle.global_max_pool(src)
        outs.append(y)
    return [y.reshape((1,) * depth + y.shape) for y in outs]


# -- running and judging -----------------------------------------------------------------------
def _run(model: onnx.ModelProto, f: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model.SerializeToString(), _SO, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in f.items() if k in names})


_REFUSAL = re.compile(r"^node '[^']*' \((\w+)-(\d+), in [^)]*\) cannot be converted to opset (\d+): (.+)$")


def _untyped_in_function(case: Case) -> bool:
    """Whether an owned op's input has no stated type: inside a function, functions state types only
    through value_info (of their inputs here), so a value computed inside one (after a "pre"
    Identity, or a chained op's input) has none."""
    in_function, typed = False, True
    for kind in case.levels:
        if kind == "function":
            in_function, typed = True, True
        elif kind == "pre" and in_function:
            typed = False
    return in_function and (not typed or case.chain)


def _allowed_refusal(case: Case, message: str) -> str | None:
    """The refusal class if ``message`` is a documented refusal that this case may raise, else None."""
    m = _REFUSAL.match(message)
    if not m or "\n" in message:
        return None
    reason = m.group(4)
    op, target = m.group(1), case.target
    fn_chain = _untyped_in_function(case)
    unknown_rank = case.shape_mode == "none" or fn_chain
    # functions without value_info (shape_mode none) know no element types either
    unknown_elem = fn_chain or ("function" in case.has and case.shape_mode == "none")
    not_static = case.shape_mode != "static" or fn_chain
    hardmax_dec = "hardmax" in case.decompose and op == "Hardmax"
    rules: list[tuple[str, str, bool]] = [
        # (class, reason pattern, whether this case may raise it)
        ("unknown-rank", r"the rank of input '[^']+' is unknown and is needed .*; add shape information",
         unknown_rank),
        ("bfloat16", r"bfloat16 input, and no op accepts bfloat16 below opset 13", case.dtype == BF16 and target < 13),
        ("unknown-elem-bf16", r"the element type of input '[^']+' is unknown, and \w+ below version 13 does not "
         r"accept bfloat16", unknown_elem and target < 13),
        ("select-last-dynamic", r"select_last_index=1 needs the size along the axis", target < 10 and not_static),
        ("missing-op", r"it needs [\w, ]+, which opset \d+ does not have", bool(case.decompose)),
        ("if-branch-shapes", r"If-1 needs both branches to yield the same shape", case.shared_if > 0 and target < 11),
        ("function-constant", r"a non-float constant is needed, and inside a function",
         "function" in case.has and target < 9),
        # decompositions
        ("hardmax-unknown-elem", r"the element type of input '[^']+' is unknown, and casting the one-hot to it "
         r"needs CastLike", hardmax_dec and unknown_elem and target < 15),
        ("hardmax-legacy-shape", r"the shape of input '[^']+' is unknown, and below opset 7 the one-hot",
         hardmax_dec and target < 7 and unknown_rank),
        ("hardmax-legacy-dynamic", r"the size along the axis is dynamic, and below opset 7",
         hardmax_dec and target < 7 and not_static),
        ("hardmax-legacy-size", r"below opset 7 the one-hot is a Gather from a \d+x\d+ identity table, larger",
         hardmax_dec and target < 7),
        ("hardmax-legacy-reshape", r"input '[^']+' has more than one dynamic dim, and Reshape below opset 5",
         hardmax_dec and target < 5 and not_static),
        ("hardmax-no-onehot", r"the size along the axis is not static \(or the rank is unknown\), and below "
         r"opset 9", hardmax_dec and target < 9 and not_static),
        ("gmp-unknown-rank", r"the rank of input '[^']+' is unknown, and ReduceMax below opset 18",
         "globalmaxpool" in case.decompose and op == "GlobalMaxPool" and unknown_rank and target < 18),
        ("function-attribute-ref", r"its attribute\(s\) [\w=@, ]+ refer to the function's attributes",
         case.ref_attrs),
        (f"op-missing {op}", r"\w+ does not exist there", op not in OPS and target < case.source),
        ("types", r"\w+ changed its types at version \d+: (input|output) '[^']+' is tensor\(bfloat16\), which \w+ "
         r"does not accept there(; .*)?$", case.dtype == BF16 and target < case.source),
        # the same, met by the ops a lowering wrote (Scan below 8 becomes a Loop, whose bfloat16 came at 16)
        ("types-lowered", r"it is rewritten \(\w+-\d+ → ops that exist below it\) into a \w+ that cannot be taken "
         r"there: \w+ changed its types at version \d+: (input|output) '[^']+' is tensor\(bfloat16\)",
         case.dtype == BF16 and target < case.source),
        (f"semantics {op}", r"\w+ changed meaning at version \d+ .*and lowerer has no exact adapter for this step "
         r"down(; .*)?$", op not in OPS and target < case.source),
        (f"structural {op}", r"onnx.version_converter changes this op's structure and lowerer does not convert "
         r"ops with subgraphs", op in ("Scan", "If", "Loop")),
        # below Scan-8 a Scan becomes a Loop that needs its body as the model gave it: a Scan nested in a
        # Scan's body is inside a made Loop by then
        # below Scan-8 the Loop reads the Scan's body at the Scan's version: an owned op there whose meaning
        # changed between that version and the model's opset is refused
        ("scan-body-versions-below-8", r"below Scan-8 it becomes a Loop whose body is read at Scan-\d+'s opset",
         "scan" in case.levels and target < 8),
        ("scan-nested-below-8", r"it is rewritten \(Scan-\d+ → ops that exist below it\) into a Scan that cannot be "
         r"taken there", op == "Scan" and target < 8 and case.levels.count("scan") > 1),
        # onnx's converter has no down-adapter for many ops (e.g. Identity-13 -> 12): a clear refusal
        (f"foreign-op {op}-{m.group(2)}", r"onnx.version_converter failed \(",
         op not in (*COERCED, *ARG) and target < case.source),
    ]
    for kind, pattern, allowed in rules:
        if re.match(pattern, reason):
            return kind if allowed else None
    return None


def _count_ops(model: onnx.ModelProto, op_type: str) -> int:
    count = 0

    def walk(nodes: object) -> None:
        nonlocal count
        for n in nodes:  # type: ignore[attr-defined]
            if n.op_type == op_type and n.domain in ("", "ai.onnx"):
                count += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g.node)
                for g in a.graphs:
                    walk(g.node)

    walk(model.graph.node)
    for fn in model.functions:
        walk(fn.node)
    return count


def _decomposed_ops(names: list[str]) -> set[str]:
    ops: set[str] = set()
    for n in names:
        ops.update(DECOMPOSITIONS[n].op_types)
    return ops


def check_case(case: Case) -> str:
    """Convert and judge one case; returns the outcome (for hypothesis events)."""
    model = build(case)
    try:
        onnx.checker.check_model(model, full_check=True)
        input_valid = True
    except Exception:  # ValidationError or InferenceError: then the output is not held to it either
        input_valid = False
    before = model.SerializeToString()
    try:
        result = lowerer.convert(model, target_opset=case.target, decompose=case.decompose, verify=case.verify)
    except ConversionError as e:
        kind = _allowed_refusal(case, str(e))
        assert kind is not None, f"unexpected refusal for {case}: {e}"
        return f"refused: {kind}"
    except VerificationError as e:
        raise AssertionError(f"verification failed for {case}: {e}") from None
    except InputError as e:  # e.g. a Loop/If below 16 carrying bfloat16: the generator made an invalid model
        assert not input_valid, f"valid input refused for {case}: {e}"
        assert "\n" not in str(e)
        return "refused: invalid input"
    assert model.SerializeToString() == before, "convert() modified its input model"
    out = result.model
    assert [(o.domain, o.version) for o in out.opset_import if o.domain in ("", "ai.onnx")] == [("", case.target)]
    for fn in out.functions:
        assert [o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")] == [case.target]
    needed = onnx.helper.find_min_ir_version_for(list(out.opset_import), ignore_unknown=True)
    assert needed <= out.ir_version <= max(needed, 13), f"IR version {out.ir_version} (opsets need {needed})"
    if input_valid:
        onnx.checker.check_model(out, full_check=True)
    for op in _decomposed_ops(case.decompose):
        assert _count_ops(out, op) == 0, f"{op} left after decomposition"
    if case.dtype == BF16:
        return "converted (bfloat16, not run)"
    f = feeds(case)
    want = expected(case, f)
    try:
        got = _run(out, f)
    except Exception as e:  # onnxruntime lacks some kernels at old opsets (e.g. float16 Hardmax-1)
        # (float16 below opset 7: no kernel, or a Cast-1 onnxruntime inserts and then rejects)
        assert case.dtype == F16 and case.target < 7, str(e)
        return "converted (no onnxruntime kernel)"
    assert len(got) == len(want)
    original: list[np.ndarray] | None = None
    for i, (spec, g, w) in enumerate(zip(case.ops, got, want, strict=True)):
        assert g.shape == w.shape, f"output {i} ({spec.op}): shape {g.shape} != {w.shape}"
        if spec.op in ("Softmax", "LogSoftmax"):
            assert g.dtype == f["x"].dtype
            tol = {np.float16: 2e-2, np.float32: 1e-4, np.float64: 1e-9}[g.dtype.type]
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol)
            if original is None:
                try:
                    original = _run(model, f)
                except Exception:  # no kernel for the source op at its opset: the oracle still judged it
                    original = []
            if original and case.model_opset in (None, case.source):
                np.testing.assert_array_equal(g, original[i], err_msg=f"output {i} not bit-exact vs original")
        else:
            assert g.dtype == w.dtype, f"output {i} ({spec.op}): dtype {g.dtype} != {w.dtype}"
            np.testing.assert_array_equal(g, w, err_msg=f"output {i} ({spec.op}) differs from the oracle")
    return "converted and equal"


@pytest.mark.filterwarnings("ignore")
@settings(_PROFILE)
@given(cases())
def test_fuzz_owned_ops(case: Case) -> None:
    outcome = check_case(case)
    event(outcome)
    if case.shared_if:
        event(f"sibling branches share names ({outcome.split(':')[0]})")
