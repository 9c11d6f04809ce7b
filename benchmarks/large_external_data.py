"""A model of more than 2 GB converts because its weights are never loaded.

Generates, in a temporary directory, an opset-11 model whose initializers (``--gib`` GiB, 3 by
default) live in one external data file, with owned ops (Softmax, LogSoftmax, Hardmax, ArgMax,
ArgMin, GlobalMaxPool) in the main graph, in If/Loop bodies (nested) and in model-local
functions (one calling another). Then it measures whole processes (wall time, and each child's
own peak RSS from ``os.wait4``, i.e. ``getrusage(RUSAGE_CHILDREN).ru_maxrss`` for that child):

* ``lowerer (beside input)``: ``python -m lowerer convert IN -o OUT --target-opset 13
  --decompose all`` (per-rewrite verification on), OUT in IN's directory: no weight is copied;
* ``lowerer (other dir)``: the same with OUT in another directory: the data file is copied
  there (``copy_file_range``);
* ``onnx load+save``: ``onnx.load(IN, load_external_data=False)`` + ``onnx.save`` (the floor of
  any converter that keeps the weights external);
* ``lowerer --external-data``: the same into another directory, all weights written into one
  new data file (byte ranges copied with ``copy_file_range``);
* ``cp``: ``cp`` of the data file (what placing the weights beside another output costs).

Each variant runs ``--repeat`` times, interleaved in a rotating order, after an ``os.sync()`` (so that no step pays
for the write-back of the one before); the median wall time and the largest peak RSS are shown.

It prints each figure, the ratios against the baselines, and checks the targets (peak RSS
< 300 MiB, no weight copy beside the input, the output's data bytes identical). Everything is
deleted afterwards (``--keep`` keeps it). This is a benchmark, not a test.

Usage::

    python benchmarks/large_external_data.py [--gib 3] [--repeat 3] [--dir /var/tmp] [--sparse] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MIB = 1 << 20
GIB = 1 << 30
DATA = "weights.bin"
ROWS, COLS = 4096, 8192  # one weight: 4096 x 8192 float32 = 128 MiB

GENERATE = r'''
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper

out, n_weights, rows, cols, data_name = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
vi = helper.make_tensor_value_info
N = 4  # rows gathered per weight (static: the Hardmax decomposition cannot yet take empty dynamic rows)
nbytes = rows * cols * 4

def weight(i):
    t = TensorProto(name=f"W{i}", data_type=F, dims=[rows, cols])
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", data_name), ("offset", str(i * nbytes)), ("length", str(nbytes))):
        e = t.external_data.add(); e.key, e.value = k, v
    return t

# functions: Head(a) = ArgMax(Inner(a)), LogSoftmax(a, axis=0); Inner(a) = Hardmax(a, axis=1)
inner = helper.make_function("pkg", "Inner", ["a"], ["h"], [helper.make_node("Hardmax", ["a"], ["h"], axis=1)],
                             [helper.make_opsetid("", 11)])
head = helper.make_function("pkg", "Head", ["a"], ["am", "ls"], [
    helper.make_node("Inner", ["a"], ["h"], domain="pkg"),
    helper.make_node("ArgMax", ["h"], ["am"], axis=1, keepdims=0),
    helper.make_node("LogSoftmax", ["a"], ["ls"], axis=0)],
    [helper.make_opsetid("", 11), helper.make_opsetid("pkg", 1)])
for f in (inner, head):
    f.value_info.append(vi("a", F, [N, cols]))

nodes, outputs = [], []
for i in range(n_weights):
    g = f"g{i}"
    nodes.append(helper.make_node("Gather", [f"W{i}", "ids"], [g], name=f"gather{i}", axis=0))
    nodes.append(helper.make_node("Softmax", [g], [f"sm{i}"], name=f"softmax{i}", axis=0))
    nodes.append(helper.make_node("Head", [g], [f"am{i}", f"ls{i}"], name=f"head{i}", domain="pkg"))
    nodes.append(helper.make_node("Unsqueeze", [g], [f"u{i}"], name=f"unsq{i}", axes=[0]))
    nodes.append(helper.make_node("GlobalMaxPool", [f"u{i}"], [f"gmp{i}"], name=f"gmp{i}"))
    outputs += [vi(f"sm{i}", F, [N, cols]), vi(f"am{i}", I64, [N]), vi(f"ls{i}", F, [N, cols]),
                vi(f"gmp{i}", F, [1, N, 1])]
# control flow: If(c) { Loop(trip) { Hardmax(g0, axis=0), If(c) { ArgMin(g0, axis=-1) } } else { ArgMax(g1) }
inner_then = helper.make_graph([helper.make_node("ArgMin", ["g0"], ["amin"], name="deep_argmin", axis=-1, keepdims=0)],
                               "inner_then", [], [vi("amin", I64, [N])])
inner_else = helper.make_graph([helper.make_node("ArgMax", ["g0"], ["amax"], name="deep_argmax", axis=-1, keepdims=0)],
                               "inner_else", [], [vi("amax", I64, [N])])
loop_body = helper.make_graph([
    helper.make_node("Hardmax", ["g0"], ["loop_hm"], name="loop_hardmax", axis=0),
    helper.make_node("If", ["c"], ["loop_arg"], name="inner_if", then_branch=inner_then, else_branch=inner_else),
    helper.make_node("Identity", ["cond_in"], ["cond_out"], name="loop_cond")],
    "loop_body", [vi("it", I64, []), vi("cond_in", B, []), vi("carry", F, [1])],
    [vi("cond_out", B, []), vi("carry", F, [1]), vi("loop_hm", F, [N, cols]), vi("loop_arg", I64, [N])])
then_g = helper.make_graph([helper.make_node("Loop", ["trip", "", "acc"], ["carry_out", "hm_seq", "arg_seq"],
                                             name="the_loop", body=loop_body)],
                           "then", [], [vi("hm_seq", F, [None, N, cols]), vi("arg_seq", I64, [None, N])])
else_g = helper.make_graph([
    helper.make_node("Hardmax", ["g1"], ["e_hm"], name="else_hardmax", axis=1),
    helper.make_node("Unsqueeze", ["e_hm"], ["e_hm3"], name="else_unsq", axes=[0]),
    helper.make_node("ArgMax", ["g1"], ["e_am"], name="else_argmax", axis=-1, keepdims=0),
    helper.make_node("Unsqueeze", ["e_am"], ["e_am2"], name="else_unsq2", axes=[0])],
    "else", [], [vi("e_hm3", F, [None, N, cols]), vi("e_am2", I64, [None, N])])
nodes.append(helper.make_node("If", ["c"], ["cf_hm", "cf_arg"], name="the_if", then_branch=then_g, else_branch=else_g))
outputs += [vi("cf_hm", F, [None, N, cols]), vi("cf_arg", I64, [None, N])]
graph = helper.make_graph(nodes, "large", [vi("ids", I64, [N]), vi("c", B, []), vi("trip", I64, []),
                                           vi("acc", F, [1])], outputs,
                          initializer=[weight(i) for i in range(n_weights)])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("pkg", 1)],
                          functions=[inner, head], ir_version=8, producer_name="large_external_data")
with open(out, "wb") as f:
    f.write(model.SerializeToString())
'''

FLOOR = ("import onnx, sys; onnx.save(onnx.load(sys.argv[1], load_external_data=False), sys.argv[2])")


def measure(cmd: list[str]) -> tuple[float, int, int]:
    """Run ``cmd``; its wall time (s), its own peak RSS (bytes, from wait4) and exit status."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{err}")
    return wall, usage.ru_maxrss * 1024, proc.returncode


