"""Symbolic dims of values a conversion made: which named dim a dynamic dim provably equals.

onnx's per-node inference gives a made value's static dims; a dynamic one comes back unnamed. A
rewrite sometimes needs to know that it equals a named dim of another value (a Reshape-14 with
``allowzero=1`` back to ``Shape(X)`` is exact below 14 only where each 0 would copy the very same
dim). :func:`made_symbols` recovers the names through the ops function bodies reshape and compute
with: a Reshape to a shape whose entries are known (``(X, i)`` is X's dim ``i``), and elementwise
ops, where a dim is named only when every input that is not 1 there has that same name.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from lowerer.facts.constants import ShapeEntry
from lowerer.model_io.node_attributes import int_attribute, ints_attribute

__all__ = ["ELEMENTWISE", "REDUCTIONS", "made_symbols"]

Symbols = list[int | str | None]

#: Ops whose output has the broadcast shape of their inputs.
ELEMENTWISE = frozenset({
    "Identity", "Cast", "CastLike", "Neg", "Abs", "Sqrt", "Reciprocal", "Exp", "Log", "Relu", "Sigmoid", "Tanh",
    "Erf", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Not", "Softplus", "Add", "Sub", "Mul", "Div", "Pow",
    "Max", "Min", "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Where",
    "Mod", "PRelu",
})


#: Reductions over ``axes`` (an attribute, or input 1 from the versions that moved it).
REDUCTIONS = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})


def made_symbols(node: onnx.NodeProto, dims: list[int | None], symbols_of: Callable[[str], Symbols | None],
                 entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols:
    """``dims`` (the inferred dims of ``node``'s first output) with dynamic ones named where provable."""
    named: Symbols | None = None
    if node.op_type == "Reshape" and len(node.input) > 1:
        named = _reshaped(node, len(dims), symbols_of, entries_of)
    elif node.op_type in ELEMENTWISE and node.domain in ("", "ai.onnx"):
        named = _broadcast([symbols_of(i) if i else None for i in node.input], len(dims))
    elif node.op_type in REDUCTIONS and node.domain in ("", "ai.onnx"):
        named = _reduced(node, len(dims), symbols_of, entries_of)
    elif node.op_type in _MOVES and node.domain in ("", "ai.onnx"):
        named = _MOVES[node.op_type](node, len(dims), symbols_of, entries_of)
    if named is None or len(named) != len(dims):
        return list(dims)
    return [d if d is not None else n for d, n in zip(dims, named, strict=True)]


def _reshaped(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
              entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    entries = entries_of(node.input[1])
    if entries is None or len(entries) != rank:
        return None
    allowzero = any(a.name == "allowzero" and a.i for a in node.attribute)
    data = symbols_of(node.input[0])
    out: Symbols = []
    for k, entry in enumerate(entries):
        if isinstance(entry, int):
            if entry == 0 and not allowzero:
                out.append(data[k] if data is not None and k < len(data) else None)
            else:
                out.append(entry if entry >= 0 else None)
            continue
        source, index = entry
        theirs = symbols_of(source)
        out.append(theirs[index] if theirs is not None and 0 <= index < len(theirs) else None)
    return out


def _reduced(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
             entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    """A reduction's dims: the input's, with each reduced axis 1 (``keepdims=1``, the default) or gone."""
    data = symbols_of(node.input[0])
    attrs = {a.name: a for a in node.attribute}
    if data is None or ("noop_with_empty_axes" in attrs and attrs["noop_with_empty_axes"].i):
        return None
    found: list[ShapeEntry] | None = list(attrs["axes"].ints) if "axes" in attrs else \
        entries_of(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    axes = [a for a in found or [] if isinstance(a, int)]
    if found is None or len(axes) != len(found):
        return None
    reduced = {a + len(data) if a < 0 else a for a in axes}
    keep = "keepdims" not in attrs or attrs["keepdims"].i
    out: Symbols = []
    for k, d in enumerate(data):
        if k in reduced:
            if keep:
                out.append(1)
        else:
            out.append(d)
    return out if len(out) == rank else None


def _transposed(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
                entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    data = symbols_of(node.input[0])
    if data is None:
        return None
    perm = ints_attribute(node, "perm", list(range(len(data)))[::-1])
    return [data[p] for p in perm] if sorted(perm) == list(range(len(data))) else None


def _expanded(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
              entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    entries = entries_of(node.input[1])
    if entries is None:
        return None
    wanted: Symbols = []
    for e in entries:
        theirs = symbols_of(e[0]) if isinstance(e, tuple) else None
        wanted.append(e if isinstance(e, int) else theirs[e[1]] if theirs is not None and e[1] < len(theirs)
                      else None)
    return _broadcast([symbols_of(node.input[0]), wanted], rank)


def _unsqueezed(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
                entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    data = symbols_of(node.input[0])
    found = ints_attribute(node, "axes", None)
    if found is None and len(node.input) > 1:
        entries = entries_of(node.input[1])
        found = None if entries is None or not all(isinstance(e, int) for e in entries) else \
            [e for e in entries if isinstance(e, int)]
    if data is None or found is None:
        return None
    axes = {a + rank if a < 0 else a for a in found}
    rest = iter(data)
    return [1 if k in axes else next(rest, None) for k in range(rank)]


def _slice_axes(node: onnx.NodeProto, entries_of: Callable[[str], list[ShapeEntry] | None]) -> list[int] | None:
    """The axes a Slice may change: its ``axes`` (attribute or constant input), else the first len(starts)."""
    stated = ints_attribute(node, "axes", None)
    found: list[ShapeEntry] | None = None if stated is None else list(stated)
    if found is None and len(node.input) > 3 and node.input[3]:
        found = entries_of(node.input[3])
    elif found is None:
        stated_starts = ints_attribute(node, "starts", None)
        starts = list(stated_starts) if stated_starts is not None else \
            entries_of(node.input[1]) if len(node.input) > 1 else None
        found = None if starts is None else list(range(len(starts)))
    axes = [a for a in found or [] if isinstance(a, int)]
    return axes if found is not None and len(axes) == len(found) else None


def _along_axis(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
                entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    """Concat, Split, Slice: every dim but those the op changes is the (common) input dim."""
    if node.op_type == "Slice":
        changed = _slice_axes(node, entries_of)
        if changed is None:
            return None
        sources = [node.input[0]]
    else:
        changed = [int_attribute(node, "axis", 0)]
        sources = [i for i in node.input if i] if node.op_type == "Concat" else [node.input[0]]
    axes = {a + rank if a < 0 else a for a in changed}
    named = [symbols_of(i) for i in sources]
    if any(n is None or len(n) != rank for n in named):
        return None
    out: Symbols = []
    for k in range(rank):
        seen = {n[k] for n in named if n is not None}
        out.append(None if k in axes or len(seen) != 1 else seen.pop())
    return out


def _gathered(node: onnx.NodeProto, rank: int, symbols_of: Callable[[str], Symbols | None],
              entries_of: Callable[[str], list[ShapeEntry] | None]) -> Symbols | None:
    """Gather: the data's dims before and after ``axis`` around the indices' dims."""
    data, indices = symbols_of(node.input[0]), symbols_of(node.input[1])
    if data is None or indices is None:
        return None
    axis = int_attribute(node, "axis", 0)
    axis = axis + len(data) if axis < 0 else axis
    return [*data[:axis], *indices, *data[axis + 1:]]


#: Data-movement ops whose output dims are the input's, moved.
_MOVES: dict[str, Callable[[onnx.NodeProto, int, Callable[[str], Symbols | None],
                            Callable[[str], list[ShapeEntry] | None]], Symbols | None]] = {
    "Transpose": _transposed, "Expand": _expanded, "Unsqueeze": _unsqueezed, "Concat": _along_axis,
    "Split": _along_axis, "Slice": _along_axis, "Gather": _gathered,
}


def _broadcast(inputs: list[Symbols | None], rank: int) -> Symbols | None:
    """The broadcast dims' names: a dim is named when every input not statically 1 there has that name."""
    if any(s is None for s in inputs):
        return None
    out: Symbols = []
    for k in range(rank):
        seen: set[int | str | None] = set()
        for symbols in inputs:
            assert symbols is not None
            j = k - (rank - len(symbols))
            if j < 0 or symbols[j] == 1:
                continue
            seen.add(symbols[j])
        out.append(seen.pop() if len(seen) == 1 else None)
    return out
