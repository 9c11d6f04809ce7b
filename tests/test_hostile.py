"""Issue 11: lowerer under hostile and careless input. Each numbered case of the issue is a test here.

Every refusal must be one printable ``lowerer: error:`` line with exit 2 (1 for a failed check), no
traceback, and leave every file as it was: same bytes, same mtime, nothing created (no hidden
temporaries, no folders). Interrupts (case 8) are in ``test_signals.py``.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from _convert_helpers import hidden_rank_model
from _hostile_helpers import (
    W_BYTES,
    assert_refused,
    make_external,
    model_with_weights,
    run_lowerer,
    save_with_data,
    snapshot,
)
from _wrong_rules import DropsSelectLast
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import lowerer
import lowerer.rules as rules
from lowerer import model_io
from lowerer.cli import main
from lowerer.core.errors import InputError, one_line
from lowerer.model_io import reading
from lowerer.model_io.files import Transaction

F = TensorProto.FLOAT
LONG = "x" * 300  # longer than NAME_MAX (255)


def cli(*args: object) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.stderr


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    """tmp/model/m.onnx with its weight in tmp/model/w.bin, and an empty tmp/out/."""
    d = tmp_path / "model"
    d.mkdir()
    save_with_data(model_with_weights(), d)
    (tmp_path / "out").mkdir()
    return d


def convert_refused(tmp_path: Path, args: list[object], *needles: str, exit_code: int = 2) -> str:
    """Run ``lowerer convert ARGS`` in-process; assert a refusal that changed nothing under tmp_path."""
    before = snapshot(tmp_path)
    code, err = cli("convert", *args)
    line = assert_refused(code, err, *needles, exit_code=exit_code)
    assert snapshot(tmp_path) == before
    return line


# -- 1. --report destroys files ----------------------------------------------------------------------
@pytest.mark.parametrize(("report", "needles"), [
    ("model/m.onnx", ["is the input model"]),
    ("out/o.onnx", ["is the output model too"]),
    ("model/w.bin", ["is the input's external data file 'w.bin'"]),
    ("nodir/r.json", ["does not exist"]),
    ("out", ["is a directory"]),
    (f"out/{LONG}.json", ["File name too long"]),
], ids=["input", "output", "data-file", "missing-dir", "folder", "long-name"])
def test_1_report_path_checked_before_any_work(model_dir: Path, tmp_path: Path, report: str,
                                                needles: list[str]) -> None:
    convert_refused(tmp_path, [model_dir / "m.onnx", "-o", tmp_path / "out/o.onnx", "--target-opset", "13",
                               "--report", tmp_path / report], *needles)




def test_1_report_written_on_failed_verification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rules.REGISTRY._spans, ("", "ArgMax"), DropsSelectLast())
    node = helper.make_node("ArgMax", ["x"], ["y"], axis=1, select_last_index=1, name="am")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2, 4, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [2, 1, 5])])
    src = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), src)
    out, report = tmp_path / "o.onnx", tmp_path / "r.json"
    code, err = cli("convert", src, "-o", out, "--target-opset", "11", "--report", report)
    assert_refused(code, err, "'am'", "the report is in", exit_code=1)
    assert not out.exists()
    data = json.loads(report.read_text())
    assert data["rewrites"][-1]["node"] == "am" and data["rewrites"][-1]["status"] == "failed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "r.json"]


def test_1_a_report_that_cannot_be_written_leaves_no_model(model_dir: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    real = model_io.saving._stage_bytes

    def failing(tx: Transaction, path: Path, payload: bytes) -> None:
        if path.suffix == ".json":
            raise InputError(f"{path}: cannot write it (No space left on device)")
        real(tx, path, payload)

    monkeypatch.setattr(model_io.saving, "_stage_bytes", failing)
    convert_refused(tmp_path, [model_dir / "m.onnx", "-o", tmp_path / "out/o.onnx", "--target-opset", "13",
                               "--report", tmp_path / "out/r.json"], "No space left")


# -- 2. output onto the input's data file in a subfolder ----------------------------------------------
def test_2_output_onto_a_data_file_in_a_subfolder(tmp_path: Path) -> None:
    d = tmp_path / "model"
    d.mkdir()
    src = save_with_data(model_with_weights(), d, location="sub/w.bin")
    for out in (d / "sub/w.bin", tmp_path / "model/sub/../sub/w.bin"):
        convert_refused(tmp_path, [src, "-o", out, "--target-opset", "13"], "would destroy the weights")
    for flag in (["--report", d / "sub/w.bin"], ["--external-data", "sub/w.bin"]):
        convert_refused(tmp_path, [src, "-o", d / "o.onnx", "--target-opset", "13", *flag], "would destroy it")


# -- 3. / 6. every external reference, one check, at load ---------------------------------------------
def _sparse(name: str) -> onnx.SparseTensorProto:
    values = numpy_helper.from_array(np.arange(1, 25, dtype=np.float32), name)
    indices = numpy_helper.from_array(np.arange(24, dtype=np.int64), name + "_indices")
    return helper.make_sparse_tensor(values, indices, [2, 3, 4])


def _constant_sparse(out: str, name: str) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [out], sparse_value=_sparse(name), name="c_" + out)


def _with_nodes(nodes: list[onnx.NodeProto], extra: str, opsets: dict[str, int] | None = None,
                functions: list[onnx.FunctionProto] | None = None, sparse_init: bool = False) -> onnx.ModelProto:
    graph = helper.make_graph([*nodes, helper.make_node("Add", ["x", extra], ["y"])], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", F, [2, 3, 4])],
                              sparse_initializer=[_sparse(extra)] if sparse_init else None)
    imports = [helper.make_opsetid(d, v) for d, v in {"": 13, **(opsets or {})}.items()]
    return helper.make_model(graph, opset_imports=imports, ir_version=8, functions=functions)


def _nested_if(inner_init: TensorProto) -> list[onnx.NodeProto]:
    def branch(name: str, graph_init: list[TensorProto]) -> onnx.GraphProto:
        return helper.make_graph([helper.make_node("Identity", [graph_init[0].name if graph_init else "x"], [name])],
                                 name, [], [helper.make_tensor_value_info(name, F, [2, 3, 4])],
                                 initializer=graph_init)

    inner = helper.make_node("If", ["cond"], ["i_out"], then_branch=branch("ti", [inner_init]),
                             else_branch=branch("ei", []))
    then = helper.make_graph([helper.make_node("Constant", [], ["cond"], value=numpy_helper.from_array(
        np.array(True))), inner], "t", [], [helper.make_tensor_value_info("i_out", F, [2, 3, 4])])
    outer_cond = helper.make_node("Constant", [], ["c0"], value=numpy_helper.from_array(np.array(True)))
    return [outer_cond, helper.make_node("If", ["c0"], ["k"], then_branch=then, else_branch=branch("e", []))]


def _variant(kind: str) -> tuple[onnx.ModelProto, list[TensorProto]]:
    """A model with one reference of kind ``kind``; returns it and the tensors to make external."""
    if kind == "initializer":
        m = model_with_weights()
        return m, [m.graph.initializer[0]]
    if kind in ("sparse-initializer-values", "sparse-initializer-indices"):
        m = _with_nodes([], "sp", sparse_init=True)
        sp = m.graph.sparse_initializer[0]
        return m, [sp.values if kind.endswith("values") else sp.indices]
    if kind in ("constant-sparse-value", "constant-sparse-indices"):
        m = _with_nodes([_constant_sparse("k", "sv")], "k")
        sp = m.graph.node[0].attribute[0].sparse_tensor
        return m, [sp.values if kind.endswith("value") else sp.indices]
    if kind == "constant-value":
        m = _with_nodes([helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(
            np.ones((2, 3, 4), np.float32), "cv"))], "k")
        return m, [m.graph.node[0].attribute[0].t]
    if kind in ("tensors-attribute", "sparse-tensors-attribute"):
        node = helper.make_node("Custom", [], ["k"], domain="my.ops")
        attr = node.attribute.add()
        attr.name = "weights"
        if kind == "tensors-attribute":
            attr.type = onnx.AttributeProto.TENSORS
            attr.tensors.append(numpy_helper.from_array(np.ones(24, np.float32), "ta"))
        else:
            attr.type = onnx.AttributeProto.SPARSE_TENSORS
            attr.sparse_tensors.append(_sparse("sta"))
        m = _with_nodes([node], "k", {"my.ops": 1})
        a = m.graph.node[0].attribute[0]
        return m, [a.tensors[0] if kind == "tensors-attribute" else a.sparse_tensors[0].values]
    if kind == "if-in-if":
        m = _with_nodes(_nested_if(numpy_helper.from_array(np.ones((2, 3, 4), np.float32), "deep")), "k")
        then = next(a.g for a in m.graph.node[1].attribute if a.name == "then_branch")
        inner_then = next(a.g for a in then.node[1].attribute if a.name == "then_branch")
        return m, [inner_then.initializer[0]]
    assert kind == "function-constant-sparse-value"
    f = helper.make_function("pkg", "F", ["a"], ["b"], [_constant_sparse("k", "fsv"),
                                                      helper.make_node("Add", ["a", "k"], ["b"])],
                             [helper.make_opsetid("", 13)])
    m = _with_nodes([helper.make_node("F", ["x"], ["fy"], domain="pkg")], "fy", {"pkg": 1}, functions=[f])
    return m, [m.functions[0].node[0].attribute[0].sparse_tensor.values]


KINDS = ["initializer", "sparse-initializer-values", "sparse-initializer-indices", "constant-sparse-value",
         "constant-sparse-indices", "constant-value", "tensors-attribute", "sparse-tensors-attribute", "if-in-if",
         "function-constant-sparse-value"]


def _build(tmp_path: Path, kind: str, location: str, offset: str | None = "0", length: str | None = "auto",
           file_bytes: int | None = None) -> Path:
    model, tensors = _variant(kind)
    d = tmp_path / "model"
    d.mkdir(exist_ok=True)
    for t in tensors:
        data = make_external(t, location, offset, None)
        if length is not None:
            entry = t.external_data.add()
            entry.key, entry.value = "length", str(len(data)) if length == "auto" else length
    target = (d / location)
    if file_bytes is not None and ".." not in location and not target.is_symlink():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\0" * file_bytes)
    path = d / "m.onnx"
    path.write_bytes(model.SerializeToString())
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_3_every_reference_outside_the_folder_is_refused_unopened(tmp_path: Path, kind: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"\1" * 4096)
    path = _build(tmp_path, kind, "../outside/secret.bin")
    touched: list[str] = []
    for name in ("open", "stat", "lstat"):
        real = getattr(os, name)

        def spy(p: object, *args: object, _real: Callable[..., object] = real, **kwargs: object) -> object:
            touched.append(os.fsdecode(p) if isinstance(p, (str, bytes, os.PathLike)) else str(p))
            return _real(p, *args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    with pytest.raises(InputError, match="escapes the model's directory"):
        reading.load_model(path)
    monkeypatch.undo()
    assert touched  # the spy saw the loader's calls
    assert not [p for p in touched if os.path.normpath(os.path.join(os.getcwd(), p)).startswith(str(outside))]
    before = snapshot(tmp_path)
    for args in (["convert", path, "-o", tmp_path / "o.onnx", "--target-opset", "11", "--verify-model"],
                 ["inspect", path], ["verify", path, path]):
        code, err = cli(*args)
        assert_refused(code, err, "escapes the model's directory", "../outside/secret.bin")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("setup", "needle"), [
    ("link-out", "escapes the model's directory (the symbolic link 'link' leads out)"),
    ("link-inside", "passes through the symbolic link 'link'"),
    ("file-link-inside", "passes through the symbolic link 'w.bin'"),
])
def test_3_7_symbolic_links_on_the_way(tmp_path: Path, setup: str, needle: str) -> None:
    d = tmp_path / "model"
    (d / "real").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    if setup == "link-out":
        (tmp_path / "outside/w.bin").write_bytes(b"\0" * 4096)
        (d / "link").symlink_to(tmp_path / "outside", target_is_directory=True)
        location = "link/w.bin"
    elif setup == "link-inside":
        (d / "real/w.bin").write_bytes(b"\0" * 4096)
        (d / "link").symlink_to("real", target_is_directory=True)
        location = "link/w.bin"
    else:
        (d / "real/w.bin").write_bytes(b"\0" * 4096)
        (d / "w.bin").symlink_to("real/w.bin")
        location = "w.bin"
    path = _build(tmp_path, "constant-sparse-value", location)
    before = snapshot(tmp_path)
    for args in (["convert", path, "-o", tmp_path / "o.onnx", "--target-opset", "11", "--verify-model"],
                 ["verify", path, path]):
        code, err = cli(*args)
        assert_refused(code, err, needle)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("offset", "length", "needle"), [
    ("-1", "auto", "offset '-1' is not a non-negative integer"),
    ("abc", "auto", "offset 'abc' is not a non-negative integer"),
    ("0", "-96", "length '-96' is not a non-negative integer"),
    ("0", "1e3", "length '1e3' is not a non-negative integer"),
    (" 0", "auto", "offset ' 0' is not a non-negative integer"),
    ("+0", "auto", "offset '+0' is not a non-negative integer"),
    ("\u0663", "auto", "is not a non-negative integer"),  # int() would read ARABIC-INDIC DIGIT THREE as 3
    ("0", "97", "does not match its type and shape (96 bytes)"),
    ("4097", "auto", "past the end of the file"),
    ("4000", "auto", "claims bytes 4000 to 4096"),
    ("4000", None, "claims bytes 4000 to 4096"),
    (str(10**30), "auto", "past the end of the file"),
])
def test_6_7_offsets_and_lengths_strict_and_within_the_file(tmp_path: Path, offset: str, length: str | None,
                                                            needle: str) -> None:
    path = _build(tmp_path, "initializer", "w.bin", offset=offset, length=length, file_bytes=4096 - 96 + 95)
    assert W_BYTES == 96
    before = snapshot(tmp_path)
    for args in (["convert", path, "-o", tmp_path / "o.onnx", "--target-opset", "13"], ["verify", path, path]):
        code, err = cli(*args)
        assert_refused(code, err, needle)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("kind", ["sparse-initializer-indices", "constant-sparse-value",
                                  "function-constant-sparse-value"])
def test_6_ranges_checked_in_every_kind_of_reference(tmp_path: Path, kind: str) -> None:
    path = _build(tmp_path, kind, "w.bin", offset="64", file_bytes=100)
    with pytest.raises(InputError, match="past the end of the file"):
        reading.load_model(path)


def test_6_twelve_tensors_claiming_one_file_load_without_reading_it(tmp_path: Path) -> None:
    """The loading side of case 6: valid overlapping claims are fine, and nothing is read at load."""
    model = _with_nodes([_constant_sparse(f"k{i}", f"s{i}") for i in range(12)], "k0")
    for node in model.graph.node[:12]:
        make_external(node.attribute[0].sparse_tensor.values, "big.bin", "0", "96")
    d = tmp_path / "model"
    d.mkdir()
    (d / "big.bin").write_bytes(b"\0" * 96)
    (d / "m.onnx").write_bytes(model.SerializeToString())
    loaded = reading.load_input(d / "m.onnx")
    assert loaded.data_files == {"big.bin": d / "big.bin"}
    assert all(n.attribute[0].sparse_tensor.values.data_location == TensorProto.EXTERNAL for n in
               loaded.model.graph.node[:12])


# -- 5. inputs that are not regular files ---------------------------------------------------------------
@pytest.mark.parametrize("what", ["fifo", "dev-zero", "fifo-data-file"])
def test_5_special_files_refused_without_reading(tmp_path: Path, what: str) -> None:
    d = tmp_path / "model"
    d.mkdir()
    if what == "fifo":
        os.mkfifo(d / "m.onnx")
        needle = "is a FIFO (named pipe), not an .onnx model"
    elif what == "dev-zero":
        (d / "m.onnx").symlink_to("/dev/zero")
        needle = "is a character device, not an .onnx model"
    else:
        save_with_data(model_with_weights(), d)
        (d / "w.bin").unlink()
        os.mkfifo(d / "w.bin")
        needle = "external data file 'w.bin' is a FIFO (named pipe), not a regular file"
    before = snapshot(tmp_path)
    for args in (["convert", d / "m.onnx", "-o", tmp_path / "o.onnx", "--target-opset", "13"],
                 ["inspect", d / "m.onnx"], ["verify", d / "m.onnx", d / "m.onnx"]):
        proc = run_lowerer(*args, timeout=60)  # a read of the FIFO would hang: the timeout fails the test
        assert_refused(proc.returncode, proc.stderr, needle)
    assert snapshot(tmp_path) == before


# -- 7. internal errors on bad input ---------------------------------------------------------------------
def test_7_names_too_long(model_dir: Path, tmp_path: Path) -> None:
    src = model_dir / "m.onnx"
    out = tmp_path / "out/o.onnx"
    convert_refused(tmp_path, [model_dir / f"{LONG}.onnx", "-o", out, "--target-opset", "13"], "File name too long")
    convert_refused(tmp_path, [src, "-o", tmp_path / f"out/{LONG}.onnx", "--target-opset", "13"],
                    "File name too long")
    convert_refused(tmp_path, [src, "-o", out, "--target-opset", "13", "--external-data", f"{LONG}.bin"],
                    "File name too long")
    (tmp_path / "other").mkdir()
    long_ref = _build(tmp_path / "other", "initializer", f"{LONG}.bin")
    convert_refused(tmp_path, [long_ref, "-o", out, "--target-opset", "13"], "File name too long")


def test_7_verify_seed_minus_one(model_dir: Path, tmp_path: Path) -> None:
    src = model_dir / "m.onnx"
    for args in (["verify", src, src, "--seed", "-1"], ["convert", src, "-o", tmp_path / "o.onnx",
                                                          "--target-opset", "13", "--seed", "-1"]):
        code, err = cli(*args)
        assert_refused(code, err, "--seed")


def test_7_temporary_names_are_unique(model_dir: Path, tmp_path: Path) -> None:
    """Another run's temporary (the old fixed name, or any) is never touched, and ours never collide."""
    out_dir = tmp_path / "out"
    theirs = out_dir / ".w.bin.lowerer-tmp"
    theirs.write_bytes(b"another run's half-copied file")
    code, err = cli("convert", model_dir / "m.onnx", "-o", out_dir / "o.onnx", "--target-opset", "13", "--no-verify")
    assert code == 0, err
    assert theirs.read_bytes() == b"another run's half-copied file"
    assert sorted(p.name for p in out_dir.iterdir()) == [".w.bin.lowerer-tmp", "o.onnx", "w.bin"]
    names = set()
    with Transaction() as tx:
        for _ in range(200):
            fd, tmp = tx.temp_file(out_dir)
            os.close(fd)
            names.add(tmp.name)
    assert len(names) == 200 and sorted(p.name for p in out_dir.iterdir()) == [".w.bin.lowerer-tmp", "o.onnx",
                                                                               "w.bin"]


