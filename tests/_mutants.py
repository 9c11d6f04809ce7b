"""Mutants: real rules of lowerer monkeypatched into wrong ones, each on a small model that exercises it.

Each :class:`Mutant` patches one rule (an owned rule, a version-step adapter, a lowering, a
decomposition, the function-body expansion, or lowerer's numpy reference) and converts its model with
lowerer's own :func:`lowerer.convert` and default options. The mutant is *killed* when lowerer refuses:
``VerificationError`` (exit 1) or another :class:`lowerer.LowererError` with a nonzero exit code (the
engine reporting a rule that changed its input node). ``benchmarks/mutation.py`` runs them all, over
several seeds, and prints the score by family; ``tests/test_mutation.py`` runs a quick subset in CI.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
import lowerer.rules as rules
import lowerer.steps.engine as engine_module
from lowerer.facts import reference
from lowerer.steps.emitter import Emitter, Rule

Post = Callable[[Emitter], None]
Patch = Callable[[pytest.MonkeyPatch], None]


@dataclass
class Mutant:
    """One wrong rule: how to patch it in, the model it is run on, and the conversion asked for."""

    name: str
    family: str
    patch: Patch
    model: Callable[[], onnx.ModelProto]
    target: int
    options: dict[str, Any] = field(default_factory=dict)
    #: Why it may survive (a known gap, left to another part of the checks); None: it must die.
    known_gap: str | None = None


@dataclass
class Outcome:
    """What lowerer did with one mutant on one seed."""

    mutant: Mutant
    seed: int
    killed: bool
    how: str


def run(mutant: Mutant, seed: int = 0) -> Outcome:
    """Convert the mutant's model with the mutant patched in (default options but ``seed``)."""
    with pytest.MonkeyPatch.context() as mp:
        mutant.patch(mp)
        try:
            lowerer.convert(mutant.model(), target_opset=mutant.target, seed=seed, **mutant.options)
        except lowerer.LowererError as e:
            return Outcome(mutant, seed, e.exit_code != 0, f"{type(e).__name__} (exit {e.exit_code}): {e}"[:240])
    return Outcome(mutant, seed, False, "converted, exit 0")


# -- models ------------------------------------------------------------------------------------------

def one_node(op: str, opset: int, attrs: dict[str, Any] | None = None, shape: list[int] | None = None,
             elem: int = T.FLOAT, inputs: list[tuple[str, int, list[int]]] | None = None,
             consts: dict[str, np.ndarray] | None = None, outputs: int = 1) -> onnx.ModelProto:
    """A model of one ``op`` node: graph inputs ``inputs`` (default ``x``), constant inputs ``consts``."""
    ins = inputs if inputs is not None else [("x", elem, shape or [2, 3, 4])]
    names = [n for n, _, _ in ins] + list(consts or {})
    outs = [f"y{i}" if i else "y" for i in range(outputs)]
    node = helper.make_node(op, names, outs, name="n0", **(attrs or {}))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, e, s) for n, e, s in ins],
                              [onnx.ValueInfoProto(name=o) for o in outs],
                              initializer=[numpy_helper.from_array(v, k) for k, v in (consts or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)
    return onnx.shape_inference.infer_shapes(model)  # types the outputs


def _empty_axes_reduce(op: str, opset: int) -> Callable[[], onnx.ModelProto]:
    def make() -> onnx.ModelProto:
        model = one_node(op, opset, shape=[2, 3, 4])
        model.graph.node[0].attribute.append(helper.make_attribute("axes", [], attr_type=onnx.AttributeProto.INTS))
        return model
    return make


# -- mutations of what a rule emitted -----------------------------------------------------------------

def _walk(nodes: Any) -> Iterator[onnx.NodeProto]:
    """``nodes`` and the nodes of their subgraphs (a Loop's body ...), depth first."""
    for n in nodes:
        yield n
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _walk(a.g.node)


def _first(em: Emitter, op: str) -> onnx.NodeProto:
    for n in _walk(em.nodes):
        if n.op_type == op:
            return n
    raise AssertionError(f"the rule emitted no {op} (emitted {[n.op_type for n in em.nodes]})")


def set_attr(op: str, name: str, value: Callable[[Any], Any]) -> Post:
    """The first emitted ``op`` node's attribute ``name`` replaced by ``value(old)`` (old: None when absent)."""
    def post(em: Emitter) -> None:
        node = _first(em, op)
        old = next((helper.get_attribute_value(a) for a in node.attribute if a.name == name), None)
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept)
        new = value(old)
        if new is not None:
            node.attribute.append(helper.make_attribute(name, new))
    return post


def swap_op(old: str, new: str) -> Post:
    """The first emitted ``old`` node made a ``new`` node (Greater → GreaterOrEqual ...)."""
    def post(em: Emitter) -> None:
        _first(em, old).op_type = new
    return post


def change_const(fn: Callable[[np.ndarray], np.ndarray], which: int = 0) -> Post:
    """The ``which``-th constant the rule made (initializer or Constant node) replaced by ``fn(value)``."""
    def post(em: Emitter) -> None:
        tensors = list(em.constants) + [a.t for n in em.nodes if n.op_type == "Constant" for a in n.attribute
                                        if a.name == "value"]
        assert tensors, "the rule made no constant"
        t = tensors[which]
        t.CopyFrom(numpy_helper.from_array(fn(numpy_helper.to_array(t)).astype(numpy_helper.to_array(t).dtype),
                                           t.name))
    return post


