"""Rewrites whose inputs are computed upstream, checked on the values the model really feeds them.

A Reshape whose shape comes from Shape/Gather/Concat, a Resize whose sizes come from a Concat, a
ScatterElements whose indices come from a TopK: the inputs generated for the node alone do not fit,
so the generated check runs on nothing. The original model's values (lowerer.verification.observed)
verify the right rule and catch a wrong one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from _mutants import Mutant, adapter, patched, run, set_attr, swap_op
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
import lowerer.verification.observed as observed_module
from lowerer.cli import main as cli_main
from lowerer.steps.emitter import Emitter
from lowerer.verification.whole import ModelCheckOptions


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], output: onnx.ValueInfoProto,
           consts: dict[str, list[int]], opset: int) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.array(v, dtype=np.int64), k) for k, v in consts.items()]
    graph = helper.make_graph(nodes, "observed", inputs, [output], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def reshape_upstream() -> onnx.ModelProto:
    """Reshape-14 of ``x`` to ``[N, 2 * M, -1]``, the dims read from another tensor's shape."""
    nodes = [helper.make_node("Shape", ["y"], ["sy"]),
             helper.make_node("Gather", ["sy", "i0"], ["d0"], axis=0),
             helper.make_node("Gather", ["sy", "i1"], ["d1"], axis=0),
             helper.make_node("Mul", ["d1", "two"], ["d1x2"]),
             helper.make_node("Concat", ["d0", "d1x2", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["out"], name="reshape", allowzero=0)]
    return _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["N", 12]),
                          helper.make_tensor_value_info("y", T.FLOAT, ["N", 3])],
                  helper.make_tensor_value_info("out", T.FLOAT, [None, None, None]),
                  {"i0": [0], "i1": [1], "two": [2], "m1": [-1]}, 14)


def resize_sizes() -> onnx.ModelProto:
    """Resize-13 to ``sizes = Concat(Shape(x)[0:2], 2 * Shape(x)[2:4])`` (nearest)."""
    nodes = [helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Slice", ["sx", "s0", "s2"], ["nc"]),
             helper.make_node("Slice", ["sx", "s2", "s4"], ["hw"]),
             helper.make_node("Mul", ["hw", "two"], ["hw2"]),
             helper.make_node("Concat", ["nc", "hw2"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["out"], name="resize", mode="nearest")]
    return _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, "H", "W"])],
                  helper.make_tensor_value_info("out", T.FLOAT, [None] * 4),
                  {"s0": [0], "s2": [2], "s4": [4], "two": [2]}, 13)


def scatter_topk() -> onnx.ModelProto:
    """ScatterElements-16 (reduction add) whose indices are a TopK's, k the updates' width."""
    nodes = [helper.make_node("Shape", ["upd"], ["su"]),
             helper.make_node("Slice", ["su", "s1", "s2"], ["k"]),
             helper.make_node("TopK", ["s", "k"], ["vals", "idx"], axis=1),
             helper.make_node("ScatterElements", ["data", "idx", "upd"], ["out"], name="scatter", axis=1,
                              reduction="add")]
    return _model(nodes, [helper.make_tensor_value_info("data", T.FLOAT, [2, 8]),
                          helper.make_tensor_value_info("s", T.FLOAT, [2, 8]),
                          helper.make_tensor_value_info("upd", T.FLOAT, [2, "U"])],
                  helper.make_tensor_value_info("out", T.FLOAT, [2, 8]), {"s1": [1], "s2": [2]}, 16)


def _negate_output(op: str) -> Callable[[Emitter], None]:
    """The emitted ``op`` node's output negated (a Neg after it)."""
    def post(em: Emitter) -> None:
        node = next(n for n in em.nodes if n.op_type == op)
        out = node.output[0]
        node.output[0] = out + "_wrong"
        em.nodes.append(helper.make_node("Neg", [out + "_wrong"], [out]))
    return post