def test_7_two_conversions_copy_into_one_folder_at_once(model_dir: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    procs = [subprocess.Popen([sys.executable, "-m", "lowerer", "convert", str(model_dir / "m.onnx"), "-o",
                               str(out_dir / f"o{i}.onnx"), "--target-opset", "13", "--no-verify"],
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["o0.onnx", "o1.onnx", "w.bin"]
    assert (out_dir / "w.bin").read_bytes() == (model_dir / "w.bin").read_bytes()


# -- 8 (the part that needs no signal): folders created for data files go when the run fails ---------------
def test_8_created_folders_removed_after_a_failure(model_dir: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real = model_io.saving._stage_bytes
    staged: list[Path] = []

    def disk_full(tx: Transaction, path: Path, payload: bytes) -> None:  # the model, after the data files
        staged.append(path)
        if path.suffix == ".onnx":
            assert any(p.is_dir() for p in (tmp_path / "out").iterdir())  # the folders exist by now
            raise InputError(f"{path}: cannot write it (No space left on device)")
        real(tx, path, payload)

    monkeypatch.setattr(model_io.saving, "_stage_bytes", disk_full)
    convert_refused(tmp_path, [model_dir / "m.onnx", "-o", tmp_path / "out/o.onnx", "--target-opset", "13",
                               "--external-data", "newdir/deeper/d.bin"], "No space left")
    d = tmp_path / "model2"
    d.mkdir()
    src = save_with_data(model_with_weights(), d, location="sub/deeper/w.bin")
    convert_refused(tmp_path, [src, "-o", tmp_path / "out/o.onnx", "--target-opset", "13"], "No space left")
    assert len(staged) == 2


# -- 9. messages: one line, control characters escaped -------------------------------------------------------
def test_9_names_with_newlines_and_escapes(tmp_path: Path) -> None:
    evil = "h\nm\x1b[2J\u202e"
    src = tmp_path / "m.onnx"  # a Hardmax-13 whose input rank is unknown: -> 11 is refused, naming the node
    onnx.save(hidden_rank_model(helper.make_node("Hardmax", ["x"], ["y"], axis=1, name=evil), 13), src)
    code, err = cli("convert", src, "-o", tmp_path / "o.onnx", "--target-opset", "11")
    line = assert_refused(code, err, "\\x1b[2J", "\\u202e")
    assert "\x1b" not in err and "\u202e" not in err and "Hardmax" in line
    with pytest.raises(lowerer.ConversionError) as info:
        lowerer.convert(onnx.load(src), target_opset=11, verify=False)
    assert str(info.value).isprintable()
    bad_path = tmp_path / "no\nsuch\x1b[31m.onnx"
    code, err = cli("convert", bad_path, "-o", tmp_path / "o.onnx", "--target-opset", "13")
    assert_refused(code, err, "no\\nsuch\\x1b[31m.onnx", "no such file")
    code, err = cli("inspect", bad_path)
    assert_refused(code, err, "no such file")
    # the checker's text, too (a node name with an escape, reading an undefined value)
    node = helper.make_node("Relu", ["nowhere"], ["y"], name="r\x1b[2J")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2])],
                              [helper.make_tensor_value_info("y", F, [2])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), src)
    code, err = cli("convert", src, "-o", tmp_path / "o.onnx", "--target-opset", "11")
    assert_refused(code, err, "checker")


