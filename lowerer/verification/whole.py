"""Whole-model comparison: run two models on the same inputs and compare every graph output.

Used by ``lowerer verify A B``, ``convert --verify-model`` and ``convert --optimize``. Inputs
are generated (seeded; index-like inputs in range) or loaded, see :mod:`.feeds`; outputs are
matched by position and judged by a :class:`~lowerer.verification.compare.Tolerance` (exact by
default; discrete outputs always exactly), with statistics per output.

The models run in onnxruntime from their serialized bytes, with their external data read by
onnxruntime itself from the model's folder (never the working directory): no size cap, but the
bytes the tensors claim must fit in the memory available. One model runs at a time.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from lowerer.core.errors import VerificationError
from lowerer.core.progress import ProgressCallback, notify
from lowerer.core.report import Report
from lowerer.verification.blame import departure_met, nan_made_inside
from lowerer.verification.budget import available_memory, claimed_bytes, gib
from lowerer.verification.compare import EXACT, OutputStats, Tolerance, output_scale, statistics
from lowerer.verification.feeds import generate_sets, load_sets, recorded, save_sets
from lowerer.verification.graph_inputs import FeedSet, InputSpec, merge_specs, model_inputs
from lowerer.verification.propagated import ModelBudget
from lowerer.verification.providers import CPU, select_providers
from lowerer.verification.runner import OrtEngine, SessionMaker, ort_can_exchange

__all__ = ["ModelCheckOptions", "ModelComparison", "ModelSource", "compare_models", "not_run_remedy", "tolerance_hint",
           "verify_models"]

logger = logging.getLogger(__name__)


@dataclass
class ModelCheckOptions:
    """How a whole-model check runs: tolerance, inputs, and whether a check that cannot run may pass.

    Attributes:
        tolerance: what counts as equal for float outputs (exact by default).
        input_shapes: concrete shapes per input name (dynamic dims otherwise bound to 1, then 2).
        value_ranges: an inclusive (low, high) per input name; key ``""`` for every other input.
        load_inputs: ``.npz`` files whose arrays are the inputs (instead of generated ones).
        save_inputs: an ``.npz`` file to write the inputs that ran to.
        allow_unverified: a check that cannot run is noted instead of raising VerificationError.
        budget: the budget propagated from a conversion's rewrites (set by the conversion, see
            :mod:`.propagated`): float outputs are also accepted where it accepts them; None: only
            ``tolerance`` (``lowerer verify``).
    """

    tolerance: Tolerance = EXACT
    input_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    value_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    load_inputs: list[Path] = field(default_factory=list)
    save_inputs: Path | None = None
    allow_unverified: bool = False
    budget: ModelBudget | None = None


@dataclass
class ModelSource:
    """A model to run: the proto (external data not loaded), the folder its data is in, a name for messages."""

    model: onnx.ModelProto
    base_dir: Path | None
    name: str


@dataclass
class ModelComparison:
    """The outcome of a whole-model comparison.

    Attributes:
        status: ``equal`` (within the tolerance), ``different``, ``not-run`` (the check could
            not run) or ``incomparable`` (the models take different inputs).
        reason: one line: what was compared, what differs, or why it could not run.
        provider: the execution provider both models ran on.
        outputs: statistics per output (over every input set that ran).
        input_sets: labels of the input sets that ran.
        tolerance: the tolerance float outputs were judged by.
        details: notes (input sets that did not run, how index-like inputs were chosen, placement).
        models: the names of the two models in messages (``original``, ``converted``).
        budget: the budget propagated from the rewrites, when a conversion's check used one.
    """

    status: str
    reason: str
    provider: str | None = None
    outputs: list[OutputStats] = field(default_factory=list)
    input_sets: list[str] = field(default_factory=list)
    tolerance: Tolerance = EXACT
    details: dict[str, Any] = field(default_factory=dict)
    models: tuple[str, str] = ("A", "B")
    budget: ModelBudget | None = None

    @property
    def passed(self) -> bool:
        """True when every output is within the tolerance."""
        return self.status == "equal"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"status": self.status, "reason": self.reason, "provider": self.provider, "models": list(self.models),
                "tolerance": {**self.tolerance.to_dict(), "rtol": self.tolerance.rtol,
                              "discrete_outputs": "exact"},
                "input_sets": list(self.input_sets), "outputs": [o.to_dict() for o in self.outputs],
                "details": dict(self.details), "budget": None if self.budget is None else self.budget.to_dict()}


def _runnable(model: onnx.ModelProto) -> bytes | str:
    """The bytes onnxruntime gets (outputs of unknown element type untyped), or why there are none."""
    if any(o.type.tensor_type.elem_type == 0 for o in model.graph.output if o.type.HasField("tensor_type")):
        typed = onnx.ModelProto()
        typed.CopyFrom(model)
        for o in typed.graph.output:  # onnxruntime infers an output's type, but refuses type 0
            if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type == 0:
                o.ClearField("type")
        model = typed
    try:
        return bytes(model.SerializeToString())
    except Exception:  # protobuf's 2 GiB limit on one message
        return ("it holds over 2 GiB of inline tensors, more than protobuf can serialize; save it with its weights "
                "in external data")


def _seed_key(seed: int, model: onnx.ModelProto) -> list[int]:
    return [seed, zlib.crc32(model.graph.name.encode())]


def compare_models(a: ModelSource, b: ModelSource, *, options: ModelCheckOptions | None = None,
                   providers: Sequence[str] | None = None, seed: int = 0,
                   progress: ProgressCallback | None = None) -> ModelComparison:
    """Run ``a`` and ``b`` on the same inputs and compare every graph output (see the module's documentation).

    Raises:
        InputError: an unknown or unavailable provider, or options that do not fit the models
            (an input name that is not there, shapes or loaded arrays of the wrong type or rank).
    """
    opts = options or ModelCheckOptions()
    chosen = select_providers(providers)
    result = _compare(a, b, opts, chosen, seed, progress)
    if result.status == "different" and chosen[0] != CPU:
        # A second opinion before the conversion is blamed: the CPU provider's kernels (see lowerer.verification.blame).
        on_cpu = _compare(a, b, opts, [CPU], seed, progress)
        if on_cpu.status == "equal":
            said = (f"{chosen[0]}'s kernels compute this model differently from its CPU kernels: {result.reason}; "
                    f"on CPUExecutionProvider the two models agree")
            logger.warning("whole-model check: %s", said)
            on_cpu.details["provider_departure"] = {"provider": chosen[0], "statement": said}
            on_cpu.reason = f"{on_cpu.reason}; {chosen[0]} departs ({result.reason})"
            result = on_cpu
    result.models = (a.name, b.name)
    result.budget = opts.budget
    return result


def _compare(a: ModelSource, b: ModelSource, opts: ModelCheckOptions, providers: Sequence[str], seed: int,
             progress: ProgressCallback | None) -> ModelComparison:
    tol = opts.tolerance
    chosen = list(providers)
    merged = _common_inputs(a, b, tol)
    if isinstance(merged, ModelComparison):
        return merged
    prepared = _input_sets(a, b, opts, merged, seed)
    if isinstance(prepared, str):
        return _not_run(tol, prepared)
    sets, notes = prepared
    maker = SessionMaker(chosen)
    results_a, errors_a, engine_a = _run_all(maker, a, sets, lambda k: notify(progress, "model-check", k,
                                                                              2 * len(sets), "runs", a.name))
    if isinstance(engine_a, str):
        return _not_run(tol, f"onnxruntime cannot run {a.name}: {engine_a}")
    ran = [i for i, r in enumerate(results_a) if r is not None]
    details: dict[str, Any] = {"seed": seed}
    if notes:
        details["inputs"] = notes
    if errors_a:
        details["not_run"] = [f"{sets[i].label}: {a.name} raised: {e}" for i, e in errors_a.items()]
    if not ran:
        first = next(iter(errors_a.items()))
        return _not_run(tol, f"{a.name} did not run on any input set (first: {sets[first[0]].label}: {first[1]})",
                        details)
    kept = [sets[i] for i in ran]
    results_b, errors_b, engine_b = _run_all(maker, b, kept, lambda k: notify(progress, "model-check", len(sets) + k,
                                                                              len(sets) + len(kept), "runs", b.name))
    if isinstance(engine_b, str):
        return _not_run(tol, f"onnxruntime cannot run {b.name}: {engine_b}", details)
    provider = engine_a.label
    for side, eng in ((a, engine_a), (b, engine_b)):
        if eng.placement:
            details[f"placement ({side.name})"] = eng.placement
    if errors_b:
        k, error = next(iter(errors_b.items()))
        return ModelComparison("different", f"input set {kept[k].label}: {a.name} runs but {b.name} raises: {error}",
                               provider, tolerance=tol, input_sets=[s.label for s in kept], details=details)
    return _verdict(a, b, kept, [results_a[i] for i in ran], results_b, opts, provider, details)


def _not_run(tol: Tolerance, reason: str, details: dict[str, Any] | None = None) -> ModelComparison:
    """A comparison that could not run, and why."""
    return ModelComparison("not-run", reason, tolerance=tol, details=dict(details or {}))


def _common_inputs(a: ModelSource, b: ModelSource, tol: Tolerance) -> list[InputSpec] | ModelComparison:
    """The inputs both models take (merged), or the outcome when they cannot be run on the same ones."""
    specs_a, specs_b = model_inputs(a.model), model_inputs(b.model)
    for side, specs in ((a, specs_a), (b, specs_b)):
        if isinstance(specs, str):
            return _not_run(tol, f"no inputs can be made for {side.name}: {specs}")
    assert not isinstance(specs_a, str) and not isinstance(specs_b, str)
    merged = merge_specs(specs_a, specs_b, (a.name, b.name))
    if isinstance(merged, str):
        return ModelComparison("incomparable", f"{a.name} and {b.name} take different inputs: {merged}",
                               tolerance=tol)
    if len(a.model.graph.output) != len(b.model.graph.output):
        return ModelComparison("different", f"{a.name} has {len(a.model.graph.output)} outputs and {b.name} "
                                            f"{len(b.model.graph.output)}", tolerance=tol)
    why = ort_can_exchange([s.dtype for s in merged])
    if why:
        return _not_run(tol, why)
    return merged


def _input_sets(a: ModelSource, b: ModelSource, opts: ModelCheckOptions, merged: list[InputSpec],
                seed: int) -> tuple[list[FeedSet], list[str]] | str:
    """The input sets (loaded or generated, saved when asked) and notes on them, or why the models cannot run."""
    claims: list[int] = []
    for side in (a, b):
        claimed = claimed_bytes(side.model, side.base_dir)
        if isinstance(claimed, str):
            return f"{side.name} was not run: {claimed}"
        claims.append(claimed)
    notes: list[str] = []
    if opts.load_inputs:
        sets = load_sets(opts.load_inputs, merged)
    else:
        sets, notes = generate_sets(a.model, merged, seed_key=_seed_key(seed, a.model),
                                    input_shapes=opts.input_shapes, value_ranges=opts.value_ranges, special=True)
    need = max(claims) + sum(v.nbytes for s in sets for v in s.feeds.values())
    free = available_memory()
    if free is not None and need > free:
        return (f"the larger model's tensors claim {gib(max(claims))} (the sum of their lengths) and the "
                f"inputs {gib(need - max(claims))}, more than the {gib(free)} of memory available now")
    if opts.save_inputs is not None:
        save_sets(opts.save_inputs, sets)
    return sets, notes


def _verdict(a: ModelSource, b: ModelSource, kept: Sequence[FeedSet], results_a: Sequence[list[np.ndarray] | None],
             results_b: Sequence[list[np.ndarray] | None], opts: ModelCheckOptions, provider: str,
             details: dict[str, Any]) -> ModelComparison:
    """Compare every output over the input sets both models ran on (``results_a[k]`` is on ``kept[k]``).

    A float output is judged by the options' tolerance, and also by their budget at that output's scale.
    Sets of a recorded kind (NaN) are compared and recorded, not judged; a set on which the outputs differ
    and a listed kernel departure (``departures.json``) is met inside either model is recorded, not judged.
    """
    names = (a.name, b.name)
    tol, budget = opts.tolerance, opts.budget
    b_names = [o.name for o in b.model.graph.output]
    per_set: list[list[OutputStats]] = []
    for k, feed_set in enumerate(kept):
        ra, rb = results_a[k], results_b[k]
        assert ra is not None and rb is not None
        row = []
        for j, name in enumerate(o.name for o in a.model.graph.output):  # every output, each judged
            label = name if name == b_names[j] else f"{name} / {b_names[j]}"
            judged = tol if budget is None else tol.union(budget.tolerance(ra[j].dtype, output_scale(ra[j])))
            one = statistics(ra[j], rb[j], judged, name=label, sides=names)
            one.worst_input_set = feed_set.label
            row.append(one)
        per_set.append(row)
    judged_sets = _judged_sets(a, b, kept, per_set, provider, details)
    stats = [_merged([per_set[k][j] for k in judged_sets]) for j in range(len(a.model.graph.output))]
    labels = [kept[k].label for k in judged_sets]
    bad = [s for s in stats if not s.ok]
    if bad:
        return ModelComparison("different", _difference(bad, names, tol, provider, budget), provider, stats, labels,
                               tol, details)
    how, judged_by = _judged_by(tol, budget, stats)
    return ModelComparison("equal", f"{len(stats)} output(s) equal {how} on {len(labels)} input set(s) on "
                                    f"{provider}{judged_by}", provider, stats, labels, tol, details)


def _merged(stats: Sequence[OutputStats]) -> OutputStats:
    merged = stats[0]
    for one in stats[1:]:
        merged = merged.merge(one)
    return merged


def _judged_sets(a: ModelSource, b: ModelSource, kept: Sequence[FeedSet], per_set: Sequence[Sequence[OutputStats]],
                 provider: str, details: dict[str, Any]) -> list[int]:
    """The sets whose comparison is judged; the others' outcomes go to ``details`` (``recorded``, ``departures``)."""
    judged: list[int] = []
    for k, feed_set in enumerate(kept):
        bad = [s for s in per_set[k] if not s.ok]
        if recorded(feed_set.label):
            said = "equal" if not bad else "; ".join(f"output {s.name!r}: {s.what or f'{s.mismatches} values differ'}"
                                                     for s in bad)
            details.setdefault("recorded", {})[feed_set.label] = f"{said} (recorded, not judged)"
            continue
        inside = nan_made_inside(a.model, a.base_dir, feed_set.feeds, a.name) \
            if bad and feed_set.label.startswith("inf ") else None
        if inside is not None:  # ±inf made NaN inside the original: NaN's handling is not judged (as per rewrite)
            details.setdefault("recorded", {})[feed_set.label] = f"outputs differ; {inside} (recorded, not judged)"
            continue
        met = _departure_met(a, b, feed_set, provider) if bad else None
        if met is not None:
            details.setdefault("departures", {})[feed_set.label] = met
            logger.warning("whole-model check: input set %s is not judged: %s", feed_set.label, met)
            continue
        judged.append(k)
    return judged or [k for k, s in enumerate(kept) if not recorded(s.label)] or list(range(len(kept)))


def _departure_met(a: ModelSource, b: ModelSource, feed_set: FeedSet, provider: str) -> str | None:
    """A listed kernel departure that ``feed_set`` meets inside either model (what it says), or None."""
    for side in (a, b):
        met = departure_met(side.model, side.base_dir, feed_set.feeds, provider)
        if met is not None:
            return f"{side.name}: {met}"
    return None


def _judged_by(tol: Tolerance, budget: ModelBudget | None, stats: Sequence[OutputStats]) -> tuple[str, str]:
    """How the outputs were judged (``exactly``, ``within ...``), and the budget's statement to follow the line."""
    floats = [s for s in stats if not s.discrete and s.what is None]
    if budget is None or budget.exact:
        how = "exactly" if tol.exact else f"within {tol.describe()}"
        return how, "" if budget is None else f" ({budget.describe()})"
    how = "within the rewrites' own budget" + ("" if tol.exact else f" or {tol.describe()}")
    measured = [s.ulp_of_scale for s in floats if s.ulp_of_scale is not None]
    worst = f"; worst {max(measured):.3g} epsilons of the output's largest magnitude" if measured else ""
    return how, f" ({budget.describe(s.dtype for s in floats)}{worst})"


def _run_all(maker: SessionMaker, side: ModelSource, sets: Sequence[FeedSet],
             tick: Callable[[int], None]) -> tuple[list[list[np.ndarray] | None], dict[int, str], OrtEngine | str]:
    """Run one model on every set (one session, freed after): outputs per set (None where it raised), errors."""
    data = _runnable(side.model)
    if isinstance(data, str):
        return [], {}, data
    engine = maker.create(data, side.base_dir)
    del data
    if isinstance(engine, str):
        return [], {}, engine
    results: list[list[np.ndarray] | None] = []
    errors: dict[int, str] = {}
    for i, feed_set in enumerate(sets):
        logger.info("whole-model check: running %s on %s", side.name, feed_set.label)
        try:
            results.append(engine.run(feed_set.feeds))
            engine.resolve_placement()
        except Exception as e:
            results.append(None)
            errors[i] = " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")
        tick(i + 1)
    engine.session = None  # free the session (and the weights it holds) before the other model loads
    return results, errors, engine


