"""Lowering of Einsum-12 for targets before opset 12: Transpose, ReduceSum, Mul and MatMul.

The equations exporters emit, with any number of operands:

* one operand: the letters missing from the output summed (ReduceSum), the rest transposed into the
  output's order (``ij->ji``, ``bhqd->bqhd``, ``ij->i``);
* two operands with no letter summed across them (``i,j->ij``, ``ij,ij->ij``): each operand
  transposed into the output's order, unsqueezed where it lacks a letter, and multiplied (Mul
  broadcasts): exact;
* two operands with letters summed across them (``bhqd,bhkd->bhqk``, ``bij,bjk->bik``): letters
  in both operands and the output are batch dims, the others grouped into (kept, summed) and
  (summed, kept) matrices, multiplied by MatMul, then reshaped and transposed into the output.
  Groups of more than one letter are reshaped, which needs their sizes static (one may be dynamic);
* three or more operands (linear attention's ``bshd,bshde,bsh->bshe``): a sequence of pairwise
  contractions, left to right, each one of the two-operand forms above: the running result is contracted
  with the next operand, keeping the letters the output or a later operand holds and summing the others
  (a letter only one operand holds, and no other needs, is summed on that operand first).

``...`` stands for as many letters as the operand's rank needs (the rank must be known). A letter
repeated within one operand (a diagonal, ``ii->i``) is refused here; a backend profile may pick
:class:`EinsumDiagonalForm` (``einsum-diagonal``), which takes the diagonal by Gather and keeps the Einsum.
Float sums may add in another order than the Einsum kernel (MatMul, ReduceSum, and with three or more
operands the pairwise order): the lowering is budgeted (judged by the expansion ulp budget); integer
results are exact.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from lowerer.core.remedies import ADD_SHAPES
from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps.emitter import Emitter, Rule
from lowerer.steps.registry import lowering

__all__ = ["EinsumDiagonalForm", "Equation", "einsum", "parse_equation"]

#: Element types every op the lowering emits (MatMul-9, Mul-7, ReduceSum-11) accepts.
_TYPES = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.FLOAT: "float", onnx.TensorProto.DOUBLE: "double",
          onnx.TensorProto.INT32: "int32", onnx.TensorProto.INT64: "int64", onnx.TensorProto.UINT32: "uint32",
          onnx.TensorProto.UINT64: "uint64"}


@dataclass(frozen=True)
class Equation:
    """An Einsum equation with every ``...`` spelled out as letters.

    Attributes:
        terms: the letters of each operand, one per axis.
        output: the letters of the output, one per axis.
    """

    terms: tuple[str, ...]
    output: str


def _ellipsis_letters(equation: str, count: int) -> str:
    """``count`` letters the equation does not use, for the axes ``...`` stands for."""
    free = [c for c in string.ascii_letters if c not in equation]
    if len(free) < count:
        raise ValueError("`...` stands for more axes than there are unused letters")
    return "".join(free[:count])


def _spell_term(term: str, rank: int | None, ellipsis: str) -> str:
    """``term`` with its ``...`` replaced by the last letters of ``ellipsis`` its rank needs."""
    if "..." not in term:
        if rank is not None and rank != len(term):
            raise ValueError(f"operand {term!r} has {len(term)} letters but rank {rank}")
        return term
    assert rank is not None
    count = rank - (len(term) - 3)
    return term.replace("...", ellipsis[len(ellipsis) - count:] if count else "")


def parse_equation(equation: str, ranks: Sequence[int | None], diagonal: bool = False) -> Equation:
    """``equation`` parsed for operands of ``ranks`` (None: unknown); ValueError says what is not handled.

    ``diagonal``: a letter may repeat within one operand (``ii->i``; in the implicit form such a letter
    is summed, as numpy does); otherwise that is refused.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"{len(terms)} operands in the equation, {len(ranks)} inputs")
    counts: list[int] = []
    for term, rank in zip(terms, ranks, strict=True):
        if "..." in term:
            if rank is None:
                raise ValueError(f"the rank of the operand {term!r} is unknown and `...` needs it")
            counts.append(rank - (len(term) - 3))
    if any(c < 0 for c in counts):
        raise ValueError("an operand has fewer axes than its letters")
    ellipsis = _ellipsis_letters(eq, max(counts, default=0))
    spelled = tuple(_spell_term(t, r, ellipsis) for t, r in zip(terms, ranks, strict=True))
    for i, term in enumerate((*spelled, out)):
        if any(c not in string.ascii_letters for c in term.replace("...", "")):
            raise ValueError(f"{term!r} holds a character that is not a letter")
        if len(set(term.replace("...", ""))) != len(term.replace("...", "")) and (not diagonal or i == len(spelled)):
            raise ValueError(f"a letter repeats within {term!r} (a diagonal or trace)")
    if not arrow:
        used = "".join(spelled)
        out = ellipsis + "".join(sorted(c for c in set(used) if used.count(c) == 1 and c not in ellipsis))
    elif "..." in out:
        out = out.replace("...", ellipsis)
    missing = [c for c in out if not any(c in t for t in spelled)]
    if missing:
        raise ValueError(f"output letters {''.join(missing)!r} are in no operand")
    return Equation(spelled, out)