def test_9_one_line_escapes_every_control_character() -> None:
    assert one_line("plain text, é, 漢字") == "plain text, é, 漢字"
    assert one_line("a\nb\r\tc\x00\x1b[2J\x7f\u2028\u202e\U000e0001") == \
        "a\\nb\\r\\tc\\x00\\x1b[2J\\x7f\\u2028\\u202e\\U000e0001"
    assert str(InputError("two\nlines")) == "two\\nlines"


# -- 10. bad input accepted --------------------------------------------------------------------------------
def test_10_opset_newer_than_onnx_knows(tmp_path: Path) -> None:
    model = model_with_weights(opset=13)
    model.opset_import[0].version = 10000
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    convert_refused(tmp_path, [src, "-o", tmp_path / "o.onnx", "--target-opset", "13"], "imports opset 10000",
                    "knows versions 1 to")
    with pytest.raises(InputError, match="imports opset 10000"):
        lowerer.convert(model, target_opset=13, verify=False)
    model.opset_import[0].version = 13
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 99))
    with pytest.raises(InputError, match=r"opset 99 of domain 'ai\.onnx\.ml'"):
        lowerer.convert(model, target_opset=11, verify=False)
    del model.opset_import[1]
    model.opset_import.append(helper.make_opsetid("ai.onnx", 11))
    with pytest.raises(InputError, match=r"imports the default domain .* twice"):
        lowerer.convert(model, target_opset=11, verify=False)


