"""Helpers for the opset-conversion test matrix: model builders, runners (ORT, or a reference fallback).

Runners:

* :func:`ort_run` runs a model in onnxruntime (CPU, graph optimizations off, warnings muted so that
  opset < 7 models still run).
* :func:`run_model` runs it in ORT, and only when ORT has *no kernel* for an op/type
  (``NOT_IMPLEMENTED``) falls back to ``onnx.reference`` with the owned ops replaced by the numpy
  oracle of their version (onnx.reference's own Hardmax-1/11 has the opset-13 meaning). It says
  which runner it used.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))

import oracle

__all__ = [
    "BF16",
    "DTYPES",
    "complete_outputs",
    "elem_of",
    "make_model",
    "ort_can_run",
    "ort_run",
    "run_model",
    "since",
    "tie_inputs",
    "value_info",
]

BF16 = oracle.BF16

#: name -> numpy dtype for the matrix.
DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "float64": np.dtype(np.float64),
    "bfloat16": BF16,
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "int64": np.dtype(np.int64),
    "uint64": np.dtype(np.uint64),
}


def elem_of(dtype: np.dtype) -> int:
    """The ONNX element type of a numpy dtype (bfloat16 via ml_dtypes)."""
    if np.dtype(dtype) == BF16:
        return TensorProto.BFLOAT16
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


@functools.cache
def since(op_type: str, opset: int) -> int | None:
    """Since-version of ``op_type`` at default-domain ``opset`` (None if absent)."""
    try:
        return int(onnx.defs.get_schema(op_type, opset).since_version)
    except onnx.defs.SchemaError:
        return None


def value_info(name: str, elem: int, shape: Sequence[int | str | None] | None) -> onnx.ValueInfoProto:
    """A tensor value_info; ``shape`` None = unknown rank, a str dim = symbolic, None dim = unknown."""
    return helper.make_tensor_value_info(name, elem, None if shape is None else list(shape))


def ir_for(opset: int) -> int:
    """The IR version a model of ``opset`` is written with (the minimum onnx accepts, at least 3)."""
    return max(3, helper.find_min_ir_version_for([helper.make_opsetid("", opset)], ignore_unknown=True))


def complete_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each main-graph output that states no shape given the one onnx infers (in place).

    onnx's checker requires a shape on every graph input and output; builders here state outputs
    as ``None`` (unknown) where the test does not care. Outputs inference cannot shape keep none.
    """
    missing = [o for o in model.graph.output
               if not o.type.HasField("tensor_type") or not o.type.tensor_type.HasField("shape")]
    if not missing:
        return model
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        return model
    found = {o.name: o for o in inferred.graph.output}
    for o in missing:
        new = found.get(o.name)
        if new is not None and new.type.HasField("tensor_type") and new.type.tensor_type.HasField("shape"):
            o.type.CopyFrom(new.type)
    return model


def make_model(nodes: Iterable[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], opset: int, *, ir_version: int | None = None,
               initializers: Sequence[onnx.TensorProto] = (), functions: Sequence[onnx.FunctionProto] = (),
               extra_opsets: Sequence[tuple[str, int]] = (), value_infos: Sequence[onnx.ValueInfoProto] = (),
               name: str = "g") -> onnx.ModelProto:
    """A model at default-domain ``opset`` (IR version the minimum for it, 8 with functions)."""
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(initializers),
                              value_info=list(value_infos))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    ir = ir_version if ir_version is not None else ir_for(opset)
    if functions:
        ir = max(ir, 8)
    return complete_outputs(helper.make_model(graph, opset_imports=imports, ir_version=ir, functions=list(functions)))


# -- onnxruntime ----------------------------------------------------------------------------------
def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _no_kernel(e: Exception) -> bool:
    text = str(e)
    # ORT without a float16 kernel inserts a Cast to float; below opset 6 that Cast-1 has the wrong
    # attribute type and ORT rejects its own graph ("InsertedPrecisionFreeCast"): also no kernel.
    return ("NOT_IMPLEMENTED" in text or "Could not find an implementation" in text
            or "InsertedPrecisionFreeCast" in text)