def write_data(path: Path, size: int, sparse: bool) -> float:
    """The weights file: real bytes in 4 MiB chunks (default), or one sparse hole."""
    start = time.perf_counter()
    with open(path, "wb") as f:
        if sparse:
            f.truncate(size)
        else:
            block = os.urandom(4 * MIB)  # small: a child's peak RSS counts what it inherits at fork
            for done in range(0, size, len(block)):
                f.write(block[: min(len(block), size - done)])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=3.0, help="GiB of external weights (default 3)")
    parser.add_argument("--dir", default=None, help="where to make the temporary directory")
    parser.add_argument("--sparse", action="store_true", help="write the data file as a sparse hole")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument("--no-verify", action="store_true", help="convert with --no-verify")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each variant, interleaved (median)")
    args = parser.parse_args()

    weight_bytes = ROWS * COLS * 4
    n_weights = max(2, -(-int(args.gib * GIB) // weight_bytes))
    total = n_weights * weight_bytes
    work = Path(tempfile.mkdtemp(prefix="lowerer-large-", dir=args.dir))
    try:
        src_dir, other = work / "src", work / "other"
        src_dir.mkdir()
        other.mkdir()
        model = src_dir / "model.onnx"
        print(f"generating {n_weights} weights of {weight_bytes // MIB} MiB = {total / GIB:.2f} GiB in {work}")
        gen = write_data(src_dir / DATA, total, args.sparse)
        subprocess.run([sys.executable, "-c", GENERATE, str(model), str(n_weights), str(ROWS), str(COLS), DATA],
                       check=True)
        print(f"  data file written in {gen:.1f} s; model proto {model.stat().st_size / 1024:.1f} KiB")
        verify = ["--no-verify"] if args.no_verify else []
        lowerer = [sys.executable, "-m", "lowerer", "convert", str(model), "--target-opset", "13",
                   "--decompose", "all", *verify]
        single = "all_weights.bin"
        variants: dict[str, list[str]] = {
            "lowerer (beside input)": [*lowerer, "-o", str(src_dir / "converted.onnx")],
            "lowerer (other dir)": [*lowerer, "-o", str(other / "converted.onnx")],
            "lowerer --external-data": [*lowerer, "-o", str(other / "one.onnx"), "--external-data", single],
            "onnx load+save": [sys.executable, "-c", FLOOR, str(model), str(work / "floor.onnx")],
            "cp (data file)": ["cp", str(src_dir / DATA), str(other / DATA)],
        }
        walls: dict[str, list[float]] = {name: [] for name in variants}
        rsss: dict[str, int] = dict.fromkeys(variants, 0)
        inode = (src_dir / DATA).stat().st_ino
        beside_untouched = identical = one_file_ok = True
        order = list(variants)
        for i in range(args.repeat):
            for name in order[i % len(order):] + order[:i % len(order)]:  # rotated: no fixed neighbours
                cmd = variants[name]
                for leftover in other.iterdir():
                    leftover.unlink()
                os.sync()  # no dirty pages left from the step before to slow this one down
                wall, rss, _ = measure(cmd)
                walls[name].append(wall)
                rsss[name] = max(rsss[name], rss)
                if name == "lowerer (beside input)":
                    beside_untouched &= (src_dir / DATA).stat().st_ino == inode and sorted(
                        p.name for p in src_dir.iterdir()) == sorted([DATA, "model.onnx", "converted.onnx"])
                elif name == "lowerer (other dir)":
                    cmp = subprocess.run(["cmp", str(src_dir / DATA), str(other / DATA)], capture_output=True)
                    identical &= cmp.returncode == 0
                elif name == "lowerer --external-data":
                    one_file_ok &= sorted(p.name for p in other.iterdir()) == sorted(["one.onnx", single])
        results = {name: (statistics.median(w), rsss[name]) for name, w in walls.items()}

        check = subprocess.run([sys.executable, "-c", (
            "import onnx, sys; m = onnx.load(sys.argv[1], load_external_data=False); "
            "print(m.opset_import[0].version, len(m.functions), sum(1 for n in m.graph.node), "
            "all(not t.raw_data for t in m.graph.initializer))"), str(src_dir / "converted.onnx")],
            capture_output=True, text=True, check=True)

        print(f"\n{'variant (median of ' + str(args.repeat) + ')':<26}{'wall s':>9}{'peak RSS MiB':>14}   runs")
        for name, (wall, rss) in results.items():
            runs = " ".join(f"{w:.2f}" for w in walls[name])
            print(f"{name:<26}{wall:>9.2f}{rss / MIB:>14.1f}   {runs}")
        floor_w, floor_r = results["onnx load+save"]
        cp_w, _ = results["cp (data file)"]
        print("\nratios:")
        for name in ("lowerer (beside input)", "lowerer (other dir)", "lowerer --external-data"):
            wall, rss = results[name]
            print(f"  {name}: wall {wall / floor_w:.2f}x load+save, {wall / cp_w:.2f}x cp; "
                  f"RSS {rss / floor_r:.2f}x load+save")
        peak = max(rss for name, (_, rss) in results.items() if name.startswith("lowerer"))
        print("\ntargets:")
        print(f"  peak RSS < 300 MiB: {peak / MIB:.1f} MiB -> {'met' if peak < 300 * MIB else 'NOT met'}")
        print(f"  no weight copy beside the input: {'met' if beside_untouched else 'NOT met'}")
        print(f"  data copied bytes-identical to another dir: {'met' if identical else 'NOT met'}")
        print(f"  --external-data wrote just the model and one data file: {'met' if one_file_ok else 'NOT met'}")
        print(f"  converted model (opset, functions, main nodes, weights unloaded): {check.stdout.strip()}")
        print(f"  weights: {total / GIB:.2f} GiB (> 2 GiB protobuf limit: "
              f"{'yes' if total > 2 * GIB else 'no'})")
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
