"""How fast lowerer converts, as ratios to the load+save floor measured in the same run.

For each model size it times whole processes, interleaved, several times (median):

* ``floor``: ``onnx.load`` + ``onnx.save`` of the model (what any converter must at least pay);
* ``lowerer --no-verify``: ``python -m lowerer convert IN -o OUT --target-opset 13 --no-verify``;
* ``lowerer verified``: the same with per-rewrite verification (the default);
* ``onnx.version_converter``: ``onnx.load`` + ``convert_version(model, 13)`` + ``onnx.save``.

The models are synthetic opset-11 graphs (see ``benchmarks/synthetic.py``), converted 11 → 13:
the direction ``onnx.version_converter`` can do too. Peak RSS is each child's own (``wait4``), or,
when larger, the sum over the child and the processes it starts (proportional set sizes, sampled
every 20 ms: lowerer's worker for the input's checks counts like lowerer itself); this process imports nothing heavy
(models are generated and checked in subprocesses), so a child's figure is not inflated by what it
inherits at fork.
Each variant's peak RSS is also given as a ratio to the floor's. A one-node model is always
timed (what a conversion costs beyond the floor, whatever the size); from 1M nodes (``--sizes 1m``)
only the floor, ``--no-verify`` and the baseline run (``--verified-below``). The targets (at 50k
and 200k nodes ``--no-verify`` <= 2.5x the floor and faster than the baseline, verified <= 3x; at 1M
<= 2.5x and peak RSS <= 3x the floor's; one node <= floor + 0.1 s) are checked and printed as met /
not met; this is a benchmark, not a test. The machine may be shared: ratios measured in the same
run are what count. Children run with bytecode caching on (as an installed package is), under a
temporary ``PYTHONPYCACHEPREFIX``; an untimed first round fills it.

Usage::

    python benchmarks/conversion_speed.py                       # 5k, 50k, 200k nodes
    python benchmarks/conversion_speed.py --sizes 5k,50k --repeat 3
    python benchmarks/conversion_speed.py --sizes 5k,50k,200k --repeat 3 --baseline ../base-0.1
    python benchmarks/conversion_speed.py --sizes 1m --repeat 1 --baseline ../base-0.1
    python benchmarks/conversion_speed.py --sizes 5k --check    # also compare outputs in onnxruntime
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import parse_size

FLOOR = "import onnx, sys; onnx.save(onnx.load(sys.argv[1]), sys.argv[2])"
ONNX_CONVERTER = ("import onnx, sys; from onnx import version_converter; "
                  "onnx.save(version_converter.convert_version(onnx.load(sys.argv[1]), int(sys.argv[3])), sys.argv[2])")


@dataclass
class Variant:
    """One way of producing the converted model, as a command line."""

    name: str
    argv: list[str]
    seconds: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    failure: str | None = None

    @property
    def median(self) -> float:
        """Median wall time of the runs so far."""
        return statistics.median(self.seconds)


def _tree_rss(pid: int) -> int:
    """The memory of ``pid`` and its descendants together (Linux ``/proc``; 0 elsewhere).

    Each process's proportional share (``Pss``): pages a forked worker still shares with its parent
    count once, not once per process.
    """
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) << 10
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError, StopIteration):
            continue
    return total


def run_child(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """Run ``argv``; return (wall seconds, peak RSS MiB of that child, exit status, stderr tail).

    The peak is the larger of the child's own (``wait4``, which is the largest of it and each process
    it waited for) and the sum over the child and its descendants sampled every 20 ms (a worker
    lowerer forks counts like the parent: their memory adds up, shared pages once).
    """
    import threading

    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    sampled = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            sampled[0] = max(sampled[0], _tree_rss(proc.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    err = proc.stderr.read()
    done.set()
    sampler.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    rss = usage.ru_maxrss / 1024 if sys.platform != "darwin" else usage.ru_maxrss / 2**20
    return wall, max(rss, sampled[0] / 2**20), proc.returncode, err.decode(errors="replace")[-2000:]


_OTHER = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
sys.argv = ["lowerer", *sys.argv[2:]]
runpy.run_module("lowerer", run_name="__main__")
"""


def variants(src: Path, out_dir: Path, target: int, with_converter: bool,
             baselines: list[Path] | None = None, verified: bool = True) -> list[Variant]:
    """The commands compared on one model (``baselines``: other lowerer checkouts, run --no-verify too)."""
    py = sys.executable
    lowerer = [py, "-m", "lowerer", "convert", str(src), "--target-opset", str(target)]
    out = [
        Variant("floor (onnx.load+save)", [py, "-c", FLOOR, str(src), str(out_dir / "floor.onnx")]),
        Variant("lowerer --no-verify", [*lowerer, "-o", str(out_dir / "lowerer_noverify.onnx"), "--no-verify"]),
    ]
    if verified:
        out.append(Variant("lowerer (verified)", [*lowerer, "-o", str(out_dir / "lowerer_verified.onnx")]))
    for k, baseline in enumerate(baselines or []):
        out.append(Variant(f"lowerer at {baseline.name} --no-verify",
                           [py, "-c", _OTHER, str(baseline), "convert", str(src), "--target-opset", str(target),
                            "-o", str(out_dir / f"baseline{k}_noverify.onnx"), "--no-verify"]))
    if with_converter:
        out.append(Variant("onnx.version_converter", [py, "-c", ONNX_CONVERTER, str(src),
                                                      str(out_dir / "onnx_converter.onnx"), str(target)]))
    return out


