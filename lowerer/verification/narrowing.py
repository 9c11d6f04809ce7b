"""No hidden narrowing: a replacement never computes in a narrower float type than its original did.

A numeric check cannot always see it. onnxruntime's CPU provider has no float16 Softmax: it wraps
one in casts to float and then removes the redundant ``Cast(float -> float16) -> Cast(float16 ->
float)`` pair, even with ``ORT_DISABLE_ALL``, so a Softmax "computed" through float16 runs in float32
there and passes, while another runtime (``onnx.reference``: 3.7e-4 away) computes it in float16
(issue 31 item 6). This static check reads the emitted nodes instead: a ``Cast``/``CastLike`` that
turns a float value into a float type that cannot hold all of its values (fewer exponent or mantissa
bits), where that type is narrower than every float output of the original (or, when it has none,
every float input) — the precision the original keeps on that path — fails the rewrite, naming the Cast.

Only rewrites that emit a Cast or CastLike to a float type are looked at further (one type inference
of the replacement, once per distinct check), so the cost is nil for the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import onnx
from onnx import TensorProto as T
from onnx import helper

from lowerer.verification.result import CheckResult

if TYPE_CHECKING:
    from lowerer.core.report import Rewrite

__all__ = ["FLOAT_BITS", "hidden_narrowing", "narrower", "narrowing_problem"]

#: (exponent bits, mantissa bits) of each float element type.
FLOAT_BITS: dict[int, tuple[int, int]] = {
    T.DOUBLE: (11, 52), T.FLOAT: (8, 23), T.FLOAT16: (5, 10), T.BFLOAT16: (8, 7),
    T.FLOAT8E4M3FN: (4, 3), T.FLOAT8E4M3FNUZ: (4, 3), T.FLOAT8E5M2: (5, 2), T.FLOAT8E5M2FNUZ: (5, 2),
    **({T.FLOAT4E2M1: (2, 1)} if hasattr(T, "FLOAT4E2M1") else {}),
}
_CASTS = ("Cast", "CastLike")


def narrower(a: int, b: int) -> bool:
    """Float type ``a`` cannot hold every value of float type ``b`` (fewer exponent or mantissa bits)."""
    (ea, ma), (eb, mb) = FLOAT_BITS[a], FLOAT_BITS[b]
    return ea < eb or ma < mb


def _floats(types: Iterable[int]) -> list[int]:
    return [t for t in types if t in FLOAT_BITS]


def _name(elem: int) -> str:
    return str(T.DataType.Name(elem)).lower()


def _to(node: onnx.NodeProto) -> int | None:
    for a in node.attribute:
        if a.name == "to":
            return int(a.i)
    return None


def _elem_types(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, int], constants: Sequence[onnx.TensorProto],
                outputs: Sequence[str], opset: int) -> dict[str, int]:
    """Each value's element type in ``nodes`` (onnx's type inference on them alone; 0 where unknown)."""
    graph = helper.make_graph(
        list(nodes), "narrowing", [helper.make_tensor_value_info(n, t, None) for n, t in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs], initializer=list(constants))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an inference failure leaves the types unknown: nothing is claimed from them
        return dict(inputs)
    types = dict(inputs)
    types.update({t.name: t.data_type for t in constants})
    for vi in (*inferred.graph.value_info, *inferred.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def hidden_narrowing(original: onnx.NodeProto, replacement: Sequence[onnx.NodeProto],
                     input_types: Mapping[str, int], constants: Sequence[onnx.TensorProto],
                     from_opset: int, to_opset: int) -> str | None:
    """The Cast in ``replacement`` that computes below the original's float precision, in words, or None.

    Args:
        original: the original node.
        replacement: the nodes that replace it.
        input_types: the element type of each of the original's inputs, where known.
        constants: initializers the replacement reads.
        from_opset: the default-domain opset of the original.
        to_opset: the default-domain opset of the replacement.
    """
    targets = [n for n in replacement if n.op_type in _CASTS and n.domain in ("", "ai.onnx")
               and (n.op_type == "CastLike" or _to(n) in FLOAT_BITS)]
    if not targets:
        return None
    known = {n: t for n, t in input_types.items() if t}
    kept = _floats(_elem_types([original], known, [], list(original.output), from_opset).get(o, 0)
                   for o in original.output if o)
    kept = kept or _floats(known.get(i, 0) for i in original.input if i)
    if not kept:
        return None
    types = _elem_types(replacement, known, constants, list(original.output), to_opset)
    for cast in targets:
        source = types.get(cast.input[0], 0)
        to = _to(cast) if cast.op_type == "Cast" else types.get(cast.input[1], 0) if len(cast.input) > 1 else 0
        if to not in FLOAT_BITS or source not in FLOAT_BITS or not narrower(to, source):
            continue
        if all(narrower(to, k) for k in kept):
            which = repr(cast.name) if cast.name else f"writing {cast.output[0]!r}"
            return (f"the {cast.op_type} {which} narrows {cast.input[0]!r} from "
                    f"{_name(source)} to {_name(to)}, below the {' / '.join(_name(k) for k in kept)} the original "
                    f"{original.op_type} computes in (hidden narrowing: a runtime may remove the Cast pair and "
                    "hide it)")
    return None


def narrowing_problem(rewrite: Rewrite) -> CheckResult | None:
    """A failed check when ``rewrite``'s replacement narrows below its original (:func:`hidden_narrowing`)."""
    if rewrite.original is None:
        return None
    elems = {}
    for name, vt in rewrite.input_types.items():
        if isinstance(vt, tuple | list) and vt and isinstance(vt[0], int):
            elems[name] = int(vt[0])
    found = hidden_narrowing(rewrite.original, rewrite.replacement, elems, rewrite.constants,
                             rewrite.from_opset or rewrite.to_opset, rewrite.to_opset)
    if found is None:
        return None
    return CheckResult("failed", "the replacement computes in a narrower float type than the original",
                       "structure", failure=found)
