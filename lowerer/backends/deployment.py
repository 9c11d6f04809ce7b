"""Verify on the deployment runtime: the converted model run where ``--for BACKEND`` says it must run.

When the runtime of the backend named is installed (a :mod:`~lowerer.backends.witnesses` witness: one of
:mod:`lowerer.backends.runtimes`) and its release is the one the profile was
applied for, the converted model runs there on the verification inputs, and every output is compared
with the original model run in onnxruntime's CPU provider (the converted one where onnxruntime cannot
run the original): discrete outputs exactly, float outputs within the profile's ``tolerance`` (a
difference relative to the output's largest magnitude, with its source: OpenVINO's CPU plugin at
fp32 reassociates sums; RKNN and QNN's HTP compute in fp16).

The inputs are the whole-model check's (:func:`lowerer.verification.feeds.generate_sets`: every kind of
generated values on the dims bound two ways, ±inf and NaN sets where an input is float, or the shapes,
value ranges and ``.npz`` files that check was given: ``--input-shapes``, ``--val-range``, ``--load-inputs``),
plus a tie-heavy set: small integers as floats, so ArgMax/Hardmax/TopK rows hold ties and ReLU planes are all
zero. Every output is compared; the ±inf and NaN sets are compared and recorded in the reason, not judged
(:data:`RECORDED_HERE`).

Where the conversion kept a node the runtime computes differently (a profile ``departure``: the
original model departs there too), an output that differs from onnxruntime is compared with the
original model run on the same runtime: equal there, it is the departure the user already has
(status ``departs-as-original``, said in the report, not a failure). So is a difference whose first
departing node (found as below) is that kept node, where the original does not run on the runtime
(OpenVINO 2023.0 loads no TopK-11 of an opset-20 detector, and computes the converted one's ties so).

A difference, or a model the runtime refuses, fails the conversion (exit 1) with one line naming the
output, the input set and, where it can be found, the first node whose value departs (both sides of
the converted model run with every top-level value as an output: the first node whose inputs agree
and whose output does not). The report records what ran where (``report.backend["deployment"]``). A
runtime that is not installed, or installed at another release, is recorded as not run.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from lowerer.backends.profile import Profile, VersionRange
from lowerer.backends.runtimes import witnesses_for
from lowerer.backends.witnesses import Witness, WitnessError, find_witness, release_of
from lowerer.core.errors import VerificationError
from lowerer.core.report import Report
from lowerer.verification.compare import OutputStats, Tolerance, output_scale, statistics
from lowerer.verification.feeds import generate_sets, recorded
from lowerer.verification.graph_inputs import FeedSet, merge_specs, model_inputs
from lowerer.verification.providers import CPU
from lowerer.verification.runner import SessionMaker
from lowerer.verification.whole import ModelCheckOptions

__all__ = ["Deployment", "check_deployment", "witness_for"]

logger = logging.getLogger(__name__)

#: The generated kinds compared on a backend's runtime and recorded, not judged: NaN (as in every check) and
#: ±inf (measured: OpenVINO 2025's CPU plugin gives other values than onnxruntime for Relu-6 of
#: ``examples/example_opset11.onnx`` on the inf set; backends compute with their own handling of infinities).
RECORDED_HERE = frozenset({"inf", "nan"})
#: Above this many top-level nodes the departing node is not searched for (every value would be an output).
LOCATE_LIMIT = 3000


@dataclass
class Deployment:
    """What the deployment check did: where it ran, the verdict, and per-output statistics.

    Attributes:
        status: ``equal``, ``different``, ``failed`` (the runtime refused or died) or ``not-run``.
        reason: one line.
        witness: the runtime's label, or None when none ran.
        reference: what the outputs were compared with (``onnxruntime 1.32.0 CPUExecutionProvider on the original``).
        outputs: statistics per output.
        input_sets: labels of the input sets.
        departs: the first node whose value departs, when found (``'name' (Op)``).
    """

    status: str
    reason: str
    witness: str | None = None
    reference: str | None = None
    outputs: list[OutputStats] = field(default_factory=list)
    input_sets: list[str] = field(default_factory=list)
    departs: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"status": self.status, "reason": self.reason, "witness": self.witness, "reference": self.reference,
                "outputs": [o.to_dict() for o in self.outputs], "input_sets": list(self.input_sets),
                "departs": self.departs}


def _holds(named: VersionRange, version: str) -> bool:
    """Whether release ``version`` (``2026.4.1``) is one ``named`` covers; ``==2026.4`` covers every 2026.4.x."""
    found = re.match(r"\d+(?:\.\d+)*", version)
    if found is None:
        return False
    parts = [int(p) for p in found.group(0).split(".")]
    exact = named.low == named.high and named.low[1]
    if exact:
        wanted = [p for p in named.low[0] if p >= 0]
        while len(wanted) > 1 and wanted[-1] == 0:
            wanted.pop()
        return parts[:len(wanted)] == wanted
    point = VersionRange.parse("==", found.group(0))
    return named.overlaps(point)


def witness_for(profile: Profile) -> tuple[Witness | None, str]:
    """The installed witness of ``profile``'s runtime at a release it names, or None and why not."""
    runtimes = witnesses_for(profile.name)
    if not runtimes:
        return None, (f"lowerer has no witness for {profile.runtime or profile.name}: the result was not run on "
                      "the backend")
    reasons = []
    for runtime in runtimes:
        witness, why = find_witness(runtime.name)
        if witness is None:
            reasons.append(why)
            continue
        release = release_of(witness)
        if _holds(profile.named, release):
            return witness, ""
        reasons.append(f"the installed {witness.label} is not {profile.spec}")
    return None, "; ".join(reasons) + ": the result was not run on the backend"


