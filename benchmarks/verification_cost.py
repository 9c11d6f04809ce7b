"""What per-rewrite verification costs: conversion time with and without it, as ratios.

A model with N owned-op nodes (ArgMax with select_last_index and Hardmax/Softmax, a few
distinct configurations) is converted 13 -> 11 with ``verify=False`` and ``verify=True``.
A second model, where every one of M ArgMax nodes has its own input shape (no reuse possible),
shows the cost of one distinct check.

Usage: python benchmarks/verification_cost.py [--nodes 6000] [--distinct 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import onnx
from onnx import TensorProto, helper

import lowerer


def build(n: int) -> onnx.ModelProto:
    configs = [("ArgMax", {"axis": 1, "select_last_index": 1}), ("ArgMin", {"axis": -1, "select_last_index": 1}),
               ("Hardmax", {"axis": 1}), ("Softmax", {"axis": 0}), ("LogSoftmax", {"axis": -1}),
               ("ArgMax", {"axis": 0, "keepdims": 0})]
    nodes, outputs = [], []
    for i in range(n):
        op, attrs = configs[i % len(configs)]
        nodes.append(helper.make_node(op, ["x"], [f"y{i}"], name=f"n{i}", **attrs))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.UNDEFINED, None))
    graph = helper.make_graph(nodes, "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 16])],
                              outputs)
    return _typed_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))


def build_distinct(n: int) -> onnx.ModelProto:
    inputs, nodes, outputs = [], [], []
    for i in range(n):
        inputs.append(helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [2, 3 + i % 50, 4 + i // 50]))
        nodes.append(helper.make_node("ArgMax", [f"x{i}"], [f"y{i}"], name=f"n{i}", axis=1, select_last_index=1))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.INT64, None))
    graph = helper.make_graph(nodes, "distinct", inputs, outputs)
    return _typed_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8))


def _typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each graph output's inferred type and shape.

    onnx's full check, which lowerer runs, wants a shape on every graph output.
    """
    done = onnx.shape_inference.infer_shapes(model).graph
    inferred = {vi.name: vi for vi in (*done.value_info, *done.output) if vi.type.tensor_type.HasField("shape")}
    for out in model.graph.output:
        if out.name in inferred:
            out.CopyFrom(inferred[out.name])
    return model


def timed(model: onnx.ModelProto, verify: bool, repeat: int) -> tuple[float, lowerer.Report]:
    times, report = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        report = lowerer.convert(model, target_opset=11, verify=verify).report
        times.append(time.perf_counter() - t0)
    assert report is not None
    return statistics.median(times), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=6000)
    parser.add_argument("--distinct", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    model = build(args.nodes)
    t0 = time.perf_counter()
    import onnxruntime  # noqa: F401 - the import is part of the first verification's cost

    ort_import = time.perf_counter() - t0
    base, _ = timed(model, verify=False, repeat=args.repeat)
    checked, report = timed(model, verify=True, repeat=args.repeat)
    v = report.verification or {}
    statuses = report.summary()["by_status"]
    print(f"nodes: {args.nodes}, rewrites: {len(report)}, statuses: {statuses}")
    print(f"distinct checks: {v.get('distinct_checks')}, cache hits: {v.get('cache_hits')}, "
          f"sessions: {v.get('sessions')}, provider(s): {v.get('providers')}")
    print(f"onnxruntime import (once per process): {ort_import * 1000:.0f} ms")
    print(f"convert without verification: {base * 1000:.0f} ms (median of {args.repeat})")
    print(f"convert with verification:    {checked * 1000:.0f} ms (median of {args.repeat})")
    print(f"verification time inside:     {v.get('seconds', 0) * 1000:.0f} ms")
    print(f"ratio with/without: {checked / base:.2f}x; verification / conversion: {v.get('seconds', 0) / base:.2f}")
    print(f"per rewrite: {(checked - base) / max(len(report), 1) * 1e6:.0f} us extra")
    if args.distinct:
        model = build_distinct(args.distinct)
        base, _ = timed(model, verify=False, repeat=args.repeat)
        checked, report = timed(model, verify=True, repeat=args.repeat)
        v = report.verification or {}
        print(f"\nno reuse: {args.distinct} ArgMax nodes, each its own shape: "
              f"{v.get('distinct_checks')} distinct checks, {v.get('sessions')} sessions")
        print(f"convert without verification: {base * 1000:.0f} ms; with: {checked * 1000:.0f} ms; "
              f"ratio {checked / base:.1f}x; {(checked - base) / max(args.distinct, 1) * 1000:.2f} ms per distinct "
              "check")


if __name__ == "__main__":
    main()