def _difference(bad: Sequence[OutputStats], names: tuple[str, str], tol: Tolerance, provider: str,
                budget: ModelBudget | None = None) -> str:
    """One line on the worst differing output, which others differ, and a tolerance that would accept them."""
    s = bad[0]
    if s.what is not None:
        text = f"output {s.name!r}: {s.what}"
    else:
        exact = tol.exact and (budget is None or budget.exact)
        judged = tol.describe() if budget is None or budget.exact else \
            budget.describe([s.dtype]) + ("" if tol.exact else f", or {tol.describe()}")
        values = "" if s.worst is None else f": {names[0]} {s.worst[0]!r}, {names[1]} {s.worst[1]!r}"
        scaled = s.ulp_of_scale
        scale = "" if s.discrete else f", max ulp {s.max_ulp}" + (
            "" if scaled is None else f", {scaled:.3g} epsilons of the output's largest magnitude")
        text = (f"output {s.name!r}: {s.mismatches} of {s.count} values ({100 * s.share:.3g}%) "
                f"{'differ' if s.discrete or exact else 'are outside ' + judged} (max abs {s.max_abs:.3g}, "
                f"max rel {s.max_rel:.3g}{scale}); worst at index {s.worst_index} in input set "
                f"{s.worst_input_set}{values}")
    others = [repr(o.name) for o in bad[1:]]
    if others:
        text += f"; also differing: {', '.join(others)}"
    hint = tolerance_hint(bad, budget)
    if hint:
        text += f"; {hint}"
    return f"{names[0]} and {names[1]} differ on {provider}: {text}"