def check_deployment(original: onnx.ModelProto | None, converted: onnx.ModelProto, profile: Profile, report: Report,
                     *, seed: int = 0, data_dir: Path | None = None,
                     found: tuple[Witness | None, str] | None = None,
                     steering: ModelCheckOptions | None = None) -> Deployment:
    """Run ``converted`` on the backend's runtime where it is installed; compare; record in ``report.backend``.

    ``found``: :func:`witness_for`'s answer when the caller asked already (it then reads the original only
    where a witness will run). ``steering``: the whole-model check's options, whose input shapes, value
    ranges and loaded inputs the check uses too.

    Raises:
        VerificationError: the runtime refuses the converted model, dies, or computes another value for
            some output (see the module docstring).
    """
    witness, why = found if found is not None else witness_for(profile)
    if witness is None:
        result = Deployment("not-run", why)
    elif _has_external_data(converted) or (original is not None and _has_external_data(original)):
        result = Deployment("not-run", f"{witness.label} was not run: the model's weights are in external data",
                            witness.label)
    else:
        departures = frozenset(str(d["node"]) for d in (report.backend or {}).get("departures", ()))
        result = _run_check(original, converted, profile, witness, seed, data_dir, steering, departures)
    if report.backend is not None:
        report.backend["deployment"] = result.to_dict()
    if result.status in ("different", "failed"):
        error = VerificationError(f"{profile.spec}: {result.reason}")
        error.report = report
        raise error
    return result


def _has_external_data(model: onnx.ModelProto) -> bool:
    from lowerer.model_io.external_data import external_data_locations

    return bool(external_data_locations(model))


