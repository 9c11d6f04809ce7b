"""Input sets that reach the special cases by construction, not by seed (issue 31, item 4).

A Hardmax decomposition whose index iota is off by one at the last position is wrong only where
the first maximum is last; a GlobalMaxPool decomposition that gives -3.4e38 (as onnxruntime's
kernel does) for an all -inf plane is wrong only there. Seeded sets reach those cases or not
depending on the seed; the constructed ones reach them for every seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import pytest
from _convert_helpers import make_model, value_info
from onnx import TensorProto, helper

import lowerer
from lowerer.rules import global_max_pool, hardmax_decomposition
from lowerer.steps.emitter import Emitter
from lowerer.verification.special import constructed

F = TensorProto.FLOAT
SEEDS = range(10)


def _iota_off_by_one_at_the_end(em: Emitter, size: int, trailing: int) -> str:
    values = np.arange(size, dtype=np.int32)
    values[-1] = size  # wrong: the last position never matches
    return em.const(values.reshape([size] + [1] * trailing), "iota")


_reduce_max = global_max_pool.reduce_max


def _max_like_onnxruntime(em: Emitter, x: str, axes: Sequence[int] | str, keepdims: int,
                          outputs: Sequence[str] | None = None) -> str:
    reduced = _reduce_max(em, x, axes, keepdims)
    lowest = em.const(np.array(np.finfo(np.float32).min, np.float32), "lowest")
    return em.op("Max", [reduced, lowest], outputs)  # wrong: -3.4e38 for an all -inf plane


def _one_node(op: str, shape: list[int | str], out_shape: list[int | str], **attrs: object) -> onnx.ModelProto:
    return make_model([helper.make_node(op, ["x"], ["y"], **attrs)], [value_info("x", F, shape)],
                      [value_info("y", F, out_shape)], 13)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_hardmax_iota_off_by_one_at_the_last_position_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                   seed: int) -> None:
    monkeypatch.setattr(hardmax_decomposition, "_iota", _iota_off_by_one_at_the_end)
    model = _one_node("Hardmax", [2, 5], [2, 5], axis=-1)
    with pytest.raises(lowerer.VerificationError, match=r"hardmax-decomposition.*values differ"):
        lowerer.convert(model, decompose=["Hardmax"], seed=seed)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_globalmaxpool_giving_the_lowest_float_for_an_all_inf_plane_is_refused(
        monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    monkeypatch.setattr(global_max_pool, "reduce_max", _max_like_onnxruntime)
    model = _one_node("GlobalMaxPool", [1, 2, 3, 3], [1, 2, 1, 1])
    with pytest.raises(lowerer.VerificationError, match=r"globalmaxpool-decomposition.*values differ"):
        lowerer.convert(model, decompose=["GlobalMaxPool"], seed=seed)


def test_the_right_decompositions_pass_and_say_what_they_covered() -> None:
    for op, shape, out, attrs in (("Hardmax", [2, 5], [2, 5], {"axis": -1}),
                                  ("GlobalMaxPool", [1, 2, 3, 3], [1, 2, 1, 1], {})):
        result = lowerer.convert(_one_node(op, shape, out, **attrs), decompose=[op])
        (rewrite,) = result.report.rewrites
        assert rewrite.status == "verified", rewrite.reason
        covered = " ".join(rewrite.details["special_cases"])
        assert ("first and last maximum" in covered) if op == "Hardmax" else ("planes all -inf" in covered)


def _first_last(values: np.ndarray, axis: int) -> tuple[set[int], set[int], set[int]]:
    moved = np.moveaxis(values, axis, -1).reshape(-1, values.shape[axis])
    firsts, lasts, ties = set(), set(), set()
    for row in moved:
        at = np.flatnonzero(row == row.max())
        firsts.add(int(at[0]))
        lasts.add(int(at[-1]))
        ties.add(len(at))
    return firsts, lasts, ties


@pytest.mark.parametrize(("op", "shape", "axis"), [("ArgMax", (3, 4), 1), ("ArgMax", (4, 2, 3), 0),
                                                   ("Hardmax", (2, 6), -1)])
def test_every_position_is_the_first_and_the_last_maximum_with_ties_of_every_multiplicity(
        op: str, shape: tuple[int, ...], axis: int) -> None:
    node = helper.make_node(op, ["x"], ["y"], axis=axis)
    sets = constructed(node, 13, [F], [shape], np.random.default_rng(0))
    assert sets and len(sets) <= 16
    n = shape[axis]
    firsts, lasts, ties = set(), set(), set()
    for _, given, _ in sets:
        f, la, t = _first_last(given[0], axis)
        firsts, lasts, ties = firsts | f, lasts | la, ties | t
    assert firsts == lasts == set(range(n)) and ties == set(range(1, n + 1))


def test_scatter_duplicates_and_cast_edges_are_constructed() -> None:
    scatter = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="max")
    ((kind, given, _),) = constructed(scatter, 18, [F, TensorProto.INT64, F], [(3, 4), (2, 4), (2, 4)],
                                      np.random.default_rng(0))
    assert kind == "duplicates" and len(np.unique(given[1])) == 1
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)
    ((kind, given, _),) = constructed(cast, 13, [F], [(4, 5)], np.random.default_rng(0))
    assert kind == "cast-edges" and 65504.0 in given[0] and np.signbit(given[0][given[0] == 0]).any()
