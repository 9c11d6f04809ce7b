"""External data: weights stay unloaded, files appear beside the output, paths are checked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lowerer
from lowerer.core.errors import InputError

DATA = "weights.bin"


def _model(location: str = DATA) -> onnx.ModelProto:
    """Opset 11: y = Softmax-11(MatMul(x, W) + b, axis=1), z = ArgMax(Hardmax(...)); weights external."""
    rng = np.random.default_rng(0)
    w = rng.integers(-3, 4, size=(8, 2, 3, 4)).astype(np.float32).reshape(8, 24)
    b = rng.standard_normal(24).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "B"], ["pre"], name="add"),
        helper.make_node("Reshape", ["pre", "shape"], ["r"], name="reshape"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=1),
        helper.make_node("Hardmax", ["r"], ["h"], name="hardmax", axis=2),
        helper.make_node("ArgMax", ["h"], ["z"], name="argmax", axis=-1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "ext",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2, 3, 4]),
         helper.make_tensor_value_info("z", TensorProto.INT64, [2, 2, 3])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B"),
                     numpy_helper.from_array(np.array([2, 2, 3, 4], dtype=np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=6)
    onnx.external_data_helper.convert_model_to_external_data(model, all_tensors_to_one_file=True,
                                                             location=DATA, size_threshold=200)
    for t in model.graph.initializer:
        for entry in t.external_data:
            if entry.key == "location":
                entry.value = location
    return model


def _save(model: onnx.ModelProto, directory: Path, name: str = "model.onnx") -> Path:
    """Write the model proto as is (its external-data entries must already point at existing files)."""
    path = directory / name
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            t.ClearField("raw_data")
    path.write_bytes(model.SerializeToString())
    return path


@pytest.fixture
def src(tmp_path: Path) -> Path:
    d = tmp_path / "src"
    d.mkdir()
    path = d / "model.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=DATA, size_threshold=200)
    assert (d / DATA).stat().st_size > 0
    return path


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lowerer", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _run(path: Path) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).integers(-2, 3, size=(2, 8)).astype(np.float32)
    return sess.run(None, {"x": x})


def _locations(model: onnx.ModelProto) -> set[str]:
    return {e.value for t in model.graph.initializer for e in t.external_data if e.key == "location"}


def _assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowerer: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_convert_to_another_directory(src: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "converted.onnx"
    proc = _cli("convert", src, "-o", out, "--target-opset", "13")
    assert proc.returncode == 0, proc.stderr
    data_src, data_out = src.parent / DATA, out_dir / DATA
    assert data_out.read_bytes() == data_src.read_bytes()
    # a copy, never a hard link: onnx.load refuses data files with several links ("hardlink attack")
    assert not os.path.samefile(data_src, data_out)
    assert data_src.stat().st_nlink == 1 and data_out.stat().st_nlink == 1
    onnx.load(str(src))
    onnx.load(str(out))
    converted = onnx.load(str(out), load_external_data=False)
    assert _locations(converted) == {DATA}
    assert all(not t.raw_data for t in converted.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    assert converted.opset_import[0].version == 13
    for a, b in zip(_run(src), _run(out), strict=True):
        np.testing.assert_array_equal(a, b)
    onnx.checker.check_model(str(out), full_check=True)


def test_convert_in_place(src: Path) -> None:
    before_data = (src.parent / DATA).read_bytes()
    inode = (src.parent / DATA).stat().st_ino
    want = _run(src)
    proc = _cli("convert", src, "-o", src, "--target-opset", "13", "--decompose", "all")
    assert proc.returncode == 0, proc.stderr
    assert (src.parent / DATA).read_bytes() == before_data
    assert (src.parent / DATA).stat().st_ino == inode  # the weights were not rewritten
    assert sorted(p.name for p in src.parent.iterdir()) == sorted(["model.onnx", DATA])  # no temp files left
    assert onnx.load(str(src), load_external_data=False).opset_import[0].version == 13
    for a, b in zip(want, _run(src), strict=True):
        np.testing.assert_array_equal(a, b)


def test_api_keeps_weights_unloaded(src: Path) -> None:
    result = lowerer.convert(src, target_opset=13, verify=False)
    externals = [t for t in result.model.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert externals and all(not t.raw_data for t in externals)
    assert _locations(result.model) == {DATA}


def test_weights_are_never_read(tmp_path: Path) -> None:
    """Garbage of the right size in the data file: conversion works without looking at it."""
    d = tmp_path / "m"
    d.mkdir()
    model = _model()
    externals = [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    assert len(externals) == 1  # so the whole file is that tensor: its size must match
    size = len(externals[0].raw_data)
    (d / DATA).write_bytes(os.urandom(size))
    path = _save(model, d)
    out = tmp_path / "out.onnx"
    proc = _cli("convert", path, "-o", out, "--target-opset", "13", "--no-verify")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / DATA).read_bytes() == (d / DATA).read_bytes()


@pytest.mark.parametrize("location", ["../outside.bin", "sub/../../outside.bin", "/tmp/outside.bin"])
def test_escaping_location_refused(tmp_path: Path, location: str) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 4096)
    path = _save(_model(location), d)
    out = tmp_path / "o" / "out.onnx"
    out.parent.mkdir()
    proc = _cli("convert", path, "-o", out, "--target-opset", "13")
    _assert_one_line_error(proc, "escapes the model's directory", location)
    assert list(out.parent.iterdir()) == []
    with pytest.raises(InputError, match="escapes"):
        lowerer.convert(path, target_opset=13)


def test_symlink_out_of_directory_refused(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 4096)
    (d / DATA).symlink_to(tmp_path / "secret.bin")
    path = _save(_model(), d)
    out = tmp_path / "out.onnx"
    proc = _cli("convert", path, "-o", out, "--target-opset", "13")
    _assert_one_line_error(proc, "escapes the model's directory")
    assert not out.exists()


def test_missing_data_file(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    path = _save(_model(), d)
    out = tmp_path / "out.onnx"
    proc = _cli("convert", path, "-o", out, "--target-opset", "13")
    _assert_one_line_error(proc, "missing", DATA)
    assert not out.exists()


def test_existing_different_data_file_not_overwritten(src: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / DATA).write_bytes(b"somebody else's weights")
    proc = _cli("convert", src, "-o", out_dir / "converted.onnx", "--target-opset", "13")
    _assert_one_line_error(proc, "already exists")
    assert (out_dir / DATA).read_bytes() == b"somebody else's weights"
    assert not (out_dir / "converted.onnx").exists()
    assert sorted(p.name for p in out_dir.iterdir()) == [DATA]


def test_existing_identical_data_file_is_reused(src: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / DATA).write_bytes((src.parent / DATA).read_bytes())
    proc = _cli("convert", src, "-o", out_dir / "converted.onnx", "--target-opset", "13")
    assert proc.returncode == 0, proc.stderr
    for a, b in zip(_run(src), _run(out_dir / "converted.onnx"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_data_in_subdirectory(tmp_path: Path) -> None:
    d = tmp_path / "m"
    (d / "weights").mkdir(parents=True)
    path = d / "model.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights/w.bin", size_threshold=200)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = _cli("convert", path, "-o", out_dir / "c.onnx", "--target-opset", "13")
    assert proc.returncode == 0, proc.stderr
    assert (out_dir / "weights" / "w.bin").read_bytes() == (d / "weights" / "w.bin").read_bytes()
    for a, b in zip(_run(path), _run(out_dir / "c.onnx"), strict=True):
        np.testing.assert_array_equal(a, b)


def test_output_data_path_escaping_through_symlink_refused(src: Path, tmp_path: Path) -> None:
    """A data file destination must not leave the output directory through a symlinked folder."""
    d = tmp_path / "m2"
    (d / "weights").mkdir(parents=True)
    path = d / "model.onnx"
    onnx.save_model(_model(), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights/w.bin", size_threshold=200)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "weights").symlink_to(elsewhere, target_is_directory=True)
    proc = _cli("convert", path, "-o", out_dir / "c.onnx", "--target-opset", "13")
    _assert_one_line_error(proc, "escapes")
    assert list(elsewhere.iterdir()) == []
    assert not (out_dir / "c.onnx").exists()


# -- --external-data FILE: every weight into one data file -------------------------------------
def _two_file_model(d: Path) -> Path:
    """A model whose weights live in two data files plus one inline tensor of 4 KiB."""
    model = _model()
    big = numpy_helper.from_array(np.arange(1024, dtype=np.float32).reshape(1024), "unused_inline")
    model.graph.initializer.append(big)
    path = d / "model.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=False,
                    size_threshold=2000)
    assert len({e.value for t in onnx.load(str(path), load_external_data=False).graph.initializer
                for e in t.external_data if e.key == "location"}) >= 2
    return path


def test_external_data_option_writes_one_file(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    path = _two_file_model(d)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "c.onnx"
    proc = _cli("convert", path, "-o", out, "--target-opset", "13", "--external-data", "all.bin")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out_dir.iterdir()) == ["all.bin", "c.onnx"]
    converted = onnx.load(str(out), load_external_data=False)
    assert _locations(converted) == {"all.bin"}
    for t in converted.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            assert int(next(e.value for e in t.external_data if e.key == "offset")) % 4096 == 0
    full_in, full_out = onnx.load(str(path)), onnx.load(str(out))
    kept = {t.name: numpy_helper.to_array(t).tobytes() for t in full_out.graph.initializer}
    for t in full_in.graph.initializer:  # every weight kept, byte for byte (rewrites may add constants)
        assert kept[t.name] == numpy_helper.to_array(t).tobytes()
    onnx.checker.check_model(str(out), full_check=True)
    for a, b in zip(_run(path), _run(out), strict=True):
        np.testing.assert_array_equal(a, b)


def test_external_data_option_in_place_and_api(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    path = _two_file_model(d)
    want = _run(path)
    proc = _cli("convert", path, "-o", path, "--target-opset", "13", "--external-data", "w.bin")
    assert proc.returncode == 0, proc.stderr
    assert _locations(onnx.load(str(path), load_external_data=False)) == {"w.bin"}
    for a, b in zip(want, _run(path), strict=True):
        np.testing.assert_array_equal(a, b)
    # the API: save_model(..., external_data=...) from an in-memory model with inline weights
    from lowerer.model_io import save_model

    inline = onnx.load(str(path))  # weights loaded into raw_data
    save_model(inline, tmp_path / "api.onnx", external_data="api.bin")
    assert _locations(onnx.load(str(tmp_path / "api.onnx"), load_external_data=False)) == {"api.bin"}
    for a, b in zip(want, _run(tmp_path / "api.onnx"), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["../w.bin", "/tmp/w.bin", "sub/../../w.bin"])
def test_external_data_option_refuses_escaping_names(src: Path, tmp_path: Path, name: str) -> None:
    out = tmp_path / "o" / "c.onnx"
    out.parent.mkdir()
    proc = _cli("convert", src, "-o", out, "--target-opset", "13", "--external-data", name)
    _assert_one_line_error(proc, "external data file", "stays inside")
    assert list(out.parent.iterdir()) == []
    assert not (tmp_path / "w.bin").exists()


def test_external_data_option_never_overwrites_a_different_file(src: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "w.bin").write_bytes(b"precious")
    proc = _cli("convert", src, "-o", out_dir / "c.onnx", "--target-opset", "13", "--external-data", "w.bin")
    _assert_one_line_error(proc, "already exists")
    assert (out_dir / "w.bin").read_bytes() == b"precious"
    assert sorted(p.name for p in out_dir.iterdir()) == ["w.bin"]


def test_external_constant_input_is_not_read_as_empty(tmp_path: Path) -> None:
    """Regression: onnx's converter read an external ``axes`` initializer as empty.

    ReduceSum-13 takes its axes as an input; converting to 11 moves them into an attribute. With
    the axes in external data (which lowerer never reads) the converter used to write ``axes=[]``:
    a ReduceSum over *every* axis. lowerer reads no external data, so the axes are a run-time value to
    it: the node is taken down with one branch per set of axes it may name (or refused in one line
    where it cannot be); either way it computes what the original does.
    """
    d = tmp_path / "m"
    d.mkdir()
    axes = numpy_helper.from_array(np.array([1], dtype=np.int64), "axes")
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x", "axes"], ["s"], name="rsum", keepdims=1),
         helper.make_node("Softmax", ["s"], ["y"], name="sm", axis=0)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, 4])], [axes],
        value_info=[helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = d / "model.onnx"
    onnx.save_model(onnx.ModelProto.FromString(model.SerializeToString()), str(path), save_as_external_data=True,
                    location="d.bin", size_threshold=0)
    out = tmp_path / "out.onnx"
    proc = _cli("convert", path, "-o", out, "--target-opset", "11")
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    if proc.returncode == 0:  # the axes read at run time, from the data file beside the output
        assert (out.parent / "d.bin").exists()
        # (onnxruntime cannot load the original itself: its shape inference needs the external axes' value)
        inline = onnx.ModelProto.FromString(model.SerializeToString())
        want = ort.InferenceSession(inline.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(
            None, {"x": x})
        got = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(got[0], want[0])
        out.unlink()
    else:
        _assert_one_line_error(proc, "'rsum'", "ReduceSum-13", "cannot be converted to opset 11")
        assert not out.exists()
    # with the axes inline, the same conversion works and computes the same
    onnx.save_model(model, str(d / "inline.onnx"))
    proc = _cli("convert", d / "inline.onnx", "-o", out, "--target-opset", "11")
    assert proc.returncode == 0, proc.stderr
    want = ort.InferenceSession(str(d / "inline.onnx"), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = ort.InferenceSession(str(out), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])


def test_output_onto_the_data_file_is_refused(src: Path, tmp_path: Path) -> None:
    """Regression: ``-o weights.bin`` beside the input replaced the weights with the model."""
    before = (src.parent / DATA).read_bytes()
    proc = _cli("convert", src, "-o", src.parent / DATA, "--target-opset", "13")
    _assert_one_line_error(proc, "would destroy the weights")
    assert (src.parent / DATA).read_bytes() == before
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = _cli("convert", src, "-o", out_dir / DATA, "--target-opset", "13")
    _assert_one_line_error(proc, "would destroy the weights")
    proc = _cli("convert", src, "-o", out_dir / "c.onnx", "--target-opset", "13", "--external-data", "c.onnx")
    _assert_one_line_error(proc, "would destroy the weights")
    assert list(out_dir.iterdir()) == []
