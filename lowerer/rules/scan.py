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
"""

from __future__ import annotations

from lowerer.steps.changes import Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import attribute, attribute_value
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["scan_8_9", "scan_9_8"]


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


@adapter("Scan", 9, DOWN)
def scan_9_8(em: Emitter, step: Step, direction: str) -> None:
    """Scan-9 scanning axis 0 with forward outputs → Unsqueeze, Scan-8 (batch of 1), Squeeze."""
    node = em.node
    for name in ("scan_input_axes", "scan_output_axes"):
        axes = _ints(attribute_value(node, name))
        if axes and any(a != 0 for a in axes):
            em.refuse(f"{name}={axes}; Scan-8 scans axis 1 after its batch axis only (axis 0 here)")
    reversed_outputs = _ints(attribute_value(node, "scan_output_directions"))
    if reversed_outputs and any(reversed_outputs):
        em.refuse(f"scan_output_directions={reversed_outputs}; Scan-8 appends every scan output forward")
    directions = _ints(attribute_value(node, "scan_input_directions"))
    _wrapped_scan(em, list(node.input), "Unsqueeze", "Squeeze", directions=directions)
