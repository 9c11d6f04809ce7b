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
zero, and, where an input is float, a set with -inf alone sprinkled in (with both signs, most rows of a
Softmax or a sum come out NaN). Every output is compared; the NaN sets are compared and recorded in the
reason, not judged (:data:`RECORDED_HERE`). The ±inf sets are judged, but a set where the first node whose
value departs is of an op the runtime is known to compute NaN or ±inf otherwise than onnxruntime does (its
module's ``NONFINITE``, measured and cited: OpenVINO's Relu gives 0 for NaN) is recorded, saying so; so is
a ±inf set on which the original model, run on the same runtime, gives what the converted one gives (the
runtime's own ±inf handling in the user's ops: a departure the user already has), and a ±inf set on which a
node of the model onnxruntime ran meets a departure of onnxruntime's own kernel from the spec listed in
``lowerer/verification/departures.json`` (the reference departs there: its bool-mask Attention).

Where the conversion kept a node the runtime computes differently (a profile ``departure``: the
original model departs there too), an output that differs from onnxruntime is compared with the
original model run on the same runtime: equal there, it is the departure the user already has
(status ``departs-as-original``, said in the report, not a failure). So is a difference whose first
departing node (found as below) is that kept node, where the original does not run on the runtime
(OpenVINO 2023.0 loads no TopK-11 of an opset-20 detector, and computes the converted one's ties so).

A runtime that users run with a CPU fallback (onnxruntime-qnn: its record's ``JUDGES_CHANGES``) is
judged on what lowerer changed: the converted model runs as users run it (the fallback on), the nodes
the CPU took are reported (``placement``), not judged, and where the converted model fails or differs
there and the original model fails or differs there too, that is recorded (status ``fails-as-original``
or ``differs-as-original``), not a failure: the runtime's, which the user already has.

A difference, or a model the runtime refuses, fails the conversion (exit 1) with one line naming the
output, the input set and, where it can be found, the first node whose value departs (both sides of
the converted model run with every top-level value as an output: the first node whose inputs agree
and whose output does not); the line also says what the original model does there (one more run of the
witness, on failure only): a failure, or the same values, the original shows too is the runtime's own, in the
model as exported; one it does not show came with the conversion. The report records
what ran where (``report.backend["deployment"]``). A
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
from lowerer.backends.runtimes import runtime_of, witnesses_for
from lowerer.backends.witnesses import Ran, Witness, WitnessError, find_witness, release_of
from lowerer.core.errors import VerificationError
from lowerer.core.report import Report
from lowerer.model_io.naming import node_key
from lowerer.verification.blame import departure_met
from lowerer.verification.compare import OutputStats, Tolerance, output_scale, statistics
from lowerer.verification.feeds import generate_sets, recorded
from lowerer.verification.graph_inputs import FeedSet, merge_specs, model_inputs
from lowerer.verification.providers import CPU
from lowerer.verification.runner import SessionMaker
from lowerer.verification.whole import ModelCheckOptions

__all__ = ["Deployment", "check_deployment", "witness_for"]

logger = logging.getLogger(__name__)

#: The generated kinds compared on a backend's runtime and recorded, not judged: NaN (as in every check). The ±inf
#: sets are judged unless the runtime's known non-finite departures cover the node where they depart
#: (:func:`_inf_sets`).
RECORDED_HERE = frozenset({"nan"})
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
        placement: where a runtime with a CPU fallback put the converted model's nodes (the runtime
            module's ``placement``: ``fallback``, ``nodes``, ``provider``, ``on_cpu``), or None.
    """

    status: str
    reason: str
    witness: str | None = None
    reference: str | None = None
    outputs: list[OutputStats] = field(default_factory=list)
    input_sets: list[str] = field(default_factory=list)
    departs: str | None = None
    placement: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"status": self.status, "reason": self.reason, "witness": self.witness, "reference": self.reference,
                "outputs": [o.to_dict() for o in self.outputs], "input_sets": list(self.input_sets),
                "departs": self.departs, "placement": self.placement}


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
    sets = _input_sets(original if original is not None else converted, converted, seed, steering)
    if isinstance(sets, str):
        return Deployment("not-run", f"{witness.label} was not run: {sets}", witness.label)
    found = _reference_outputs(original, converted, sets, data_dir)
    if isinstance(found, str):
        return Deployment("not-run", f"{witness.label} was not run: onnxruntime cannot run the model: {found}",
                          witness.label)
    reference, ref_label, sets, expected = found.whose, found.label(sets), found.kept(sets), found.expected
    shared = original is not None and reference == "the original" and _judges_changes(witness)
    ran, sets, expected, left = _run_converted(original if reference == "the original" else None, converted,
                                               witness, sets, expected)
    if isinstance(ran, WitnessError):
        return _refused(ran, original, witness, sets, reference, ref_label, shared)
    ref_label, labels = ref_label + left, [s.label for s in sets]
    got, placed = ran.values, _placed(ran.placement)
    judged = [k for k, s in enumerate(sets) if not _recorded_here(s.label) and not _special(s.label)]
    stats = _compare(converted, [expected[k] for k in judged], [got[k] for k in judged], [sets[k] for k in judged],
                     profile.tolerance)
    bad = [s for s in stats if not s.ok]
    covered = None
    if not bad:
        stats, bad, judged, covered = _inf_sets(converted, witness, sets, expected, got, profile.tolerance, judged,
                                                original if reference == "the original" else None, data_dir)
    if not bad:
        kept = [k for k in range(len(sets)) if k not in judged]
        return Deployment("equal", f"ran on {witness.label}{placed}: {len(stats)} output(s) equal to {ref_label} "
                                   f"({_judged(stats, profile.tolerance)}) on {len(judged)} input set(s)"
                                   f"{_recorded(converted, expected, got, sets, profile.tolerance, kept, covered)}",
                          witness.label, ref_label, stats, labels, placement=ran.placement)
    if departures and original is not None and reference == "the original" and \
            _as_original(original, converted, witness, sets, got, profile.tolerance):
        same = ", ".join(repr(s.name) for s in bad)
        return Deployment("departs-as-original", f"ran on {witness.label}: output(s) {same} differ from {ref_label} "
                                                 f"as the original model does on {witness.label} (the departure "
                                                 "named in report.backend.departures)", witness.label, ref_label,
                          stats, labels, placement=ran.placement)
    first = bad[0]
    differs = f"output {first.name!r} differs from {ref_label} ({_describe(first)}, input set {first.worst_input_set})"
    if shared and original is not None and \
            (there := _original_there(original, witness, sets, [expected[k] for k in judged], judged,
                                      profile.tolerance)) is not None:
        return Deployment("differs-as-original", f"ran on {witness.label}{placed}: {differs}; the original model "
                                                 f"{there} there too: the runtime's, recorded, not judged",
                          witness.label, ref_label, stats, labels, placement=ran.placement)
    node = _locate(converted, witness, sets, first, profile.tolerance)
    departs = _node_label(converted, node) if node is not None else None
    if node is not None and _finding_name(converted, node) in departures:
        return Deployment("departs-as-original", f"ran on {witness.label}{placed}: {differs}, first at {departs}, "
                                                 "the departure named in report.backend.departures (the original "
                                                 "model's own node, which the runtime computes so)", witness.label,
                          ref_label, stats, labels, departs, ran.placement)
    where = f"; the first node that departs there: {departs}" if departs else ""
    reason = f"the converted model computes otherwise on {witness.label}{placed}: {differs}{where}" + \
        _difference_fate(original if reference == "the original" else None, converted, witness, sets, expected, got,
                         judged, profile.tolerance) + _domain_hint(found, steering)
    return Deployment("different", reason, witness.label, ref_label, stats, labels, departs, ran.placement)


def _domain_hint(found: _Reference, steering: ModelCheckOptions | None) -> str:
    """Where onnxruntime could not run some generated input sets: a sign they lie outside the model's domain."""
    if not found.errors or (steering is not None and steering.load_inputs):
        return ""
    return (f"; onnxruntime could not run {len(found.errors)} of the generated input sets either: where the inputs "
            "lie outside what the model takes, give inputs it takes (--verify-model --load-inputs IN.npz, or "
            "--input-shapes NAME:DIMS)")


def _run_converted(original: onnx.ModelProto | None, converted: onnx.ModelProto, witness: Witness,
                   sets: list[FeedSet], expected: list[list[np.ndarray]]
                   ) -> tuple[Ran | WitnessError, list[FeedSet], list[list[np.ndarray]], str]:
    """The converted model run on the witness: (what it gave or why not, the sets run, their expected values, a note).

    A ±inf or NaN set the runtime cannot run, and cannot run for the original model either, is left out and said
    (the note): the runtime's own handling of ±inf and NaN in the model's ops (an index computed from them and
    checked there, which onnxruntime runs), as the ±inf sets whose values the original shares are recorded.
    """
    left: list[str] = []
    while True:
        try:
            ran: Ran | WitnessError = witness.run_placed(converted, [s.feeds for s in sets])
        except WitnessError as e:
            ran = e
        k = ran.input_set if isinstance(ran, WitnessError) else None
        special = k is not None and (_inf(sets[k].label) or _recorded_here(sets[k].label))
        if k is None or original is None or len(sets) < 2 or not special or \
                _original_there(original, witness, [sets[k]]) is None:
            note = f" ({len(left)} ±inf or NaN input set(s) left out, which {witness.label} cannot run for the " \
                   f"original model either, first {left[0]})" if left else ""
            return ran, sets, expected, note
        assert isinstance(ran, WitnessError)
        left.append(f"{sets[k].label}: {_short(str(ran), 160)}")
        sets, expected = sets[:k] + sets[k + 1:], expected[:k] + expected[k + 1:]


def _difference_fate(original: onnx.ModelProto | None, converted: onnx.ModelProto, witness: Witness,
                     sets: list[FeedSet], expected: list[list[np.ndarray]], got: list[list[np.ndarray]],
                     judged: list[int], relative: float) -> str:
    """What the original model gives on the witness where the converted one differs (one more run, on failure only).

    The same values: the runtime's own departure, which the model as exported shows too; onnxruntime's values:
    the difference came with the conversion.
    """
    if original is None:
        return ""
    try:
        there = witness.run_sets(original, [s.feeds for s in sets])
    except WitnessError as e:
        return f"; the original model cannot {_verb(e.stage)} there ({_short(str(e), 200)})"
    picked = [sets[k] for k in judged]
    if all(s.ok for s in _compare(converted, [there[k] for k in judged], [got[k] for k in judged], picked, relative)):
        return "; the original model gives the same there: the runtime's own departure, in the model as exported too"
    if all(s.ok for s in _compare(converted, [expected[k] for k in judged], [there[k] for k in judged], picked,
                                  relative)):
        return "; the original model matches there: the difference comes with the conversion"
    return "; the original model differs there too, otherwise"


@dataclass
class _Reference:
    """onnxruntime CPU's outputs per input set (None where it cannot run the set), whose, and why not."""

    whose: str
    outputs: list[list[np.ndarray] | None]
    errors: dict[int, str]

    @property
    def ran(self) -> list[int]:
        """The sets it ran."""
        return [k for k, o in enumerate(self.outputs) if o is not None]

    def kept(self, sets: list[FeedSet]) -> list[FeedSet]:
        """Of ``sets``, those it ran (the others are left out of the comparison)."""
        return [sets[k] for k in self.ran]

    @property
    def expected(self) -> list[list[np.ndarray]]:
        """The outputs of the sets it ran."""
        return [o for o in self.outputs if o is not None]

    def label(self, sets: list[FeedSet]) -> str:
        """``onnxruntime 1.32.0 CPU on the original model``, and the sets left out (the model rejects them)."""
        said = f"onnxruntime {_ort_version()} CPU on {self.whose} model"
        if not self.errors:
            return said
        first = min(self.errors)
        return (f"{said} ({len(self.errors)} input set(s) left out, which it cannot run either, first "
                f"{sets[first].label}: {self.errors[first]})")


def _reference_outputs(original: onnx.ModelProto | None, converted: onnx.ModelProto, sets: list[FeedSet],
                       data_dir: Path | None) -> _Reference | str:
    """The outputs of onnxruntime's CPU on ``sets``: of the original, else of the converted; or why none.

    A set the model cannot run (it rejects those values: an index out of range) is left out, and said;
    where it runs none, why.
    """
    maker = SessionMaker([CPU])
    if original is not None:
        found = _run_reference(maker, original, sets, data_dir, "the original")
        if not isinstance(found, str):
            return found
    return _run_reference(maker, converted, sets, data_dir, "the converted")


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def _refused(error: WitnessError, original: onnx.ModelProto | None, witness: Witness, sets: list[FeedSet],
             reference: str, ref_label: str, shared: bool) -> Deployment:
    """The runtime refused the converted model: said with the original's fate there (one more run, on failure only).

    Whose failure it is tells the user what to do: one the original shows too is the runtime's own (recorded, not
    judged, where the runtime is judged on what lowerer changed; else a failure lowerer has no form to avoid), one
    it does not show came with the conversion.
    """
    labels = [s.label for s in sets]
    where = f" (input set {labels[error.input_set]})" if error.input_set is not None else ""
    reason = f"{witness.label} cannot {_verb(error.stage)} the converted model{where}: {_short(str(error))}"
    if original is None or reference != "the original":
        return Deployment("failed", reason, witness.label, ref_label, input_sets=labels)
    there = _original_there(original, witness, sets)
    if there is None:
        return Deployment("failed", f"{reason}; the original model runs there: the failure comes with the conversion",
                          witness.label, ref_label, input_sets=labels)
    if shared:
        return Deployment("fails-as-original", f"{reason}; the original model fails there too ({there}): the "
                                               "runtime's failure, recorded, not judged", witness.label, ref_label,
                          input_sets=labels)
    return Deployment("failed", f"{reason}; the original model fails there too ({there}): the runtime's own failure, "
                                "which lowerer has no form to avoid", witness.label, ref_label, input_sets=labels)


def _judges_changes(witness: Witness) -> bool:
    """Whether the witness's runtime is judged on what lowerer changed (its record's ``JUDGES_CHANGES``)."""
    record = runtime_of(witness.runtime)
    return record is not None and record.judges_changes


def _original_there(original: onnx.ModelProto, witness: Witness, sets: list[FeedSet],
                    expected: list[list[np.ndarray]] | None = None, judged: list[int] | None = None,
                    relative: float = 0.0) -> str | None:
    """How the original model fails (or, given ``expected``, differs) on the witness; None: it runs and matches."""
    try:
        there = witness.run_sets(original, [s.feeds for s in sets])
    except WitnessError as e:
        return f"cannot {_verb(e.stage)}: {_short(str(e), 200)}"
    if expected is None or judged is None:
        return None
    stats = _compare(original, expected, [there[k] for k in judged], [sets[k] for k in judged], relative)
    bad = [s for s in stats if not s.ok]
    return f"differs (output {bad[0].name!r}: {_describe(bad[0])})" if bad else None


def _placed(placement: dict[str, Any] | None, limit: int = 6) -> str:
    """``, CPU fallback on (as users run it): 3 of 27 node(s) on the CPU (reported, not judged): ...``."""
    if placement is None:
        return ""
    mode = "on (as users run it)" if placement.get("fallback") else "off"
    cpu = [f"{name!r} ({op})" for name, op in placement.get("on_cpu", [])]
    provider = str(placement.get("provider", "the provider"))
    if not cpu:
        return f", CPU fallback {mode}: every node on {provider}"
    shown = ", ".join(cpu[:limit]) + (f", ... ({len(cpu) - limit} more)" if len(cpu) > limit else "")
    return (f", CPU fallback {mode}: {len(cpu)} of {placement.get('nodes', len(cpu))} node(s) on the CPU "
            f"(reported, not judged): {shown}")


def _special(label: str) -> bool:
    """A ±inf set, or the all-equal one (one value everywhere: normalizations there amplify each runtime's rounding)."""
    return _inf(label) or label.split(" ", 1)[0] == "all-equal"


def _inf(label: str) -> bool:
    return label.split(" ", 1)[0] in ("inf", "-inf")


def _inf_sets(converted: onnx.ModelProto, witness: Witness, sets: list[FeedSet], expected: list[list[np.ndarray]],
              got: list[list[np.ndarray]], relative: float, judged: list[int],
              original: onnx.ModelProto | None = None, data_dir: Path | None = None
              ) -> tuple[list[OutputStats], list[OutputStats], list[int], str | None]:
    """The ±inf and all-equal sets judged beside ``judged``: (stats, bad, the sets judged, what was recorded, or None).

    The all-equal set (one value everywhere) is taken with the ±inf sets: normalizations on it divide rounding
    noise by a near-zero deviation, so runtimes that round otherwise than onnxruntime differ there beyond any
    budget; it is recorded where the original model gives the same on the runtime (the NONFINITE and listed
    departures are asked of the ±inf sets and the reference alike).

    A ±inf set on which an output differs is recorded, not judged, only where the first node that departs on
    it (the converted model run on both runtimes) is of an op in the runtime's ``NONFINITE`` (a measured
    departure on NaN or ±inf, whose effect reaches every value downstream), or where the ``original`` model,
    run on the same runtime, gives what the converted one gives there (the runtime's own handling of ±inf in
    the model's ops, which the conversion did not change), or where the reference itself departs from the spec
    on it: a node of the model onnxruntime ran (``original``, else ``converted``) meets a departure of
    onnxruntime's CPU kernel listed in ``lowerer/verification/departures.json`` (onnxruntime's bool-mask
    Attention, say), as the whole-model check records such a set; the departure is named.
    """
    runtime = runtime_of(witness.runtime)
    infs = [k for k, s in enumerate(sets) if _special(s.label)]
    differ = [k for k in infs if not all(s.ok for s in _compare(converted, [expected[k]], [got[k]], [sets[k]],
                                                                relative))]
    located = [k for k in differ if _inf(sets[k].label)]
    nodes = dict(zip(located, _departing_nodes(converted, witness, [sets[k].feeds for k in located], relative),
                     strict=True)) if located and runtime is not None and runtime.nonfinite else {}
    both, recorded = list(judged), []
    for k in infs:
        node = nodes.get(k)
        known = next((f"{said} ({source})" for op, said, source in runtime.nonfinite
                      if node is not None and node.op_type == op), None) if runtime is not None else None
        if node is None or known is None:
            both.append(k)
        else:
            recorded.append(f"input set {sets[k].label}: the first node that departs, {_node_label(converted, node)}, "
                            f"is one {witness.label} is known to compute otherwise: {known}")
    unexplained = [k for k in differ if k in both]
    if unexplained and original is not None:
        same = _same_as_original(original, converted, witness, [sets[k] for k in unexplained],
                                 [got[k] for k in unexplained], relative)
        for k in (k for k, ok in zip(unexplained, same, strict=True) if ok):
            both.remove(k)
            own = "handling of ±inf" if _inf(sets[k].label) else "rounding, amplified on one value everywhere,"
            recorded.append(f"input set {sets[k].label}: the original model gives the same on {witness.label} "
                            f"(the runtime's own {own} in the model's ops, not changed by the conversion)")
    for k in [k for k in differ if k in both]:
        met = departure_met(original if original is not None else converted, data_dir, sets[k].feeds, CPU)
        if met is not None:
            both.remove(k)
            recorded.append(f"input set {sets[k].label}: the reference, onnxruntime CPU, departs from the spec there: "
                            f"{met}")
    stats = _compare(converted, [expected[k] for k in both], [got[k] for k in both], [sets[k] for k in both], relative)
    return stats, [s for s in stats if not s.ok], both, "; ".join(recorded) or None


def _same_as_original(original: onnx.ModelProto, converted: onnx.ModelProto, witness: Witness, sets: list[FeedSet],
                      got: list[list[np.ndarray]], relative: float) -> list[bool]:
    """Per set: whether the original model, run on the witness, gives what the converted one does there."""
    try:
        there = witness.run_sets(original, [s.feeds for s in sets])
    except WitnessError:
        return [False] * len(sets)
    return [all(s.ok for s in _compare(converted, [a], [b], [feed], relative))
            for a, b, feed in zip(there, got, sets, strict=True)]


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
    tied, negative = {}, {}
    for name, value in sets[0].feeds.items():
        tied[name] = rng.integers(-2, 3, size=value.shape).astype(value.dtype) if value.dtype.kind == "f" else value
        negative[name] = np.where(rng.random(size=value.shape) < 0.2, -np.inf, value).astype(value.dtype) \
            if value.dtype.kind == "f" else value
    shown = sets[0].label.split(" ", 1)[-1]
    # -inf alone: where +inf is sprinkled in too, most rows of a Softmax or a sum come out NaN, hiding the rest
    extra = [FeedSet(f"-inf ({shown})", negative)] if any(_inf(s.label) for s in sets) else []
    return [*sets, *extra, FeedSet(f"ties ({shown})", tied)]


def _run_reference(maker: SessionMaker, model: onnx.ModelProto, sets: list[FeedSet], data_dir: Path | None,
                   whose: str) -> _Reference | str:
    engine = maker.create(model, data_dir)
    if isinstance(engine, str):
        return engine
    found = _Reference(whose, [], {})
    for k, s in enumerate(sets):
        try:
            found.outputs.append(engine.run(s.feeds))
        except Exception as e:
            found.outputs.append(None)
            found.errors[k] = _short(str(e), 200)
    if not found.ran:
        return f"input set {sets[0].label}: {found.errors[0]}"
    return found


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
              sets: list[FeedSet], relative: float, kept: list[int], covered: str | None = None) -> str:
    """What the recorded sets (``kept``) gave, for the reason: ``; NaN sets (recorded, not judged): equal``."""
    if not kept:
        return ""
    stats = _compare(converted, [expected[k] for k in kept], [got[k] for k in kept], [sets[k] for k in kept], relative)
    bad = [f"output {s.name!r}: {_describe(s)}" for s in stats if not s.ok]
    what, why = ("±inf, all-equal and NaN sets", f" ({covered})") if covered else ("NaN sets", "")
    return f"; {what} (recorded, not judged): {'; '.join(bad) or 'equal'}{why}"


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
    return _departing_node(converted, witness, sets, bad, relative)


def _departing_node(converted: onnx.ModelProto, witness: Witness, sets: list[FeedSet], bad: OutputStats,
                    relative: float) -> onnx.NodeProto | None:
    """:func:`_locate`'s node: the first whose output departs on ``bad``'s worst input set (None: not found)."""
    index = next((k for k, s in enumerate(sets) if s.label == bad.worst_input_set), len(sets) - 1)
    return _departing_nodes(converted, witness, [sets[index].feeds], relative)[0]


def _departing_nodes(converted: onnx.ModelProto, witness: Witness, feeds: list[dict[str, np.ndarray]],
                     relative: float) -> list[onnx.NodeProto | None]:
    """Per input set, the first top-level node whose output departs on the witness (the witness run once)."""
    graph = converted.graph
    if len(graph.node) > LOCATE_LIMIT or not feeds:
        return [None] * len(feeds)
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
        return [None] * len(feeds)
    try:
        wants = [dict(zip(wanted, engine.run(f), strict=True)) for f in feeds]
        haves = [dict(zip(wanted, h, strict=True)) for h in witness.run_sets(probe, feeds, wanted)]
    except (WitnessError, Exception):  # a value the runtime fused away cannot be asked for: no finding
        return [None] * len(feeds)
    out: list[onnx.NodeProto | None] = []
    for want, have in zip(wants, haves, strict=True):
        out.append(next((node for node in graph.node for o in node.output  # topological: its inputs agree
                         if o and o in want and o in have and
                         not statistics(want[o], np.asarray(have[o]), _tolerance(want[o], relative)).ok), None))
    return out


def _finding_name(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """The node's name as the backend's findings give it (an unnamed one by its op and index: ``Attention#1``)."""
    index = next((i for i, n in enumerate(model.graph.node) if n is node or n == node), -1)
    return node_key(node, index)


def _node_label(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """``'name' (Op-v)``: the node and its op's since-version at the model's opset."""
    from lowerer.core.opsets import default_opset, is_default_domain, since_version

    opset = default_opset(model.opset_import)
    version = since_version(node.op_type, opset) if is_default_domain(node.domain) and opset is not None else None
    op = f"{node.op_type}-{version}" if version is not None else node.op_type
    return f"{node.name or node.op_type!r} ({op})"