def test_10_providers_and_seed_checked_even_without_verification(model_dir: Path, tmp_path: Path) -> None:
    src = model_dir / "m.onnx"
    out = tmp_path / "out/o.onnx"
    convert_refused(tmp_path, [src, "-o", out, "--target-opset", "13", "--providers", "nonsense", "--no-verify"],
                    "unknown execution provider 'nonsense'")
    convert_refused(tmp_path, [src, "-o", out, "--target-opset", "13", "--providers", ",", "--no-verify"],
                    "no execution provider given")
    convert_refused(tmp_path, [src, "-o", out, "--target-opset", "13", "--seed", "-1", "--no-verify"], "--seed")


@pytest.mark.parametrize("what", ["fifo", "link-to-dev-null", "char-device", "report-fifo", "external-data-fifo"])
def test_10_outputs_that_are_special_files(model_dir: Path, tmp_path: Path, what: str) -> None:
    out_dir = tmp_path / "out"
    args: list[object] = [model_dir / "m.onnx", "-o", out_dir / "o.onnx", "--target-opset", "13", "--no-verify"]
    special = out_dir / "special"
    if what == "char-device":
        try:
            os.mknod(special, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # like /dev/null
        except (PermissionError, OSError):
            pytest.skip("cannot make a device node here (not root, or not allowed)")
    elif what == "link-to-dev-null":
        special.symlink_to("/dev/null")
    else:
        os.mkfifo(special)
    if what == "report-fifo":
        args += ["--report", special]
    elif what == "external-data-fifo":
        args += ["--external-data", "special"]
    else:
        args[2] = special
    before = snapshot(tmp_path)
    proc = run_lowerer("convert", *args, timeout=60)
    assert_refused(proc.returncode, proc.stderr, "special")
    assert snapshot(tmp_path) == before
    assert not stat.S_ISREG(os.stat(special).st_mode)


# -- 11. the API ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"decompose": 123}, "decompose must be a name or a list of names"),
    ({"decompose": [None]}, "decompose must list names"),
    ({"decompose": b"hardmax"}, "decompose must be a name"),
    ({"providers": [None]}, "providers must list names"),
    ({"providers": 7}, "providers must be a list of names"),
    ({"providers": ["nonsense"], "verify": False}, "unknown execution provider 'nonsense'"),
    ({"seed": -1}, "seed must be 0 or more"),
    ({"seed": "1"}, "seed must be an integer"),
    ({"seed": 1.5}, "seed must be an integer"),
    ({"seed": True}, "seed must be an integer"),
    ({"verify": "no"}, "verify must be True or False"),
    ({"verify_model": 1}, "verify_model must be True, False or a ModelCheckOptions"),
    ({"progress": 3}, "progress must be a callable"),
    ({"target_opset": "13"}, "target opset must be an integer"),
])
def test_11_api_option_types_are_lowerer_errors(kwargs: dict[str, object], needle: str) -> None:
    options = {"target_opset": 13, "verify": False, **kwargs}
    with pytest.raises(InputError, match=needle):
        lowerer.convert(model_with_weights(), **options)  # type: ignore[arg-type]


