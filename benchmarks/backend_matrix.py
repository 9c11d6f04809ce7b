"""Backends measured: the probe suite and ``lowerer convert --for BACKEND==R`` run on release R itself.

Every release R with a measured probe run (``lowerer/backends/measured/<runtime>-<version>.json``, whose
runtime's record witnesses a backend; onnxruntime-openvino stands for the OpenVINO it bundles), in a venv
built once (:data:`RECIPES`, else its runtime's pip steps, by default ``pip install <distribution>==<version>
numpy onnx``) and cached under ``--cache`` (``~/.cache/lowerer/backend-venvs/<release>``):

1. the probe suite (``python -m lowerer.cli.probes``, onnx's node cases included) on R: right / wrong /
   fails;
2. for every model M among the real fixtures (``tests/fixtures/real/*.onnx``) and the probe models
   (:func:`lowerer.backends.probe_models.base_probes`, the one-node models of the expansion bodies and of
   :data:`~lowerer.backends.probe_models.LOWERED`): M itself run on R, then ``lowerer convert M -o OUT --for
   <backend>==R`` with this environment's lowerer (the deployment check off: the witness Python is a bare
   interpreter, so what is measured is the profile alone; ``--deployment``: on, the release itself the
   witness, as a user with R installed converts), then OUT run on R through the witness; each
   compared with onnxruntime CPU on M (floats within the runtime's budget x scale, discrete outputs exactly).
   Counts: written (exit 0) / matching / refused (exit 2, or 1: a failed verification) / fails there
   (written, but R refuses or fails it: loud) / silently wrong (written and differing there, where no warning line
   said the runtime computes a node of it differently: those are counted apart, "said"); and against M as
   exported: helped (M fails or
   differs there, OUT matches), kept (both match), broken (M matches, OUT is written and does not), refused
   though M matches there (``refused-ok``).

Examples::

    python benchmarks/backend_matrix.py                                     # every release
    python benchmarks/backend_matrix.py --releases openvino-2024.0.0 --python openvino-2024.0.0=/venv/bin/python
    python benchmarks/backend_matrix.py --before 785841f --no-probes        # the profiles as they were at 785841f
    python benchmarks/backend_matrix.py --before-tree /work/main --no-probes  # another checkout's lowerer
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
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lowerer.backends.probe_models import EXPANSIONS, LOWERED, Probe, base_probes  # noqa: E402
from lowerer.backends.runtimes import runtime_of  # noqa: E402
from lowerer.backends.witnesses import Witness  # noqa: E402
from lowerer.cli.probes import budget_of, compare, run_batch  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "real"
CONVERT_TIMEOUT_S = 900
_PINS = ["numpy<=1.26.4", "onnx==1.18.0", "protobuf<=4.25.4", "onnxruntime==1.20.1", "psutil", "ruamel.yaml",
         "scipy", "tqdm", "opencv-python-headless", "fast-histogram", "setuptools<70"]


@dataclass(frozen=True)
class Release:
    """A runtime release: its witness runtime, version, ``--for`` spec, pip recipe (steps) and probed runtime.

    ``probed``: the runtime its measured probe run named (``onnxruntime-qnn:htp-only``: the CPU fallback off).
    """

    runtime: str
    version: str
    spec: str
    recipe: tuple[tuple[str, ...], ...]
    probed: str = ""


#: pip steps of the releases whose wheels need pins (older OpenVINO on numpy 1; rknn-toolkit2's whole stack); any
#: other release is installed by its runtime's steps (``PIP`` of its module, lowerer/backends/runtimes/).
RECIPES: dict[str, tuple[tuple[str, ...], ...]] = {
    "openvino-2023.0.2": (("openvino==2023.0.2", "numpy<2", "onnx"),),
    "openvino-2024.0.0": (("openvino==2024.0.0", "numpy<2", "onnx"),),
    # setuptools<70: rknn.api imports pkg_resources; torch 2.13.0 is the CPU build on this machine's disk
    "rknn-toolkit2-2.5.0": (("torch==2.13.0",), ("rknn-toolkit2==2.5.0", "--no-deps"), tuple(_PINS)),
}


def _releases() -> dict[str, Release]:
    """A release per measured probe run: its runtime's record names the backend, the recipe and the spec."""
    found = {}
    for path in sorted((ROOT / "lowerer" / "backends" / "measured").glob("*.json")):
        measured = json.loads(path.read_text(encoding="utf-8"))
        record = runtime_of(measured["runtime"])
        if record is None or not record.backends:
            continue
        version = str(measured["version"])
        named = str(measured.get(record.release, version)) if record.release else version
        spec = f"{record.backends[0]}==" + ".".join(re.findall(r"\d+", named)[:2])
        recipe = RECIPES.get(path.stem, tuple(tuple(a.format(version=version) for a in step) for step in record.pip))
        probed = re.search(r"--runtime (\S+)", str(measured.get("command", "")))
        found[path.stem] = Release(record.name, version, spec, recipe, probed.group(1) if probed else record.name)
    return found