#: (model, target, node, wrong rule): each case's model, where its node's check ran on no generated input.
CASES = {
    "reshape": (reshape_upstream, 13, "reshape", adapter("Reshape", 14, 13, post=_negate_output("Reshape"))),
    # Resize-10 takes constant scales only (computed sizes are refused): the case shows from 11 on
    "resize": (resize_sizes, 11, "resize", adapter("Resize", 13, 11, post=set_attr("Resize", "mode",
                                                                                   lambda _: "linear"))),
    "scatter": (scatter_topk, 15, "scatter", adapter("ScatterElements", 16, 13, post=swap_op("Add", "Sub"))),
}


def _no_observed(mp: pytest.MonkeyPatch) -> None:
    """As before the checks on observed values: the original's values are not at hand."""
    real = observed_module.check_pending

    def unavailable(verifier: object, source: observed_module.ObservedSource) -> None:
        real(verifier, observed_module.ObservedSource(None, unavailable="switched off by the test"))  # type: ignore[arg-type]

    mp.setattr(observed_module, "check_pending", unavailable)


@pytest.mark.parametrize("case", sorted(CASES))
def test_verified_on_the_values_the_model_feeds(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, target, node, _ = CASES[case]
    with monkeypatch.context() as mp:  # the generated inputs alone do not fit the node
        _no_observed(mp)
        before = lowerer.convert(make(), target_opset=target).report
    (r,) = [r for r in before.rewrites if r.node == node]
    assert r.status == "unverified"
    assert r.reason.startswith("not run on generated inputs nor on the values the model feeds it: switched off")
    assert "on generated inputs: the original could not run on any generated input" in r.reason
    report = lowerer.convert(make(), target_opset=target).report
    (r,) = [r for r in report.rewrites if r.node == node]
    assert r.status == "verified", r.reason
    sets = r.details["input_sets"]
    assert sets and all(s.startswith("observed (whole-model input set ") for s in sets)
    assert "could not run on any generated input" in r.details["observed"]
    assert report.verification is not None and report.verification["observed"]["verified"] == 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_wrong_rule_there_is_caught(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    make, target, node, patch = CASES[case]
    mutant = Mutant(f"observed-{case}", "adapter", patch, make, target)
    with monkeypatch.context() as mp:  # before: it passed as unverified, exit 0
        _no_observed(mp)
        assert not run(mutant).killed
    with patched(mutant), pytest.raises(lowerer.VerificationError) as caught:
        lowerer.convert(make(), target_opset=target)
    message = str(caught.value)
    assert caught.value.exit_code == 1 and message.startswith(f"node {node!r}"), message
    assert "failed verification on CPUExecutionProvider: input set observed (whole-model input set " in message


def test_loaded_inputs_are_the_values_observed(tmp_path: Path) -> None:
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 12), "y": np.ones((2, 3), dtype=np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    report = lowerer.convert(reshape_upstream(), target_opset=13,
                             verify_model=ModelCheckOptions(load_inputs=[tmp_path / "in.npz"])).report
    (r,) = report.rewrites
    assert r.status == "verified" and r.details["input_sets"] == [
        "observed (whole-model input set 1, loaded) (x: float32[2,12]; shape: int64[3])"]


def test_a_value_over_the_size_limit_is_not_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(observed_module, "MAX_ELEMENTS", 4)
    (r,) = lowerer.convert(reshape_upstream(), target_opset=13).report.rewrites
    assert r.status == "unverified"
    assert r.reason.startswith("not run on generated inputs nor on the values the model feeds it: 'x' holds 12 "
                               "values, over the 4 kept for a check")


def test_the_summary_names_the_unverified_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "m.onnx"
    onnx.save(reshape_upstream(), src)
    _no_observed(monkeypatch)
    result = CliRunner().invoke(cli_main, ["convert", str(src), "-o", str(tmp_path / "o.onnx"),
                                           "--target-opset", "13"])
    assert result.exit_code == 0, result.output
    (line,) = [s for s in result.stderr.splitlines() if s.startswith("unverified by per-rewrite checks")]
    assert line.startswith("unverified by per-rewrite checks (1: 'reshape'): not run on generated inputs nor on "
                           "the values the model feeds it: switched off by the test")
