"""A rewrite built on facts lowerer proved is checked on inputs that satisfy them (issue 31, item 8).

Inside a Loop body the carried value ``v`` stays float32[3,5] (or [2,3,5]): lowerer proves it and
the rules build on it (ArgMax-12 select_last_index -> 11/10 reverses with a constant Gather of 5
indices; Hardmax-11 -> 13 coerces at the proven rank; GlobalMaxPool -> ReduceMax over the proven
rank 3). The body declares nothing, so a check fed what the body declares generates other ranks and
sizes and refuses right rewrites ("indices element out of data bounds", "shapes differ").
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from _convert_helpers import make_model, value_info
from onnx import TensorProto, helper, numpy_helper

import lowerer

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _loop(body_op: onnx.NodeProto, shape: list[int], out_elem: int, out_shape: list[int], opset: int
          ) -> onnx.ModelProto:
    """A Loop of 2 trips whose carried ``v`` keeps its shape; ``body_op`` (v_in -> r) is scanned out.

    The body declares no type for ``v_in``, ``v_out`` or ``r``.
    """
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Neg", ["v_in"], ["nv"]), helper.make_node("Neg", ["nv"], ["v_out"]), body_op],
        "body", [value_info("i", I64, []), value_info("cond_in", TensorProto.BOOL, []),
                 onnx.ValueInfoProto(name="v_in")],
        [value_info("cond_out", TensorProto.BOOL, []), onnx.ValueInfoProto(name="v_out"),
         onnx.ValueInfoProto(name="r")])
    nodes = [helper.make_node("Constant", [], ["trips"], value=numpy_helper.from_array(np.array(2, np.int64))),
             helper.make_node("Constant", [], ["go"], value=numpy_helper.from_array(np.array(True))),
             helper.make_node("Loop", ["trips", "go", "v0"], ["v", "outs"], body=body)]
    return make_model(nodes, [value_info("v0", F, shape)],
                      [value_info("v", F, shape), value_info("outs", out_elem, out_shape)], opset)


def _argmax(opset: int = 12) -> onnx.ModelProto:
    return _loop(helper.make_node("ArgMax", ["v_in"], ["r"], axis=1, select_last_index=1), [3, 5], I64,
                 [2, 3, 1], opset)


CASES = {
    "argmax-12-select-last-to-11": (_argmax, {"target_opset": 11}),
    "argmax-12-select-last-to-10": (_argmax, {"target_opset": 10}),
    "hardmax-11-coerced-axis-to-13": (
        lambda: _loop(helper.make_node("Hardmax", ["v_in"], ["r"], axis=1), [2, 3, 5], F, [2, 2, 3, 5], 11),
        {"target_opset": 13}),
    "hardmax-decomposition": (
        lambda: _loop(helper.make_node("Hardmax", ["v_in"], ["r"], axis=-1), [3, 5], F, [2, 3, 5], 13),
        {"decompose": ["Hardmax"]}),
    "globalmaxpool-decomposition": (
        lambda: _loop(helper.make_node("GlobalMaxPool", ["v_in"], ["r"]), [2, 3, 5], F, [2, 2, 3, 1], 13),
        {"decompose": ["GlobalMaxPool"]}),
}


def _feeds(shape: list[int], inf_planes: bool) -> list[dict[str, np.ndarray]]:
    """Tie-heavy inputs: random, two-valued (first vs last maximum), all equal, with -inf planes.

    ``inf_planes`` False: not an all -inf plane (onnxruntime's GlobalMaxPool gives -3.4e38 there,
    the spec and the decomposition -inf; the check judges the original by the spec).
    """
    rng = np.random.default_rng(3)
    ties = rng.integers(0, 2, size=shape).astype(np.float32)
    planes = rng.standard_normal(shape).astype(np.float32)
    planes[0] = -np.inf
    sets = [{"v0": rng.standard_normal(shape).astype(np.float32)}, {"v0": ties},
            {"v0": np.full(shape, 2.0, np.float32)}]
    return [*sets, {"v0": planes}] if inf_planes else sets


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_rewrite_in_a_loop_body_is_checked_on_the_proven_shape(case: str) -> None:
    make, options = CASES[case]
    model = make()
    result = lowerer.convert(model, **options)  # raised VerificationError before: the check fed other shapes
    (rewrite,) = result.report.rewrites
    assert rewrite.status == "verified", rewrite.reason
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert all(f"[{','.join(map(str, shape))}]" in s for s in rewrite.details["input_sets"])
    onnx.checker.check_model(result.model, full_check=True)
    a = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(result.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in _feeds(shape, inf_planes="globalmaxpool" not in case):
        for want, got in zip(a.run(None, feeds), b.run(None, feeds), strict=True):
            np.testing.assert_array_equal(got, want)
