"""Tested against the real releases: ``lowerer convert --for onnxruntime==X`` run in onnxruntime X itself.

For every real fixture (``tests/fixtures/real/*.onnx``) and every onnxruntime release X:

1. ``lowerer convert FIXTURE -o OUT --for onnxruntime==X`` with this environment's lowerer (which verifies
   against the onnxruntime installed here, the newest);
2. in a venv holding only onnxruntime X and numpy (created once, cached under ``--cache``), the converted model
   is loaded with ``InferenceSession(path, providers=["CPUExecutionProvider"])`` and run on the fixture's inputs
   (``tests/fixtures/real/<model>.inputs.npz``);
3. its outputs are compared with the ORIGINAL fixture run here (the newest onnxruntime): floats within
   ``--rtol``/``--atol`` (1e-4, 1e-5), integers and bools exactly.

It prints, per release, converted / loaded / matched counts with each failure on one line (a conversion lowerer
refuses, exit 2, is "refused", not a failure of the runtime), the failure classes, and a final table
(release x converted, refused, loaded, ran, matched, each out of the fixtures). ``--json PATH`` writes it all.

Examples::

    python benchmarks/runtime_matrix.py                                  # every default release and fixture
    python benchmarks/runtime_matrix.py --releases 1.15.1,1.16.3 --fixtures bert,gpt2 --jobs 2
    python benchmarks/runtime_matrix.py --at HEAD --json matrix.json     # lowerer as committed, not the work tree

Release specs: ``1.15.1`` (exact), ``1.18`` (the last 1.18.x on the package index), ``latest`` (the newest).
Releases older than 1.19 get ``numpy<2`` (they were built against numpy 1.x).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "real"
DEFAULT_RELEASES = "1.15.1,1.16.3,1.17.3,1.18,1.20,1.22,latest"
# used when the package index cannot be asked (offline): the last patch of each minor as of this writing
FALLBACK_LAST = {"1.15": "1.15.1", "1.16": "1.16.3", "1.17": "1.17.3", "1.18": "1.18.1", "1.19": "1.19.2",
                 "1.20": "1.20.1", "1.21": "1.21.1", "1.22": "1.22.1", "1.23": "1.23.2", "1.24": "1.24.4"}
CONVERT_TIMEOUT_S = 600
RUN_TIMEOUT_S = 300

# Runs in a release's venv (any Python >= 3.8, numpy 1.x or 2.x): load, run, save the outputs; one JSON line out.
RUNNER = r"""
import json, sys
req = json.loads(sys.argv[1])
res = {"stage": "import"}
try:
    import numpy as np
    import onnxruntime as ort
    res["onnxruntime"] = ort.__version__
    res["numpy"] = np.__version__
    so = ort.SessionOptions()
    so.log_severity_level = 3
    res["stage"] = "load"
    sess = ort.InferenceSession(req["model"], sess_options=so, providers=["CPUExecutionProvider"])
    res["stage"] = "run"
    data = np.load(req["inputs"])
    feeds = {i.name: data[i.name] for i in sess.get_inputs()}
    res["names"] = [o.name for o in sess.get_outputs()]
    outs = sess.run(None, feeds)
    np.savez(req["outputs"], **{"o%d" % k: np.asarray(v) for k, v in enumerate(outs)})
    res["stage"] = "done"
except BaseException as e:
    res["error"] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(res))
"""


# ---------------------------------------------------------------------------------------------- releases and venvs


def index_versions() -> list[str]:
    """Onnxruntime's releases on the package index, newest first (empty when pip cannot tell)."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "onnxruntime"],
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    for line in done.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    return []


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