RELEASES: dict[str, Release] = _releases()


def ensure_venv(cache: Path, name: str, release: Release) -> str:
    """The Python of ``name``'s venv, created (Python 3.11) and installed once."""
    venv = cache / name
    python = venv / "bin" / "python"
    if (venv / ".complete").exists():
        return str(python)
    subprocess.run(["python3.11", "-m", "venv", str(venv)], check=True)
    for step in release.recipe:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *step], check=True)
    (venv / ".complete").write_text("ok", encoding="utf-8")
    return str(python)


def _bare_python() -> str:
    """An interpreter with no runtime installed: the witness Python of the conversions (no deployment check)."""
    return str(Path(sys.base_prefix) / "bin" / "python3")


def models(only: str) -> list[tuple[str, onnx.ModelProto, dict[str, np.ndarray]]]:
    """The real fixtures (with their inputs) and the probe models, filtered by the regex ``only``."""
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text(encoding="utf-8"))["fixtures"]
    found = []
    for name, info in sorted(manifest.items()):
        with np.load(FIXTURES / info["inputs"]) as data:
            feeds = {n: np.array(data[n]) for n in info["input_names"]}
        found.append((name, onnx.load(str(FIXTURES / name)), feeds))
    found += [(f"probe:{p.name}", p.model, p.feeds) for p in base_probes() if p.group != "limits"]
    for name, build in EXPANSIONS.items():
        model, feeds = build()
        found.append((f"probe:{name}", model, feeds))
    for name, (made, _) in LOWERED.items():
        model, feeds = made()
        found.append((f"probe:{name}", model, feeds))
    return [m for m in found if re.search(only, m[0])]


def convert(lowerer: list[str], source: Path, out: Path, spec: str, env: dict[str, str]) -> tuple[int, str]:
    """``lowerer convert SOURCE -o OUT --for SPEC``: (exit status, its last line on stderr)."""
    try:
        # cwd: the model's folder (``python -m`` puts the working folder first on sys.path, ahead of PYTHONPATH)
        done = subprocess.run([*lowerer, "convert", str(source), "-o", str(out), "--for", spec], capture_output=True,
                              text=True, env=env, timeout=CONVERT_TIMEOUT_S, check=False, cwd=source.parent)
    except subprocess.TimeoutExpired:
        return -1, "timeout"
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and "warning" not in ln]
    said = [ln for ln in done.stderr.splitlines() if "warning" in ln and "computes it differently" in ln]
    return done.returncode, (lines[0] if done.returncode else (said[0] if said else ""))[:300]


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return [np.asarray(v) for v in session.run(None, feeds)]
    except Exception:
        return None


