"""Peak memory of converting a model held in memory whose inline weights pass protobuf's 2 GB limit.

Builds, in this process, an opset-11 ``onnx.ModelProto`` with one inline float initializer of
``--gb`` GB (2.2 by default) added to the input, and a Hardmax node that converting to opset 13
rewrites. Then ``lowerer.convert(model, target_opset=13, verify=False)`` runs, with the process's
peak RSS reset just before it (``/proc/self/clear_refs``, Linux). It prints the model's size, the
RSS before, the peak during the conversion, and peak / size (absolute, and the growth over the
RSS before), and checks that the result holds the weight unchanged.

The result must hold its own copy of the weight (the caller's model is not modified), so the
absolute peak cannot be below about 2x the weight: the growth is the conversion's own cost.

With ``--save DIR`` the result is then saved with ``lowerer.model_io.save_model(..., external_data=...)``
into DIR (the weight written from its tensor to the data file, never copied whole), and the peak of
the save is given too. Run it under an address-space limit to check that it fits, e.g.
``(ulimit -v $((6 << 20)); python benchmarks/big_in_memory.py --save /tmp/big)``: a conversion or save
that cannot fit must end in a LowererError, never a bare MemoryError.

Usage::

    python benchmarks/big_in_memory.py [--gb 2.2] [--json] [--save DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper


def _status(key: str) -> int:
    """A ``/proc/self/status`` figure in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) << 10
    raise RuntimeError(f"no {key} in /proc/self/status")


def big_model(size: int) -> onnx.ModelProto:
    """An opset-11 model: y = Hardmax(x) + w, with ``w`` an inline float initializer of ``size`` bytes."""
    n = size // 4
    nodes = [helper.make_node("Hardmax", ["x"], ["h"], axis=0, name="hm"), helper.make_node("Add", ["h", "w"], ["y"])]
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7)
    weight = model.graph.initializer.add()  # filled in place: protobuf copies a message over 2 GB by serializing
    weight.name, weight.data_type = "w", TensorProto.FLOAT
    weight.dims.append(n)
    weight.raw_data = np.arange(n, dtype=np.float32).tobytes()  # the bytes object is freed at once
    return model


def measure(gb: float, save: str | None = None) -> dict[str, float]:
    """Build the model, convert it (and save it with external data into ``save``), and return the figures."""
    import lowerer

    size = int(gb * 1e9) // 4 * 4
    model = big_model(size)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak RSS (VmHWM) to the current RSS
    before = _status("VmRSS")
    start = time.perf_counter()
    result = lowerer.convert(model, target_opset=13, verify=False)
    seconds = time.perf_counter() - start
    peak = _status("VmHWM")
    out = next(t for t in result.model.graph.initializer if t.name == "w")
    same = out.data_location == TensorProto.DEFAULT and list(out.dims) == [size // 4]
    ops = [n.op_type for n in result.model.graph.node]
    saved: dict[str, float] = {}
    if save is not None:
        from pathlib import Path

        from lowerer.model_io import save_model

        Path(save).mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        save_model(result.model, Path(save) / "big.onnx", external_data="big.onnx.data")
        saved = {"save_seconds": time.perf_counter() - start, "save_peak": _status("VmHWM"),
                 "data_bytes": float((Path(save) / "big.onnx.data").stat().st_size)}
    return {**saved, "size": size, "rss_before": before, "peak": peak, "seconds": seconds,
            "peak_over_size": peak / size, "growth_over_size": (peak - before) / size,
            "weight_kept": float(same), "opset": float(result.model.opset_import[0].version),
            "rewritten": float(ops != ["Hardmax", "Add"] or result.model.opset_import[0].version == 13)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.2, help="size of the inline weight in GB (default 2.2)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--save", default=None, metavar="DIR",
                        help="also save the result with its weight in a data file in DIR")
    args = parser.parse_args()
    figures = measure(args.gb, args.save)
    if args.json:
        print(json.dumps(figures))
        return
    gib = 1 << 30
    print(f"model {figures['size'] / gib:.2f} GiB; RSS before {figures['rss_before'] / gib:.2f} GiB; peak during "
          f"convert {figures['peak'] / gib:.2f} GiB; {figures['seconds']:.1f} s")
    print(f"peak RSS / model size: {figures['peak_over_size']:.2f} (growth during convert / size: "
          f"{figures['growth_over_size']:.2f}); weight kept: {bool(figures['weight_kept'])}")
    if "save_seconds" in figures:
        print(f"saved with external data in {figures['save_seconds']:.1f} s; peak so far "
              f"{figures['save_peak'] / gib:.2f} GiB; data file {figures['data_bytes'] / gib:.2f} GiB")
    sys.exit(0 if figures["weight_kept"] else 1)


if __name__ == "__main__":
    main()
