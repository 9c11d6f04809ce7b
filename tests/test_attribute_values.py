"""String attribute values per op version (``lowerer/facts/attribute_values.json``), which onnx does not check."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import lowerer
from lowerer.facts.attribute_values import allowed_values, value_problem
from lowerer.verification.specs import strict_check

TABLE = json.loads((Path(lowerer.__file__).parent / "facts" / "attribute_values.json").read_text())["ops"]
ENTRIES = [(op, e) for op, entries in TABLE.items() for e in entries]
IDS = [f"{op}-{e['attribute']}-{e['versions'][0]}" for op, e in ENTRIES]


@pytest.mark.parametrize(("op", "entry"), ENTRIES, ids=IDS)
def test_each_value_listed_is_named_by_the_spec_at_that_version(op: str, entry: dict[str, object]) -> None:
    """Every value is a word of the attribute's description in onnx's schema; each version a since-version of op."""
    versions = entry["versions"]
    assert isinstance(versions, list)
    since = {s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == ""}
    for version in versions:
        assert version in since, (op, version)
        text = onnx.defs.get_schema(op, version, "").attributes[str(entry["attribute"])].description
        named = set(re.findall(r"[a-z_]+", text))
        values = entry["values"]
        assert isinstance(values, list) and set(values) <= named, (op, version, set(values) - named)
        # a value the spec names at another version but not at this one is not listed here (bilinear and linear
        # appear in the descriptions' explanations: "linear (including bilinear, trilinear, etc)")
        others = {v for e in TABLE[op] if e["attribute"] == entry["attribute"] for v in e["values"]}
        assert others & named <= set(values) | {"bilinear", "linear"}, (op, version, others & named - set(values))


def _grid_sample(version: int, mode: str) -> onnx.ModelProto:
    node = helper.make_node("GridSample", ["x", "g"], ["y"], name="gs", mode=mode)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 1, 3, 4]),
                                            helper.make_tensor_value_info("g", T.FLOAT, [1, 2, 2, 2])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [1, 1, 2, 2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)], ir_version=8)


def test_a_value_of_another_version_is_refused_though_onnx_accepts_it() -> None:
    model = _grid_sample(16, "linear")
    onnx.checker.check_model(model)  # onnx itself does not look at the value
    assert allowed_values("GridSample", 16, "mode") == ("bilinear", "nearest", "bicubic")
    assert value_problem(model.graph.node[0], 16) == ("node 'gs' (GridSample-16): attribute mode='linear' is not one "
                                                      "of GridSample-16's values (bilinear, nearest, bicubic)")
    with pytest.raises(onnx.checker.ValidationError, match="mode='linear'"):
        strict_check(model)
    assert value_problem(_grid_sample(20, "linear").graph.node[0], 20) is None
    assert value_problem(_grid_sample(17, "bilinear").graph.node[0], 17) is None  # GridSample-16 at opset 17


def test_the_real_grid_sample_steps_are_verified_both_ways() -> None:
    down = lowerer.convert(_grid_sample(20, "linear"), target_opset=16)
    assert [n.s for n in down.model.graph.node[0].attribute if n.name == "mode"] == [b"bilinear"]
    up = lowerer.convert(_grid_sample(16, "bicubic"), target_opset=20)
    assert [n.s for n in up.model.graph.node[0].attribute if n.name == "mode"] == [b"cubic"]
    assert {r.status for r in [*down.report.rewrites, *up.report.rewrites]} == {"verified"}
    assert np.isfinite(down.report.rewrites[0].details["max_difference"])