def end_to_end(release: Release, python: str, lowerer: list[str], only: str, jobs: int,
               deployment: bool = False) -> dict[str, Any]:
    """Convert every model for ``release`` and run what was written there (see the module docstring).

    ``deployment``: the conversions run with the deployment check on (the release's own Python as the witness:
    what a user with R installed gets), so a model written and failing there is one the check let through.
    """
    env = dict(os.environ, LOWERER_WITNESS_PYTHON=python if deployment else _bare_python())
    witness = Witness(release.runtime, release.version, python)
    budget = budget_of(release.runtime)
    cases = models(only)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="lowerer-backend-matrix-") as folder:
        work = Path(folder)

        def one(i: int) -> tuple[int, str]:
            model = cases[i][1]
            source = work / f"m{i}.onnx"
            source.write_bytes(model.SerializeToString())
            return convert(lowerer, source, work / f"o{i}.onnx", release.spec, env)

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            statuses = list(pool.map(one, range(len(cases))))
        originals = run_batch(witness, [Probe(c[0], "", "", c[1], c[2]) for c in cases])
        written = [i for i, (rc, _) in enumerate(statuses) if rc == 0]
        outs = run_batch(witness, [Probe(cases[i][0], "", "", onnx.load(str(work / f"o{i}.onnx")), cases[i][2])
                                   for i in written])
        got = dict(zip(written, outs, strict=True))
        for i, (name, model, feeds) in enumerate(cases):
            reference = _reference(model, feeds)
            was = _matches(reference, originals[i], budget)
            rows[name] = {**_row(statuses[i], got.get(i), reference, budget), "original": was}
    counts = Counter(r["status"] for r in rows.values())
    effect = Counter(_effect(r) for r in rows.values())
    return {"written": sum(1 for r, _ in statuses if r == 0), **counts, **effect, "models": rows}


def _matches(reference: list[np.ndarray] | None, got: list[np.ndarray] | tuple[str, str], budget: float) -> str:
    """``matching``, ``differs``, ``fails`` (the runtime refused or failed) or ``no reference``."""
    if reference is None:
        return "no reference"
    if isinstance(got, tuple):
        return "fails"
    return "matching" if compare(reference, got, budget)[0] else "differs"


def _row(status: tuple[int, str], result: list[np.ndarray] | tuple[str, str] | None,
         reference: list[np.ndarray] | None, budget: float) -> dict[str, Any]:
    rc, why = status
    if rc != 0 or result is None:
        return {"status": "refused" if rc in (1, 2) else "crash", "exit": rc, "why": why}
    if isinstance(result, tuple):
        return {"status": "fails there", "stage": result[0], "why": result[1][:300]}
    if reference is None:
        return {"status": "no reference"}
    ok, worst, what = compare(reference, result, budget)
    if not ok and "computes it differently" in why:  # a departure of the model as exported, said in a warning
        return {"status": "said", "max_diff": worst, "why": f"{what}; {why}"}
    return {"status": "matching" if ok else "silently wrong", "max_diff": worst, "why": what}


def _effect(row: dict[str, Any]) -> str:
    """What the conversion did to a model against the model as exported, on the runtime."""
    before, after = row["original"] == "matching", row["status"] == "matching"
    if row["status"] in ("refused", "crash"):
        return "refused-ok" if before else "refused-bad"
    if row["status"] == "no reference" or row["original"] == "no reference":
        return "unknown"
    return {(False, True): "helped", (True, True): "kept", (True, False): "broken"}.get((before, after), "still bad")