def _transpose(em: Emitter, x: str, have: str, want: str) -> str:
    """``x`` (axes ``have``) with its axes in the order ``want`` (a permutation of ``have``)."""
    if have == want:
        return x
    return em.op("Transpose", [x], perm=[have.index(c) for c in want])


def _finish(em: Emitter, x: str) -> None:
    """Make ``x`` the node's output: the last node emitted writes it (an Identity when none did)."""
    (output,) = em.node.output
    last = em.nodes[-1] if em.nodes else None
    if last is None or last.output[0] != x:
        em.op("Identity", [x], [output])
        return
    last.output[0] = output
    em.facts.add_node(last, em.opset)


def _reduce(em: Emitter, x: str, have: str, keep: str) -> tuple[str, str]:
    """``x`` (axes ``have``) summed over the letters not in ``keep``, and its remaining letters."""
    summed = [i for i, c in enumerate(have) if c not in keep]
    if not summed:
        return x, have
    if (em.version_of("ReduceSum") or 1) >= 13:  # the pairwise form, at a target of 13 or more: axes an input
        reduced = em.op("ReduceSum", [x, em.const(np.array(summed, np.int64), "axes")], keepdims=0)
    else:
        reduced = em.op("ReduceSum", [x], axes=summed, keepdims=0)
    return reduced, "".join(c for c in have if c in keep)


def _sizes(em: Emitter, terms: Sequence[str]) -> dict[str, int]:
    """The static size of each letter, read from the operands' shapes (absent: dynamic or unknown)."""
    sizes: dict[str, int] = {}
    for name, term in zip(em.node.input, terms, strict=True):
        dims = em.dims(name) or [None] * len(term)
        for letter, dim in zip(term, dims, strict=True):
            if dim is not None and sizes.get(letter, 1) == 1:
                sizes[letter] = dim
    return sizes


def _regroup(em: Emitter, x: str, have: Sequence[str], want: Sequence[str], sizes: dict[str, int]) -> str:
    """``x``, whose axes hold the letter groups ``have``, reshaped to axes holding ``want`` (same letters, in order).

    The Reshape-5 shape copies (0) an axis whose group stays where it is, gives the product of static
    sizes elsewhere (1 for an empty group), and -1 for at most one group of dynamic size.
    """
    if list(have) == list(want):
        return x
    shape: list[int | None] = []
    for i, group in enumerate(want):
        if i < len(have) and have[i] == group:
            shape.append(0)
        elif all(c in sizes for c in group):
            shape.append(int(np.prod([sizes[c] for c in group], dtype=np.int64)))
        else:
            shape.append(None)
    unknown = [g for g, s in zip(want, shape, strict=True) if s is None]
    if len(unknown) > 1:
        em.refuse(f"equation {attribute_value(em.node, 'equation')!r} needs the sizes of the letters "
                  f"{', '.join(repr(g) for g in unknown)} static (all but one group); {ADD_SHAPES}")
    final = [-1 if s is None else s for s in shape]
    return em.op("Reshape", [x, em.const(np.array(final, dtype=np.int64), "shape")])


