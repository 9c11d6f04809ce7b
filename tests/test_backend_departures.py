"""A departure the user already has is said, not refused; the deployment check reads the user's input shapes.

OpenVINO's TopK breaks ties at a later index for k >= 7 (measured, lowerer/backends/openvino.json): a TopK
of the user's own model is converted as it is with a warning line and recorded in
``report.backend["departures"]``; ``strict_backend=True`` refuses it. Where OpenVINO is installed, the
deployment check runs the original there too and calls the tie difference the original's
(``departs-as-original``), not a failure.
"""

from __future__ import annotations

import importlib.util
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.backends import deployment
from lowerer.core.errors import ConversionError, InputError
from lowerer.verification.whole import ModelCheckOptions

HAS_OPENVINO = importlib.util.find_spec("openvino") is not None


def _topk(k: int) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 32])
    values = helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, k])
    indices = helper.make_tensor_value_info("i", TensorProto.INT64, [2, k])
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="top", axis=-1)
    k_value = numpy_helper.from_array(np.array([k], np.int64), "k")
    graph = helper.make_graph([node], "g", [x], [values, indices], [k_value])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_topk_of_the_users_model_is_said_not_refused(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        result = lowerer.convert(_topk(7), for_backend="openvino==2026.4", verify=False)
    record = result.report.backend
    assert record is not None and [d["node"] for d in record["departures"]] == ["top"]
    assert record["left"] == []
    said = [r.getMessage() for r in caplog.records if "departs there too" in r.getMessage()]
    assert len(said) == 1 and "'top'" in said[0] and "openvino==2026.4" in said[0] and "\n" not in said[0]


def test_strict_backend_refuses_the_departure() -> None:
    with pytest.raises(ConversionError, match=r"node 'top' \(TopK-11.*openvino==2026.4 cannot run it"):
        lowerer.convert(_topk(7), for_backend="openvino==2026.4", verify=False, strict_backend=True)
    with pytest.raises(InputError, match="strict_backend goes with for_backend"):
        lowerer.convert(_topk(7), target_opset=13, strict_backend=True)


def test_k_the_runtime_computes_right_is_not_a_departure() -> None:
    record = lowerer.convert(_topk(3), for_backend="openvino==2026.4", verify=False).report.backend
    assert record is not None and "departures" not in record


@pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed (the test extra installs it)")
def test_deployment_calls_the_tie_difference_the_originals() -> None:
    record = lowerer.convert(_topk(7), for_backend="openvino").report.backend
    assert record is not None
    assert record["deployment"]["status"] in ("departs-as-original", "equal"), record["deployment"]


@pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO is not installed (the test extra installs it)")
def test_departure_found_first_where_the_original_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenVINO 2023.0 loads no opset-20 detector: the kept TopK, located as the first node departing, says it."""
    monkeypatch.setattr(deployment, "_as_original", lambda *args: False)  # as if the original did not run there
    record = lowerer.convert(_topk(7), for_backend="openvino").report.backend
    assert record is not None
    found = record["deployment"]
    assert found["status"] in ("departs-as-original", "equal"), found
    if found["status"] != "equal":
        assert "first at 'top' (TopK-11)" in found["reason"] and "departures" in found["reason"], found


def test_deployment_inputs_follow_the_users_shapes() -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x],
                                                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
                              opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    steering = ModelCheckOptions(input_shapes={"x": (1, 3, 4, 4)})
    sets = deployment._input_sets(model, model, 0, steering)
    assert not isinstance(sets, str) and {s.feeds["x"].shape for s in sets} == {(1, 3, 4, 4)}
    plain = deployment._input_sets(model, model, 0)
    assert not isinstance(plain, str) and (1, 3, 1, 1) in {s.feeds["x"].shape for s in plain}


def test_a_form_that_cannot_be_written_keeps_the_users_node_as_a_departure(caplog: pytest.LogCaptureFixture) -> None:
    """MNN ignores select_last_index=1 (measured); argmax-reduce cannot take uint64: the user's node is kept, said."""
    x = helper.make_tensor_value_info("x", TensorProto.UINT64, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [3, 1])
    node = helper.make_node("ArgMax", ["x"], ["y"], name="am", axis=1, select_last_index=1)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)],
                              ir_version=8)
    with caplog.at_level(logging.WARNING):
        result = lowerer.convert(model, for_backend="mnn", verify=False)
    record = result.report.backend
    assert record is not None and [d["node"] for d in record["departures"]] == ["am"]
    assert "its form (argmax-reduce) cannot be written here" in record["departures"][0]["reason"]
    said = [r.getMessage() for r in caplog.records if "departs there too" in r.getMessage()]
    assert len(said) == 1 and "not uint64" in said[0] and "\n" not in said[0]
    with pytest.raises(ConversionError, match=r"node 'am' \(ArgMax-13.*not uint64"):
        lowerer.convert(model, for_backend="mnn", verify=False, strict_backend=True)
