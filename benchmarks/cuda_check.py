"""The one GPU check: lowerer on CUDA, end to end, in one short run on a lent device (about 8 minutes on an H100).

1. the providers: what onnxruntime lists, and whether CUDA can run (lowerer's child probe);
2. the CUDA-sensitive tests (fakes, Upsample/Resize adapters, backends) with CUDA picked by default;
3. every real fixture (``tests/fixtures/real``) converted to 13 and 11 with ``verify_model`` on CUDA:
   passed or not, and every disagreement lowerer classed as the provider's (``provider_departure``);
4. ``for_backend="cuda"`` on every fixture: the placement status and its classes (no kernel,
   refused by a kernel, onnxruntime's CPU preference for shapes);
5. ``benchmarks/cuda_placement.py``'s latency table (host and device-resident inputs).

It prints one summary (and writes ``cuda_check.json`` under ``$OUT`` when that is set). Each phase
stops starting new work after its share of ``--budget-s``. Without a usable CUDA it still runs
(everything on the CPU) and says so first: a dry run of the script itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "real"
CUDA = "CUDAExecutionProvider"


def providers() -> dict[str, Any]:
    """What onnxruntime lists and whether CUDA can run here."""
    from lowerer.backends.installed_kernels import installed_release
    from lowerer.verification.ort import load_onnxruntime
    from lowerer.verification.providers import provider_problem

    ort = load_onnxruntime()
    listed = list(ort.get_available_providers())
    why = provider_problem(CUDA) if CUDA in listed else "onnxruntime has no CUDA provider"
    return {"onnxruntime": installed_release(), "listed": listed, "cuda_usable": why is None, "cuda_problem": why}


def run_tests(seconds: float) -> dict[str, Any]:
    """The CUDA-sensitive tests (pytest-xdist's ``-n 12`` where it is installed)."""
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_cuda_readiness.py",
            "tests/test_backends.py", "tests/test_whole_model.py", "tests/test_adapters_reach.py",
            "tests/test_verification.py", "tests/test_real_models.py"]
    if importlib.util.find_spec("xdist") is not None:
        args += ["-n", "12"]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=seconds, check=False)
        tail = done.stdout.strip().splitlines()[-15:]
        return {"exit": done.returncode, "seconds": round(time.perf_counter() - t0, 1), "tail": tail}
    except subprocess.TimeoutExpired:
        return {"exit": None, "seconds": seconds, "tail": [f"did not finish in {seconds:.0f} s"]}


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.onnx"))


def verify_fixtures(targets: list[int], seconds: float, use_cuda: bool) -> list[dict[str, Any]]:
    """Each fixture to each target with the whole-model check on CUDA (or the CPU when CUDA cannot run)."""
    import lowerer

    rows: list[dict[str, Any]] = []
    deadline = time.perf_counter() + seconds
    for path in _fixtures():
        for target in targets:
            if time.perf_counter() > deadline:
                rows.append({"fixture": path.name, "target": target, "status": "not run (time budget)"})
                continue
            t0 = time.perf_counter()
            row: dict[str, Any] = {"fixture": path.name, "target": target}
            try:
                result = lowerer.convert(str(path), target_opset=target, verify_model=True,
                                         providers=["cuda", "cpu"] if use_cuda else ["cpu"])
                report = result.report.to_dict()
                check = report["summary"].get("model_check") or {}
                row.update(status="passed", model_check=check.get("status"), provider=check.get("provider"),
                           departures=[r["details"]["provider_departure"]["statement"]
                                       for r in report.get("rewrites", [])
                                       if "provider_departure" in (r.get("details") or {})])
                if "provider_departure" in (check.get("details") or {}):
                    row["model_departure"] = check["details"]["provider_departure"]["statement"]
            except lowerer.LowererError as e:
                row.update(status=type(e).__name__, error=str(e)[:400])
            row["seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
    return rows


def place_fixtures(seconds: float) -> list[dict[str, Any]]:
    """``for_backend="cuda"`` on each fixture: placement status and classes."""
    import lowerer

    rows: list[dict[str, Any]] = []
    deadline = time.perf_counter() + seconds
    for path in _fixtures():
        if time.perf_counter() > deadline:
            rows.append({"fixture": path.name, "placement": "not run (time budget)"})
            continue
        row: dict[str, Any] = {"fixture": path.name}
        try:
            backend = lowerer.convert(str(path), for_backend="cuda", verify=False,
                                      allow_fallback=True).report.backend or {}
            classes = backend.get("placement_classes") or {}
            row.update(placement=backend.get("placement"),
                       classes={k: len(v) for k, v in classes.items() if isinstance(v, list)},
                       on_provider=classes.get("on_provider"),
                       compute_on_cpu=(classes.get("no-kernel") or []) + (classes.get("rejected") or []))
        except lowerer.LowererError as e:
            row.update(placement=type(e).__name__, error=str(e)[:400])
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run every phase and print the summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=420.0, help="seconds for the whole check")
    parser.add_argument("--skip-tests", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    out: dict[str, Any] = {"providers": providers()}
    use_cuda = bool(out["providers"]["cuda_usable"])
    print(f"providers: {out['providers']}", flush=True)
    share = args.budget_s
    if not args.skip_tests:
        out["tests"] = run_tests(0.35 * share)
        print("tests:", *out["tests"]["tail"][-3:], sep="\n  ", flush=True)
    out["verify_model"] = verify_fixtures([13, 11], 0.35 * share, use_cuda)
    out["placement"] = place_fixtures(0.15 * share)
    from benchmarks import cuda_placement

    out["latency"] = cuda_placement.measure(20, quick=not use_cuda)
    passed = [r for r in out["verify_model"] if r.get("status") == "passed"]
    proven = [r for r in out["placement"] if r.get("placement") == "placement proven"]
    print(f"\n== summary ({'CUDA' if use_cuda else 'CPU only: ' + str(out['providers']['cuda_problem'])}) ==")
    print(f"verify_model to 13/11: {len(passed)}/{len(out['verify_model'])} passed")
    for r in out["verify_model"]:
        if r.get("status") != "passed" or r.get("departures") or r.get("model_departure"):
            print(f"  {r['fixture']} -> {r['target']}: {r.get('status')} {r.get('error', '')}"
                  f"{r.get('departures') or ''} {r.get('model_departure', '')}")
    print(f"--for cuda placement proven: {len(proven)}/{len(out['placement'])}")
    for r in out["placement"]:
        if r.get("placement") != "placement proven":
            print(f"  {r['fixture']}: {r.get('placement')} {r.get('classes', '')} {r.get('compute_on_cpu', '')[:3]}")
    for r in out["latency"]:
        print(f"latency {r['case']:<34} {r['inputs']:<7} {r['ratio']:.2f}x ({r['original_ms']:.3f} -> "
              f"{r['converted_ms']:.3f} ms)")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "cuda_check.json").write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