def _product(em: Emitter, a: str, ta: str, b: str, tb: str, out: str) -> str:
    """``a * b`` broadcast over the letters of ``out`` (no letter summed): each transposed and unsqueezed."""
    operands = []
    for x, term in ((a, ta), (b, tb)):
        x = _transpose(em, x, term, "".join(c for c in out if c in term))
        missing = [i for i, c in enumerate(out) if c not in term]
        if missing and (em.version_of("Unsqueeze") or 1) >= 13:
            x = em.op("Unsqueeze", [x, em.const(np.array(missing, np.int64), "axes")])
        elif missing:
            x = em.op("Unsqueeze", [x], axes=missing)
        operands.append(x)
    return em.op("Mul", operands)


def _matmul(em: Emitter, a: str, ta: str, b: str, tb: str, keep: str, sizes: dict[str, int]) -> tuple[str, str]:
    """``a`` and ``b`` contracted over the letters they share that ``keep`` lacks, by MatMul; and its letters.

    The result's axes hold the batch letters (in both, kept), then ``a``'s kept letters, then ``b``'s.
    """
    batch = [c for c in keep if c in ta and c in tb]
    summed = "".join(c for c in ta if c in tb and c not in keep)
    kept_a = "".join(c for c in keep if c in ta and c not in tb)
    kept_b = "".join(c for c in keep if c in tb and c not in ta)
    left = _transpose(em, a, ta, "".join(batch) + kept_a + summed)
    left = _regroup(em, left, [*batch, *kept_a, *summed], [*batch, kept_a, summed], sizes)
    right = _transpose(em, b, tb, "".join(batch) + summed + kept_b)
    right = _regroup(em, right, [*batch, *summed, *kept_b], [*batch, summed, kept_b], sizes)
    product = em.op("MatMul", [left, right])
    product = _regroup(em, product, [*batch, kept_a, kept_b], [*batch, *kept_a, *kept_b], sizes)
    return product, "".join(batch) + kept_a + kept_b


def _contract(em: Emitter, a: str, ta: str, b: str, tb: str, keep: str, sizes: dict[str, int]) -> tuple[str, str]:
    """``a`` (letters ``ta``) and ``b`` (``tb``) contracted: the letters of ``keep`` stay, the others are summed.

    Returns the result and its letters: ``keep``'s order for a product with nothing summed across the two,
    the MatMul form's order otherwise.
    """
    a, ta = _reduce(em, a, ta, keep + tb)
    b, tb = _reduce(em, b, tb, keep + ta)
    if any(c in tb and c not in keep for c in ta):
        return _matmul(em, a, ta, b, tb, keep, sizes)
    return _product(em, a, ta, b, tb, keep), keep


@lowering("Einsum", budgeted=True)
def einsum(em: Emitter) -> None:
    """Einsum-12 as Transpose/ReduceSum/Mul/MatMul (any number of operands, pairwise; no diagonal)."""
    node = em.node
    equation = str(attribute_value(node, "equation"))
    for name in node.input:
        elem = em.elem_type(name)
        if elem not in _TYPES:
            found = "unknown" if elem is None else onnx.TensorProto.DataType.Name(elem).lower()
            em.refuse(f"the element type of input {name!r} is {found}, and the lowering takes "
                      f"{', '.join(_TYPES.values())} only")
    try:
        parsed = parse_equation(equation, [em.rank(i) for i in node.input])
    except ValueError as e:
        em.refuse(f"equation {equation!r} is not handled: {e}")
    out, terms = parsed.output, parsed.terms
    if len(terms) == 1:
        x, have = _reduce(em, node.input[0], terms[0], out)
        _finish(em, _transpose(em, x, have, out))
        return
    sizes = _sizes(em, terms)
    acc, letters = node.input[0], terms[0]
    for i in range(1, len(terms)):
        later = "".join(terms[i + 1:])
        # The letters the output or a later operand needs, in the order they first appear.
        keep = out if not later else "".join(c for c in dict.fromkeys(letters + terms[i]) if c in out + later)
        acc, letters = _contract(em, acc, letters, node.input[i], terms[i], keep, sizes)
    _finish(em, _transpose(em, acc, letters, out))


