"""The probe suite: what an installed runtime release really computes, op-version by op-version.

Each probe (:mod:`lowerer.backends.probe_models`) and each of onnx's node test cases (opset <= 23,
shipped inside the onnx package) is run on a :class:`~lowerer.backends.witnesses.Witness` and compared
with onnxruntime's CPU provider on the same model and inputs: discrete outputs exactly, floats within
the runtime's budget x the output's largest magnitude (its record's ``BUDGET``,
:mod:`lowerer.backends.runtimes`; :data:`DEFAULT_BUDGET` for a runtime lowerer has no record of).
Each gets one status: ``right``, ``wrong`` (with the largest difference, relative to the scale),
``fails`` (``stage``: load, compile, run, crash or timeout, and the runtime's message) or
``skipped`` (onnxruntime itself cannot run it, or an input no witness takes). The results are a
release's measured profile: ``lowerer/backends/measured/<runtime>-<version>.json`` are such runs.

Command line::

    export LOWERER_WITNESS_PYTHON=/venvs/ov2024/bin/python
    python -m lowerer.cli.probes --runtime openvino --json lowerer/backends/measured/openvino-2024.0.0.json
    export LOWERER_WITNESS_PYTHON=/venvs/tract/bin/python
    python -m lowerer.cli.probes --runtime tract --json lowerer/backends/measured/tract-0.23.9.json
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from lowerer.backends import witnesses
from lowerer.backends.probe_models import EXPANSIONS, LOWERED, Probe, base_probes
from lowerer.backends.runtimes import runtime_of, runtimes
from lowerer.backends.witnesses import Witness, find_witness

__all__ = ["DEFAULT_BUDGET", "budget_of", "Result", "compare", "expansion_probes", "form_probes", "main",
           "node_case_probes", "run_probes", "summarize"]

#: Float outputs may differ from onnxruntime CPU by this much x the output's largest magnitude, on a runtime
#: with no record of its own (each runtime's ``BUDGET`` in :mod:`lowerer.backends.runtimes` says its own).
DEFAULT_BUDGET = 1e-5


def budget_of(runtime: str) -> float:
    """The budget of ``runtime`` (``NAME`` or ``NAME:PARAM``): its record's, else :data:`DEFAULT_BUDGET`."""
    record = runtime_of(runtime)
    return record.budget if record is not None else DEFAULT_BUDGET

#: The targets each expansion body is written for (lowerer.convert(model, target_opset=T)).
EXPANSION_TARGETS: dict[str, tuple[int, ...]] = {
    "Gelu-20-none": (18, 17), "Gelu-20-tanh": (18, 17), "RMSNormalization-23": (18, 17),
    "LayerNormalization-17": (16, 13), "Attention-23": (18, 17),
    "Attention-23-gqa": (18,), "Attention-23-noncausal": (18,), "Attention-23-bool-mask": (18,),
    "RotaryEmbedding-23": (18, 17)}
_RANDOM_OPS = frozenset({"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
                         "RandomUniformLike", "Dropout"})
#: float16 outputs: 2 units of float16's epsilon (2^-10) x scale, whatever the budget (the reference
#: itself rounds to float16).
_LOW_PRECISION = {"float16": 2.0 * 2.0**-10}
_MAX_OPSET = 23
_BATCH_SECONDS = 120.0


@dataclass
class Result:
    """One probe's outcome on one runtime.

    Attributes:
        name: the probe (or ``node:<case>``).
        group: its family (``node`` for onnx's cases).
        status: ``right``, ``wrong``, ``fails`` or ``skipped``.
        stage: for ``fails``, where (load, compile, run, crash, timeout).
        max_diff: for floats, the largest difference / the output's largest magnitude.
        message: the runtime's error, or what differed.
        op_versions: the default-domain op-versions of the probe's graph (``Softmax-11``).
    """

    name: str
    group: str
    status: str
    stage: str = ""
    max_diff: float | None = None
    message: str = ""
    op_versions: tuple[str, ...] = ()


