"""Einsum-12 with three or more operands below 12: a sequence of pairwise contractions, left to right.

Each model is converted by ``lowerer.convert`` (its per-rewrite verification on), then the original and
the result run in onnxruntime on tie-heavy inputs (small integers as floats, ±inf, all-equal) and random
normal ones, and compare: integers exactly, float sums within the expansion budget
(:data:`lowerer.verification.compare.EXPANSION_ULPS`, the budget the two-operand form has).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from test_lowerings_advanced import F32_BUDGET, _check_same, _einsum_model, _feeds, _ops

import lowerer
from lowerer.core.errors import ConversionError
from lowerer.steps.registry import REGISTRY

NARY_CASES = [
    ("bshd,bshde,bsh->bshe", [[2, 3, 2, 4], [2, 3, 2, 4, 5], [2, 3, 2]]),  # linear attention
    ("ij,jk,kl->il", [[3, 4], [4, 5], [5, 2]]),  # a chain of products
    ("i,i,i->", [[5], [5], [5]]),
    ("bn,anm,bm->ba", [[2, 3], [4, 3, 5], [2, 5]]),  # bilinear
    ("ab,bc,cd,de->ae", [[2, 3], [3, 4], [4, 2], [2, 3]]),  # four operands
    ("ij,j,k->ik", [[3, 4], [4], [2]]),  # a sum, then a broadcast product
    ("i,j,k->ijk", [[2], [3], [4]]),  # nothing summed
    ("...ij,...jk,...kl->...il", [[2, 3, 4], [2, 4, 5], [2, 5, 3]]),
    ("ij,jk,kl", [[3, 4], [4, 5], [5, 2]]),  # implicit output "il"
    ("abc,cd,ab->d", [[2, 3, 4], [4, 5], [2, 3]]),  # a, b needed by the last operand
    ("ijk,i,j,k->", [[2, 3, 4], [2], [3], [4]]),
]


@pytest.mark.parametrize("target", [11, 9, 7])
@pytest.mark.parametrize(("equation", "shapes"), NARY_CASES, ids=[c[0] for c in NARY_CASES])
def test_float_within_budget(equation: str, shapes: list[list[int]], target: int) -> None:
    model = _einsum_model(equation, shapes)
    result = lowerer.convert(model, target_opset=target)
    assert "Einsum" not in _ops(result.model)
    assert result.model.opset_import[0].version == target
    feeds = _feeds({f"x{i}": s for i, s in enumerate(shapes)}, np.dtype(np.float32))
    _check_same(model, result.model, feeds, max_ulp=F32_BUDGET)


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize(("equation", "shapes"), NARY_CASES, ids=[c[0] for c in NARY_CASES])
def test_integers_exact(equation: str, shapes: list[list[int]], dtype: type) -> None:
    model = _einsum_model(equation, shapes, np.dtype(dtype))
    result = lowerer.convert(model, target_opset=9)
    _check_same(model, result.model, _feeds({f"x{i}": s for i, s in enumerate(shapes)}, np.dtype(dtype)))


def test_products_with_nothing_summed_are_bit_identical() -> None:
    """Broadcast products round once per multiplication, in the kernel's left-to-right order."""
    for equation, shapes in (("i,j,k->ijk", [[2], [3], [4]]), ("ij,ij,ij->ij", [[3, 4], [3, 4], [3, 4]])):
        model = _einsum_model(equation, shapes)
        result = lowerer.convert(model, target_opset=11)
        assert "MatMul" not in _ops(result.model)
        _check_same(model, result.model, _feeds({f"x{i}": s for i, s in enumerate(shapes)}, np.dtype(np.float32)))


def test_linear_attention_with_dynamic_batch_and_sequence() -> None:
    model = _einsum_model("bshd,bshde,bsh->bshe", [["B", "S", 2, 4], ["B", "S", 2, 4, 5], ["B", "S", 2]])
    result = lowerer.convert(model, target_opset=11)
    assert _ops(result.model).count("MatMul") == 1 and _ops(result.model)[-1] == "Mul"
    for b, s in ((1, 1), (3, 2), (2, 7)):
        feeds = _feeds({"x0": [b, s, 2, 4], "x1": [b, s, 2, 4, 5], "x2": [b, s, 2]}, np.dtype(np.float32))
        _check_same(model, result.model, feeds, max_ulp=F32_BUDGET)


def test_from_its_newest_version() -> None:
    model = _einsum_model("ij,jk,kl->il", [[3, 4], [4, 5], [5, 2]], opset=onnx.defs.onnx_opset_version())
    result = lowerer.convert(model, target_opset=11)
    assert _ops(result.model).count("MatMul") == 2
    _check_same(model, result.model, _feeds({"x0": [3, 4], "x1": [4, 5], "x2": [5, 2]}, np.dtype(np.float32)),
                max_ulp=F32_BUDGET)


def test_refuses_a_group_of_dynamic_letters_in_a_later_contraction() -> None:
    """The second contraction sums the group ``cd``, whose sizes are both dynamic: the condition is named."""
    model = _einsum_model("ab,bcd,acd->a", [[2, 3], [3, "C", "D"], [2, "C", "D"]])
    with pytest.raises(ConversionError) as info:
        lowerer.convert(model, target_opset=11)
    message = str(info.value)
    assert "node 'ein' (Einsum-12" in message and "opset 11" in message
    assert "needs the sizes of the letters" in message and "\n" not in message


def test_explain_names_the_lowering() -> None:
    lines = REGISTRY.explain("Einsum", 12, 11)
    assert lines == ["Einsum [lowering einsum_12_lowering: no Einsum at opset 11]"], lines
