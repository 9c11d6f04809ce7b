"""Helpers for the hostile-input tests: small models with external data, file-system snapshots, checks."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "W_BYTES",
    "assert_refused",
    "make_external",
    "model_with_weights",
    "run_lowerer",
    "save_with_data",
    "snapshot",
]

F = TensorProto.FLOAT
#: Bytes of the weight ``W`` of :func:`model_with_weights` (float32 [2, 3, 4]).
W_BYTES = 96


def model_with_weights(opset: int = 11, name: str = "hm") -> onnx.ModelProto:
    """y = Hardmax(x + W, axis=1) on float [2, 3, 4]: one owned op, one weight (inline)."""
    w = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 5, "W")
    nodes = [helper.make_node("Add", ["x", "W"], ["s"], name="add"),
             helper.make_node("Hardmax", ["s"], ["y"], axis=1, name=name)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", F, [2, 3, 4])], initializer=[w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7)


def make_external(tensor: TensorProto, location: str, offset: str | None = None, length: str | None = None) -> bytes:
    """Turn ``tensor`` into an external reference (entries given verbatim); return the bytes it held."""
    data = numpy_helper.to_array(tensor).tobytes()
    tensor.ClearField("raw_data")
    for field in ("float_data", "int32_data", "int64_data", "double_data"):
        tensor.ClearField(field)
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return data


def save_with_data(model: onnx.ModelProto, directory: Path, location: str = "w.bin", name: str = "m.onnx") -> Path:
    """Save ``model`` with ``W`` in the data file ``location`` (folders created); return the model's path."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    w = next(t for t in model.graph.initializer if t.name == "W")
    data = make_external(w, location, "0", str(W_BYTES))
    (directory / location).parent.mkdir(parents=True, exist_ok=True)
    (directory / location).write_bytes(data)
    path = directory / name
    path.write_bytes(model.SerializeToString())
    return path


def snapshot(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` (hidden ones too): kind, bytes and mtime of files, link targets."""
    out: dict[str, tuple[object, ...]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", p.read_bytes(), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("special", stat.S_IFMT(st.st_mode))
    return out


def assert_refused(code: int, stderr: str, *needles: str, exit_code: int = 2) -> str:
    """One ``lowerer: error:`` line (printable), the exit code, no traceback; returns the line."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("lowerer: error: "), stderr
    assert line.isprintable(), repr(line)
    assert code == exit_code, (code, stderr)
    for needle in needles:
        assert needle in line, (needle, line)
    return line


def run_lowerer(*args: object, timeout: float = 120, env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m lowerer ARGS`` in a real process (for FIFOs and devices: a hang becomes a timeout)."""
    return subprocess.run([sys.executable, "-m", "lowerer", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)