#: A hint proposes ``--max-ulp N`` where every value is within this many ulp of its own (rounding).
HINT_MAX_ULP = 64
#: A hint proposes ``--atol X`` where the differences are within this many epsilons of each output's
#: largest magnitude: small against the output, however large against values near zero.
HINT_MAX_EPSILONS_OF_SCALE = 1024


def tolerance_hint(bad: Sequence[OutputStats], budget: ModelBudget | None = None) -> str | None:
    """The tolerance options that would accept these differences, where they look like rounding; else None.

    ``--max-ulp N`` where every value is within :data:`HINT_MAX_ULP` ulp of its own (with a conversion's
    non-exact budget, N also scales with the output's magnitude: the smallest N that accepts them);
    ``--atol X`` where the differences sit near zero (small against the output's largest magnitude,
    large relative to the values); ``--rtol X`` where every difference is below 1e-3 of its value.
    None when an output is discrete or the differences are too large to be rounding.
    """
    import math

    floats = [o for o in bad if not o.discrete and o.what is None]
    if not floats or len(floats) != len(bad):
        return None
    ulp = max(o.max_ulp or 0 for o in floats)
    scaled = [o.ulp_of_scale for o in floats]
    worst_scaled = None if any(x is None for x in scaled) else max(x for x in scaled if x is not None)
    near_zero = worst_scaled is not None and worst_scaled <= HINT_MAX_EPSILONS_OF_SCALE
    rel = max(o.max_rel for o in floats)
    if budget is not None and not budget.exact and near_zero:
        assert worst_scaled is not None
        option = (f"--max-ulp {min(ulp, max(1, math.ceil(worst_scaled)))} (API: max_ulp; the expansions' budget, "
                  "also in epsilons of each output's largest magnitude)")
    elif ulp <= HINT_MAX_ULP:
        option = f"--max-ulp {ulp}"
    elif near_zero:
        option = (f"--atol {_round_up(max(o.max_abs for o in floats))} (small against the output: at most "
                  f"{worst_scaled:.3g} epsilons of its largest magnitude)")
    elif rel < 1e-3:
        option = f"--rtol {_round_up(rel)}"
    else:
        return None
    advice = f"if rounding differences are expected, accept them with {option}"
    if budget is not None and budget.exact_asked:
        advice += ", or leave out --exact to judge by the rewrites' own budgets"
    return advice