def _run_check(original: onnx.ModelProto | None, converted: onnx.ModelProto, profile: Profile, witness: Witness,
               seed: int, data_dir: Path | None, steering: ModelCheckOptions | None = None,
               departures: frozenset[str] = frozenset()) -> Deployment:
    reference_model, reference = (original, "the original") if original is not None else (converted, "the converted")
    sets = _input_sets(reference_model, converted, seed, steering)
    if isinstance(sets, str):
        return Deployment("not-run", f"{witness.label} was not run: {sets}", witness.label)
    maker = SessionMaker([CPU])
    expected = _run_reference(maker, reference_model, sets, data_dir)
    if isinstance(expected, str) and original is not None:
        reference_model, reference = converted, "the converted"
        expected = _run_reference(maker, converted, sets, data_dir)
    if isinstance(expected, str):
        return Deployment("not-run", f"{witness.label} was not run: onnxruntime cannot run the model: {expected}",
                          witness.label)
    import onnxruntime

    ref_label = f"onnxruntime {onnxruntime.__version__} CPU on {reference} model"
    labels = [s.label for s in sets]
    try:
        got = witness.run_sets(converted, [s.feeds for s in sets])
    except WitnessError as e:
        where = f" (input set {labels[e.input_set]})" if e.input_set is not None else ""
        return Deployment("failed", f"{witness.label} cannot {_verb(e.stage)} the converted model{where}: "
                                    f"{_short(str(e))}", witness.label, ref_label, input_sets=labels)
    judged = [k for k, s in enumerate(sets) if not _recorded_here(s.label)]
    stats = _compare(converted, [expected[k] for k in judged], [got[k] for k in judged], [sets[k] for k in judged],
                     profile.tolerance)
    bad = [s for s in stats if not s.ok]
    if not bad:
        return Deployment("equal", f"ran on {witness.label}: {len(stats)} output(s) equal to {ref_label} "
                                   f"({_judged(stats, profile.tolerance)}) on {len(judged)} input set(s)"
                                   f"{_recorded(converted, expected, got, sets, profile.tolerance)}",
                          witness.label, ref_label, stats, labels)
    if departures and original is not None and reference == "the original" and \
            _as_original(original, converted, witness, sets, got, profile.tolerance):
        same = ", ".join(repr(s.name) for s in bad)
        return Deployment("departs-as-original", f"ran on {witness.label}: output(s) {same} differ from {ref_label} "
                                                 f"as the original model does on {witness.label} (the departure "
                                                 "named in report.backend.departures)", witness.label, ref_label,
                          stats, labels)
    node = _locate(converted, witness, sets, bad[0], profile.tolerance)
    departs = _node_label(converted, node) if node is not None else None
    first = bad[0]
    if node is not None and node.name in departures:
        return Deployment("departs-as-original", f"ran on {witness.label}: output {first.name!r} differs from "
                                                 f"{ref_label} ({_describe(first)}, input set "
                                                 f"{first.worst_input_set}), first at {departs}, the departure "
                                                 "named in report.backend.departures (the original model's own "
                                                 "node, which the runtime computes so)", witness.label, ref_label,
                          stats, labels, departs)
    where = f"; the first node that departs there: {departs}" if departs else ""
    reason = (f"the converted model computes otherwise on {witness.label}: output {first.name!r} differs from "
              f"{ref_label} ({_describe(first)}, input set {first.worst_input_set}){where}")
    return Deployment("different", reason, witness.label, ref_label, stats, labels, departs)


def _as_original(original: onnx.ModelProto, converted: onnx.ModelProto, witness: Witness, sets: list[FeedSet],
                 got: list[list[np.ndarray]], relative: float) -> bool:
    """Whether the original model, run on the witness, gives what the converted one does there."""
    try:
        there = witness.run_sets(original, [s.feeds for s in sets])
    except WitnessError:
        return False
    return all(s.ok for s in _compare(converted, there, got, sets, relative))


def _verb(stage: str) -> str:
    return {"load": "load", "compile": "compile", "run": "run"}.get(stage, "run")


def _short(text: str, limit: int = 400) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[:limit] + " ..."


def _input_sets(reference: onnx.ModelProto, converted: onnx.ModelProto, seed: int,
                steering: ModelCheckOptions | None = None) -> list[FeedSet] | str:
    """The input sets (the whole-model check's, generated or loaded as ``steering`` says) plus a tie-heavy one."""
    import zlib

    from lowerer.verification.feeds import load_sets

    specs_a, specs_b = model_inputs(reference), model_inputs(converted)
    if isinstance(specs_a, str):
        return specs_a
    if isinstance(specs_b, str):
        return specs_b
    merged = merge_specs(specs_a, specs_b, ("original", "converted"))
    if isinstance(merged, str):
        return merged
    if steering is not None and steering.load_inputs:
        return load_sets(steering.load_inputs, merged)  # the user's own inputs, as they are
    sets, _ = generate_sets(reference, merged, seed_key=[seed, zlib.crc32(b"deployment")],
                            input_shapes=None if steering is None else steering.input_shapes,
                            value_ranges=None if steering is None else steering.value_ranges, special=True)
    if not sets:
        return "no input sets could be made"
    rng = np.random.default_rng([seed, 7])
    tied = {}
    for name, value in sets[0].feeds.items():
        tied[name] = rng.integers(-2, 3, size=value.shape).astype(value.dtype) if value.dtype.kind == "f" else value
    return [*sets, FeedSet(f"ties ({sets[0].label.split(' ', 1)[-1]})", tied)]


def _run_reference(maker: SessionMaker, model: onnx.ModelProto, sets: list[FeedSet],
                   data_dir: Path | None) -> list[list[np.ndarray]] | str:
    engine = maker.create(model, data_dir)
    if isinstance(engine, str):
        return engine
    out = []
    for s in sets:
        try:
            out.append(engine.run(s.feeds))
        except Exception as e:
            return f"input set {s.label}: {_short(str(e))}"
    return out


