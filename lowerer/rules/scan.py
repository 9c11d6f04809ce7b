"""Version-step adapter for Scan 8 ↔ 9, where the batch axis went away.

Scan-8 loops over a batch axis 0 of every input and output (states too) and scans axis 1, with an
optional ``sequence_lens`` (input 0) and per-input ``directions``; Scan-9 has no batch axis and no
``sequence_lens``, scans axis 0 by default and adds per-input and per-output axes and directions.
A batch of 1 maps exactly between them:

* up (8 → 9): ``sequence_lens`` absent and the batch statically 1: Squeeze axis 0 of each input,
  Scan-9 with ``scan_input_directions`` = ``directions``, Unsqueeze axis 0 of each output. Scan-8's
  inputs (states and scanned ones) share one batch (onnxruntime fails on inputs of different
  batches), so one input whose batch is statically 1 fixes it for all: a scanned input of unknown
  shape beside a state of ``[1, ...]`` has a batch of 1 too, or the original fails as the result's
  Squeeze does. Any input of another static batch is refused;
* down (9 → 8): scan axes 0 and forward scan outputs (Scan-8 has neither other axes nor reversed
  outputs): Unsqueeze axis 0 of each input, Scan-8 without ``sequence_lens``, Squeeze each output.

Other batches would need a Loop, which is refused. The body is the same on both sides.

Below Scan-8 (at 7) Scan-9+ becomes a Loop over the sequence (:func:`scan_as_loop`). That is not a
loop form in the registry's sense (:attr:`lowerer.steps.registry.RegistryEntry.loop_form`, the scatter reductions'
Loop over updates): the Scan already runs its body once per element of the sequence, and the Loop runs the
same body as many times, so the cost class does not change and ``no_loops`` does not refuse it.
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.core.opsets import since_version
from lowerer.facts.body_shapes import body_input_types
from lowerer.model_io.node_attributes import attribute, attribute_value
from lowerer.steps.changes import Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter, history, lowering, made_rewrite

__all__ = ["loop_from_scan", "scan_8_9", "scan_9_8", "scan_as_loop"]


def _ints(node_value: object) -> list[int] | None:
    return None if node_value is None else [int(v) for v in node_value]  # type: ignore[attr-defined]


def _wrapped_scan(em: Emitter, inputs: list[str], wrap_in: str, wrap_out: str, **attrs: object) -> None:
    """``wrap_in`` (axis 0) on each input, a Scan with ``attrs`` and the body, ``wrap_out`` on each output."""
    node = em.node
    body = attribute(node, "body")
    assert body is not None
    wrapped = [em.op(wrap_in, [x], axes=[0]) if x else "" for x in inputs]
    if wrap_in == "Unsqueeze":
        wrapped = ["", *wrapped]  # Scan-8's sequence_lens, absent
    results = [em.fresh(f"{o}_scan") if o else "" for o in node.output]
    em.op("Scan", wrapped, results, body=body.g, num_scan_inputs=attribute_value(node, "num_scan_inputs"), **attrs)
    for inner, outer in zip(results, node.output, strict=True):
        if outer:
            em.op(wrap_out, [inner], [outer], axes=[0])


@adapter("Scan", 9, UP)
def scan_8_9(em: Emitter, step: Step, direction: str) -> None:
    """Scan-8 with a batch of 1 and no sequence_lens → Squeeze, Scan-9, Unsqueeze."""
    node = em.node
    if node.input and node.input[0]:
        em.refuse(f"it has sequence_lens ({node.input[0]!r}), which Scan-9 does not take; only a Scan-8 without "
                  "it maps to Scan-9")
    inputs = list(node.input[1:])
    batches: dict[str, int | None] = {}
    for name in inputs:
        dims = em.dims(name) if name else None
        batches[name] = dims[0] if dims else None
    for name, batch in batches.items():
        if batch is not None and batch != 1:
            em.refuse(f"the batch (axis 0) of input {name!r} is {batch}; Scan-9 has no batch axis, and only a "
                      "static batch of 1 maps to it exactly (other batches need a Loop)")
    if 1 not in batches.values():
        em.refuse(f"no input's batch (axis 0) is statically 1 (inputs {', '.join(map(repr, inputs))}: not static); "
                  "Scan-9 has no batch axis, and only a batch of 1 maps to it exactly (other batches need a Loop); "
                  "the inputs share one batch, so one input of a static batch of 1 would do")
    directions = _ints(attribute_value(node, "directions"))
    _wrapped_scan(em, inputs, "Squeeze", "Unsqueeze", scan_input_directions=directions)


def _scan_8_conditions(em: Emitter, node: onnx.NodeProto) -> None:
    """Refuse what Scan-8 cannot express: other scan axes than 0, reversed scan outputs."""
    for name in ("scan_input_axes", "scan_output_axes"):
        axes = _ints(attribute_value(node, name))
        if axes and any(a != 0 for a in axes):
            em.refuse(f"{name}={axes}; Scan-8 scans axis 1 after its batch axis only (axis 0 here)")
    reversed_outputs = _ints(attribute_value(node, "scan_output_directions"))
    if reversed_outputs and any(reversed_outputs):
        em.refuse(f"scan_output_directions={reversed_outputs}; Scan-8 appends every scan output forward")


@adapter("Scan", 9, DOWN)
def scan_9_8(em: Emitter, step: Step, direction: str) -> None:
    """Scan-9 scanning axis 0 with forward outputs → Unsqueeze, Scan-8 (batch of 1), Squeeze."""
    node = em.node
    _scan_8_conditions(em, node)
    directions = _ints(attribute_value(node, "scan_input_directions"))
    _wrapped_scan(em, list(node.input), "Unsqueeze", "Squeeze", directions=directions)


@lowering("Scan", tuple(v for v in history("Scan") if v >= 9))
def scan_as_loop(em: Emitter) -> None:
    """Scan-9+ as a Loop over the sequence (below Scan-8, at 7); see :func:`loop_from_scan`.

    The engine has taken the body down already when it reaches the Scan, and takes the Loop's body down
    again from the Scan's version: the Loop gets the body as the model gave it (its nodes must mean the
    same at the Scan's version as at the model's opset), never the converted one.
    """
    node = em.node
    if em.target >= 8:  # only where there is no Scan; a Scan-8 step that refuses says why
        _scan_8_conditions(em, node)
        em.refuse("below Scan-8 a Scan becomes a Loop, and the target has Scan-8")
    given = em.facts.given_subgraph(node, "body")
    if given is None:
        em.refuse("below Scan-8 it becomes a Loop, which needs its body as the model gave it, and this Scan is "
                  "not the model's own (a made Scan is rewritten where it is made)")
    scope_opset = em.scope.opset or em.opset
    for inner in _all_nodes(given):
        if inner.domain in ("", "ai.onnx") and since_version(inner.op_type, em.opset) != \
                since_version(inner.op_type, scope_opset):
            em.refuse(f"below Scan-8 it becomes a Loop whose body is read at Scan-{em.opset}'s opset, and the "
                      f"body's {inner.op_type} means another version there than at opset {scope_opset}")
    loop = loop_from_scan(em, node, given, em.opset)
    em.nodes.append(loop)
    em.facts.add_node(loop, em.opset)


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    found = []
    for n in graph.node:
        found.append(n)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found.extend(_all_nodes(a.g))
            for g in a.graphs:
                found.extend(_all_nodes(g))
    return found


@made_rewrite("Scan")  # a Scan an expansion makes for a target below Scan-8: rewritten where it is made
def loop_from_scan(em: Emitter, node: onnx.NodeProto, body: onnx.GraphProto, opset: int | None = None
                   ) -> onnx.NodeProto:
    """Scan-9+ ``node`` as a Loop (returned, not emitted) over ``body``, its nodes valid at ``opset`` (``em.opset``).

    The Loop runs ``T`` times (``T``, the scanned axis's size, static and positive: a Loop of no
    iteration cannot state its scan outputs' shapes), carries the states, and its body takes slice
    ``i`` (``T - 1 - i`` for a reversed input) of each scanned input with a Gather of the iteration
    count, named as the Scan body names its slice; the body's own nodes follow unchanged and its scan
    outputs are stacked along axis 0 in iteration order, as the Loop stacks them (so every
    ``scan_output_axes`` must be 0 and every ``scan_output_directions`` forward).
    """
    n_scan = int(attribute_value(node, "num_scan_inputs") or 0)  # type: ignore[call-overload]
    inputs = list(node.input)
    n_state = len(inputs) - n_scan
    if n_scan < 1 or n_state < 0 or len(body.input) != len(inputs):
        em.refuse(f"its body takes {len(body.input)} inputs for {n_state} states and {n_scan} scanned inputs")
    for name in ("scan_output_axes", "scan_output_directions"):
        values = _ints(attribute_value(node, name))
        if values and any(values):
            em.refuse(f"{name}={values}; the Loop it becomes below Scan-8 stacks scan outputs forward along axis 0")
    axes = _ints(attribute_value(node, "scan_input_axes")) or [0] * n_scan
    length, normalized = _scanned_length(em, inputs[n_state:], axes)
    typed = body_input_types(node, opset or em.opset, em.facts.type_of, em.facts.symbols, em.facts.value)
    label = node.name or "Scan"
    count, cond_in, cond_out = (em.fresh(f"{node.output[0] or 'scan'}_{h}") for h in ("i", "cond", "cond_out"))
    em.facts.add_type(count, (onnx.TensorProto.INT64, []))
    em.facts.add_type(cond_in, (onnx.TensorProto.BOOL, []))
    directions = _ints(attribute_value(node, "scan_input_directions")) or [0] * n_scan
    made = _slices(em, label, list(zip(body.input[n_state:], inputs[n_state:], normalized, directions, strict=False)),
                   count, length)
    made.append(onnx.helper.make_node("Identity", [cond_in], [cond_out], name=em.fresh(f"{label}/cond")))
    states = [_state_input(em, formal, typed.get(formal.name)) for formal in body.input[:n_state]]
    copies = []
    for n in body.node:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        copies.append(c)
    loop_body = onnx.helper.make_graph(
        [*made, *copies], em.fresh(f"{body.name or 'scan'}_loop"),
        [onnx.helper.make_tensor_value_info(count, onnx.TensorProto.INT64, []),
         onnx.helper.make_tensor_value_info(cond_in, onnx.TensorProto.BOOL, []), *states],
        [onnx.helper.make_tensor_value_info(cond_out, onnx.TensorProto.BOOL, []), *body.output],
        initializer=list(body.initializer), value_info=list(body.value_info))
    trips = em.const(np.array(length, np.int64), "trips")
    return onnx.helper.make_node("Loop", [trips, "", *inputs[:n_state]], list(node.output),
                                 name=em.fresh(f"{label}/Loop"), body=loop_body)


def _scanned_length(em: Emitter, scanned: list[str], axes: list[int]) -> tuple[int, list[int]]:
    """The scanned axes' one static positive size and the axes made non-negative; refused otherwise."""
    lengths = set()
    normalized = []
    for x, axis in zip(scanned, axes, strict=False):
        dims = em.dims(x)
        if dims is None:
            em.refuse(f"the rank of scanned input {x!r} is unknown; the Loop it becomes below Scan-8 needs the "
                      "scanned axis's static size")
        axis = axis + len(dims) if axis < 0 else axis
        normalized.append(axis)
        lengths.add(dims[axis] if 0 <= axis < len(dims) else None)
    if len(lengths) != 1 or None in lengths or 0 in lengths:
        em.refuse(f"the scanned axes' sizes are {sorted(map(str, lengths))}; the Loop it becomes below Scan-8 "
                  "needs them static and positive (a Loop of no iteration cannot state its scan outputs)")
    (length,) = lengths
    return int(length or 0), normalized


def _slices(em: Emitter, label: str, scanned: list[tuple[onnx.ValueInfoProto, str, int, int]], count: str,
            length: int) -> list[onnx.NodeProto]:
    """The Loop body's Gathers of slice ``count`` (``length - 1 - count`` backwards) of each scanned input.

    ``scanned``: (the Scan body's input, the outer input, its scan axis, whether it is read backwards).
    """
    made: list[onnx.NodeProto] = []
    reverse_index = ""
    for formal, x, axis, backwards in scanned:
        index = count
        if backwards:
            if not reverse_index:
                reverse_index = em.fresh(f"{formal.name}_at")
                last = em.const(np.array(length - 1, np.int64), "last")
                made.append(onnx.helper.make_node("Sub", [last, count], [reverse_index], name=em.fresh(f"{label}/Sub")))
            index = reverse_index
        em.facts.mark_non_negative(index)
        made.append(onnx.helper.make_node("Gather", [x, index], [formal.name], axis=axis,
                                          name=em.fresh(f"{label}/Gather")))
    return made


def _state_input(em: Emitter, formal: onnx.ValueInfoProto, found: tuple[int, list[int | str | None] | None] | None
                 ) -> onnx.ValueInfoProto:
    """The Loop body's input for a Scan state ``formal``, typed as the body provably receives it (``found``)."""
    info = onnx.ValueInfoProto()
    info.CopyFrom(formal)
    if found is not None and found[0]:
        em.facts.add_type(formal.name, (found[0], None if found[1] is None else
                                        [d if isinstance(d, int) else None for d in found[1]]))
        if not info.type.tensor_type.elem_type:
            info.type.tensor_type.elem_type = found[0]
    return info