def compare(reference: Sequence[np.ndarray], got: Sequence[np.ndarray], budget: float) -> tuple[bool, float, str]:
    """Whether ``got`` matches ``reference``: discrete exactly, floats within ``budget`` x scale.

    The scale is the reference output's largest finite magnitude; NaN and infinities must be where the
    reference has them; a float16 output is allowed 2 x 2^-10 x scale at least.

    Returns:
        (matches, the worst float difference relative to its output's scale, what differed).
    """
    if len(got) != len(reference):
        return False, float("inf"), f"{len(got)} outputs, expected {len(reference)}"
    worst = 0.0
    for i, (want, have) in enumerate(zip(reference, got, strict=True)):
        want, have = np.asarray(want), np.asarray(have)
        if want.shape != have.shape:
            return False, float("inf"), f"output {i}: shape {have.shape}, expected {want.shape}"
        if want.dtype.kind not in "fc":
            if want.dtype.kind in "OSU" or not np.array_equal(want.astype(np.float64), have.astype(np.float64)):
                wrong = int(np.sum(want != have)) if want.dtype.kind not in "OSU" else -1
                return False, float("inf"), f"output {i}: {wrong} of {want.size} values differ"
            continue
        w, h = want.astype(np.float64), have.astype(np.float64)
        if not np.array_equal(np.isnan(w), np.isnan(h)) or not np.array_equal(w[np.isinf(w)], h[np.isinf(w)]):
            return False, float("inf"), f"output {i}: NaN or infinity differs"
        finite = np.isfinite(w)
        if not finite.any():
            continue
        scale = max(float(np.max(np.abs(w[finite]))), 1e-30)
        diff = float(np.max(np.abs(w[finite] - h[finite]), initial=0.0)) / scale
        worst = max(worst, diff)
        if not diff <= max(budget, _LOW_PRECISION.get(want.dtype.name, 0.0)):
            return False, worst, f"output {i}: off by {diff:.3g} x scale {scale:.3g}"
    return True, worst, ""


def op_versions(model: onnx.ModelProto) -> tuple[str, ...]:
    """The default-domain op-versions of the top-level graph (``Softmax-11``), sorted."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    found = set()
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx"):
            try:
                found.add(f"{node.op_type}-{onnx.defs.get_schema(node.op_type, opset).since_version}")
            except onnx.defs.SchemaError:
                found.add(f"{node.op_type}-?")
    return tuple(sorted(found))


def expansion_probes() -> list[Probe]:
    """The bodies lowerer writes (Gelu-20, RMSNorm-23, LayerNorm-17, Attention-23, RotaryEmbedding-23), LOWERED's."""
    from lowerer.api import convert  # the probe suite is a leaf: nothing in lowerer imports it

    probes = []
    for name, build in EXPANSIONS.items():
        model, feeds = build()
        for target in EXPANSION_TARGETS[name]:
            written = convert(model, target_opset=target).model
            probes.append(Probe(f"{name}-to{target}", "expansion", f"{name}'s body as lowerer writes it at "
                                f"opset {target}", written, feeds))
    for name, (build, targets) in LOWERED.items():
        model, feeds = build()
        for target in targets:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                written = convert(model, target_opset=target).model
            probes.append(Probe(f"{name}-to{target}", "lowered", f"{name} as lowerer writes it at opset {target}",
                                written, feeds))
    return probes


#: The profile the reduce forms' probes are written with: OpenVINO 2023.0's row and entries (``argmax-reduce``,
#: ``hardmax-reduce``), as a range no witnessed release lies in, so the deployment check does not run during the
#: conversion (the probe itself is the measurement, on every release).
FORM_SPEC = "openvino<2023.0.1"
#: The targets the reduce forms are written for (ReduceMax/ReduceMin-11 and -13, axes as an attribute).
FORM_TARGETS = (11, 17)


def form_probes() -> list[Probe]:
    """ArgMax/ArgMin/Hardmax on rows of 16 and 64 with ties as ``argmax-reduce``/``hardmax-reduce`` write them."""
    from lowerer.api import convert  # the probe suite is a leaf: nothing in lowerer imports it

    probes = []
    for source in base_probes():
        if source.name.split("-")[0] not in ("ArgMax", "ArgMin", "Hardmax") or \
                not any(kind in source.name for kind in ("-rows", "-coerced")):
            continue
        for target in FORM_TARGETS:
            written = convert(source.model, target_opset=target, for_backend=FORM_SPEC).model
            probes.append(Probe(f"{source.name}-reduce-to{target}", "reduce-forms", f"{source.name} as the reduce "
                                f"form lowerer writes at opset {target} (no ArgMax/TopK)", written, source.feeds))
    return probes + _entry_form_probes()


