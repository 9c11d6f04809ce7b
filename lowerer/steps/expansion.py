"""Expanding a node into its op's ONNX function body (LayerNormalization, Gelu, HardSwish, ...).

The ONNX specification defines many ops *by* a function body in their schema: a static one
(``HardSwish`` = ``HardSigmoid`` + ``Mul``), or one built for the node's attributes and input
types (``LayerNormalization``, ``Gelu``). lowerer expands a node into that body when the target
opset has no version of the op, or when the user names the op in ``decompose``. The body is
instantiated with the node's attributes (schema defaults filled in, attribute references
resolved), its values get fresh names, nodes whose outputs nothing reads are dropped (an unused
optional output's computation), and it is returned at the body's own opset; the engine then takes
each of its nodes to the target like any other node.

onnx's bodies reshape computed shapes with Reshape's default ``allowzero=0``, which reads a 0 in
the shape as "copy the input's dim": on an empty input (``LayerNormalization`` of a [0, 0, 64]
tensor) the body then gives another shape than the op ([0, 64, 64]). lowerer writes
``allowzero=1`` on a body's Reshapes whose shape is not a constant (from Reshape-14 on; older
bodies have none), which is what the op means; the Reshape steps below 14 then keep it exact.

HardSwish's body is written ``Mul(HardSigmoid(X), X)``, not onnx's ``Mul(X, HardSigmoid(X))``: the
same product bit for bit (IEEE multiplication is commutative), and the order onnxruntime-qnn 2.7 computes
right, where onnx's order, with the HardSigmoid named as lowerer names it, comes out as ``X * X`` there
(measured: probes ``HardSigmoid-Mul-13-*`` and ``HardSwish-14-to13`` in
``lowerer/backends/measured/onnxruntime-qnn-2.7.0.json``). One form for every backend.

An expansion computes what the op means, but in the body's order of operations, which may round
differently from a fused kernel: verification judges it against an explicit ulp budget
(:data:`lowerer.verification.compare.EXPANSION_ULPS`), never exactly-or-nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

import onnx
import onnx.defs
from onnx import helper

from lowerer.facts.value_types import type_proto
from lowerer.model_io.scopes import node_graphs
from lowerer.steps.emitter import Emitter
from lowerer.steps.plain_forms import plain_forms
from lowerer.steps.specialize import MadeRewrite, flatten_free_layer_norm, fold, reads_of

__all__ = ["EXPANSION_RULE", "body_opsets", "expand", "expandable_ops", "has_body"]

#: The rule name expansions are reported under.
EXPANSION_RULE = "function-expansion"


def body_opsets(op: str, version: int) -> tuple[int, ...]:
    """The opsets at which ``op``-``version``'s schema defines a function body (static or context-dependent)."""
    try:
        schema: Any = onnx.defs.get_schema(op, version)  # the function-body accessors have no stubs
    except onnx.defs.SchemaError:
        return ()
    found = set(schema.function_opset_versions) | set(schema.context_dependent_function_opset_versions)
    if schema.has_function and not found:
        found.add(schema.since_version)
    return tuple(sorted(int(v) for v in found))


def has_body(op: str, version: int) -> bool:
    """Whether ``op``-``version`` can be expanded into a function body."""
    return bool(body_opsets(op, version))


@functools.lru_cache(maxsize=1)
def expandable_ops() -> dict[str, str]:
    """Every default-domain op whose newest schema has a function body, by lower-case name."""
    out: dict[str, str] = {}
    for schema in onnx.defs.get_all_schemas():
        if schema.domain in ("", "ai.onnx") and has_body(schema.name, schema.since_version):
            out[schema.name.lower()] = schema.name
    return out


def _body(em: Emitter, schema: Any, opset: int) -> onnx.FunctionProto:
    """The schema's function body at ``opset`` for ``em.node`` (context-dependent ones need input types)."""
    node = em.node
    raw: bytes | onnx.FunctionProto
    if opset in schema.context_dependent_function_opset_versions:
        types = []
        for name in node.input:
            if not name:
                types.append(onnx.TypeProto().SerializeToString())
                continue
            vt = em.facts.type_of(name, lambda vt: vt[0] != 0)
            if vt is not None and vt[0] != 0:
                types.append(helper.make_tensor_type_proto(vt[0], None if vt[1] is None else list(vt[1]))
                             .SerializeToString())
                continue
            spelled = type_proto(em.facts.type_str(name))  # a sequence or optional: its element type
            if spelled is None:
                em.refuse(f"its function body is built from the input types, and the type of {name!r} is unknown "
                          "(add type information)")
            types.append(spelled.SerializeToString())
        raw = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), types)
    else:
        raw = schema.get_function_with_opset_version(opset)
    body = onnx.FunctionProto()
    if isinstance(raw, bytes):
        body.ParseFromString(raw)
    else:
        body.CopyFrom(raw)
    return body


def _attribute_values(node: onnx.NodeProto, schema: onnx.defs.OpSchema) -> dict[str, onnx.AttributeProto]:
    """The node's attributes with the schema's defaults for those it leaves out."""
    values = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in values and spec.default_value is not None and spec.default_value.type:
            default = onnx.AttributeProto()
            default.CopyFrom(spec.default_value)
            default.name = name
            values[name] = default
    return values


def _resolve_references(nodes: Iterable[onnx.NodeProto], values: dict[str, onnx.AttributeProto]) -> None:
    """Replace each ``ref_attr_name`` attribute by the value it refers to (dropped when there is none)."""
    for node in nodes:
        kept = []
        for a in node.attribute:
            if a.ref_attr_name:
                source = values.get(a.ref_attr_name)
                if source is None:
                    continue
                resolved = onnx.AttributeProto()
                resolved.CopyFrom(source)
                resolved.name = a.name
                kept.append(resolved)
                continue
            kept.append(a)
        for g in node_graphs(node):
            _resolve_references(g.node, values)
        del node.attribute[:]
        node.attribute.extend(kept)


