"""``--for onnxruntime==X``: the opset the release runs (its kernel table), and a proof stated as what it is."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer
from lowerer.backends.kernel_tables import holds, kernel_table
from lowerer.backends.profile import load_profile
from lowerer.backends.release import kernel_opset, release_table, runs_here

FIXTURES = Path(__file__).parent / "fixtures" / "real"
CPU = "CPUExecutionProvider"


def _reshape_model(opset: int) -> onnx.ModelProto:
    import numpy as np

    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [3, 4])],
                              [numpy_helper.from_array(np.array([3, 4], np.int64), "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def test_an_open_kernel_row_serves_its_start_only() -> None:
    # onnxruntime's VerifyVersion: a kernel with no end version matches the node's since-version exactly.
    assert holds(14, None, 14) and not holds(14, None, 19)
    assert holds(14, 18, 16) and not holds(14, 18, 19)


def test_release_table_of_1_15_has_no_reshape_19() -> None:
    table = release_table("1.15.1", CPU)
    assert table is not None and table.exact and "v1.15.1" in table.source
    assert table.has("Reshape", 14) and not table.has("Reshape", 19)
    table16 = release_table("1.16", CPU)
    assert table16 is not None and table16.has("Reshape", 19)


def test_kernel_opset_goes_below_an_op_without_a_kernel() -> None:
    table = release_table("1.15", CPU)
    assert table is not None
    assert kernel_opset({"Reshape", "Relu"}, 19, table) == (18, ["Reshape-19"])
    assert kernel_opset({"Relu"}, 19, table) == (19, [])
    # An op with no kernel at any opset does not hold the choice back (it is left to the conversion).
    assert kernel_opset({"Relu", "ImageDecoder"}, 19, table)[0] == 19


@pytest.mark.parametrize(("spec", "release"), [("onnxruntime==1.15", "1.15"), ("onnxruntime<=1.16.3", "1.16.3"),
                                               ("onnxruntime<1.16", "1.15"), ("cuda==1.20", "1.20"),
                                               ("onnxruntime", None), ("onnxruntime>=1.16", None),
                                               ("tensorrt==8.6", None)])
def test_the_release_a_spec_names(spec: str, release: str | None) -> None:
    assert load_profile(spec).release == release


def test_for_onnxruntime_1_15_never_emits_reshape_19() -> None:
    result = lowerer.convert(_reshape_model(23), for_backend="onnxruntime==1.15", verify=False)
    model = result.model
    assert model.opset_import[0].version == 18
    assert [(n.op_type) for n in model.graph.node] == ["Reshape", "Relu"]
    assert model.ir_version <= 9  # the release's row: IR 9 (its bundled onnx 1.14.0)
    notes = " ".join(result.report.notes)
    assert "opset 18, not 19" in notes and "Reshape-19" in notes and "v1.15.1" in notes
    backend = result.report.backend
    assert backend is not None
    if not runs_here("1.15"):
        assert backend["placement"] == "per the profile, not proven here"
        assert "per onnxruntime 1.15.1's kernel table" in backend["placement_detail"]
        assert "not run here (the installed onnxruntime is" in backend["placement_detail"]
        assert "every node (2) has a CPU kernel" in backend["placement_detail"]
    # 1.16 has Reshape-19: the opset it loads (19) stands.
    assert lowerer.convert(_reshape_model(23), for_backend="onnxruntime==1.16",
                           verify=False).model.opset_import[0].version == 19


def test_for_the_installed_onnxruntime_is_proven_by_opening() -> None:
    result = lowerer.convert(_reshape_model(17), for_backend="onnxruntime", verify=False)
    assert result.report.backend is not None and result.report.backend["placement"] == "placement proven"


def test_real_opset_23_export_for_1_15_reaches_an_opset_the_table_runs() -> None:
    path = FIXTURES / "decoder.dynamo.opset23.onnx"
    result = lowerer.convert(str(path), for_backend="onnxruntime==1.15", verify=False)
    table = kernel_table("1.15")
    assert table is not None
    opset = result.model.opset_import[0].version
    assert opset <= 19
    from lowerer.core.opsets import since_version
    from lowerer.model_io.scopes import walk_nodes

    for node in walk_nodes(result.model):
        if node.domain in ("", "ai.onnx"):
            version = since_version(node.op_type, opset)
            assert version is not None and table.has_kernel(CPU, node.op_type, version), node.op_type


def test_targets_cite_a_source_for_every_onnxruntime_row() -> None:
    from lowerer.cli.targets import targets_table

    cpu = next(t for t in targets_table() if t["name"] == "cpu")
    for row in cpu["loads"]:
        assert "microsoft/onnxruntime" in row["source"] or row["source"].startswith("none found"), row
        assert row["confirmed"] == (not row["source"].startswith("none found"))
    by_version = {r["version"]: r for r in cpu["loads"]}
    assert (by_version["1.15"]["max_opset"], by_version["1.15"]["max_ir"]) == (19, 9)  # bundled onnx 1.14.0
    assert (by_version["1.17"]["max_opset"], by_version["1.17"]["max_ir"]) == (20, 9)
    assert (by_version["1.23"]["max_opset"], by_version["1.23"]["max_ir"]) == (23, 11)
    # The shipped kernel tables (compatibility.md's matrix) agree with the rows where the matrix is consistent.
    for release in ("1.16", "1.17", "1.18"):
        table = kernel_table(release)
        assert table is not None and (table.max_opset, table.max_ir) == (by_version[release]["max_opset"],
                                                                          by_version[release]["max_ir"])