#: Forms an entry names, each written for one profile that names it, from the probes its entry covers: the
#: pattern of the source probes' names, the profile, the target opset (``rknn==1.6``: rknn's entry names
#: Softmax, Hardmax and LogSoftmax-1/11 on a non-last axis, at a release no witness is, so that no deployment
#: check runs while the probes are written).
ENTRY_FORMS: dict[str, tuple[str, str, int]] = {
    "argmax-flip": (r"select_last_index1$|-rows16-last$", "cuda", 13),
    "last-axis": (r"^Softmax-11-axis[01]$|-shared-axis1$", "rknn==1.6", 11),
    "einsum-diagonal": (r"^Einsum-12-(trace|diagonal|batch-diagonal)$", FORM_SPEC, 17),
    "gelu-mul": (r"^Gelu-20-none-wide$", FORM_SPEC, 17),
    "attention-scale-after": (r"^Attention-23-(gqa|noncausal)$", "rknn==1.6", 19),
    "expand": (r"^GroupNormalization-21-(dynamic|rank3)$", "qnn==2.6", 21),
    "gather-slices": (r"^Gather-13-(negative|list|list-2d)$", "ncnn", 17),
    "where-constant": (r"^Where-16-constant-condition$", "ncnn", 17),
    "isnan-ordered": (r"^IsNaN-13$", "mnn==3.6", 17),
    "isnan-ordered-below-12": (r"^IsNaN-13$", "mnn==3.6", 11),
    "constant-fill": (r"^ConstantOfShape-9-scalar$", "mnn==3.6", 17),
    "explicit-fill": (r"^ConstantOfShape-9-no-value$", "mnn==3.6", 17),
    "einsum-pairwise": (r"^Einsum-12-three-operands$", "mnn==3.6", 17),
    "shape-slice": (r"^Shape-15-dims-Reshape$", "tvm==0.27", 17),
    "attention-float-mask": (r"^Attention-23-bool-mask$", "tract<0.23.9", 23),
    "attention-trilu-isinf": (r"^Attention-23(-noncausal|-bool-mask)?$", "tvm==0.27", 17),
}


def _entry_form_probes() -> list[Probe]:
    """The sources of :data:`ENTRY_FORMS` as each form writes them (``ArgMax-13-rows16-last-argmax-flip``).

    A source is a base probe or the one-node model of an expansion (``Attention-23-gqa``).
    """
    from lowerer.api import convert  # the probe suite is a leaf: nothing in lowerer imports it

    probes = []
    sources = [*base_probes(), *(Probe(name, "expansion", "", *build()) for name, build in EXPANSIONS.items())]
    for form, (pattern, spec, target) in ENTRY_FORMS.items():
        for source in sources:
            if not re.search(pattern, source.name):
                continue
            written = convert(source.model, target_opset=target, for_backend=spec).model
            probes.append(Probe(f"{source.name}-{form}", "entry-forms", f"{source.name} as the {form} form writes "
                                "it", written, source.feeds))
    return probes