def _take_diagonal(em: Emitter, x: str, term: str) -> tuple[str, str]:
    """``x`` (axes ``term``) with each letter repeated in ``term`` taken once, on its diagonal; and its letters.

    For a letter on ``k`` axes of size ``n``: ``Transpose`` those axes last, ``Reshape`` them into one axis of
    ``n**k``, ``Gather`` the elements ``i * (1 + n + ... + n**(k-1))`` (where every index is ``i``). Exact.
    """
    dims = em.dims(x) or [None] * len(term)
    while len(set(term)) != len(term):
        letter = next(c for c in term if term.count(c) > 1)
        at = [i for i, c in enumerate(term) if c == letter]
        sizes = {dims[i] for i in at}
        if None in sizes or len(sizes) != 1:
            em.refuse(f"equation {attribute_value(em.node, 'equation')!r} takes a diagonal over the letter "
                      f"{letter!r}, which needs its size static and the same on each axis (found "
                      f"{', '.join('?' if d is None else str(d) for d in (dims[i] for i in at))}); {ADD_SHAPES}")
        n = int(dims[at[0]] or 0)
        rest = [i for i in range(len(term)) if i not in at]
        if rest + at != list(range(len(term))):
            x = em.op("Transpose", [x], perm=rest + at)
        shape = np.array([0] * len(rest) + [n ** len(at)], dtype=np.int64)
        x = em.op("Reshape", [x, em.const(shape, "shape")])
        stride = sum(n ** j for j in range(len(at)))
        x = em.op("Gather", [x, em.const(np.arange(n, dtype=np.int64) * stride, "diagonal")], axis=len(rest))
        term = "".join(term[i] for i in rest) + letter
        dims = [dims[i] for i in rest] + [n]
    return x, term


class EinsumDiagonalForm(Rule):
    """``Einsum`` with a letter repeated within an operand (``ii->``, ``bii->bi``) → diagonal by Gather, then Einsum.

    The diagonal is taken by ``Transpose`` + ``Reshape`` + ``Gather`` (exact), then ``Einsum`` over it with that
    letter once. The second Einsum adds the same values as the first (the diagonal's, in the operands' order),
    so the form is exact; where nothing is left to contract (``ii->i``), an ``Identity`` or ``Transpose``. The repeated
    letter's size must be static (else refused). For runtimes that fail on Einsum diagonals (OpenVINO 2023.0
    and 2024.0: "Unsupported operation of type: Einsum", measured).
    """

    name = "einsum-diagonal"
    op_types = ("Einsum",)
    versions = (12,)
    decomposition = "einsum-diagonal"

    def rewrite(self, em: Emitter) -> None:
        """Emit the diagonals, then the Einsum (or Identity/Transpose) over them, for ``em.node``."""
        node = em.node
        equation = str(attribute_value(node, "equation"))
        try:
            parsed = parse_equation(equation, [em.rank(i) for i in node.input], diagonal=True)
        except ValueError as e:
            em.refuse(f"equation {equation!r} is not handled: {e}")
        taken = [_take_diagonal(em, x, term) for x, term in zip(node.input, parsed.terms, strict=True)]
        (x, term), out = taken[0], parsed.output
        if len(taken) == 1 and sorted(term) == sorted(out):
            _finish(em, _transpose(em, x, term, out))
            return
        copy = em.copy_node()
        del copy.attribute[:], copy.input[:]
        copy.attribute.append(onnx.helper.make_attribute("equation", ",".join(t for _, t in taken) + "->" + out))
        copy.input.extend(x for x, _ in taken)


class EinsumPairwiseForm(Rule):
    """``Einsum`` of three or more operands → the lowering's pairwise contractions (Transpose, Mul, MatMul, ...).

    For runtimes that take Einsum of one or two operands only (MNN 3.6.1's converter: "Can't convert Einsum
    for input size = 3"). The sums add in the pairwise order, not the kernel's: budgeted, as the lowering.
    """

    name = "einsum-pairwise"
    op_types = ("Einsum",)
    versions = (12,)
    decomposition = "einsum-pairwise"
    budgeted = True

    def rewrite(self, em: Emitter) -> None:
        """Emit :func:`einsum`'s lowering of ``em.node``."""
        einsum(em)