def drop_node(op: str) -> Post:
    """The first emitted ``op`` node removed, its readers reading its first input instead."""
    def post(em: Emitter) -> None:
        node = _first(em, op)
        em.nodes.remove(node)
        for n in em.nodes:
            for i, name in enumerate(n.input):
                if name == node.output[0]:
                    n.input[i] = node.input[0]
    return post


def through_fp16(op: str) -> Post:
    """The first emitted ``op`` node computed in float16: Cast to float16 before, back to float after."""
    def post(em: Emitter) -> None:
        node = _first(em, op)
        at = em.nodes.index(node)
        x, y = node.input[0], node.output[0]
        node.input[0], node.output[0] = x + "_h", y + "_h"
        em.nodes.insert(at, helper.make_node("Cast", [x], [x + "_h"], to=T.FLOAT16))
        em.nodes.insert(at + 2, helper.make_node("Cast", [y + "_h"], [y], to=T.FLOAT))
    return post


def mutate_input(change: Callable[[onnx.NodeProto], None]) -> Callable[[Emitter], None]:
    """Before the rule runs: the node it is given changed in place (a rule that writes into its input)."""
    def pre(em: Emitter) -> None:
        change(em.node)
    return pre


def _drop_attr(name: str) -> Callable[[onnx.NodeProto], None]:
    def change(node: onnx.NodeProto) -> None:
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept)
    return change


# -- patching each kind of registry entry -------------------------------------------------------------

def span(op: str, post: Post | None = None, pre: Post | None = None) -> Patch:
    """The op-wide rule of ``op`` (and every op it owns) with ``pre``/``post`` around its rewrite."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        real = rules.REGISTRY.span_rule(op)
        assert real is not None
        wrong = _wrapped_rule(real, post, pre)
        for owned in real.op_types:
            mp.setitem(rules.REGISTRY._spans, ("", owned), wrong)
    return patch


def _wrapped_rule(real: Rule, post: Post | None, pre: Post | None) -> Rule:
    class Wrong(type(real)):  # type: ignore[misc]
        name = f"mutant-{real.name}"

        def rewrite(self, em: Emitter) -> None:
            if pre is not None:
                pre(em)
            real.rewrite(em)
            if post is not None:
                post(em)

    wrong = Wrong.__new__(Wrong)
    wrong.__dict__.update(getattr(real, "__dict__", {}))
    return wrong


def replace_span(op: str, rule: Rule) -> Patch:
    """Every op of ``op``'s op-wide rule converted by ``rule`` instead."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        real = rules.REGISTRY.span_rule(op)
        assert real is not None
        for owned in real.op_types:
            mp.setitem(rules.REGISTRY._spans, ("", owned), rule)
    return patch


def decomposition(name: str, post: Post) -> Patch:
    """The decomposition ``name`` with ``post`` after its rewrite."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        real = rules.REGISTRY.decompositions[name]
        wrong = _wrapped_rule(real, post, None)
        mp.setitem(rules.REGISTRY.decompositions, name, wrong)
        for key, entry in list(rules.REGISTRY._forms.items()):
            if entry.handler is real:
                mp.setitem(rules.REGISTRY._forms, key, dataclasses.replace(entry, handler=wrong))
    return patch


def adapter(op: str, start: int, end: int, post: Post | None = None, pre: Post | None = None) -> Patch:
    """The adapter of ``op``'s step ``start`` → ``end`` with ``pre``/``post`` around it."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        key = ("", op, start, end)
        entry = rules.REGISTRY._steps[key]
        real = entry.handler

        def wrong(em: Emitter, step: Any, direction: str) -> None:
            if pre is not None:
                pre(em)
            real(em, step, direction)
            if post is not None:
                post(em)

        mp.setitem(rules.REGISTRY._steps, key, dataclasses.replace(entry, handler=wrong))
    return patch


def lowering(op: str, version: int, post: Post) -> Patch:
    """The lowering of ``op``-``version`` with ``post`` after it."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        key = ("", op, version)
        entry = rules.REGISTRY._lowerings[key]
        real = entry.handler

        def wrong(em: Emitter) -> None:
            real(em)
            post(em)

        mp.setitem(rules.REGISTRY._lowerings, key, dataclasses.replace(entry, handler=wrong))
    return patch


def expansion(post: Post) -> Patch:
    """The function-body expansion with ``post`` after it (every expanded op)."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        real = engine_module.expand

        def wrong(em: Emitter, *args: Any) -> int:
            opset: int = real(em, *args)
            post(em)
            return opset

        mp.setattr(engine_module, "expand", wrong)
    return patch


def reference_op(op: str, fn: reference.OpFn) -> Patch:
    """lowerer's numpy reference of ``op`` replaced by ``fn``."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        mp.setitem(reference._OPS, op, fn)
    return patch


@contextmanager
def patched(mutant: Mutant) -> Iterator[None]:
    """``mutant`` patched in for the block."""
    with pytest.MonkeyPatch.context() as mp:
        mutant.patch(mp)
        yield