def resolve_releases(spec: str) -> list[str]:
    """``1.15.1`` as is, ``1.18`` to the last 1.18.x, ``latest`` to the newest release (asking pip once)."""
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    known: list[str] | None = None
    out: list[str] = []
    for item in wanted:
        if item.count(".") >= 2:
            version = item
        else:
            if known is None:
                known = [v for v in index_versions() if re.fullmatch(r"\d+\.\d+\.\d+", v)]
            if item == "latest":
                version = max(known, key=_key) if known else _installed_onnxruntime()
            else:
                same = [v for v in known if v.startswith(item + ".")]
                version = max(same, key=_key) if same else FALLBACK_LAST.get(item, item + ".0")
        if version not in out:
            out.append(version)
    return out


def _installed_onnxruntime() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def needs_numpy1(version: str) -> bool:
    """Releases before 1.19 were built against numpy 1.x and fail to import beside numpy 2."""
    return _key(version) < (1, 19)


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(cache: Path, version: str) -> dict[str, Any]:
    """Create (once) ``cache/ort-<version>`` holding onnxruntime==version and numpy; reuse it when ready."""
    venv = cache / f"ort-{version}"
    marker = venv / "runtime-matrix.json"
    if marker.is_file():
        info = json.loads(marker.read_text())
        info["cached"] = True
        return info
    t0 = time.perf_counter()
    if venv.exists():
        shutil.rmtree(venv)
    cache.mkdir(parents=True, exist_ok=True)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(venv_python(venv)), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              f"onnxruntime=={version}", "numpy<2" if needs_numpy1(version) else "numpy"]]
    for cmd in steps:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        except subprocess.TimeoutExpired:
            return {"release": version, "ok": False, "error": f"timed out: {' '.join(cmd[:4])}"}
        if done.returncode != 0:
            lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip() and "WARNING" not in ln]
            error = next((ln for ln in lines if "ERROR" in ln), lines[-1] if lines else f"exit {done.returncode}")
            shutil.rmtree(venv, ignore_errors=True)
            return {"release": version, "ok": False, "error": error.split(" (from versions:")[0].strip()}
    probe = subprocess.run([str(venv_python(venv)), "-c",
                            "import sys, numpy, onnxruntime; print(onnxruntime.__version__, numpy.__version__, "
                            "'%d.%d.%d' % sys.version_info[:3])"],
                           capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines() or [f"exit {probe.returncode}"]
        return {"release": version, "ok": False, "error": f"import fails: {lines[-1]}"}
    ort_v, np_v, py_v = probe.stdout.split()
    info = {"release": version, "ok": True, "venv": str(venv), "onnxruntime": ort_v, "numpy": np_v, "python": py_v,
            "setup_s": round(time.perf_counter() - t0, 1)}
    marker.write_text(json.dumps(info, indent=1))
    info["cached"] = False
    return info


# ------------------------------------------------------------------------------------------- fixtures and running


def fixtures(only: str | None) -> list[tuple[Path, Path]]:
    """(model, inputs.npz) for every real fixture, or those whose name starts with one of ``only``'s models."""
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text()).get("fixtures", {})
    wanted = [w.strip() for w in only.split(",")] if only else None
    out = []
    for path in sorted(FIXTURES.glob("*.onnx")):
        entry = manifest.get(path.name, {})
        model = entry.get("model", path.name.split(".")[0])
        if wanted and model not in wanted and path.stem not in wanted and path.name not in wanted:
            continue
        out.append((path, FIXTURES / entry.get("inputs", f"{model}.inputs.npz")))
    return out


def run_model(python: Path | str, model: Path, inputs: Path, outputs: Path) -> dict[str, Any]:
    """Load and run ``model`` in the interpreter ``python`` (a child process: a crash is a result, not ours)."""
    req = json.dumps({"model": str(model), "inputs": str(inputs), "outputs": str(outputs)})
    t0 = time.perf_counter()
    try:
        done = subprocess.run([str(python), "-c", RUNNER, req], capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S, cwd=outputs.parent, check=False)
    except subprocess.TimeoutExpired:
        return {"stage": "run", "error": f"timed out after {RUN_TIMEOUT_S} s", "seconds": RUN_TIMEOUT_S}
    seconds = round(time.perf_counter() - t0, 2)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        tail = done.stderr.strip().splitlines()
        why = f"process died (exit {done.returncode})" + (f": {tail[-1]}" if tail else "")
        return {"stage": "load", "error": why, "seconds": seconds}
    res: dict[str, Any] = json.loads(lines[-1])
    res["seconds"] = seconds
    return res


