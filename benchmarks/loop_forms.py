"""What the Loop-over-updates form costs in onnxruntime CPU (the README's lowering list states it).

A GNN-like model at opset 18 (MatMul, Gather by ``src``, then ScatterND(add) and/or ScatterElements(max) on ``dst``,
indices given at run time) is converted to 13 (each scatter becomes a Loop over its updates) and both run in
onnxruntime on one thread, median of repeated runs; outputs are checked equal. Run:
``python benchmarks/loop_forms.py`` (about a minute).
"""

from __future__ import annotations

import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer


def gnn(nodes: int, edges: int, feat: int = 16, opset: int = 18, form: str = "both") -> onnx.ModelProto:
    """The model: ``form`` sum (ScatterND add), max (ScatterElements max) or both."""
    vi = helper.make_tensor_value_info
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((feat, feat)).astype(np.float32), "w"),
             numpy_helper.from_array(np.zeros((nodes, feat), np.float32), "zeros"),
             numpy_helper.from_array(np.full((nodes, feat), -1e30, np.float32), "ninf"),
             numpy_helper.from_array(np.array([-1], np.int64), "last"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    ns = [helper.make_node("MatMul", ["x", "w"], ["h"], name="lin"),
          helper.make_node("Gather", ["h", "src"], ["msg"], axis=0, name="gather_src")]
    if form in ("sum", "both"):
        ns += [helper.make_node("Unsqueeze", ["dst", "last"], ["dst_nd"], name="dst_nd"),
               helper.make_node("ScatterND", ["zeros", "dst_nd", "msg"], ["agg_sum"], reduction="add",
                                name="scatter_sum")]
    if form in ("max", "both"):
        ns += [helper.make_node("Unsqueeze", ["dst", "ax"], ["dst_col"], name="dst_col"),
               helper.make_node("Shape", ["msg"], ["msg_shape"], name="msg_shape"),
               helper.make_node("Expand", ["dst_col", "msg_shape"], ["dst_full"], name="dst_full"),
               helper.make_node("ScatterElements", ["ninf", "dst_full", "msg"], ["agg_max"], axis=0,
                                reduction="max", name="scatter_max")]
    if form == "both":
        ns.append(helper.make_node("Add", ["agg_sum", "agg_max"], ["y"], name="combine"))
    else:
        ns.append(helper.make_node("Identity", ["agg_sum" if form == "sum" else "agg_max"], ["y"], name="out"))
    g = helper.make_graph(ns, "gnn", [vi("x", T.FLOAT, [nodes, feat]), vi("src", T.INT64, [edges]),
                                      vi("dst", T.INT64, [edges])],
                          [vi("y", T.FLOAT, [nodes, feat])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model, full_check=True)
    return model


def bench(model: onnx.ModelProto, feeds: dict[str, np.ndarray], reps: int) -> tuple[float, list[np.ndarray]]:
    """Median milliseconds of one run, and the outputs."""
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.log_severity_level = 1, 3
    session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out = session.run(None, feeds)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3, out


def main() -> None:
    """Print the cost factor per form and size."""
    for form in ("sum", "max", "both"):
        for nodes, edges in ((10, 30), (200, 1000)):
            model = gnn(nodes, edges, form=form)
            rng = np.random.default_rng(1)
            feeds = {"x": rng.standard_normal((nodes, 16)).astype(np.float32),
                     "src": rng.integers(0, nodes, edges), "dst": rng.integers(0, nodes, edges)}
            base, want = bench(model, feeds, 2000)
            result = lowerer.convert(model, target_opset=13, verify=False)
            loops = [e["trips"] for e in result.report.summary()["loops"]]
            slow, got = bench(result.model, feeds, 20 if edges > 100 else 100)
            same = all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
            print(f"{form}: {nodes} nodes / {edges} edges, loop trips {loops}: {base:.3f} ms -> {slow:.3f} ms "
                  f"({slow / base:.0f}x), equal: {same}")
    print(f"onnxruntime {ort.__version__}")


if __name__ == "__main__":
    main()
