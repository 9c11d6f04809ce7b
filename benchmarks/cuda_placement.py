"""Does ``--for cuda`` pay? Latency of the original against lowerer's CUDA form, inputs on the host and on the GPU.

Each case is a small model whose op has no CUDA kernel (or a kernel that refuses an attribute):
the original runs that node on the CPU with copies both ways, ``convert(..., for_backend="cuda")``
rewrites it into ops CUDA has. Both are timed in one process, interleaved (original, converted,
original, ...), median of ``--runs`` runs each, after warm-up:

* ``host``: inputs given as numpy arrays (copied to the GPU every run, outputs copied back);
* ``device``: inputs bound on the GPU once with IO binding (``OrtValue.ortvalue_from_numpy(x, "cuda")``),
  outputs left on the GPU.

It prints one row per case and placement (median ms of each, and converted / original: below 1 is
faster). A case whose converted form is slower on device-resident data is a profile entry that
does not pay there: the figure is the source for dropping it or making it conditional.

Run on a machine where onnxruntime-gpu can create CUDA sessions; elsewhere it says why and runs on
the CPU provider (the ratios then say nothing about CUDA). ``--quick``: small sizes, few runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper, numpy_helper

import lowerer

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def _model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
           inits: list[onnx.TensorProto], opset: int) -> onnx.ModelProto:
    return helper.make_model(helper.make_graph(nodes, "case", inputs, outputs, inits),
                             opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def hardmax_head(batch: int, width: int, classes: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """MatMul -> Hardmax -> MatMul (a head choosing one class and reading its embedding)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((width, classes)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((classes, width)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["logits"]),
             helper.make_node("Hardmax", ["logits"], ["onehot"], axis=-1),
             helper.make_node("MatMul", ["onehot", "w2"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [batch, width])],
                   [helper.make_tensor_value_info("y", T.FLOAT, [batch, width])], [w1, w2], 13)
    return model, {"x": rng.standard_normal((batch, width)).astype(np.float32)}


def argmax_last(rows: int, cols: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """ArgMax with select_last_index=1 (the CUDA kernel refuses it)."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("ArgMax", ["x"], ["y"], axis=1, keepdims=0, select_last_index=1)]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [rows, cols])],
                   [helper.make_tensor_value_info("y", T.INT64, [rows])], [], 13)
    return model, {"x": rng.integers(0, 8, (rows, cols)).astype(np.float32)}


def global_max_pool(shape: list[int], opset: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """GlobalMaxPool (lowerer's decomposition: ReduceMax over the spatial axes)."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("GlobalMaxPool", ["x"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, shape)],
                   [helper.make_tensor_value_info("y", T.FLOAT, [*shape[:2], 1, 1])], [], opset)
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def cases(quick: bool) -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray], dict[str, Any]]]:
    """(name, model, feeds, convert options) of every case."""
    gmp = [4, 64, 28, 28] if quick else [32, 256, 56, 56]
    out = [("MatMul->Hardmax->MatMul", *hardmax_head(64 if quick else 512, 256, 1000), {}),
           ("ArgMax select_last_index=1", *argmax_last(512 if quick else 4096, 1000), {}),
           (f"GlobalMaxPool {'x'.join(map(str, gmp))} @13", *global_max_pool(gmp, 13), {"decompose": "globalmaxpool"}),
           (f"GlobalMaxPool {'x'.join(map(str, gmp))} @20", *global_max_pool(gmp, 20),
            {"decompose": "globalmaxpool"})]
    return out


def _timer(ort: Any, model: onnx.ModelProto, feeds: dict[str, np.ndarray], provider: str,
           device: bool) -> Callable[[], float]:
    """A function that runs ``model`` once and returns the seconds it took."""
    from lowerer.verification.providers import session_providers

    so = ort.SessionOptions()
    so.log_severity_level = 3
    providers = session_providers([provider, CPU] if provider != CPU else [CPU])
    session = ort.InferenceSession(model.SerializeToString(), so, providers=providers)
    if not device or provider != CUDA:
        def host() -> float:
            t0 = time.perf_counter()
            session.run(None, feeds)
            return time.perf_counter() - t0
        return host
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, ort.OrtValue.ortvalue_from_numpy(value, "cuda", 0))
    for out in session.get_outputs():
        binding.bind_output(out.name, "cuda")

    def on_device() -> float:
        t0 = time.perf_counter()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        return time.perf_counter() - t0
    return on_device


def measure(runs: int, quick: bool) -> list[dict[str, Any]]:
    """Every case, host and device, original against converted: medians and ratios."""
    from lowerer.verification.ort import load_onnxruntime
    from lowerer.verification.providers import provider_problem

    ort = load_onnxruntime()
    why = provider_problem(CUDA) if CUDA in ort.get_available_providers() else "onnxruntime has no CUDA provider"
    provider = CPU if why else CUDA
    if why:
        print(f"CUDA cannot run here ({why}): timing on {CPU}; the ratios say nothing about CUDA", file=sys.stderr)
    rows = []
    for name, model, feeds, options in cases(quick):
        converted = lowerer.convert(model, for_backend="cuda", verify=False, allow_fallback=True, **options).model
        for device in (False, True):
            if device and provider != CUDA:
                continue
            a, b = _timer(ort, model, feeds, provider, device), _timer(ort, converted, feeds, provider, device)
            for _ in range(3):
                a(), b()
            ta, tb = [], []
            for _ in range(runs):
                ta.append(a())
                tb.append(b())
            ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
            rows.append({"case": name, "inputs": "device" if device else "host", "provider": provider,
                         "original_ms": round(ma, 4), "converted_ms": round(mb, 4), "ratio": round(mb / ma, 3)})
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Print the table (and ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = measure(5 if args.quick else args.runs, args.quick)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'case':<34} {'inputs':<7} {'original ms':>12} {'--for cuda ms':>14} {'ratio':>7}")
        for r in rows:
            print(f"{r['case']:<34} {r['inputs']:<7} {r['original_ms']:>12.3f} {r['converted_ms']:>14.3f} "
                  f"{r['ratio']:>7.2f}")
    return rows


if __name__ == "__main__":
    main()
