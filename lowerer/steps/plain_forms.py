"""Body nodes written so that every runtime reads them the same way (issue 37, Build item 3).

An expanded function body is taken as onnx writes it; two of its habits are valid ONNX that runtimes
other than onnxruntime read wrongly, so :func:`plain_forms` rewrites them, exactly, after the body was
specialized at its call site (:func:`~lowerer.steps.specialize.fold`):

* **ConstantOfShape without** ``value`` (Attention's body): ONNX's default is a float32 zero
  (``onnx/defs/generator/defs.cc``: "If attribute 'value' is not specified, the value in the output
  defaults to 0, and the datatype defaults to float32"). tract 0.23 types the output as F64 and MNN
  3.6 leaves it unfilled; the value is written out (a float32 tensor ``[0.0]``), the same meaning.
* **A Split part of constant length 0** (RotaryEmbedding's body splits ``[rotary_dim, rest]`` and
  ``rest`` is 0 when the whole head rotates) whose output only Concats along the same axis read:
  concatenating an empty part along its empty axis adds nothing, so the part is dropped from the
  Split and from those Concats (a Split left with one part and a Concat left with one input become
  Identity). MNN 3.6 computes garbage for the empty part and onnxruntime-qnn leaves the node on the
  CPU.

Both rewrites are exact by construction; the expansion they belong to is verified as a whole.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter
from lowerer.steps.specialize import reads_of

__all__ = ["plain_forms"]

_DEFAULT = ("", "ai.onnx")


def _explicit_value(node: onnx.NodeProto) -> None:
    if node.op_type == "ConstantOfShape" and node.domain in _DEFAULT \
            and not any(a.name == "value" for a in node.attribute):
        node.attribute.append(helper.make_attribute(
            "value", numpy_helper.from_array(np.zeros([1], dtype=np.float32), "value")))


def _split_sizes(node: onnx.NodeProto, em: Emitter) -> list[int] | None:
    """The constant part lengths of a Split (input from 13, attribute before), or None."""
    if len(node.input) > 1 and node.input[1]:
        value = em.constant(node.input[1])
        return None if value is None else [int(v) for v in np.asarray(value).reshape(-1)]
    attr = next((a for a in node.attribute if a.name == "split"), None)
    return None if attr is None else [int(v) for v in attr.ints]


def _drop_empty_parts(nodes: list[onnx.NodeProto], em: Emitter, keep: set[str]) -> list[onnx.NodeProto]:
    readers: dict[str, list[onnx.NodeProto]] = {}
    in_bodies: set[str] = set()
    for n in nodes:
        for i in n.input:
            readers.setdefault(i, []).append(n)
        if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute):
            in_bodies |= reads_of(n)
    replaced: dict[int, onnx.NodeProto] = {}
    for n in nodes:
        if n.op_type != "Split" or n.domain not in _DEFAULT:
            continue
        sizes = _split_sizes(n, em)
        if sizes is None or len(sizes) != len(n.output) or 0 not in sizes or all(s == 0 for s in sizes):
            continue
        axis = int_attribute(n, "axis") or 0
        empty = [o for o, s in zip(n.output, sizes, strict=True) if s == 0]
        if any(not o or o in keep or o in in_bodies
               or any(all(i in empty for i in r.input) for r in readers.get(o, []))
               or not all(r.op_type == "Concat" and r.domain in _DEFAULT and int_attribute(r, "axis") == axis
                          for r in readers.get(o, []))
               for o in empty):
            continue
        parts = [(o, s) for o, s in zip(n.output, sizes, strict=True) if s != 0]
        if len(parts) == 1:
            replaced[id(n)] = helper.make_node("Identity", [n.input[0]], [parts[0][0]], name=n.name)
        elif len(n.input) > 1 and n.input[1]:
            lengths = em.const(np.array([s for _, s in parts], dtype=np.int64), "split_lengths")
            replaced[id(n)] = helper.make_node("Split", [n.input[0], lengths], [o for o, _ in parts], name=n.name,
                                               axis=axis)
        else:
            replaced[id(n)] = helper.make_node("Split", [n.input[0]], [o for o, _ in parts], name=n.name, axis=axis,
                                               split=[s for _, s in parts])
        for r in {id(r): r for o in empty for r in readers.get(o, [])}.values():
            inputs = [i for i in r.input if i not in empty]
            replaced[id(r)] = helper.make_node("Identity", inputs, list(r.output), name=r.name) \
                if len(inputs) == 1 else helper.make_node("Concat", inputs, list(r.output), name=r.name, axis=axis)
    return [replaced.get(id(n), n) for n in nodes]


def plain_forms(nodes: Iterable[onnx.NodeProto], em: Emitter, keep: set[str]) -> list[onnx.NodeProto]:
    """``nodes`` (a specialized body) with ConstantOfShape's value written and empty Split parts dropped.

    ``keep``: the node's outputs (never dropped).
    """
    out = list(nodes)
    for n in out:
        _explicit_value(n)
    return _drop_empty_parts(out, em, keep)
