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
    sets = [s for s in constructed(node, 13, [F], [shape], np.random.default_rng(0)) if s[0] == "positions"]
    assert sets and len(sets) <= 16
    n = shape[axis]
    firsts, lasts, ties = set(), set(), set()
    for _, given, _ in sets:
        f, la, t = _first_last(given[0], axis)
        firsts, lasts, ties = firsts | f, lasts | la, ties | t
    assert firsts == lasts == set(range(n)) and ties == set(range(1, n + 1))


def test_scatter_duplicates_and_cast_edges_are_constructed() -> None:
    scatter = helper.make_node("ScatterElements", ["d", "i", "u"], ["y"], reduction="max")
    (kind, given, _), *selects = constructed(scatter, 18, [F, TensorProto.INT64, F], [(3, 4), (2, 4), (2, 4)],
                                             np.random.default_rng(0))
    assert kind == "duplicates" and len(np.unique(given[1])) == 1
    assert [s[0] for s in selects] == ["signed-zeros", "non-finite", "non-finite", "non-finite"]
    assert np.signbit(selects[0][1][0]).all() and 1 not in selects[0][1]  # the data all -0.0, the indices generated
    # NaN on one side of every combined pair: the data all NaN under updates without, then the reverse
    (_, data_nan, _), (_, updates_nan, _) = selects[2:]
    assert np.isnan(data_nan[0]).all() and not np.isnan(data_nan[2]).any()
    assert np.isnan(updates_nan[2]).all() and not np.isnan(updates_nan[0]).any()
    cast = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)
    ((kind, given, _),) = constructed(cast, 13, [F], [(4, 5)], np.random.default_rng(0))
    assert kind == "cast-edges" and 65504.0 in given[0] and np.signbit(given[0][given[0] == 0]).any()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_products_of_exact_minus_zero_are_constructed_for_gemm_and_matmul(dtype: type) -> None:
    """Tiny negative times tiny positive: each product underflows to -0.0, and their sum (onnxruntime) is -0.0."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    for node in (helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("Gemm", ["a", "b", "c"], ["y"])):
        shapes = [(2, 3), (3, 4), (4,)][: len(node.input)]
        ((kind, given, _),) = constructed(node, 13, [elem] * len(shapes), shapes, np.random.default_rng(0))
        assert kind == "signed-zeros" and (given[0] < 0).all() and (given[1] > 0).all()
        products = given[0][:, :, None] * given[1][None, :, :]  # in the type itself: each underflows to -0.0
        assert products.dtype == dtype and (products == 0).all() and np.signbit(products).all()
        if node.op_type == "Gemm":
            assert (given[2] == 0).all() and np.signbit(given[2]).all()
    assert constructed(helper.make_node("MatMul", ["a", "b"], ["y"]), 13, [TensorProto.INT32] * 2, [(2, 3), (3, 4)],
                       np.random.default_rng(0)) == []


def test_a_gemm_c_of_plus_zero_is_refused_for_every_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemm 11 -> 9 must add C = -0.0 (beta * C changes no value, a -0.0 product included); +0.0 is caught."""
    from _mutant_list import MUTANTS
    from _mutants import run

    mutant = next(m for m in MUTANTS if m.name == "gemm-11-9-c-plus-zero")
    model = mutant.model()
    for seed in range(10):
        assert run(mutant, seed).killed, seed
        rewrite = lowerer.convert(model, target_opset=9, seed=seed).report.rewrites[0]  # the right rule passes
        assert rewrite.status == "verified" and any(s.startswith("signed-zeros") for s in rewrite.details["input_sets"])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_coordinates_land_exactly_on_the_kernels_coordinate_limit(dtype: type, align: int) -> None:
    """onnxruntime samples |coordinate| > 2**62 at the lowest one: the last set puts points on 2**62 and just beyond."""
    from lowerer.rules.grid_sample import _COORDINATE_LIMIT
    from lowerer.verification.sampling import COORDINATE_LIMIT

    assert COORDINATE_LIMIT == _COORDINATE_LIMIT  # the check's limit is the one the lowering follows

    node = helper.make_node("GridSample", ["x", "g"], ["y"], align_corners=align)
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    sizes = (5, 3)  # W, H (x 5 wide, 3 high): the two axes of the grid's last dim
    sets = constructed(node, 16, [elem, elem], [(1, 2, sizes[1], sizes[0]), (1, 2, 4, 2)], np.random.default_rng(0))
    _, given, covers = sets[-1]
    assert "2**62" in covers and not np.any(given[0] == 0)  # every pixel sampled at the lowest coordinate shows
    limit = dtype(COORDINATE_LIMIT)
    beyond = np.nextafter(limit, dtype(np.inf))
    landed = set()
    for k, point in enumerate(given[1].reshape(-1, 2)):
        axis = k % 2
        g, size = point[axis], sizes[axis]
        one, two = dtype(1), dtype(2)
        at = (g + one) / two * dtype(size - 1) if align else ((g + one) * dtype(size) - one) / two
        landed.add(float(at))
    assert {float(beyond), float(-beyond), float(limit), float(-limit)} <= landed