def convert(lowerer: list[str], env: dict[str, str], fixture: Path, out: Path, version: str,
            verify: bool) -> dict[str, Any]:
    """``lowerer convert fixture -o out --for onnxruntime==version``: converted, refused (exit 2) or failed.

    It runs in ``out``'s folder: ``python -m`` puts the current directory first on ``sys.path``, and in the
    repository root that would be the work tree's ``lowerer`` whatever ``--at`` asked for.
    """
    cmd = [*lowerer, "convert", str(fixture), "-o", str(out), f"--for=onnxruntime=={version}",
           "--verify" if verify else "--no-verify", "-q"]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=env,
                              cwd=out.parent, check=False)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "exit": None, "line": f"timed out after {CONVERT_TIMEOUT_S} s",
                "seconds": CONVERT_TIMEOUT_S}
    seconds = round(time.perf_counter() - t0, 2)
    lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
    line = next((ln for ln in lines if ln.startswith("lowerer: error")), lines[0] if lines else "")
    if line.startswith("Traceback"):  # an uncaught exception: its last line says what
        line = lines[-1]
    line = line.removeprefix("lowerer: error: ")
    status = {0: "converted", 2: "refused"}.get(done.returncode, "failed")
    if status == "converted" and not out.is_file():
        status, line = "failed", "exit 0 but nothing written"
    return {"status": status, "exit": done.returncode, "line": line, "seconds": seconds}


def compare(ref: Path, ref_names: list[str], got: Path, got_names: list[str], rtol: float, atol: float) -> str | None:
    """None when every output agrees (floats within rtol/atol, the rest exactly), else the first difference."""
    if len(ref_names) != len(got_names):
        return f"{len(got_names)} outputs, the original has {len(ref_names)}"
    with np.load(ref) as a, np.load(got) as b:
        for k, name in enumerate(ref_names):
            x, y = a[f"o{k}"], b[f"o{k}"]
            if x.shape != y.shape:
                return f"output {name}: shape {list(y.shape)}, the original's {list(x.shape)}"
            if x.dtype != y.dtype:
                return f"output {name}: dtype {y.dtype}, the original's {x.dtype}"
            if x.dtype.kind in "fc":
                if not np.allclose(y, x, rtol=rtol, atol=atol, equal_nan=True):
                    diff = np.abs(y.astype(np.float64) - x.astype(np.float64))
                    return f"output {name}: max |diff| {np.nanmax(diff):.3g} (rtol {rtol:g}, atol {atol:g})"
            elif not np.array_equal(x, y):
                return f"output {name}: {int(np.count_nonzero(x != y))} of {x.size} values differ (exact)"
    return None


def short(error: str) -> str:
    """An onnxruntime error's first line without its ``[ONNXRuntimeError] : 9 :`` prefix."""
    first = error.strip().splitlines()[0] if error.strip() else error
    first = re.sub(r"^(\w+: )?\[ONNXRuntimeError\] : \d+ : ", "", first)
    # "Load model from PATH failed:/onnxruntime_src/...model.cc:181 onnxruntime::Model::Model(...) WHY" -> WHY
    first = re.sub(r"Load model from \S+ failed:\s*(\S+:\d+ )?(\S+\(.*\) )?", "Load model failed: ", first)
    return first.strip()


