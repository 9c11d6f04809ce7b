"""Per-rewrite checks that no wrong rule gets past: input kinds per input, NaN judged where defined, sampling edges.

Each test patches one deliberately wrong rule in (as ``tests/_mutants.py`` does) and converts a one-node model
with ``lowerer.convert``'s default options: lowerer must refuse it (``VerificationError``, exit 1), while the
right rule, on the same model, verifies. The wrong rules:

* a Where below 9 written as ``x * c + y * (1 - c)`` (NaN where the side not chosen is infinite): caught only
  when the float inputs of an op with a bool input get the ±inf set (input kinds per input, not intersected);
* a scatter ``max`` Loop choosing with ``Where`` (onnxruntime's Where turns a chosen -0.0 into +0.0): caught by
  the signed-zeros set of the select-like ops;
* a scatter ``max`` compare written as ``Not(a <= b)`` (a NaN already there kept, where the kernel's
  ``a > b ? a : b`` takes the update): caught by judging NaN for the scatter reductions;
* ``argmax-reduce`` with the fill value ``n`` instead of ``n - 1`` (index ``n`` on an all-NaN row): caught by
  the NaN rows of the arg forms, whose indices must be in range;
* DeformConv with ``h == -1`` counted inside the image (0 times an infinite pixel of row 0 is NaN): caught by
  offsets that land exactly on the border next to non-finite pixels.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from _mutants import lowering, one_node, swap_op
from onnx import TensorProto as T
from test_lowerings_deform_conv import Case
from test_lowerings_deform_conv import _model as deform_conv_model

import lowerer
from lowerer import rules
from lowerer.core.errors import VerificationError
from lowerer.rules import reduce_forms, scatter
from lowerer.steps.emitter import Emitter
from tests import test_backend_topk_forms
from tests.test_backend_topk_forms import _entry

use_profile = test_backend_topk_forms.use_profile

_ONE = np.array(1, dtype=np.int64)


def _where_by_arithmetic(em: Emitter) -> None:
    """Where(c, x, y) as ``x * c + y * (1 - c)``: wrong where the side not chosen is infinite or NaN."""
    c, x, y = em.node.input
    cf = em.op("Cast", [c], to=T.FLOAT)
    one = em.const(np.array(1.0, dtype=np.float32), "one")
    em.op("Add", [em.op("Mul", [x, cf]), em.op("Mul", [y, em.op("Sub", [one, cf])])], [em.node.output[0]])


def _pick_by_where(em: Emitter, keep: str, current: str, update: str, leading_one: bool) -> str:
    """The scatter reductions' choice made with Where (loses a chosen -0.0 in onnxruntime)."""
    return em.op("Where", [keep, current, update])


def _combine_not_le(real: Callable[..., str]) -> Callable[..., str]:
    def wrong(em: Emitter, reduction: str, current: str, update: str, elem: int | None,
              leading_one: bool = False) -> str:
        if reduction != "max":
            return real(em, reduction, current, update, elem, leading_one)
        keep = em.op("Not", [em.op("LessOrEqual", [current, update])])  # a NaN already there is kept: wrong
        return scatter._pick(em, keep, current, update, leading_one)
    return wrong


def _fill_n(real: Callable[..., tuple[str, str]]) -> Callable[..., tuple[str, str]]:
    def wrong(em: Emitter, v: str, axis: int, last: bool) -> tuple[str, str]:
        iota, fill = real(em, v, axis, last)
        if last:
            return iota, fill
        return iota, em.op("Add", [fill, em.const(_ONE, "one")])  # n, out of range on an all-NaN row
    return wrong


def _replaced_lowering(op: str, version: int, handler: Callable[[Emitter], None]
                       ) -> Callable[[pytest.MonkeyPatch], None]:
    def patch(mp: pytest.MonkeyPatch) -> None:
        key = ("", op, version)
        mp.setitem(rules.REGISTRY._lowerings, key, dataclasses.replace(rules.REGISTRY._lowerings[key], handler=handler))
    return patch


def _scatter_max() -> onnx.ModelProto:
    inputs = [("x", T.FLOAT, [4, 3]), ("i", T.INT64, [2, 3]), ("u", T.FLOAT, [2, 3])]
    return one_node("ScatterElements", 18, {"axis": 0, "reduction": "max"}, inputs=inputs)


def _refused(model: onnx.ModelProto, target: int, patch: Callable[[pytest.MonkeyPatch], None],
             **options: Any) -> None:
    """The model verifies as it is, and with ``patch`` applied lowerer refuses it (exit 1)."""
    result = lowerer.convert(model, target_opset=target, **options)
    assert all(r.status == "verified" for r in result.report.rewrites), [r.reason for r in result.report.rewrites]
    with pytest.MonkeyPatch.context() as mp:
        patch(mp)
        with pytest.raises(VerificationError) as caught:
            lowerer.convert(model, target_opset=target, **options)
    assert caught.value.exit_code == 1


@pytest.fixture(autouse=True)
def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR)


def test_where_below_9_by_arithmetic_is_refused() -> None:
    model = one_node("Where", 9, inputs=[("c", T.BOOL, [2, 3]), ("a", T.FLOAT, [2, 3]), ("b", T.FLOAT, [2, 3])])

    _refused(model, 8, _replaced_lowering("Where", 9, _where_by_arithmetic))


def test_scatter_max_loop_choosing_with_where_is_refused() -> None:
    _refused(_scatter_max(), 16, lambda mp: mp.setattr(scatter, "_pick", _pick_by_where))


def test_scatter_max_compare_not_le_is_refused() -> None:
    _refused(_scatter_max(), 16, lambda mp: mp.setattr(scatter, "_combine", _combine_not_le(scatter._combine)))


def test_argmax_reduce_fill_n_is_refused(use_profile: Any) -> None:
    use_profile([_entry(["ArgMax", "ArgMin"], "argmax-reduce")])
    model = one_node("ArgMax", 13, {"axis": 1, "keepdims": 0}, shape=[3, 5])
    _refused(model, 13, lambda mp: mp.setattr(reduce_forms, "_iota_and_fill", _fill_n(reduce_forms._iota_and_fill)),
             for_backend="openvino")


def test_deform_conv_minus_one_counted_inside_is_refused() -> None:
    model = deform_conv_model(Case())
    _refused(model, 17, lowering("DeformConv", 19, swap_op("Greater", "GreaterOrEqual")))
