"""Where OpenVINO's ArgMax/ArgMin/Hardmax break ties: every row of 0/1 (0..2 up to 8) of each length, per release.

The measurement behind ``innermost_size_at_least`` in ``lowerer/backends/openvino.json``: ArgMax-1/13,
ArgMin-1/13, Hardmax-1/13 and ArgMax-12/ArgMin-13 with ``select_last_index=1`` along the last axis over
*every* row of zeros and ones of length n (every row of 0, 1, 2 for n <= 8), n = 2..16, and along a
non-last axis (first, middle with 1, 2 or 8 inner elements) of length 15, 16, 64 and 100 on random rows
of zeros and ones; each output compared exactly with numpy's first (or last) extremum, the ONNX answer.
Run in each release's venv (``benchmarks/backend_matrix.py``'s recipes)::

    python benchmarks/openvino_ties.py --releases openvino-2023.0.2,openvino-2024.0.0

Prints, per release, the cases that are not right (2026-12-02: on 2023.0.2 and 2024.0.0, 224 of 232 right:
the last axis of 16 elements wrong for all eight, 2..15 right; every non-last axis right).
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backend_matrix import RELEASES, ensure_venv

#: (op, version, select_last_index)
OPS = (("ArgMax", 1, 0), ("ArgMax", 13, 0), ("ArgMin", 1, 0), ("ArgMin", 13, 0), ("Hardmax", 1, 0),
       ("Hardmax", 13, 0), ("ArgMax", 12, 1), ("ArgMin", 13, 1))

#: Run in the release's venv: each case compiled on OpenVINO's CPU plugin and compared with its expected output.
RUNNER = """
import json, sys, numpy as np
try:
    from openvino import Core
except ImportError:
    from openvino.runtime import Core
core, out, folder = Core(), {}, sys.argv[1]
for name in json.load(open(folder + "/cases.json")):
    data = np.load(f"{folder}/{name}.npz")
    try:
        compiled = core.compile_model(f"{folder}/{name}.onnx", "CPU")
        got = np.asarray(compiled([data["x"]])[compiled.output(0)])
        out[name] = "right" if np.array_equal(got.astype(data["ref"].dtype), data["ref"]) else "wrong"
    except Exception as e:
        out[name] = "fails: " + str(e).splitlines()[0][:80]
print(json.dumps(out))
"""


def _model(op: str, opset: int, shape: tuple[int, ...], axis: int, last: int) -> onnx.ModelProto:
    attrs = {"axis": axis, **({} if op == "Hardmax" else {"keepdims": 1}), **({"select_last_index": 1} if last else {})}
    out = TensorProto.FLOAT if op == "Hardmax" else TensorProto.INT64
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "ties",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", out, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _expected(op: str, x: np.ndarray, axis: int, last: int) -> np.ndarray:
    if op == "Hardmax":
        ref = np.zeros_like(x)
        np.put_along_axis(ref, np.expand_dims(np.argmax(x, axis=axis), axis), 1.0, axis)
        return ref
    find = np.argmax if op == "ArgMax" else np.argmin
    index = x.shape[axis] - 1 - find(np.flip(x, axis), axis=axis) if last else find(x, axis=axis)
    return np.expand_dims(index, axis).astype(np.int64)


def _inputs() -> list[tuple[str, np.ndarray, int]]:
    """(label, input, axis): every row along the last axis, random rows along a non-last axis."""
    cases = []
    for n in range(2, 17):
        rows = (np.array(list(itertools.product((0.0, 1.0, 2.0), repeat=n))) if n <= 8 else
                (np.arange(2 ** n)[:, None] >> np.arange(n)[None, :]) & 1)
        cases.append((f"last-n{n}-every{len(rows)}", rows.astype(np.float32), 1))
    rng = np.random.default_rng(0)
    for n in (15, 16, 64, 100):
        for where, shape in (("first", (n, 64)), ("mid1", (8, n, 1)), ("mid2", (8, n, 2)), ("mid8", (8, n, 8))):
            cases.append((f"{where}-n{n}", rng.integers(0, 2, size=shape).astype(np.float32), 0 if where == "first"
                          else 1))
    return cases


def write_cases(folder: Path) -> list[str]:
    """Each (op, version, input) as a model, its input and its expected output in ``folder``."""
    names = []
    for (op, opset, last), (label, x, axis) in itertools.product(OPS, _inputs()):
        if op == "Hardmax" and opset < 13 and not label.startswith("last"):
            continue  # Hardmax-1 coerces to rows from the axis on: always the innermost
        name = f"{op}-{opset}{'-select_last_index1' if last else ''}-{label}"
        onnx.save(_model(op, opset, x.shape, axis, last), str(folder / f"{name}.onnx"))
        np.savez(folder / f"{name}.npz", x=x, ref=_expected(op, x, axis, last))
        names.append(name)
    (folder / "cases.json").write_text(json.dumps(names), encoding="utf-8")
    return names


def main(argv: list[str] | None = None) -> int:
    """Run every case on each release named; print the cases that are not right."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--releases", default="openvino-2023.0.2,openvino-2024.0.0")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lowerer" / "backend-venvs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        names = write_cases(Path(tmp))
        for release in args.releases.split(","):
            python = ensure_venv(args.cache, release, RELEASES[release])
            done = subprocess.run([python, "-c", RUNNER, tmp], capture_output=True, text=True, check=True)
            results = json.loads(done.stdout.strip().splitlines()[-1])
            bad = {k: v for k, v in results.items() if v != "right"}
            print(f"{release}: {len(names) - len(bad)} of {len(names)} right; not right: "
                  + (", ".join(f"{k} ({v})" for k, v in sorted(bad.items())) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