def _tolerance(expected: np.ndarray, relative: float) -> Tolerance:
    return Tolerance(atol=relative * output_scale(expected))


def _compare(converted: onnx.ModelProto, expected: list[list[np.ndarray]], got: list[list[np.ndarray]],
             sets: list[FeedSet], relative: float) -> list[OutputStats]:
    names = [o.name for o in converted.graph.output]
    stats: list[OutputStats] = []
    for j, name in enumerate(names):
        merged: OutputStats | None = None
        for k, s in enumerate(sets):
            want, have = expected[k][j], got[k][j] if j < len(got[k]) else np.array([])
            if want.ndim == 0 and have.shape == (1,):  # rknn-toolkit2's simulator returns a 0-d output as [v]
                have = have.reshape(())
            one = statistics(want, np.asarray(have), _tolerance(want, relative), name=name,
                             sides=("onnxruntime", "backend"))
            one.worst_input_set = s.label
            merged = one if merged is None else merged.merge(one)
        if merged is not None:
            stats.append(merged)
    return stats


def _recorded(converted: onnx.ModelProto, expected: list[list[np.ndarray]], got: list[list[np.ndarray]],
              sets: list[FeedSet], relative: float) -> str:
    """What the recorded sets gave, for the reason: ``; ±inf and NaN sets (recorded, not judged): equal``."""
    kept = [k for k, s in enumerate(sets) if _recorded_here(s.label)]
    if not kept:
        return ""
    stats = _compare(converted, [expected[k] for k in kept], [got[k] for k in kept], [sets[k] for k in kept], relative)
    bad = [f"output {s.name!r}: {_describe(s)}" for s in stats if not s.ok]
    return f"; ±inf and NaN sets (recorded, not judged): {'; '.join(bad) or 'equal'}"


def _recorded_here(label: str) -> bool:
    return recorded(label) or label.split(" ", 1)[0] in RECORDED_HERE


def _describe(stats: OutputStats) -> str:
    if stats.what:
        return stats.what
    return f"{stats.mismatches} of {stats.count} values, largest difference {stats.max_abs:.3g}"


def _judged(stats: list[OutputStats], relative: float) -> str:
    if all(s.discrete or s.max_abs == 0 for s in stats):
        return "exactly"
    return f"within {relative:g} x each output's largest magnitude"


def _locate(converted: onnx.ModelProto, witness: Witness, sets: list[FeedSet], bad: OutputStats,
            relative: float) -> onnx.NodeProto | None:
    """The first top-level node whose output departs on the witness while its inputs agree (None: not found)."""
    graph = converted.graph
    if len(graph.node) > LOCATE_LIMIT:
        return None
    index = next((k for k, s in enumerate(sets) if s.label == bad.worst_input_set), len(sets) - 1)
    feeds = sets[index].feeds
    names = [o for n in graph.node for o in n.output if o]
    probe = onnx.ModelProto()
    probe.CopyFrom(converted)
    known = {o.name for o in probe.graph.output}
    for name in names:
        if name not in known:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
            known.add(name)
    wanted = [o.name for o in probe.graph.output]
    engine = SessionMaker([CPU]).create(probe)
    if isinstance(engine, str):
        return None
    try:
        want = dict(zip(wanted, engine.run(feeds), strict=True))
        have = dict(zip(wanted, witness.run(probe, feeds, wanted), strict=True))
    except (WitnessError, Exception):  # a value the runtime fused away cannot be asked for: no finding
        return None
    node: onnx.NodeProto
    for node in graph.node:  # in topological order: the first node that departs has inputs that agree
        for out in node.output:
            if out and out in want and out in have and \
                    not statistics(want[out], np.asarray(have[out]), _tolerance(want[out], relative)).ok:
                return node
    return None


def _node_label(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """``'name' (Op-v)``: the node and its op's since-version at the model's opset."""
    from lowerer.core.opsets import default_opset, is_default_domain, since_version

    opset = default_opset(model.opset_import)
    version = since_version(node.op_type, opset) if is_default_domain(node.domain) and opset is not None else None
    op = f"{node.op_type}-{version}" if version is not None else node.op_type
    return f"{node.name or node.op_type!r} ({op})"