def test_11_api_accepts_a_provider_string_and_numpy_seed() -> None:
    result = lowerer.convert(model_with_weights(), target_opset=13, providers="cpu", seed=np.int64(3))
    assert result.report.rewrites[0].status == "verified"


def test_11_save_model_bad_paths_are_lowerer_errors(tmp_path: Path) -> None:
    model = model_with_weights()
    for path, needle in ((tmp_path / "a\0b.onnx", "NUL"), (tmp_path / f"{LONG}.onnx", "File name too long"),
                         (tmp_path / "missing/o.onnx", "does not exist"), (tmp_path, "is a directory")):
        with pytest.raises(InputError, match=needle):
            model_io.save_model(model, path)
    with pytest.raises(InputError, match="external data file"):
        model_io.save_model(model, tmp_path / "o.onnx", external_data="w\0.bin")
    assert list(tmp_path.iterdir()) == []


def test_11_a_model_over_the_protobuf_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over 2 GiB inline: refused up front when saved inline, saved with external_data (limit scaled down)."""
    monkeypatch.setattr(model_io.saving, "PROTOBUF_LIMIT", 2000)  # what _serialize reads
    model = model_with_weights()
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.arange(24 * 100, dtype=np.float32)
                                                                .reshape(2, 3, 400)[:, :, :4].copy(), "W"))
    big = numpy_helper.from_array(np.arange(1024, dtype=np.float32), "big")
    model.graph.initializer.append(big)
    converted = lowerer.convert(model, target_opset=13, verify=False).model
    with pytest.raises(InputError, match=r"over 2 GiB with its weights inline.*store the weights in a data file"):
        model_io.save_model(converted, tmp_path / "o.onnx")
    assert list(tmp_path.iterdir()) == []
    model_io.save_model(converted, tmp_path / "o.onnx", external_data="o.bin")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.bin", "o.onnx"]
    loaded = onnx.load(str(tmp_path / "o.onnx"))
    assert np.array_equal(numpy_helper.to_array(loaded.graph.initializer[1]), np.arange(1024, dtype=np.float32))


def test_11_pwrite_of_a_large_tensor_is_complete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pwrite writes at most about 2 GiB on Linux: the writer loops (shown here with short writes)."""
    real = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, offset: real(fd, bytes(data[:1000]), offset))
    model = model_with_weights()
    model.graph.initializer.append(numpy_helper.from_array(np.arange(5000, dtype=np.float32), "big"))
    model_io.save_model(model, tmp_path / "o.onnx", external_data="o.bin")
    monkeypatch.undo()
    loaded = onnx.load(str(tmp_path / "o.onnx"))
    assert np.array_equal(numpy_helper.to_array(loaded.graph.initializer[1]), np.arange(5000, dtype=np.float32))