def help_time(env: dict[str, str], repeat: int) -> float:
    """Median wall time of ``python -m lowerer --help``."""
    times = [run_child([sys.executable, "-m", "lowerer", "--help"], env)[0] for _ in range(max(repeat, 3))]
    return statistics.median(times)


_CHECK = """
import sys
import numpy as np
import onnxruntime as ort
sys.path.insert(0, sys.argv[3])
from synthetic import SHAPE
feeds = {"x": np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)}
opts = ort.SessionOptions()
opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
a = ort.InferenceSession(sys.argv[1], opts, providers=["CPUExecutionProvider"]).run(None, feeds)
b = ort.InferenceSession(sys.argv[2], opts, providers=["CPUExecutionProvider"]).run(None, feeds)
bad = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if not np.array_equal(x, y, equal_nan=True)]
print("identical" if not bad else f"{len(bad)} of {len(a)} outputs differ")
"""

_GENERATE = """
import sys
import onnx
sys.path.insert(0, sys.argv[4])
from synthetic import build_model
model = build_model(int(sys.argv[1]), value_info=sys.argv[3] == "1")
onnx.save(model, sys.argv[2])
print(len(model.graph.node))
"""

_VERSIONS = "import onnx, onnxruntime; print(f'onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}')"
_HERE = str(Path(__file__).resolve().parent)