def node_case_probes(max_opset: int = _MAX_OPSET) -> list[Probe]:
    """Onnx's node test cases (opset <= ``max_opset``, default domain, no random op, tensor inputs)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node.collect_testcases("")
    probes = []
    for case in sorted(cases, key=lambda c: c.name):
        model = case.model
        if model is None:
            continue
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if opset is None or opset > max_opset or any(o.domain not in ("", "ai.onnx") for o in model.opset_import):
            continue
        if any(n.op_type in _RANDOM_OPS for n in model.graph.node) or not case.data_sets:
            continue
        inputs = case.data_sets[0][0]
        if not all(isinstance(v, np.ndarray) and v.dtype.kind in "biuf?" and v.dtype.itemsize <= 8
                   and v.dtype.name != "bfloat16" for v in inputs):
            continue
        initialized = {t.name for t in model.graph.initializer}
        names = [i.name for i in model.graph.input if i.name not in initialized]
        if len(names) != len(inputs):
            continue
        probes.append(Probe(f"node:{case.name}", "node", "onnx node test case", model,
                            dict(zip(names, inputs, strict=True))))
    return probes


def _reference(probe: Probe) -> list[np.ndarray] | str:
    """The outputs of onnxruntime CPU, or why it cannot run the probe."""
    try:
        options = ort.SessionOptions()
        options.log_severity_level = 4
        session = ort.InferenceSession(probe.model.SerializeToString(), options,
                                       providers=["CPUExecutionProvider"])
        return [np.asarray(v) for v in session.run(None, probe.feeds)]
    except Exception as e:  # onnxruntime raises its own exception types
        return f"onnxruntime CPU cannot run it: {' '.join(str(e).split())[:200]}"


def _write_job(work: Path, index: int, probe: Probe) -> list[str | None]:
    folder = work / f"j{index}"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(probe.model.SerializeToString())
    order = list(probe.feeds)
    arrays: dict[str, Any] = {f"s0_in{i}": np.asarray(probe.feeds[n]) for i, n in enumerate(order)}
    np.savez(folder / "feeds.npz", __order__=np.array(json.dumps(order)), __sets__=np.array(1), **arrays)
    (folder / "outputs.json").write_text(json.dumps([o.name for o in probe.model.graph.output]), encoding="utf-8")
    return [str(folder / "model.onnx"), str(folder / "feeds.npz"), str(folder), str(folder / "outputs.json")]


def _collect(folder: Path) -> list[np.ndarray] | tuple[str, str] | None:
    """A finished job's outputs, or (stage, message), or None when it did not finish."""
    if (folder / "error.json").exists():
        found = json.loads((folder / "error.json").read_text(encoding="utf-8"))
        return str(found["stage"]), str(found["message"])
    if (folder / "outputs.npz").exists() and (folder / "done").exists():
        with np.load(folder / "outputs.npz", allow_pickle=False) as data:
            return [np.array(data[f"s0_{j}"]) for j in range(len(data.files))]
    return None