def _round_up(x: float) -> str:
    """``x`` with two significant digits, rounded up (a tolerance suggested from it accepts ``x``)."""
    import math

    if x <= 0:
        return "0"
    exponent = math.floor(math.log10(x)) - 1
    value = math.ceil(x / 10.0 ** exponent) * 10.0 ** exponent
    text = f"{value:.2g}"
    return text if float(text) >= x else f"{value:.3g}"


def verify_models(original: ModelSource, converted: ModelSource, *, options: ModelCheckOptions | None,
                  providers: Sequence[str] | None, seed: int, report: Report, what: str = "whole-model check",
                  progress: ProgressCallback | None = None) -> ModelComparison:
    """Compare two models (before and after a step) and note the outcome in ``report``.

    ``what`` names the check in messages (``whole-model check``, ``optimization check``).

    Raises:
        VerificationError: an output differs, or the check could not run (unless
            ``options.allow_unverified``, which notes it instead).
    """
    opts = options or ModelCheckOptions()
    result = compare_models(original, converted, options=opts, providers=providers, seed=seed, progress=progress)
    report.model_checks[what] = result.to_dict()
    report.notes.append(f"{what}: {result.status}: {result.reason}")
    if result.status in ("different", "incomparable"):
        raise VerificationError(f"{what} failed: {result.reason}")
    if result.status == "not-run":
        if not opts.allow_unverified:
            raise VerificationError(f"{what} could not run: {result.reason}; nothing was verified as a whole; "
                                    f"{not_run_remedy(result, opts, original)}")
        logger.warning("%s could not run: %s", what, result.reason)
    return result


def not_run_remedy(result: ModelComparison, options: ModelCheckOptions, first: ModelSource) -> str:
    """What would make a check that could not run (``result``) run, for the models in hand.

    When ``first`` ran on none of the generated input sets and lowerer bound some of its dims (not
    given by ``options.input_shapes``), the sizes are what to give (see
    :func:`lowerer.core.remedies.generated_shapes_remedy`); otherwise nothing about the inputs would
    help: ``--allow-unverified``.
    """
    from lowerer.core.remedies import ALLOW_UNVERIFIED, generated_shapes_remedy

    specs = model_inputs(first.model)
    if (options.load_inputs or isinstance(specs, str) or not result.details.get("not_run")
            or not result.reason.startswith(f"{first.name} did not run on any input set")):
        return ALLOW_UNVERIFIED
    bound = {s.name: s.dims for s in specs
             if s.name not in options.input_shapes and any(isinstance(d, str) for d in s.dims)}
    return generated_shapes_remedy(bound) if bound else ALLOW_UNVERIFIED