def failure_class(line: str) -> str:
    """Errors that differ only in node names, paths and numbers grouped together."""
    m = re.search(r"Could not find an implementation for (\w+)\((\d+)\)", line)
    if m:
        return f"NOT_IMPLEMENTED {m.group(1)}({m.group(2)})"
    m = re.search(r"Unsupported model IR version: (\d+), max supported IR version: (\d+)", line)
    if m:
        return f"IR version {m.group(1)} > {m.group(2)}"
    m = re.search(r"(Opset \d+ is under development|opset \d+ .*?(?:not supported|is not supported)[^.]*)", line,
                  flags=re.IGNORECASE)
    if m:
        return m.group(1)
    m = re.search(r"No (?:Op|op|schema) registered for (\w+) with domain_version of (\d+)", line)
    if m:
        return f"no schema {m.group(1)}({m.group(2)})"
    line = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", line)
    line = re.sub(r"/\S+", "…", line)
    return line[:160]


# ---------------------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    """Run the matrix; exit 0 (the table is the result, failures included)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", default=DEFAULT_RELEASES,
                    help=f"comma-separated: 1.15.1, 1.18 (last 1.18.x), latest (default {DEFAULT_RELEASES})")
    ap.add_argument("--fixtures", help="comma-separated models (bert,gpt2) or fixture names (default: all)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="parallel processes (default: CPUs)")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lowerer-runtime-matrix",
                    help="where the per-release venvs live (default ~/.cache/lowerer-runtime-matrix)")
    ap.add_argument("--verify", action="store_true", help="convert with lowerer's per-rewrite verification "
                    "(default --no-verify: this matrix checks the result in the release itself)")
    ap.add_argument("--at", metavar="REV", help="run lowerer as committed at REV (git archive into a temp dir) "
                    "instead of the work tree")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--work", type=Path, help="keep the converted models and outputs here (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args(argv)

    t_start = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="runtime-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    lowerer_src = "work tree"
    if args.at:
        src = work / "lowerer-src"
        src.mkdir(exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", args.at, "lowerer"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.at], capture_output=True,
                             text=True, check=True).stdout.strip()
        lowerer_src = f"git {args.at} ({rev})"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), env.get("PYTHONPATH", "")) if p)
    lowerer = [sys.executable, "-m", "lowerer"]
    where = subprocess.run([sys.executable, "-c", "import lowerer; print(lowerer.__file__)"], capture_output=True,
                           text=True, env=env, cwd=work, check=True).stdout.strip()
    lowerer_src += f", {Path(where).parent}"

    releases = resolve_releases(args.releases)
    todo = fixtures(args.fixtures)
    print(f"lowerer from {lowerer_src}; reference: onnxruntime {_installed_onnxruntime()} here; "
          f"releases {', '.join(releases)}; {len(todo)} fixtures; jobs {args.jobs}", flush=True)

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        t0 = time.perf_counter()
        venvs = dict(zip(releases, pool.map(lambda v: ensure_venv(args.cache, v), releases), strict=True))
        setup_s = time.perf_counter() - t0
        for v, info in venvs.items():
            if info["ok"]:
                state = "cached" if info["cached"] else f"created in {info['setup_s']} s"
                print(f"  venv {v}: onnxruntime {info['onnxruntime']}, numpy {info['numpy']}, {state}")
            else:
                print(f"  venv {v}: CANNOT INSTALL: {info['error']}")

        t0 = time.perf_counter()
        refs = dict(zip([f for f, _ in todo], pool.map(
            lambda fi: run_model(sys.executable, fi[0], fi[1], work / f"ref-{fi[0].stem}.npz"), todo), strict=True))
        ref_s = time.perf_counter() - t0

        def cell(job: tuple[str, Path, Path]) -> dict[str, Any]:
            version, fixture, inputs = job
            row: dict[str, Any] = {"release": version, "fixture": fixture.name}
            out = work / f"ort-{version}" / fixture.name
            out.parent.mkdir(parents=True, exist_ok=True)
            row["convert"] = conv = convert(lowerer, env, fixture, out, version, args.verify)
            ref = refs[fixture]
            if conv["status"] != "converted":
                row["result"], row["line"] = conv["status"], conv["line"]
                return row
            got = run_model(venv_python(Path(venvs[version]["venv"])), out, inputs, out.with_suffix(".npz"))
            row["run"] = got
            if got["stage"] != "done":
                row["result"] = "not loaded" if got["stage"] in ("import", "load") else "not run"
                row["line"] = short(got.get("error", ""))
            elif ref["stage"] != "done":
                row["result"], row["line"] = "no reference", "original: " + short(ref.get("error", ""))
            else:
                why = compare(work / f"ref-{fixture.stem}.npz", ref["names"], out.with_suffix(".npz"),
                              got["names"], args.rtol, args.atol)
                row["result"], row["line"] = ("matched", "") if why is None else ("mismatch", why)
            return row

        jobs = [(v, f, i) for v in releases if venvs[v]["ok"] for f, i in todo]
        t0 = time.perf_counter()
        rows = list(pool.map(cell, jobs))
        matrix_s = time.perf_counter() - t0

    for fixture, ref in refs.items():
        if ref["stage"] != "done":
            print(f"  reference run of {fixture.name} failed here: {short(ref.get('error', ''))}")

    n = len(todo)
    table: dict[str, dict[str, Any]] = {}
    for v in releases:
        mine = [r for r in rows if r["release"] == v]
        if not venvs[v]["ok"]:
            table[v] = {"installed": False, "error": venvs[v]["error"]}
            continue
        count = Counter(r["result"] for r in mine)
        converted = sum(r["convert"]["status"] == "converted" for r in mine)
        loaded = sum(r.get("run", {}).get("stage") in ("run", "done") for r in mine)
        ran = sum(r.get("run", {}).get("stage") == "done" for r in mine)
        table[v] = {"installed": True, "fixtures": n, "converted": converted, "refused": count["refused"],
                    "convert_failed": count["failed"], "loaded": loaded, "ran": ran, "matched": count["matched"],
                    "classes": Counter(f"{r['result']}: {failure_class(r['line'])}" for r in mine
                                       if r["result"] != "matched")}
        t = table[v]
        print(f"\nonnxruntime {v}: converted {converted}/{n}, refused {t['refused']}, loaded {loaded}/{converted}, "
              f"ran {ran}/{loaded}, matched {t['matched']}/{ran}")
        for r in mine:
            if r["result"] != "matched":
                print(f"  {r['result']:<10} {r['fixture']:<40} {r['line']}")
        for cls, k in t["classes"].most_common():
            print(f"    {k:>3} x {cls}")

    print(f"\n{'release':<10} {'converted':>10} {'refused':>8} {'loaded':>8} {'ran':>8} {'matched':>8}   (of {n})")
    for v, t in table.items():
        if not t["installed"]:
            print(f"{v:<10} cannot install: {t['error']}")
        else:
            print(f"{v:<10} {t['converted']:>10} {t['refused']:>8} {t['loaded']:>8} {t['ran']:>8} {t['matched']:>8}")
    total_s = time.perf_counter() - t_start
    print(f"\ntime: {total_s:.0f} s (venvs {setup_s:.0f} s, references {ref_s:.0f} s, "
          f"convert+run {matrix_s:.0f} s, {len(jobs)} cells, {args.jobs} jobs); "
          f"conversions {'with' if args.verify else 'without'} per-rewrite verification")

    if args.json:
        report = {"lowerer": lowerer_src, "reference_onnxruntime": _installed_onnxruntime(),
                  "rtol": args.rtol, "atol": args.atol, "verify": args.verify, "seconds": round(total_s, 1),
                  "venvs": venvs, "table": table, "references": {f.name: r for f, r in refs.items()}, "rows": rows}
        args.json.write_text(json.dumps(report, indent=1, default=str))
        print(f"wrote {args.json}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
