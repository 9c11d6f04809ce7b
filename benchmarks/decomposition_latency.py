"""onnxruntime CPU latency of the Hardmax and GlobalMaxPool decompositions against the originals.

For each case, the original single-op model and its decomposition (``lowerer.convert(...,
decompose=[...])``) are run in onnxruntime's CPU provider on the same input, first checked
for equal outputs, then timed interleaved (original, rewrite, original, ...) so that machine
noise hits both alike. It prints the median latency of each and the ratio rewrite/original,
for 1 and 2 intra-op threads.

Usage::

    python benchmarks/decomposition_latency.py [--runs 100] [--threads 1 2] [--data normal|ties]
                                               [--no-optimize]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

import lowerer


@dataclass(frozen=True)
class Case:
    """One benchmark case: a single-op model and the decomposition that removes the op."""

    label: str
    op: str
    opset: int
    shape: tuple[int, ...]
    decompose: str
    attrs: dict[str, int]


CASES = (
    Case("Hardmax-13 axis=-1 [64,32000]", "Hardmax", 13, (64, 32000), "hardmax", {"axis": -1}),
    Case("Hardmax-13 axis=1 [2,64,56,56]", "Hardmax", 13, (2, 64, 56, 56), "hardmax", {"axis": 1}),
    Case("Hardmax-11 axis=1 [2,64,56,56]", "Hardmax", 11, (2, 64, 56, 56), "hardmax", {"axis": 1}),
    Case("GlobalMaxPool opset 13 [8,512,28,28]", "GlobalMaxPool", 13, (8, 512, 28, 28), "globalmaxpool", {}),
    Case("GlobalMaxPool opset 18 [8,512,28,28]", "GlobalMaxPool", 18, (8, 512, 28, 28), "globalmaxpool", {}),
)


def _out_shape(case: Case) -> list[int]:
    """The output's shape (onnx's full check, which lowerer runs, wants one on every graph output)."""
    if case.op == "GlobalMaxPool":
        return [*case.shape[:2], *([1] * (len(case.shape) - 2))]
    return list(case.shape)


def build(case: Case) -> tuple[onnx.ModelProto, onnx.ModelProto]:
    """The original model of ``case`` and its decomposition."""
    graph = helper.make_graph(
        [helper.make_node(case.op, ["x"], ["y"], name="target", **case.attrs)], "bench",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(case.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, _out_shape(case))],
    )
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)], ir_version=8)
    rewritten = lowerer.convert(original, decompose=[case.decompose], verify=False).model
    return original, rewritten


def session(model: onnx.ModelProto, threads: int, optimize: bool) -> ort.InferenceSession:
    """A CPU session with ``threads`` intra-op threads."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def make_input(shape: Sequence[int], data: str) -> np.ndarray:
    """Standard-normal floats, or small integers as floats (many ties) for ``data == "ties"``."""
    rng = np.random.default_rng(0)
    if data == "ties":
        return rng.integers(-3, 4, size=tuple(shape)).astype(np.float32)
    return rng.standard_normal(tuple(shape)).astype(np.float32)


def time_pair(original: ort.InferenceSession, rewritten: ort.InferenceSession, x: np.ndarray,
              runs: int) -> tuple[float, float]:
    """Median seconds of each session over ``runs`` interleaved runs (after warm-up)."""
    feed = {"x": x}
    for _ in range(3):
        original.run(None, feed)
        rewritten.run(None, feed)
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(runs):
        # Alternate which goes first so neither always runs on a warmer cache.
        order = ((0, original), (1, rewritten)) if i % 2 == 0 else ((1, rewritten), (0, original))
        for slot, sess in order:
            start = time.perf_counter()
            sess.run(None, feed)
            times[slot].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100, help="interleaved runs per case (>= 50)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--data", choices=["normal", "ties"], default="normal")
    parser.add_argument("--no-optimize", action="store_true", help="disable onnxruntime graph optimizations")
    args = parser.parse_args(argv)
    runs = max(args.runs, 50)
    print(f"onnxruntime {ort.__version__}, CPU; {runs} interleaved runs; data={args.data}; "
          f"graph optimizations {'off' if args.no_optimize else 'on'}")
    print(f"{'case':40s} {'threads':>7s} {'original ms':>12s} {'rewrite ms':>11s} {'ratio':>6s}  rewrite ops")
    worst = 0.0
    for case in CASES:
        original, rewritten = build(case)
        ops = " ".join(n.op_type for n in rewritten.graph.node)
        x = make_input(case.shape, args.data)
        for threads in args.threads:
            s_orig = session(original, threads, not args.no_optimize)
            s_new = session(rewritten, threads, not args.no_optimize)
            if not np.array_equal(s_orig.run(None, {"x": x})[0], s_new.run(None, {"x": x})[0]):
                raise SystemExit(f"{case.label}: the decomposition computed different numbers")
            t_orig, t_new = time_pair(s_orig, s_new, x, runs)
            ratio = t_new / t_orig
            worst = max(worst, ratio)
            print(f"{case.label:40s} {threads:7d} {t_orig * 1e3:12.3f} {t_new * 1e3:11.3f} {ratio:6.2f}  {ops}")
    print(f"worst ratio: {worst:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