def _python(code: str, *args: str) -> str:
    """Run ``code`` in a child interpreter; its stdout, stripped (raises on failure)."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def check_outputs(original: Path, converted: Path) -> str:
    """Run both models in onnxruntime on the same input; 'identical' or what differs."""
    try:
        return _python(_CHECK, str(original), str(converted), _HERE)
    except RuntimeError as e:
        return str(e)


def mark(ok: bool) -> str:
    """'met' or 'NOT MET'."""
    return "met" if ok else "NOT MET"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="5k,50k,200k",
                        help="comma-separated node counts, up to 1m (default: 5k,50k,200k; a one-node model is "
                             "always timed too)")
    parser.add_argument("--verified-below", default="1m", metavar="SIZE",
                        help="time the verified run and onnx's converter only below this size (default 1m)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per variant (interleaved; default 5)")
    parser.add_argument("--max-repeat-200k", type=int, default=3,
                        help="cap on the runs for models of 200k nodes or more (default 3)")
    parser.add_argument("--target-opset", type=int, default=13)
    parser.add_argument("--value-info", action="store_true",
                        help="give every intermediate value a typed, shaped value_info (no shape inference needed)")
    parser.add_argument("--no-converter", action="store_true", help="skip onnx.version_converter")
    parser.add_argument("--baseline", type=Path, action="append", default=None, metavar="DIR",
                        help="also time the lowerer of another checkout (e.g. a git worktree of an earlier "
                             "commit), --no-verify, in the same run; repeatable (the first is the one the "
                             "targets compare with)")
    parser.add_argument("--check", action="store_true", help="compare the converted models' outputs in onnxruntime")
    parser.add_argument("--keep", type=Path, default=None, help="copy the generated models into this directory")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    if 1 not in sizes:
        sizes.insert(0, 1)  # the one-node model: what a conversion costs beyond the floor, whatever the size
    verified_below = parse_size(args.verified_below)

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    # As installed (pip byte-compiles): bytecode cached, here under a temporary prefix (no files in the
    # checkouts), filled by an untimed first round on the one-node model.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    pycache = tempfile.TemporaryDirectory(prefix="lowerer-bench-pycache-")
    env["PYTHONPYCACHEPREFIX"] = pycache.name
    print(f"machine: {platform.machine()} {_cpu_name()}, {os.cpu_count()} cores, "
          f"{_mem_gib():.0f} GiB; {platform.system()} {platform.release()}")
    print(f"python {platform.python_version()}, {_python(_VERSIONS)}")
    print(f"models: synthetic opset 11 -> {args.target_opset}, value_info={'yes' if args.value_info else 'no'}; "
          f"repeat {args.repeat} (<= {args.max_repeat_200k} at 200k+), interleaved, medians\n")

    results: dict[int, list[Variant]] = {}
    with tempfile.TemporaryDirectory(prefix="lowerer-bench-") as tmp:
        tmp_dir = Path(tmp)
        for n in sizes:
            src = tmp_dir / f"synthetic_{n}.onnx"
            node_count = int(_python(_GENERATE, str(n), str(src), "1" if args.value_info else "0", _HERE))
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(src, args.keep / src.name)
            vs = variants(src, tmp_dir, args.target_opset, not args.no_converter and n < verified_below,
                          args.baseline, verified=n < verified_below)
            repeat = args.repeat if n < 200_000 else min(args.repeat, args.max_repeat_200k)
            if n == 1:
                for v in vs:  # untimed: fills the bytecode cache
                    run_child(v.argv, env)
            for _ in range(repeat):
                for v in vs:
                    if v.failure is not None:
                        continue
                    wall, rss, code, err = run_child(v.argv, env)
                    if code != 0:
                        v.failure = f"exit {code}: {err.strip().splitlines()[-1] if err.strip() else ''}"
                        continue
                    v.seconds.append(wall)
                    v.rss_mib.append(rss)
            results[n] = vs
            _print_size(n, node_count, src.stat().st_size, vs)
            if args.check:
                for v in vs[1:3]:
                    if "-o" not in v.argv:
                        continue
                    out = Path(v.argv[v.argv.index("-o") + 1])
                    if out.exists():
                        print(f"  exactness {v.name}: {check_outputs(src, out)}")
            for f in tmp_dir.glob("*.onnx"):
                f.unlink()
            print()
    help_s = help_time(env, args.repeat)
    _print_targets(results, help_s)
    pycache.cleanup()
    return 0


def _print_size(n: int, nodes: int, size: int, vs: list[Variant]) -> None:
    floor = vs[0].median if vs[0].seconds else float("nan")
    floor_rss = max(vs[0].rss_mib) if vs[0].rss_mib else float("nan")
    print(f"{n:,} requested nodes ({nodes:,} nodes, {size / 2**20:.1f} MiB)")
    print(f"  {'variant':<30}{'median s':>10}{'x floor':>9}{'peak RSS MiB':>14}{'x floor':>9}  runs")
    for v in vs:
        if v.failure is not None and not v.seconds:
            print(f"  {v.name:<30}{'failed':>10}  {v.failure}")
            continue
        runs = " ".join(f"{s:.2f}" for s in v.seconds)
        rss = max(v.rss_mib)
        print(f"  {v.name:<30}{v.median:>10.3f}{v.median / floor:>9.2f}{rss:>14.0f}{rss / floor_rss:>9.2f}  [{runs}]")


def _ratio(vs: list[Variant], name: str) -> float | None:
    floor = vs[0]
    for v in vs:
        if v.name.startswith(name) and v.seconds and floor.seconds:
            return v.median / floor.median
    return None


def _rss_ratio(vs: list[Variant], name: str) -> float | None:
    floor = vs[0]
    for v in vs:
        if v.name.startswith(name) and v.rss_mib and floor.rss_mib:
            return max(v.rss_mib) / max(floor.rss_mib)
    return None


def _print_targets(results: dict[int, list[Variant]], help_s: float) -> None:
    """The issue's targets, each met / NOT MET (ratios to the floor measured in the same run)."""
    print("targets:")
    for n, vs in results.items():
        r = _ratio(vs, "lowerer --no-verify")
        if n == 1:
            t, f = _median(vs, "lowerer --no-verify"), _median(vs, "floor")
            if t is not None and f is not None:
                print(f"  one-node model: --no-verify <= floor + 0.1 s: {t - f:+.3f} s -> {mark(t - f <= 0.1)}")
            continue
        if r is not None and n >= 50_000:
            print(f"  {n:,} nodes: --no-verify <= 2.5x floor: {r:.2f}x -> {mark(r <= 2.5)}")
        b = _ratio(vs, "lowerer at")
        if r is not None and b is not None and 50_000 <= n < 1_000_000:
            print(f"  {n:,} nodes: --no-verify faster than the baseline: {r:.2f}x vs {b:.2f}x -> {mark(r < b)}")
        v = _ratio(vs, "lowerer (verified)")
        if v is not None and 50_000 <= n < 1_000_000:
            print(f"  {n:,} nodes: verified <= 3x floor: {v:.2f}x -> {mark(v <= 3)}")
        m = _rss_ratio(vs, "lowerer --no-verify")
        if m is not None and n >= 1_000_000:
            print(f"  {n:,} nodes: --no-verify peak RSS <= 3x the floor's: {m:.2f}x -> {mark(m <= 3)}")
        c = _ratio(vs, "onnx.version_converter")
        if r is not None and c is not None and n >= 50_000:
            print(f"  {n:,} nodes: --no-verify ahead of onnx.version_converter: {r:.2f}x vs {c:.2f}x -> "
                  f"{mark(r < c)}")
    if 50_000 in results and 200_000 in results:
        t50 = _median(results[50_000], "lowerer --no-verify")
        t200 = _median(results[200_000], "lowerer --no-verify")
        if t50 and t200:
            print(f"  linear growth (200k time <= 4.5x the 50k time, --no-verify): {t200 / t50:.2f}x -> "
                  f"{mark(t200 / t50 <= 4.5)}")
    print(f"  lowerer --help < 0.5 s: {help_s:.3f} s -> {mark(help_s < 0.5)}")


def _median(vs: list[Variant], name: str) -> float | None:
    for v in vs:
        if v.name.startswith(name) and v.seconds:
            return v.median
    return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _mem_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return float("nan")


if __name__ == "__main__":
    sys.exit(main())