def probes(release: Release, python: str) -> dict[str, int]:
    """The probe suite's totals on ``release``."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "probes.json"
        subprocess.run([sys.executable, "-m", "lowerer.cli.probes", "--runtime", release.probed or release.runtime,
                        "--json", str(out)], env=dict(os.environ, LOWERER_WITNESS_PYTHON=python), cwd=ROOT,
                       capture_output=True, check=False)
        if not out.exists():
            return {}
        total: dict[str, int] = json.loads(out.read_text(encoding="utf-8"))["summary"]["total"]
        return total


def _lowerer(before: str | None, keep: Path, tree: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The command that runs lowerer: this tree's, another checkout's (``tree``), or this tree's with old profiles.

    ``before`` swaps only the data (``lowerer/backends/openvino.json`` and ``rknn.json`` as of that revision,
    ``git show``) into a copy of this tree's package, so that a before/after count differs by the profiles alone.
    """
    if tree is not None:
        return [sys.executable, "-m", "lowerer"], {"PYTHONPATH": str(tree)}
    if before is None:  # this tree's (the conversions run in the model's folder: PYTHONPATH names the tree)
        return [sys.executable, "-m", "lowerer"], {"PYTHONPATH": str(ROOT)}
    tree = keep / f"lowerer-profiles-{before}"
    shutil.copytree(ROOT / "lowerer", tree / "lowerer", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("openvino.json", "rknn.json"):
        old = subprocess.run(["git", "-C", str(ROOT), "show", f"{before}:lowerer/backends/{name}"],
                             capture_output=True, check=True).stdout
        (tree / "lowerer" / "backends" / name).write_bytes(old)
    return [sys.executable, "-m", "lowerer"], {"PYTHONPATH": str(tree)}


def main(argv: list[str] | None = None) -> int:
    """Entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--releases", default=",".join(RELEASES), help="comma-separated keys of RELEASES")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lowerer" / "backend-venvs")
    parser.add_argument("--python", action="append", default=[], help="RELEASE=PYTHON: use an existing venv")
    parser.add_argument("--models", default="", help="regex on the model names (fixtures, probe:NAME)")
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--no-models", action="store_true")
    parser.add_argument("--before", help="run the conversions with the openvino/rknn profiles of this git revision")
    parser.add_argument("--before-tree", type=Path, help="run the conversions with the lowerer of this checkout")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--deployment", action="store_true",
                        help="convert with the deployment check on (the release itself as the witness)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    given = dict(item.split("=", 1) for item in args.python)
    table: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as keep:
        lowerer, extra = _lowerer(args.before, Path(keep), args.before_tree)
        os.environ.update(extra)
        for name in [r.strip() for r in args.releases.split(",") if r.strip()]:
            release = RELEASES[name]
            python = given.get(name) or ensure_venv(args.cache, name, release)
            row: dict[str, Any] = {"spec": release.spec}
            if not args.no_probes:
                row["probes"] = probes(release, python)
            if not args.no_models:
                row["models"] = end_to_end(release, python, lowerer, args.models, args.jobs,
                                           args.deployment)
            table[name] = row
            print(_line(name, row), flush=True)
            if args.json:  # after each release: a long run keeps what it measured
                args.json.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print("\n" + render(table))
    return 0


def _line(name: str, row: dict[str, Any]) -> str:
    bad = {k: v for k, v in row.get("models", {}).get("models", {}).items()
           if v["status"] in ("silently wrong", "fails there", "crash")}
    return f"{name}: " + "; ".join(f"{k} {v['status']}: {v.get('why', '')[:150]}" for k, v in bad.items())


def render(table: dict[str, Any]) -> str:
    """The markdown table: release | probes | models written/.../silently wrong | helped/kept/broken/refused."""
    lines = ["| release (`--for`) | probes right / wrong / fail | models written / matching / refused / fail there /"
             " silently wrong | helped / kept / broken / refused (of those matching as exported) |",
             "|---|---|---|---|"]
    for name, row in table.items():
        p = row.get("probes", {})
        m = row.get("models", {})
        probe_cell = f"{p.get('right', 0)} / {p.get('wrong', 0)} / {p.get('fails', 0)}" if p else "not run"
        model_cell = (f"{m.get('written', 0)} / {m.get('matching', 0)} / {m.get('refused', 0)} / "
                      f"{m.get('fails there', 0)} / {m.get('silently wrong', 0)}"
                      + (f" ({m['said']} more differ there, said)" if m.get("said") else "")) if m else "not run"
        effect_cell = (f"{m.get('helped', 0)} / {m.get('kept', 0)} / {m.get('broken', 0)} / "
                       f"{m.get('refused-ok', 0) + m.get('refused-bad', 0)} ({m.get('refused-ok', 0)})") if m else ""
        lines.append(f"| {name} (`{row['spec']}`) | {probe_cell} | {model_cell} | {effect_cell} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
