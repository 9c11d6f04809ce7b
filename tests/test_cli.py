"""The ``lowerer`` command line: help, version, convert and inspect, and the bad-input table.

Every bad input must give exit code 2, exactly one line on stderr starting ``lowerer: error:``,
no traceback, no output file, and an existing output file left byte-for-byte (and mtime) intact.
The table runs through click's CliRunner; a few cases also run as a real process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import oracle
import pytest
from _convert_helpers import hidden_rank_model, make_model, ort_run, value_info
from click.testing import CliRunner
from onnx import TensorProto, helper

from lowerer._version import __version__
from lowerer.cli import main

F = TensorProto.FLOAT
MAX = onnx.defs.onnx_opset_version()


def hardmax_model(opset: int = 11, axis: int = 1, domain: str = "") -> onnx.ModelProto:
    node = helper.make_node("Hardmax", ["x"], ["y"], axis=axis, name="hm", domain=domain)
    return make_model([node], [value_info("x", F, [2, 3, 4])], [value_info("y", F, [2, 3, 4])], opset)


def unknown_rank_model() -> onnx.ModelProto:
    """A valid Hardmax-13 axis=1 model whose input rank is unknown: → 11 must be refused."""
    return hidden_rank_model(helper.make_node("Hardmax", ["x"], ["y"], axis=1, name="hm"), 13)


def _write(path: Path, model: onnx.ModelProto) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def _invoke(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


# -- happy paths ---------------------------------------------------------------------------------
def test_help_and_version_in_a_real_process() -> None:
    cases = ((["--help"], "Usage"), (["convert", "--help"], "--target-opset"), (["--version"], __version__))
    # ``python -m lowerer``, and the console script where the install put one beside python.
    script = Path(sys.executable).parent / "lowerer"
    launchers = [[sys.executable, "-m", "lowerer"], *([[str(script)]] if script.exists() else [])]
    for launcher in launchers:
        for args, needle in cases:
            proc = subprocess.run([*launcher, *args], capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            assert needle in proc.stdout
            assert "Traceback" not in proc.stderr


def test_convert_happy_path(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.onnx", hardmax_model(11))
    out, report = tmp_path / "out.onnx", tmp_path / "r.json"
    code, _stdout, stderr = _invoke(["convert", str(src), "-o", str(out), "--target-opset", "13", "--no-verify",
                                     "--report", str(report)])
    assert code == 0, stderr
    assert f"wrote {out}" in stderr
    converted = onnx.load(out)
    onnx.checker.check_model(converted, full_check=True)
    assert {o.domain: o.version for o in converted.opset_import}[""] == 13
    x = np.random.default_rng(0).integers(-2, 3, size=(2, 3, 4)).astype(np.float32)
    assert np.array_equal(ort_run(converted, [{"x": x}])[0][0], oracle.hardmax(x, 1, 11))
    data = json.loads(report.read_text())
    assert data  # a report was written
    assert "Flatten" in json.dumps(data)


def test_output_path_equal_to_input_is_allowed(tmp_path: Path) -> None:
    src = _write(tmp_path / "m.onnx", hardmax_model(13, 0))
    code, _, stderr = _invoke(["convert", str(src), "-o", str(src), "--target-opset", "11", "--no-verify"])
    assert code == 0, stderr
    converted = onnx.load(src)
    assert {o.domain: o.version for o in converted.opset_import}[""] == 11
    assert "Transpose" in [n.op_type for n in converted.graph.node]
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]  # no temporary left behind


def test_inspect_text_and_json(tmp_path: Path) -> None:
    src = _write(tmp_path / "in.onnx", hardmax_model(13, 0))
    code, stdout, stderr = _invoke(["inspect", str(src), "--target-opset", "11"])
    assert code == 0, stderr
    assert "owned" not in stdout
    assert "inputs: 1\n  x  float32  [2, 3, 4]\noutputs: 1\n  y  float32  [2, 3, 4]\nnodes: 1\n" in stdout
    assert "ops: 1 distinct, by count:\n  Hardmax 1\n" in stdout
    assert "would rewrite 1 node(s) (opset 13 -> 11), in 1 group (op, rewrite):" in stdout
    assert "  1 x Hardmax-13  coerced axis  -> Transpose + Hardmax + Transpose" in stdout
    code, stdout, _ = _invoke(["inspect", str(src), "--json"])
    info = json.loads(stdout)
    assert info["default_opset"] == 13 and info["ops"] == {"Hardmax": 1}
    assert info["inputs"] == [{"name": "x", "type": "float32", "dims": [2, 3, 4]}]
    assert info["nodes"] == {"total": 1, "graph": 1, "subgraphs": 0, "functions": 0}
    code, stdout, stderr = _invoke(["inspect", _write(tmp_path / "u.onnx", unknown_rank_model()).as_posix(),
                                    "--target-opset", "11"])
    # a dry run that would be refused exits 2, with the refusal as the one error line
    assert code == 2 and "would refuse" in stderr and "rank of input 'h' is unknown" in stderr
    assert stderr.count("\n") == 1
    code, stdout, _ = _invoke(["inspect", str(src), "--reach"])
    assert code == 0 and "converts to opsets 1 .. " in stdout


# -- the bad-input table ---------------------------------------------------------------------------
def _truncated(tmp: Path) -> Path:
    data = hardmax_model().SerializeToString()
    p = tmp / "trunc.onnx"
    p.write_bytes(data[: len(data) // 2])
    return p


def _not_a_model(tmp: Path) -> Path:
    p = tmp / "tensor.onnx"
    p.write_bytes(onnx.numpy_helper.from_array(np.arange(10, dtype=np.float32), "t").SerializeToString())
    return p


def _fails_checker(tmp: Path) -> Path:
    model = hardmax_model()
    model.graph.node[0].input[0] = "undefined_value"
    return _write(tmp / "bad.onnx", model)


def _random(tmp: Path) -> Path:
    p = tmp / "random.onnx"
    p.write_bytes(np.random.default_rng(0).integers(0, 256, size=4096, dtype=np.uint8).tobytes())
    return p


def _empty(tmp: Path) -> Path:
    p = tmp / "empty.onnx"
    p.write_bytes(b"")
    return p


def _dir(tmp: Path) -> Path:
    p = tmp / "adir.onnx"
    p.mkdir()
    return p


def _good(tmp: Path) -> Path:
    return _write(tmp / "good.onnx", hardmax_model(11))


#: (id, make input, extra args, output dir relative to tmp or None = tmp, stderr must contain)
BAD: list[tuple[str, Callable[[Path], Path], list[str], str | None, str]] = [
    ("missing", lambda t: t / "nope.onnx", ["--target-opset", "13"], None, "no such file"),
    ("directory", _dir, ["--target-opset", "13"], None, "is a directory"),
    ("empty", _empty, ["--target-opset", "13"], None, "empty"),
    ("random-bytes", _random, ["--target-opset", "13"], None, "not an ONNX model"),
    ("truncated", _truncated, ["--target-opset", "13"], None, "not an ONNX model"),
    ("tensor-not-model", _not_a_model, ["--target-opset", "13"], None, "not an ONNX model"),
    ("fails-checker", _fails_checker, ["--target-opset", "13"], None, "checker"),
    ("owned-op-unknown-domain", lambda t: _write(t / "dom.onnx", hardmax_model(domain="my.domain")),
     ["--target-opset", "13"], None, "my.domain"),
    ("target-0", _good, ["--target-opset", "0"], None, "out of range"),
    ("target-too-new", _good, ["--target-opset", str(MAX + 1)], None, "out of range"),
    ("target-negative", _good, ["--target-opset", "-3"], None, "out of range"),
    ("rank-unknown", lambda t: _write(t / "u.onnx", unknown_rank_model()), ["--target-opset", "11"], None,
     "rank of input 'h' is unknown"),
    ("bfloat16-below-13", lambda t: _write(t / "bf.onnx", make_model(
        [helper.make_node("ArgMax", ["x"], ["y"], axis=1)], [value_info("x", TensorProto.BFLOAT16, [2, 3])],
        [value_info("y", TensorProto.INT64, [2, 1])], 13)), ["--target-opset", "12"], None, "bfloat16"),
    ("out-dir-missing", _good, ["--target-opset", "13"], "no/such/dir", "does not exist"),
    ("unknown-decompose", _good, ["--decompose", "hardmax,frobnicate"], None, "frobnicate"),
]


@pytest.mark.parametrize(("make", "args", "out_dir", "needle"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("existing_output", [False, True], ids=["fresh", "existing"])
def test_bad_input(tmp_path: Path, make: Callable[[Path], Path], args: list[str], out_dir: str | None, needle: str,
                   existing_output: bool) -> None:
    src = make(tmp_path)
    out = (tmp_path / out_dir if out_dir else tmp_path) / "out.onnx"
    if existing_output and out.parent.is_dir():
        out.write_bytes(b"precious")
        os.utime(out, (1_000_000_000, 1_000_000_000))
    before = sorted(p.name for p in tmp_path.iterdir())
    code, stdout, stderr = _invoke(["convert", str(src), "-o", str(out), "--no-verify", *args])
    assert code == 2, (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowerer: error:"), stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in stdout + stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created (no temporaries either)
    if existing_output and out.parent.is_dir():
        assert out.read_bytes() == b"precious" and out.stat().st_mtime == 1_000_000_000
    elif out_dir is None:
        assert not out.exists()


def test_output_directory_not_writable(tmp_path: Path) -> None:
    src = _good(tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "out.onnx").write_bytes(b"precious")
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user that chmod does not restrict (root): cannot test a read-only dir")
        code, _, stderr = _invoke(["convert", str(src), "-o", str(locked / "out.onnx"), "--target-opset", "13",
                                   "--no-verify"])
        assert code == 2
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("lowerer: error:") and "not writable" in lines[0]
        assert (locked / "out.onnx").read_bytes() == b"precious"
    finally:
        locked.chmod(0o700)


def test_bad_input_in_a_real_process(tmp_path: Path) -> None:
    src = _write(tmp_path / "u.onnx", unknown_rank_model())
    out = tmp_path / "out.onnx"
    proc = subprocess.run([sys.executable, "-m", "lowerer", "convert", str(src), "-o", str(out), "--target-opset",
                           "11"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lowerer: error:"), proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_inspect_bad_input_exit_2(tmp_path: Path) -> None:
    for path in (tmp_path / "nope.onnx", _random(tmp_path), _fails_checker(tmp_path)):
        code, stdout, stderr = _invoke(["inspect", str(path)])
        assert code == 2, (path, stdout, stderr)
        assert len(stderr.splitlines()) == 1 and stderr.startswith("lowerer: error:")
        assert "Traceback" not in stdout + stderr


def test_top_level_help_says_what_lowerer_does() -> None:
    code, text, _ = _invoke(["--help"])
    assert code == 0
    for words in ("between opsets", "down or up, for every op", "function-body", "lowerings", "--for BACKEND",
                  "verifying every rewrite in", "refused (exit 2)", "inspect", "verify", "targets"):
        assert words in " ".join(text.split()), words
    assert "Hardmax/Softmax/LogSoftmax" not in text
