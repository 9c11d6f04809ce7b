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
    #: The check expected to kill it: ``rewrite`` (per-rewrite), ``relabel``, ``model`` (``verify_model``),
    #: ``deployment`` (``--for`` a backend whose runtime is installed), ``reference`` (lowerer's numpy
    #: reference judging a side onnxruntime cannot run), ``engine`` (the engine's own guards).
    check: str = "rewrite"
    #: The rule area (a module of ``lowerer/rules`` or of the engine: ``argmax``, ``scatter`` ...); "": from the op.
    area: str = ""
    #: What the wrong rule hides behind, if anything (``float16``, ``dynamic dims``, ``batch 0``, ``body``, ``NaN``,
    #: ``explicit default`` ...).
    hides: str = ""
    #: Whether the patch changes what the conversion writes (False: it changes a check, e.g. the reference).
    changes_output: bool = True


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


def _written(mutant: Mutant, patch: bool) -> bytes | str:
    """The model converted without verification (patched or not), or the error raised."""
    options = {k: v for k, v in mutant.options.items() if k not in ("verify_model", "optimize")}
    options["verify"] = False
    with pytest.MonkeyPatch.context() as mp:
        if patch:
            mutant.patch(mp)
        try:
            return lowerer.convert(mutant.model(), target_opset=mutant.target, **options).model.SerializeToString()
        except lowerer.LowererError as e:
            return f"{type(e).__name__} (exit {e.exit_code}): {e}"[:240]


def control(mutant: Mutant) -> str | None:
    """Why the mutant proves nothing, or None: the real rules must convert its model (exit 0) with its options,
    and (for a mutant of a rule) the patch must change what is written."""
    try:
        lowerer.convert(mutant.model(), target_opset=mutant.target, **mutant.options)
    except lowerer.LowererError as e:
        return f"the real rules fail on its model: {type(e).__name__} (exit {e.exit_code}): {e}"[:240]
    if mutant.changes_output:
        right = _written(mutant, False)
        if right == _written(mutant, True):
            return "the patch does not fire: the model written is the same as the real rules write"
    return None


# -- models ------------------------------------------------------------------------------------------

def one_node(op: str, opset: int, attrs: dict[str, Any] | None = None, shape: list[int] | None = None,
             elem: int = T.FLOAT, inputs: list[tuple[str, int, list[int]]] | None = None,
             consts: dict[str, np.ndarray] | None = None, outputs: int = 1,
             order: list[str] | None = None) -> onnx.ModelProto:
    """A model of one ``op`` node: graph inputs ``inputs`` (default ``x``), constant inputs ``consts``.

    The node reads the graph inputs then the constants, or the names of ``order`` (``""``: an absent input).
    """
    ins = inputs if inputs is not None else [("x", elem, shape or [2, 3, 4])]
    names = order if order is not None else [n for n, _, _ in ins] + list(consts or {})
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


# -- patching forms, passes and the relabel machinery --------------------------------------------------

def form(name: str, post: Post, like: str | None = None) -> Patch:
    """The backend form ``name`` with ``post`` after its rewrite (``like``: built by that form's factory instead)."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        for key, entry in list(rules.REGISTRY._forms.items()):
            if key[2] != name:
                continue
            source = rules.REGISTRY._forms[(key[0], key[1], like)] if like else entry
            real_make = source.handler

            def make(*params: Any, real_make: Any = real_make) -> Rule:
                return _wrapped_rule(real_make(*params), post, None)

            mp.setitem(rules.REGISTRY._forms, key, dataclasses.replace(entry, handler=make))
    return patch


def when(test: Callable[[onnx.NodeProto], bool], post: Post) -> Post:
    """``post`` only where ``test(node)`` holds for the node the rule was given (a rule wrong in one case)."""
    def guarded(em: Emitter) -> None:
        if test(em.node):
            post(em)
    return guarded


def has_attr(name: str) -> Callable[[onnx.NodeProto], bool]:
    """Whether the node writes attribute ``name`` (explicitly, perhaps at its default)."""
    return lambda node: any(a.name == name for a in node.attribute)


def after_convert(change: Callable[[onnx.ModelProto], None]) -> Patch:
    """The converted model changed by ``change`` after the conversion pass (its rewrites verified): a later
    pass gone wrong, which only the whole-model and deployment checks can see."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        import lowerer.passes as passes

        real = passes.ConvertPass.run

        def wrong(self: Any, state: Any) -> None:
            real(self, state)
            change(state.model)

        mp.setattr(passes.ConvertPass, "run", wrong)
    return patch


def same_meaning(op: str, pair: tuple[int, int]) -> Patch:
    """``op``'s op-wide rule declaring ``pair`` (from, to) a step of the same meaning: the node relabelled."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        rule = rules.REGISTRY.span_rule(op)
        assert rule is not None
        mp.setattr(type(rule), "same_meaning", frozenset(type(rule).same_meaning | {pair}))
    return patch


def table_says_same(op: str, version: int) -> Patch:
    """The step table's step into ``op``-``version`` with no change of meaning (and no adapter): a relabel."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        from lowerer.steps.table import TABLE

        kept = tuple(c for c in TABLE[op][version] if type(c).__name__ not in ("Semantics", "DefaultChanged"))
        mp.setitem(TABLE[op], version, kept)
        for key in [k for k in rules.REGISTRY._steps if k[1] == op and version in k[2:]]:
            mp.delitem(rules.REGISTRY._steps, key)
    return patch


def chain(*patches: Patch) -> Patch:
    """Several patches at once."""
    def patch(mp: pytest.MonkeyPatch) -> None:
        for p in patches:
            p(mp)
    return patch
