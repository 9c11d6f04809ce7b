"""The named passes of a conversion, composed once in :data:`PIPELINE`, and the gates around them.

The package owns the options every entry point checks (:mod:`.options`), the conversion walk
(:mod:`.walk`, :mod:`.relabels`, :mod:`.scan_shapes`), the clean-up (:mod:`.cleanup`), the output's gates
(:mod:`.checker_gate`, :mod:`.runtime_gate`), ``--optimize`` (:mod:`.optimize`) and how far a model can go
(:mod:`.reach`). It may import everything below the API (backends, rules, verification, steps, facts,
model I/O, core), nothing above.

Every entry point (:func:`lowerer.convert`, the command line, :class:`lowerer.LowerPass`) runs the
same passes, in this order, over one :class:`State`:

0. ``imports``: a domain imported twice at one version becomes one import; imports of domains no node
   uses are dropped (unless ``keep_imports``) (:mod:`lowerer.model_io.imports`), each with a note;
1. ``convert``: the one walk over every scope: version steps, decompositions and the backend forms a
   profile picks (:mod:`lowerer.passes.walk`), each rewrite verified as it is made;
2. ``backend``: what the profile still names is refused or kept (``--allow-fallback``), and recorded;
3. ``cleanup``: initializers and Constant nodes the rewrites left unread are removed;
4. ``validate``: the output against its target's schemas and onnx's checker (:mod:`lowerer.passes.checker_gate`);
5. ``verify-model``: the whole original and converted models run and compared (``verify_model``);
6. ``optimize``: onnxscript's optimizer, and the comparison of its result (``optimize``);
7. ``users-session``: the final model opened and run once with onnxruntime's default session options, as
   users open it (the checks run with graph optimizations off; :mod:`lowerer.verification.default_session`);
8. ``placement``: the backend's provider opens the model with CPU fallback off (``for_backend``);
9. ``deployment``: the converted model runs on the backend's own runtime where it is installed (one of
   :mod:`lowerer.backends.runtimes`) and is compared with onnxruntime CPU (:mod:`lowerer.backends.deployment`).

The contract, enforced by :class:`Pass`: a pass runs only where :meth:`Pass.applies`, works on
``state.model`` (only ``optimize`` replaces it), never replaces the options, and its time is recorded in
``state.timings``.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import onnx

from lowerer.core.errors import VerificationError
from lowerer.core.report import Report, Rewrite
from lowerer.model_io.reading import HeldWeights
from lowerer.passes.options import ConvertOptions

if TYPE_CHECKING:
    from lowerer.backends.plan import BackendPlan
    from lowerer.model_io.input_check import InputCheck
    from lowerer.verification.observed import ObservedSource

__all__ = ["INSPECTION", "PIPELINE", "Pass", "State", "converts_for_backend", "run_passes"]

logger = logging.getLogger(__name__)


@dataclass
class State:
    """What the passes share: the model being converted, the checked options, the report so far.

    Attributes:
        model: the working copy, converted in place.
        options: the checked options (frozen).
        serialized: the bytes the working copy was parsed from, when known (spares scans and copies).
        original: an untouched copy of the input, when a whole-model check needs one.
        source_dir: the folder external data is read from (a path's folder), or None.
        report: the report so far.
        plan: the backend plan (``for_backend``), or None.
        verifier: verifies each rewrite (None with ``verify=False``).
        seen: every rewrite given to the verifier (the report of a failed verification).
        timings: seconds per pass.
        held: a large in-memory model's weights, held back from the working copy and put back at the end.
        input_checked: the input passed onnx's checker on the way in (a file: see ``load_input``), or
            will have when ``checks`` are joined (at the end of the ``convert`` pass).
        checks: the input's checks running beside the conversion, or None (see :mod:`lowerer.model_io.input_check`).
    """

    model: onnx.ModelProto
    options: ConvertOptions
    serialized: bytes | None = None
    original: onnx.ModelProto | None = None
    source_dir: Path | None = None
    report: Report = field(default_factory=Report)
    plan: BackendPlan | None = None
    verifier: Any = None
    seen: list[Rewrite] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    held: HeldWeights = field(default_factory=HeldWeights)
    input_checked: bool = False
    checks: InputCheck | None = None

    def recording(self) -> Callable[[Rewrite], None] | None:
        """The verifier, also keeping each rewrite it is given; None without verification."""
        verifier = self.verifier
        if verifier is None:
            return None

        def verify(rewrite: Rewrite) -> None:
            self.seen.append(rewrite)
            verifier(rewrite)

        return verify


class Pass(abc.ABC):
    """One named pass over a :class:`State`; call it to run it under its contract."""

    #: The pass's name (logs, timings).
    name: ClassVar[str]

    def applies(self, state: State) -> bool:
        """Whether the pass has anything to do for these options (default: yes)."""
        return True

    @abc.abstractmethod
    def run(self, state: State) -> None:
        """Do the pass's work on ``state`` (the model in place)."""

    def __call__(self, state: State) -> None:
        """Run the pass on ``state`` if it applies: timed, and the options must stay the same object."""
        if not self.applies(state):
            return
        options = state.options
        started = time.perf_counter()
        self.run(state)
        if state.options is not options:
            raise RuntimeError(f"pass {self.name!r} replaced the options")
        state.timings[self.name] = time.perf_counter() - started
        logger.debug("pass %s: %.3f s", self.name, state.timings[self.name])


class ImportsPass(Pass):
    """The opset imports: one entry per domain (same-version repeats merged), unused domains dropped; noted."""

    name = "imports"

    def run(self, state: State) -> None:
        from lowerer.model_io.imports import drop_unused, merge_duplicates

        model = state.model
        notes = merge_duplicates(model.opset_import)
        for function in model.functions:
            notes += merge_duplicates(function.opset_import, f"function {function.domain}.{function.name}")
        if state.options.converts and not state.options.keep_imports:
            notes += drop_unused(model)
        for note in notes:
            logger.warning("%s", note)
            state.report.notes.append(note)


class ConvertPass(Pass):
    """The one conversion walk: version steps, decompositions, backend forms; rewrites verified as made."""

    name = "convert"

    def applies(self, state: State) -> bool:
        return state.options.converts

    def run(self, state: State) -> None:
        from lowerer.core.opsets import default_opset
        from lowerer.passes.walk import run_walk

        options = state.options
        plan = state.plan
        observing = False  # the walk is over: the rewrites left unverified are checked on observed values
        try:
            target, why = options.target_and_why(default_opset(state.model.opset_import), state.model)
            report = run_walk(state.model, target_opset=target,
                                  request=options.request, verifier=state.recording(), serialized=state.serialized,
                                  picker=plan.pick if plan is not None else None,
                                  picked_ops=plan.picked_ops if plan is not None else frozenset(),
                                  ir_version=options.ir_version, input_check=state.checks)
            if state.verifier is not None and state.verifier.pending:  # unverified: on the values the model feeds
                from lowerer.verification.observed import check_pending

                observing = True
                check_pending(state.verifier, _observed_source(state))
        except VerificationError as e:  # the report so far, the failing rewrite last, for the user to read
            e.report = Report(rewrites=state.seen, source_opset=default_opset(state.model.opset_import),
                              target_opset=options.target_opset, decompose=tuple(sorted(options.decompose)),
                              verification=state.verifier.summary() if state.verifier else None,
                              notes=["verification failed on the values the model feeds a rewrite, checked once the "
                                     "walk was over: the error names the rewrite" if observing else
                                     "verification failed: the conversion stopped at the last rewrite listed"])
            raise
        report.notes[:0] = state.report.notes
        if why is not None:  # a named onnxruntime release without a kernel of some op at the opset it loads
            report.notes.append(why)
        state.report = report


def _observed_source(state: State) -> ObservedSource:
    """The original model and the whole-model check's input options, for the checks on observed values."""
    from lowerer.verification.observed import ObservedSource

    options = state.options
    steer = options.verify_model or options.optimize
    model = state.original if state.original is not None else state.serialized
    unavailable = ("the caller's large weights are held back from the working copy (convert the saved file to "
                   "check on them)") if state.held.tensors else None
    if steer is None:
        return ObservedSource(model, state.source_dir, seed=options.seed, unavailable=unavailable)
    return ObservedSource(model, state.source_dir, steer.input_shapes, steer.value_ranges, steer.load_inputs,
                          options.seed, unavailable)


class BackendPass(Pass):
    """What the backend profile still names after the walk: refused, or kept with ``allow_fallback``.

    ``warn``: a warning line per node kept (not in :data:`INSPECTION`, whose caller lists them).
    """

    name = "backend"

    def __init__(self, warn: bool = True) -> None:
        self.warn = warn

    def applies(self, state: State) -> bool:
        return state.plan is not None

    def run(self, state: State) -> None:
        from lowerer.backends.lowering import finish

        assert state.plan is not None
        finish(state.model, state.plan, state.report, warn=self.warn,
               converts_at=lambda opset: converts_for_backend(state, opset))


def converts_for_backend(state: State, opset: int) -> bool:
    """Whether ``state.model`` converts to ``opset`` for its backend, nothing the profile names left (unverified).

    A refusal's remedy (:func:`lowerer.backends.lowering.backend_remedy`) asks this of the opset below
    the op-versions a profile names: one more walk, on a copy, only when the conversion is refused.
    """
    from lowerer.backends.lowering import finish
    from lowerer.backends.plan import BackendPlan
    from lowerer.core.errors import ConversionError, InputError
    from lowerer.passes.walk import run_walk

    assert state.plan is not None
    trial = onnx.ModelProto()
    trial.CopyFrom(state.model)
    plan = BackendPlan(state.plan.profile)
    try:
        report = run_walk(trial, target_opset=opset, request=state.options.request, picker=plan.pick,
                          picked_ops=plan.picked_ops)
        finish(trial, plan, report, warn=False)
    except (ConversionError, InputError):
        return False
    return True


class CleanupPass(Pass):
    """Initializers and Constant nodes that only rewritten nodes read, and nothing reads now, are removed."""

    name = "cleanup"

    def applies(self, state: State) -> bool:
        return bool(state.report.rewrites)

    def run(self, state: State) -> None:
        from lowerer.model_io.scopes import used_names_of
        from lowerer.passes.cleanup import remove_dead

        # Only a value a replacement no longer reads can have become dead: the model is scanned for what
        # is read only when some rewrite dropped an input (most replacements read what their node read).
        dropping = [r for r in state.report.rewrites if r.original is not None and
                    not {n for n in r.original.input if n} <= used_names_of(r.replacement)]
        if not dropping:
            return
        removed = remove_dead(state.model, dropping, state.report.read_names)
        if removed:
            logger.info("removed %d value(s) the rewrites left unread", removed)


class ValidatePass(Pass):
    """The output against the target's schemas and onnx's checker; what onnxruntime cannot open."""

    name = "validate"

    def applies(self, state: State) -> bool:
        return state.options.converts

    def run(self, state: State) -> None:
        from lowerer.passes.checker_gate import validate_output

        validate_output(state.model, state.serialized if state.serialized is not None else state.original,
                        state.report, state.report.target_opset, input_checked=state.input_checked)


class ModelCheckPass(Pass):
    """The whole original and converted models, run and compared (``verify_model``).

    Float outputs are judged by the budget propagated from the rewrites' own
    (:mod:`lowerer.verification.propagated`): exact where every rewrite was exact or with ``exact``,
    else what the expansions' and kernels' budgets accepted, at each output's scale; and by the
    tolerance the options give.
    """

    name = "verify-model"

    def applies(self, state: State) -> bool:
        return state.options.verify_model is not None and state.original is not None

    def run(self, state: State) -> None:
        import dataclasses

        from lowerer.verification.propagated import model_budget
        from lowerer.verification.whole import ModelSource, verify_models

        options = state.options
        assert state.original is not None and options.verify_model is not None
        budget = model_budget(state.report.rewrites, options.max_ulp, options.exact)
        check = dataclasses.replace(options.verify_model, budget=budget)
        try:
            verify_models(ModelSource(state.original, state.source_dir, "original"),
                          ModelSource(state.model, state.source_dir, "converted"), options=check,
                          providers=None if options.providers is None else list(options.providers),
                          seed=options.seed, report=state.report, progress=options.progress)
        except VerificationError as e:
            e.report = state.report
            raise
        state.original = None


class OptimizePass(Pass):
    """onnxscript's optimizer, and the check that its result computes what the converted model does."""

    name = "optimize"

    def applies(self, state: State) -> bool:
        return state.options.optimize is not None

    def run(self, state: State) -> None:
        from lowerer.passes.optimize import optimize_model

        options = state.options
        optimized = optimize_model(state.model, state.source_dir, report=state.report, options=options.optimize,
                                   providers=None if options.providers is None else list(options.providers),
                                   seed=options.seed, progress=options.progress)
        state.model = optimized


class UsersSessionPass(Pass):
    """The final model opened and run once with onnxruntime's default session options, as users open it.

    The checks run onnxruntime with graph optimizations off; this one does not
    (:mod:`lowerer.verification.default_session`). A model that only the default options fail is exit 1.
    """

    name = "users-session"

    def applies(self, state: State) -> bool:
        from lowerer.verification.ort_support import ort_supports

        return state.options.verify and ort_supports(state.model)

    def run(self, state: State) -> None:
        from lowerer.verification.default_session import open_as_users_do

        result = open_as_users_do(state.model, state.source_dir, state.options.seed)
        state.report.notes.append(f"users' session: {result.status}: {result.reason}")
        logger.info("users' session (%.2f s): %s", result.seconds, result.reason)
        if result.failed:
            error = VerificationError(f"the converted model fails as users open it: {result.reason}")
            error.report = state.report
            raise error


class PlacementPass(Pass):
    """The backend's provider opens the model with CPU fallback disabled, where it is installed."""

    name = "placement"

    def applies(self, state: State) -> bool:
        return state.plan is not None

    def run(self, state: State) -> None:
        from lowerer.backends.lowering import prove

        assert state.plan is not None
        prove(state.model, state.plan, state.report, state.source_dir)


class DeploymentPass(Pass):
    """The converted model run on the backend's own runtime where it is installed, compared with onnxruntime CPU."""

    name = "deployment"

    def applies(self, state: State) -> bool:
        # an onnxruntime execution provider's profile (cpu, cuda, dml ...): the placement pass opens the model
        # with that provider itself, and the rewrites were verified in onnxruntime
        return state.plan is not None and state.options.verify and state.plan.profile.runtime != "onnxruntime"

    def run(self, state: State) -> None:
        from lowerer.backends.deployment import check_deployment, witness_for

        assert state.plan is not None
        found = witness_for(state.plan.profile)
        original = state.original
        if original is None and state.serialized is not None and found[0] is not None:  # parsed only to be run
            original = onnx.load_from_string(state.serialized)
        result = check_deployment(original, state.model, state.plan.profile, state.report, seed=state.options.seed,
                                  data_dir=state.source_dir, found=found,
                                  steering=state.options.verify_model or state.options.optimize)
        logger.info("deployment check: %s", result.reason)


#: The passes, in order.
PIPELINE: tuple[Pass, ...] = (ImportsPass(), ConvertPass(), BackendPass(), CleanupPass(), ValidatePass(),
                              ModelCheckPass(), OptimizePass(), UsersSessionPass(), PlacementPass(), DeploymentPass())
#: ``lowerer inspect``'s dry run: :data:`PIPELINE` without the placement proof (it opens the backend's provider),
#: the backend pass without its warning lines.
INSPECTION: tuple[Pass, ...] = tuple(BackendPass(warn=False) if isinstance(p, BackendPass) else p
                                     for p in PIPELINE if not isinstance(p, PlacementPass))


def run_passes(state: State, passes: tuple[Pass, ...] = PIPELINE) -> None:
    """Run ``passes`` over ``state`` in order."""
    for p in passes:
        p(state)