# -- 12. models invalid in ways onnx's checker misses, and in-memory models -------------------------------------
def _graph_model(nodes: list[onnx.NodeProto], outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info(o, F, [2, 3]) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


INVALID = {
    "reads-undefined": (_graph_model([helper.make_node("Softmax", ["ghost"], ["y"], name="s")]),
                        "reads 'ghost', which nothing defines before it"),
    "written-twice": (_graph_model([helper.make_node("Relu", ["x"], ["y"], name="a"),
                                    helper.make_node("Softmax", ["x"], ["y"], name="b")]),
                      "writes 'y', which is already defined"),
    "softmax-no-input": (_graph_model([helper.make_node("Softmax", [], ["y"], name="s")]),
                         "has 0 input(s); Softmax-13 takes 1"),
    "required-input-empty": (_graph_model([helper.make_node("Add", ["x", ""], ["y"], name="a")]),
                             "a required one empty"),
    "subgraph-reads-undefined": (_graph_model([
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["c"], ["y"], name="if",
                         then_branch=helper.make_graph([helper.make_node("Softmax", ["later"], ["t"])], "t", [],
                                                       [helper.make_tensor_value_info("t", F, [2, 3])]),
                         else_branch=helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "e", [],
                                                       [helper.make_tensor_value_info("e", F, [2, 3])])),
        helper.make_node("Relu", ["x"], ["later"])], ("y", "later")), "reads 'later'"),
}