def _rename(nodes: list[onnx.NodeProto], mapping: dict[str, str], em: Emitter) -> None:
    """Give every value the body defines a fresh name (inputs and outputs map to the node's own)."""

    def name_of(n: str) -> str:
        if not n:
            return n
        if n not in mapping:
            mapping[n] = em.fresh(f"{em.node.output[0] if em.node.output else 'x'}_{n}")
        return mapping[n]

    def graph(g: onnx.GraphProto) -> None:
        for v in (*g.input, *g.output, *g.value_info):
            v.name = name_of(v.name)
        for t in g.initializer:
            t.name = name_of(t.name)
        walk(g.node)

    def walk(ns: Iterable[onnx.NodeProto]) -> None:
        for n in ns:
            for i, name in enumerate(n.input):
                n.input[i] = name_of(name)
            for i, name in enumerate(n.output):
                n.output[i] = name_of(name)
            n.name = em.fresh(f"{em.node.name or em.node.op_type}/{n.op_type}")
            for g in node_graphs(n):
                graph(g)

    walk(nodes)


def _literal_reshapes(nodes: list[onnx.NodeProto], opset: int) -> None:
    """``allowzero=1`` on the body's Reshapes of shapes made of run-time dims (a 0 there is a 0, not "copy").

    A shape that a constant holding a 0 flows into (``Concat([0, 0], [-1])``, the body's way to say
    "keep these dims") keeps the default: that 0 means "copy".
    """
    if opset < 14:
        return
    producers = {o: n for n in nodes for o in n.output if o}

    def constant_zero_reaches(name: str, depth: int = 0) -> bool:
        node = producers.get(name)
        if node is None or depth > 16:
            return False
        if node.op_type == "Constant":
            value = next((a for a in node.attribute), None)
            if value is None:
                return False
            if value.type == onnx.AttributeProto.TENSOR:
                return bool((onnx.numpy_helper.to_array(value.t) == 0).any())
            if value.type == onnx.AttributeProto.INTS:
                return 0 in list(value.ints)
            return bool(value.type == onnx.AttributeProto.INT and value.i == 0)
        if node.op_type in ("Shape", "Size"):
            return False
        return any(constant_zero_reaches(i, depth + 1) for i in node.input if i)

    for n in nodes:
        if n.op_type == "Reshape" and n.domain in ("", "ai.onnx") and len(n.input) > 1 \
                and not any(a.name == "allowzero" for a in n.attribute) and n.input[1] in producers \
                and not constant_zero_reaches(n.input[1]):
            n.attribute.append(helper.make_attribute("allowzero", 1))


def _hardswish_operands(nodes: list[onnx.NodeProto]) -> None:
    """HardSwish's ``Mul(X, HardSigmoid(X))`` as ``Mul(HardSigmoid(X), X)`` (see the module docstring)."""
    made = {o for n in nodes if n.op_type == "HardSigmoid" for o in n.output}
    for n in nodes:
        if n.op_type == "Mul" and len(n.input) == 2 and n.input[1] in made and n.input[0] not in made:
            n.input[0], n.input[1] = n.input[1], n.input[0]


def expand(em: Emitter, made: Mapping[str, MadeRewrite] | None = None) -> int:
    """Emit ``em.node``'s function body into ``em`` and return the opset its nodes are valid at.

    The body chosen is the one at the lowest opset the schema offers (fewest steps to take down).
    ``made``: how a node the body makes, of an op the target lacks, is rewritten where it is made
    (see :func:`~lowerer.steps.specialize.fold`; the engine passes its registry's).
    """
    node = em.node
    schema: Any = onnx.defs.get_schema(node.op_type, em.source_version)
    opsets = body_opsets(node.op_type, em.source_version)
    if not opsets:
        em.refuse(f"{node.op_type} has no function body in onnx's schema to expand it into")
    opset = opsets[0]
    body = _body(em, schema, opset)
    if node.op_type == "LayerNormalization":
        flatten_free_layer_norm(body, em)
    formal_in, formal_out = list(body.input), list(body.output)
    if len(node.input) > len(formal_in) or len(node.output) > len(formal_out):
        em.refuse("it has more inputs or outputs than its function body")
    mapping: dict[str, str] = {}
    present = list(node.input) + [""] * (len(formal_in) - len(node.input))
    nodes = list(body.node)
    reads = set().union(*(reads_of(n) for n in nodes)) if nodes else set()
    for formal, actual in zip(formal_in, present, strict=True):
        if not actual and formal in reads and opset not in schema.context_dependent_function_opset_versions:
            em.refuse(f"its optional input {formal!r} is absent and the function body reads it")
        mapping[formal] = actual
    outputs = list(node.output) + [""] * (len(formal_out) - len(node.output))
    wanted = set()
    for formal, actual in zip(formal_out, outputs, strict=True):
        if actual:
            mapping[formal] = actual
            wanted.add(actual)
    copies = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        copies.append(c)
    _resolve_references(copies, _attribute_values(node, schema))
    _literal_reshapes(copies, opset)
    if node.op_type == "HardSwish":
        _hardswish_operands(copies)
    _rename(copies, mapping, em)
    for c in plain_forms(fold(copies, em, opset, wanted, made), em, wanted):
        if node.metadata_props:
            c.metadata_props.extend(node.metadata_props)
        em.nodes.append(c)
        em.facts.add_node(c, opset)
    return opset