def ort_can_run(model: onnx.ModelProto) -> bool:
    """Whether ORT has kernels for every node (other load errors are raised, not hidden)."""
    try:
        _session(model)
    except Exception as e:
        if _no_kernel(e):
            return False
        raise
    return True


def ort_run(model: onnx.ModelProto, feeds_list: Sequence[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """Run ``model`` in ORT once per feed dict; outputs in graph order."""
    sess = _session(model)
    return [sess.run(None, feeds) for feeds in feeds_list]


# -- reference fallback -----------------------------------------------------------------------------
def _oracle_ops() -> list[type]:
    from onnx.reference.op_run import OpRun

    def version_of(op: Any) -> int:
        opset = op.run_params["opsets"].get("", op.run_params["opsets"].get("ai.onnx"))
        v = since(op.onnx_node.op_type, int(opset))
        assert v is not None
        return v

    def attrs(op: Any) -> dict[str, int]:
        return {a.name: int(a.i) for a in op.onnx_node.attribute}

    class _Coerced(OpRun):
        kind = ""

        def _run(self, x: np.ndarray, **_: Any) -> tuple[np.ndarray]:
            return (oracle.coerced_axis_op(self.kind, x, attrs(self).get("axis"), version_of(self)),)

    class Hardmax(_Coerced):
        kind = "hardmax"

    class Softmax(_Coerced):
        kind = "softmax"

    class LogSoftmax(_Coerced):
        kind = "logsoftmax"

    class _Arg(OpRun):
        def _run(self, x: np.ndarray, **_: Any) -> tuple[np.ndarray]:
            a = attrs(self)
            return (oracle.argextremum(self.onnx_node.op_type, x, a.get("axis"), a.get("keepdims"),
                                       a.get("select_last_index"), version_of(self)),)

    class ArgMax(_Arg):
        pass

    class ArgMin(_Arg):
        pass

    return [Hardmax, Softmax, LogSoftmax, ArgMax, ArgMin]


def reference_run(model: onnx.ModelProto, feeds_list: Sequence[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """Run ``model`` with onnx.reference, owned ops computed by the oracle of their version."""
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(model, new_ops=_oracle_ops())
    return [[np.asarray(o) for o in ev.run(None, feeds)] for feeds in feeds_list]


def run_model(model: onnx.ModelProto,
              feeds_list: Sequence[dict[str, np.ndarray]]) -> tuple[str, list[list[np.ndarray]]]:
    """(runner, outputs): ORT, or the reference fallback when ORT has no kernel for an op/type."""
    try:
        sess = _session(model)
    except Exception as e:
        if not _no_kernel(e):
            raise
        return "reference", reference_run(model, feeds_list)
    return "ort", [sess.run(None, feeds) for feeds in feeds_list]


# -- inputs ---------------------------------------------------------------------------------------
def tie_inputs(shape: Sequence[int], dtype: np.dtype, rng: np.random.Generator, *,
               with_inf: bool = True) -> list[np.ndarray]:
    """Tie-heavy inputs: small integers, the same with ±inf sprinkled in (floats), and all-equal."""
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    lo, hi = (0, 3) if dtype.kind == "u" else (-2, 2)
    small = rng.integers(lo, hi + 1, size=shape).astype(np.float64)
    out = [small.astype(dtype)]
    if dtype.kind == "f" or dtype == BF16:
        if with_inf:
            infs = small.copy()
            mask = rng.random(shape) < 0.3
            infs[mask] = rng.choice([np.inf, -np.inf], size=int(mask.sum()))
            flat = infs.reshape(-1)
            quarter = max(1, flat.size // 4)
            flat[:quarter] = -np.inf  # whole rows of -inf at the front, of +inf at the back
            flat[-quarter:] = np.inf
            out.append(infs.astype(dtype))
        out.append((small * 0.25 + rng.standard_normal(shape) * 0.01).astype(dtype))
    else:
        info = np.iinfo(dtype)
        ext = small.astype(object)
        ext[rng.random(shape) < 0.3] = info.max
        ext[rng.random(shape) < 0.2] = info.min
        out.append(np.array(ext.tolist(), dtype=dtype))
    out.append(np.full(shape, 1, dtype=dtype))
    return out


# -- the conversion matrix engine ------------------------------------------------------------------
#: Static shapes by rank (a dim of 1 included), and which dims become symbolic in the dynamic variant.
SHAPES: dict[int, tuple[int, ...]] = {1: (5,), 2: (3, 4), 3: (2, 3, 4), 4: (2, 3, 2, 3), 5: (2, 1, 3, 2, 2)}

#: Opsets every test walks: each since-version boundary of the owned ops and its neighbours.
OPSETS = (1, 7, 9, 10, 11, 12, 13, 18, 21, 26)


def input_shape(rank: int, dynamic: bool) -> list[int | str]:
    """The declared shape of input ``x{rank}``: first and last dims symbolic when ``dynamic``."""
    dims: list[int | str] = list(SHAPES[rank])
    if dynamic:
        dims[0] = f"N{rank}"
        dims[-1] = f"M{rank}" if rank > 1 else f"N{rank}"
    return dims


def axis_is_dynamic(rank: int, axis: int, dynamic: bool) -> bool:
    """Whether the declared size along ``axis`` of ``x{rank}`` is symbolic."""
    a = axis + rank if axis < 0 else axis
    return dynamic and a in (0, rank - 1)


def feeds_for(ranks: Iterable[int], dtype: np.dtype, seed: int, *,
              with_inf: bool = True) -> list[dict[str, np.ndarray]]:
    """Feed dicts for inputs ``x{rank}``: one per input variant of :func:`tie_inputs`."""
    rng = np.random.default_rng(seed)
    ranks = sorted(set(ranks))
    per_rank = {r: tie_inputs(SHAPES[r], dtype, rng, with_inf=with_inf) for r in ranks}
    count = len(next(iter(per_rank.values())))
    return [{f"x{r}": per_rank[r][i] for r in ranks} for i in range(count)]


def check_model_full(model: onnx.ModelProto) -> None:
    """onnx's checker with ``full_check`` (shape inference, strict)."""
    onnx.checker.check_model(model, full_check=True)


def hidden_rank_model(node: onnx.NodeProto, opset: int, elem: int = TensorProto.FLOAT,
                      out_elem: int | None = None, extra_opsets: Sequence[tuple[str, int]] = ()) -> onnx.ModelProto:
    """A *valid* model where ``node``'s input ``h`` has unknown rank (onnx's checker wants shapes on
    graph inputs and outputs): ``h = Reshape(x[2,3,4], s[k])``, then ``node`` (input ``h``, output
    ``y``), then ``yf = Flatten(y, axis=0)`` as the output. Feed ``s = [2, 3, 4]`` (or any shape).
    """
    node = onnx.NodeProto.FromString(node.SerializeToString())
    node.input[0] = "h"
    node.output[0] = "y"
    nodes = [helper.make_node("Reshape", ["x", "s"], ["h"]), node, helper.make_node("Flatten", ["y"], ["yf"], axis=0)]
    return make_model(nodes, [value_info("x", elem, [2, 3, 4]), value_info("s", TensorProto.INT64, ["k"])],
                      [value_info("yf", out_elem if out_elem is not None else elem, [1, "n"])], opset,
                      extra_opsets=extra_opsets)


def float_mod_model(opset: int) -> onnx.ModelProto:
    """One float Mod (fmod=1), node 'tri', the refusal tests' model.

    Below Mod-10 it has no exact form (its lowering takes integers only), so any target below 10 is refused.
    """
    graph = helper.make_graph(
        [helper.make_node("Mod", ["x", "x"], ["y"], name="tri", fmod=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
