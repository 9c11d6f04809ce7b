"""A node against its op's schema at an opset: the types its formal parameters allow, and its arity.

:func:`check_types` and :func:`check_arity` refuse (through the emitter) a node the schema at the
target opset would not accept; :func:`formal_types` lists what each formal input and output
allows. Also importable from :mod:`lowerer.steps.generic`.
"""

from __future__ import annotations

import functools

import onnx
import onnx.defs

from lowerer.core.remedies import ADD_TYPES
from lowerer.steps.emitter import Emitter

__all__ = ["check_arity", "check_types", "formal_types", "op_schema"]


@functools.lru_cache(maxsize=4096)
def op_schema(op: str, opset: int) -> onnx.defs.OpSchema:
    """The schema of default-domain ``op`` at ``opset`` (cached)."""
    return onnx.defs.get_schema(op, opset)


@functools.lru_cache(maxsize=4096)
def formal_types(op: str, opset: int) -> tuple[tuple[tuple[frozenset[str], bool, bool], ...],
                                               tuple[tuple[frozenset[str], bool, bool], ...]]:
    """Per formal input and output of ``op`` at ``opset``: (allowed type strings, variadic, shared with an input)."""
    schema = op_schema(op, opset)
    params = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    input_params = {p.type_str for p in schema.inputs}
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic

    def describe(p: onnx.defs.OpSchema.FormalParameter, is_output: bool) -> tuple[frozenset[str], bool, bool]:
        allowed = params.get(p.type_str, frozenset({p.type_str}))
        return allowed, p.option == variadic, is_output and p.type_str in input_params

    return (tuple(describe(p, False) for p in schema.inputs), tuple(describe(p, True) for p in schema.outputs))


@functools.lru_cache(maxsize=4096)
def _type_params(op: str, opset: int) -> tuple[tuple[str | None, ...], tuple[str | None, ...]]:
    """The type parameter each formal input and output of ``op`` at ``opset`` binds (None: binds nothing).

    A heterogeneous variadic parameter (If's outputs, Loop's carried values) lets each value
    have its own type, so it binds nothing.
    """
    schema = op_schema(op, opset)
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic

    def param(p: onnx.defs.OpSchema.FormalParameter) -> str | None:
        return None if p.option == variadic and not p.is_homogeneous else p.type_str

    return tuple(param(p) for p in schema.inputs), tuple(param(p) for p in schema.outputs)


def check_types(em: Emitter, node: onnx.NodeProto, opset: int, why: str) -> None:
    """Refuse unless every type ``node`` uses is allowed by its schema at ``opset``.

    Each input and output must be of a type its formal parameter allows there, and the values
    bound to one type parameter must share one type (Pow-7's base and exponent; Pow-12 let
    them differ).
    """
    inputs, outputs = formal_types(node.op_type, opset)
    params = _type_params(node.op_type, opset)
    bound: dict[str, tuple[str, str]] = {}
    for names, formals, kinds, kind in ((node.input, inputs, params[0], "input"),
                                        (node.output, outputs, params[1], "output")):
        for i, name in enumerate(names):
            if not name:
                continue
            if not formals or (i >= len(formals) and not formals[-1][1]):
                em.refuse(f"{why}: it has more {kind}s than {node.op_type} takes there")
            position = min(i, len(formals) - 1)
            allowed, _, shared = formals[position]
            param = kinds[position]
            if shared and param is not None:
                continue  # typed by an input, checked there (a heterogeneous variadic, Loop's, binds nothing)
            spelled = em.facts.type_str(name)
            if spelled is None:
                em.refuse(f"{why}, and the type of {kind} {name!r} is unknown; {ADD_TYPES}")
            if spelled not in allowed:
                if spelled == "tensor(bfloat16)" and opset < 13:
                    em.refuse(f"bfloat16 input, and no op accepts bfloat16 below opset 13 (not even Cast): {kind} "
                              f"{name!r} of {node.op_type}; choose a target opset >= 13")
                em.refuse(f"{why}: {kind} {name!r} is {spelled}, which {node.op_type} does not accept there")
            if param is None:
                continue
            first = bound.setdefault(param, (name, spelled))
            if first[1] != spelled:
                em.refuse(f"{why}: {first[0]!r} ({first[1]}) and {name!r} ({spelled}) must share one type there")


def check_arity(em: Emitter, node: onnx.NodeProto, opset: int) -> None:
    """Refuse unless ``node`` has as many inputs and outputs as its schema at ``opset`` allows."""
    schema = op_schema(node.op_type, opset)
    for count, low, high, what in ((len(node.input), schema.min_input, schema.max_input, "takes"),
                                   (len(node.output), schema.min_output, schema.max_output, "makes")):
        if not low <= count <= high:
            bounds = f"at least {low}" if high >= 1 << 30 else f"{low} to {high}" if low != high else f"{low}"
            kind = "inputs" if what == "takes" else "outputs"
            em.refuse(f"{node.op_type}-{schema.since_version} {what} {bounds} {kind} and this node has {count}")