@pytest.mark.parametrize("case", list(INVALID))
def test_12_invalid_models_refused_as_proto_ir_and_file(tmp_path: Path, case: str) -> None:
    model, needle = INVALID[case]
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        lowerer.convert(model, target_opset=11, verify=False)
    ir_model = ir.serde.deserialize_model(model) if case not in ("written-twice", "reads-undefined",
                                                                  "subgraph-reads-undefined") else None
    if ir_model is not None:
        with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            lowerer.convert(ir_model, target_opset=11, verify=False)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    convert_refused(tmp_path, [src, "-o", tmp_path / "o.onnx", "--target-opset", "11"], "not a valid ONNX model")


def test_12_onnx_ir_model_reading_a_value_from_nowhere() -> None:
    x = ir.Value(name="x", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    ghost = ir.Value(name="ghost", type=ir.TensorType(ir.DataType.FLOAT), shape=ir.Shape([2, 3]))
    node = ir.Node("", "Add", [x, ghost], num_outputs=1, name="add")
    node.outputs[0].name = "y"
    model = ir.Model(ir.Graph([x], node.outputs, nodes=[node], opset_imports={"": 13}), ir_version=8)
    with pytest.raises(InputError, match="reads 'ghost'"):
        lowerer.convert(model, target_opset=11, verify=False)


def test_12_function_output_nothing_computes(tmp_path: Path) -> None:
    f = helper.make_function("pkg", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["c"])],
                             [helper.make_opsetid("", 13)])
    graph = helper.make_graph([helper.make_node("F", ["x"], ["y"], domain="pkg")], "g",
                              [helper.make_tensor_value_info("x", F, [2, 3])],
                              [helper.make_tensor_value_info("y", F, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("pkg", 1)],
                              functions=[f], ir_version=8)
    onnx.checker.check_model(model)  # onnx's checker lets it pass
    with pytest.raises(InputError, match=r"function pkg\.F has output 'b', which no node of it computes"):
        lowerer.convert(model, target_opset=11, verify=False)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    convert_refused(tmp_path, [src, "-o", tmp_path / "o.onnx", "--target-opset", "11"], "which no node of it computes")


# -- 13. telemetry -------------------------------------------------------------------------------------------
def test_13_onnxruntime_writes_no_telemetry_database(model_dir: Path, tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ("ORT_DISABLE_TELEMETRY", "LOWERER_ORT_TELEMETRY",
                                                            "XDG_CACHE_HOME")}
    control_home, home = tmp_path / "control-home", tmp_path / "home"
    control_home.mkdir()
    home.mkdir()
    # the control: onnxruntime imported plainly writes its database here (skip where it does not)
    subprocess.run([sys.executable, "-c", "import onnxruntime"], env={**base, "HOME": str(control_home)},
                   check=True, timeout=120)
    if not any(control_home.rglob("*")):
        pytest.skip("this onnxruntime writes no telemetry database: nothing to switch off")
    proc = run_lowerer("convert", model_dir / "m.onnx", "-o", tmp_path / "out/o.onnx", "--target-opset", "13",
                       "--verify-model", env={**base, "HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    assert "verified" in proc.stderr
    assert list(home.rglob("*")) == []