def run_batch(witness: Witness, probes: Sequence[Probe]) -> list[list[np.ndarray] | tuple[str, str]]:
    """Each probe run on ``witness``, many in one worker process; a crash or hang costs one probe only."""
    worker = Path(witnesses.__file__).with_name("witness_worker.py")
    results: list[list[np.ndarray] | tuple[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="lowerer-probes-") as folder:
        work = Path(folder)
        jobs = [_write_job(work, i, p) for i, p in enumerate(probes)]
        start = 0
        while start < len(jobs):
            (work / "jobs.json").write_text(json.dumps(jobs[start:]), encoding="utf-8")
            why = ""
            try:
                done = subprocess.run([witnesses.executable(witness.python), str(worker), "batch", witness.runtime,
                                       str(work / "jobs.json")], cwd=work,
                                      capture_output=True, text=True, env=witnesses._quiet_env(), check=False,
                                      timeout=_BATCH_SECONDS + 30.0 * (len(jobs) - start))
                lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
                why = f"exit status {done.returncode}" + (f": {lines[-1][:200]}" if lines else "")
            except subprocess.TimeoutExpired:
                why = "timeout"
            while start < len(jobs):
                found = _collect(Path(str(jobs[start][2])))
                if found is None:
                    results.append(("timeout" if why == "timeout" else "crash", why))
                    start += 1
                    break
                results.append(found)
                start += 1
    return results


def run_probes(witness: Witness, probes: Sequence[Probe], budget: float | None = None) -> list[Result]:
    """Run ``probes`` on ``witness``; each compared with onnxruntime CPU (see the module docstring)."""
    budget = budget_of(witness.runtime) if budget is None else budget
    references = [_reference(p) for p in probes]
    runnable = [p for p, r in zip(probes, references, strict=True) if not isinstance(r, str)]
    outcomes = iter(run_batch(witness, runnable))
    results = []
    for probe, reference in zip(probes, references, strict=True):
        versions = op_versions(probe.model)
        if isinstance(reference, str):
            results.append(Result(probe.name, probe.group, "skipped", message=reference, op_versions=versions))
            continue
        got = next(outcomes)
        if isinstance(got, tuple):
            results.append(Result(probe.name, probe.group, "fails", got[0], message=_clip(got[1]),
                                  op_versions=versions))
            continue
        ok, worst, what = compare(reference, got, budget)
        results.append(Result(probe.name, probe.group, "right" if ok else "wrong", max_diff=worst if worst else None,
                              message=what, op_versions=versions))
    return results


def _clip(message: str, limit: int = 300) -> str:
    """The message's head and tail (a traceback's last line names the cause) within ``limit`` characters."""
    if len(message) <= limit:
        return message
    half = limit // 2 - 3
    return f"{message[:half]} ... {message[-half:]}"


def summarize(results: Sequence[Result]) -> dict[str, Any]:
    """Counts by status, by group, and per op-version of onnx's single-op node cases."""
    per_version: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        if r.group == "node" and not r.name.endswith("_expanded") and len(r.op_versions) == 1:
            per_version[r.op_versions[0]][r.status] += 1
    groups: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for r in results:
        groups[r.group][r.status] += 1
    return {"total": dict(collections.Counter(r.status for r in results)),
            "groups": {g: dict(c) for g, c in sorted(groups.items())},
            "op_versions": {v: dict(c) for v, c in sorted(per_version.items())}}


def _record(witness: Witness, results: Sequence[Result], command: str, budget: float) -> dict[str, Any]:
    extra = _bundled(witness)
    version = witness.version.split(" (")[0]  # onnxruntime-openvino's "1.24.1 (OpenVINO 2025.4.1)": in "openvino"
    label = witness.label.replace(witness.version, version)
    # The runtime's name (onnxruntime-qnn, not onnxruntime-qnn:htp-only: the mode is in the command), as the file
    # is named; an onnxruntime provider keeps its name (onnxruntime:CUDAExecutionProvider).
    record = runtime_of(witness.runtime)
    runtime = record.name if record is not None and record.name != "onnxruntime" else witness.runtime
    return {"runtime": runtime, "version": version, **extra, "label": label,
            "date": datetime.date.today().isoformat(), "command": command, "reference": f"onnxruntime "
            f"{ort.__version__} CPUExecutionProvider", "budget": budget, "summary": summarize(results),
            "results": {r.name: {k: v for k, v in asdict(r).items() if v not in ("", None, ()) and k != "name"}
                        for r in results if r.group != "node" or r.status != "right"}}


def _bundled(witness: Witness) -> dict[str, str]:
    """``{"openvino": "2025.4.1"}`` for onnxruntime-openvino (the release its wheel bundles), else empty."""
    record = runtime_of(witness.runtime)
    if record is None or not record.release:
        return {}
    worker = Path(witnesses.__file__).with_name("witness_worker.py")
    done = subprocess.run([witness.python, str(worker), "version", witness.runtime], capture_output=True, text=True,
                          check=False, env=witnesses._quiet_env())
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    found = json.loads(lines[-1]) if lines else {}
    return {record.release: str(found[record.release])} if record.release in found else {}


def _table(results: Sequence[Result]) -> str:
    rows = [f"{'probe':<52} {'status':<8} {'detail'}"]
    for r in results:
        if r.group == "node" and r.status == "right":
            continue
        detail = r.stage + (": " if r.stage else "") + (r.message or (f"{r.max_diff:.2g} x scale" if r.max_diff
                                                                      else ""))
        rows.append(f"{r.name[:52]:<52} {r.status:<8} {detail[:110]}")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lowerer.cli.probes --runtime openvino [--json out.json]``."""
    parser = argparse.ArgumentParser(prog="python -m lowerer.cli.probes", description=__doc__.split("\n")[0])
    parser.add_argument("--runtime", required=True, help=", ".join(r for r in runtimes() if r != "onnxruntime") +
                        ", or onnxruntime:<ExecutionProvider>; the Python it runs in is LOWERER_WITNESS_PYTHON")
    parser.add_argument("--json", type=Path, help="write the results there (a measured profile)")
    parser.add_argument("--no-node-cases", action="store_true", help="leave out onnx's node test cases")
    args = parser.parse_args(argv)
    witness, why = find_witness(args.runtime)
    if witness is None and args.runtime.startswith("onnxruntime:"):
        witness = Witness(args.runtime, ort.__version__)
    if witness is None:
        print(f"probes: no witness: {why}", file=sys.stderr)
        return 2
    probes = base_probes() + expansion_probes() + form_probes() + ([] if args.no_node_cases else node_case_probes())
    budget = budget_of(witness.runtime)
    results = run_probes(witness, probes, budget)
    print(_table(results))
    summary = summarize(results)
    print(f"\n{witness.label}: {len(results)} probes: " + ", ".join(f"{n} {s}" for s, n in summary["total"].items()))
    for group, counts in summary["groups"].items():
        print(f"  {group}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    if args.json:
        command = "python -m lowerer.cli.probes " + " ".join(argv if argv is not None else sys.argv[1:])
        record = _record(witness, results, command, budget)
        args.json.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
