"""Per-rewrite verification: run the original node and its replacement on the same inputs, compare.

Identical rewrites (same op, version, attributes, input types and shapes, same replacement
structure and constants) are checked once; later ones reuse the result.
"""

from __future__ import annotations

import os
import time
import weakref
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from lowerer.core.errors import VerificationError
from lowerer.core.report import Rewrite
from lowerer.facts import reference
from lowerer.model_io.scopes import MAIN_GRAPH
from lowerer.verification import blame
from lowerer.verification.canon import Canon as _Canon
from lowerer.verification.canon import canon_of
from lowerer.verification.inputs import bind_shapes, min_rank_for, set_kinds
from lowerer.verification.models import small_model
from lowerer.verification.narrowing import narrowing_problem
from lowerer.verification.providers import CPU, cuda_settings, select_providers
from lowerer.verification.result import CheckResult
from lowerer.verification.runner import Engine, ReferenceEngine, SessionMaker, ort_can_exchange
from lowerer.verification.specs import (
    Spec,
    combined,
    element_sets,
    input_specs,
    invalid_graph,
    structure_problem,
)
from lowerer.verification.trial import Trial, run_shapes
from lowerer.verification.worker import KNOWN_ABORTS, VerificationWorker, aborts_on

__all__ = ["CheckCounter", "RewriteVerifier"]

#: Called with (rewrites seen, distinct checks run) after each rewrite.
CheckCounter = Callable[[int, int], None]


class RewriteVerifier:
    """The :data:`lowerer.passes.walk.Verifier`: checks each rewrite, reusing results of identical ones.

    Args:
        providers: execution providers (see :func:`~lowerer.verification.providers.select_providers`).
        seed: seed of the generated inputs (each distinct check derives its own stream from it).
        progress: called with (rewrites seen, distinct checks run) after each rewrite.
    """

    def __init__(self, providers: Sequence[str] | None = None, seed: int = 0, progress: CheckCounter | None = None,
                 max_ulp: int | None = None, exact: bool = False) -> None:
        self.providers = select_providers(providers)
        self.seed = seed
        #: The error budget of expansions in ulp (None: the per-type default); ``exact``: no tolerance at all.
        self.max_ulp = max_ulp
        self.exact = exact
        self.progress = progress
        #: The worker process that runs the sessions onnxruntime may abort (started on first need; see
        #: :mod:`.worker`); ``LOWERER_VERIFY_IN_WORKER=all`` runs every check's sessions there.
        self.worker = VerificationWorker()
        self._isolate_all = os.environ.get("LOWERER_VERIFY_IN_WORKER", "") == "all"
        weakref.finalize(self, self.worker.close)
        self.sessions = SessionMaker(self.providers, self.worker, self._isolate_all)
        self.stats: Counter[str] = Counter()
        self.seconds = 0.0
        self._cache: dict[tuple[object, ...], CheckResult] = {}
        self._cpu: SessionMaker | None = None  # second opinions on the CPU provider (made on the first)
        #: Rewrites of the main graph left unverified, to check again on the values the model feeds them
        #: (:func:`lowerer.verification.observed.check_pending`, once the walk is over).
        self.pending: list[Rewrite] = []
        #: A second opinion judges the replacement by its spec too (:meth:`_replacement_departs`).
        self._both_by_spec = False

    def summary(self) -> dict[str, Any]:
        """Providers, counts (rewrites, distinct checks, cache hits, sessions) and time spent."""
        out = {"providers": list(self.providers), "seed": self.seed, "rewrites": self.stats["rewrites"],
               "distinct_checks": self.stats["checks"], "cache_hits": self.stats["cache_hits"],
               "sessions": self.sessions.sessions + (self._cpu.sessions if self._cpu else 0),
               "seconds": round(self.seconds, 4)}
        cuda = cuda_settings(self.providers)
        if cuda is not None:
            out["cuda"] = cuda
        if self._cpu is not None:
            out["second_opinions"] = self._cpu.sessions
        if self.stats["observed_rewrites"]:  # checked again on the values the model feeds them (.observed)
            out["observed"] = {k: self.stats[f"observed_{k}"] for k in ("rewrites", "verified", "runs")}
        if self.worker.starts:
            out["worker"] = {"starts": self.worker.starts, "aborts": self.worker.aborts}
        return out

    def close(self) -> None:
        """End the verification worker, if one was started (a later check starts a fresh one)."""
        self.worker.close()

    def __call__(self, rewrite: Rewrite) -> None:
        """Verify ``rewrite``: set its status, provider, reason and details, or raise VerificationError."""
        start = time.perf_counter()
        try:
            self.stats["rewrites"] += 1
            if rewrite.original is None:
                rewrite.status, rewrite.reason = "unverified", "the rewrite carries no copy of the original node"
                return
            canon = canon_of(rewrite)
            result = self._cache.get(canon.key)
            if result is None:
                self.stats["checks"] += 1
                t0 = time.perf_counter()
                try:
                    result = self._check(rewrite, canon)
                except VerificationError:
                    raise
                except Exception as e:  # a bug in the checker must not pass as verified
                    result = CheckResult("unverified", f"the check itself failed: {type(e).__name__}: {e}")
                result.details["check_seconds"] = round(time.perf_counter() - t0, 6)
                self._cache[canon.key] = result
                reused = False
            else:
                self.stats["cache_hits"] += 1
                reused = True
            rewrite.status = result.status
            rewrite.reason = result.reason
            rewrite.provider = result.provider
            rewrite.details = {**result.details, "reused": reused}
            if result.status == "unverified" and rewrite.scope == MAIN_GRAPH:
                self.pending.append(rewrite)
            if result.status == "failed":
                raise VerificationError(self._message(rewrite, canon, result))
        finally:
            self.seconds += time.perf_counter() - start
            if self.progress is not None:
                self.progress(self.stats["rewrites"], self.stats["checks"])

    @staticmethod
    def _message(rewrite: Rewrite, canon: _Canon, result: CheckResult) -> str:
        text = result.failure or result.reason
        for c, o in (*canon.inputs, *canon.outputs):
            text = text.replace(f"'{c}'", repr(o)).replace(f"{c}:", f"{o}:")
        return (f"node {rewrite.node!r} ({rewrite.op_type}-{rewrite.from_version}, in {rewrite.scope}) rewritten for "
                f"opset {rewrite.to_opset} by rule {rewrite.rule!r} ({' + '.join(rewrite.emitted)}) failed "
                f"verification on {result.provider}: {text}")

    # -- one distinct check ------------------------------------------------------------------------
    def _check(self, rewrite: Rewrite, canon: _Canon) -> CheckResult:
        problem = structure_problem(canon) or narrowing_problem(rewrite)
        if problem is not None:
            return problem
        specs = input_specs(rewrite, canon)
        if isinstance(specs, CheckResult):
            return specs
        elem_sets = element_sets(rewrite, specs)
        if isinstance(elem_sets, CheckResult):
            return elem_sets
        min_rank = min_rank_for(canon.original, rewrite.from_version)
        shape_lists = []
        for _, _, dims in specs:
            shapes = bind_shapes(dims, min_rank)
            if isinstance(shapes, str):
                return CheckResult("unverified", shapes)
            if canon.original.op_type in _ORT_DIES_ON_EMPTY:
                shapes = [s for s in shapes if 0 not in s]
                if not shapes:
                    return CheckResult("unverified", _ORT_DIES_ON_EMPTY[canon.original.op_type])
            shape_lists.append(shapes)
        n_sets = max(len(s) for s in shape_lists) if shape_lists else 1
        combos = [tuple(s[i % len(s)] for s in shape_lists) for i in range(n_sets)]
        if canon.original.op_type in _AVOIDED_ABORTS:  # the known-fatal binding is not made (cheap)
            combos = [c for c in combos if aborts_on(canon.original.op_type, c) is None]
            if not combos:
                return CheckResult("unverified", f"onnxruntime aborts on {canon.original.op_type} with "
                                                 f"{KNOWN_ABORTS[canon.original.op_type]}, the only shapes generated")
        outcomes = [self._judged(rewrite, canon, specs, elems, combos) for elems in elem_sets]
        return combined(elem_sets, outcomes)

    def _judged(self, rewrite: Rewrite, canon: _Canon, specs: list[Spec], elems: list[int],
                combos: list[tuple[tuple[int, ...], ...]]) -> CheckResult:
        """One element-type set checked; a failure gets a second opinion before the rewrite is blamed.

        On a provider other than the CPU, a failure is checked again on the CPU provider: when the two
        sides agree there, the provider's kernel is what departs (named, the rewrite verified on the
        CPU). A failure on the CPU is checked once more with the original judged by lowerer's numpy
        reference (the op's spec) where it has one: when the replacement agrees with the spec and the
        failing inputs meet a departure listed, with its source, in ``departures.json``
        (:func:`.blame.listed_departure`), onnxruntime's CPU kernel of the original is what departs;
        otherwise the failure stands (the reference is never the sole judge unannounced).
        """
        result = self._check_types(rewrite, canon, specs, elems, combos, self.sessions)
        if result.status == "verified":
            return self._versions_by_spec(rewrite, canon, specs, elems, combos, result)
        if result.status != "failed" or result.provider == "onnx.checker":
            return result
        settled, result = self.second_opinions(rewrite, canon, result, lambda sessions, by_spec, replay: (
            self._check_types(rewrite, canon, specs, elems, combos, sessions, by_spec=by_spec, replay=replay)))
        if settled:
            return result
        return self._replacement_departs(rewrite, canon, specs, elems, combos, result) or result

    def second_opinions(self, rewrite: Rewrite, canon: _Canon, result: CheckResult,
                        rerun: Callable[[SessionMaker, bool, dict[str, np.ndarray] | None], CheckResult]
                        ) -> tuple[bool, CheckResult]:
        """A failed check run again on the CPU provider, then with the original judged by its spec.

        ``rerun(sessions, by_spec, replay)`` runs the same input sets. Returns (True, the outcome) where a
        party other than the rewrite is found to depart (the provider's kernel, or onnxruntime's CPU kernel
        of the original for a departure ``departures.json`` lists), else (False, the failure as it stands).
        """
        if self.providers[0] != CPU:
            on_cpu = rerun(self._cpu_sessions(), False, (result.evidence or {}).get("feeds"))
            if on_cpu.status == "verified":
                return True, blame.provider_departs(rewrite, result, on_cpu, self.providers[0])
            result = on_cpu if on_cpu.status == "failed" else result
        if reference.supports([canon.original], rewrite.from_opset) is None:
            by_spec = rerun(self._cpu_sessions(), True, None)
            if by_spec.status == "verified":
                feeds = (result.evidence or {}).get("feeds") or {}
                listed = blame.listed_departure(rewrite.op_type, rewrite.from_version, result.provider or CPU,
                                                [feeds[c] for c, _ in canon.inputs if c in feeds], canon.original)
                if listed is not None:
                    return True, blame.kernel_departs_from_spec(rewrite, result, by_spec, listed)
                result.details["spec_agrees"] = blame.unlisted(rewrite, result)
        return False, result

    def _versions_by_spec(self, rewrite: Rewrite, canon: _Canon, specs: list[Spec], elems: list[int],
                          combos: list[tuple[tuple[int, ...], ...]], verified: CheckResult) -> CheckResult:
        """A second witness where onnxruntime's run of the replacement cannot tell two versions of the op apart.

        Where the replacement has a node of the original's op whose onnxruntime CPU kernel departs from
        its version's spec (``departures.json``: OneHot-9 runs OneHot-11's kernel), a verified check proves
        nothing about the versions' meanings (a relabel OneHot 11 -> 9 runs one kernel twice). The check
        runs once more with both sides judged by lowerer's numpy reference; a failure there stands, naming
        the departure. Otherwise ``verified`` stands (noting the spec's agreement where it ran).
        """
        listed = blame.departures_of([n for n in canon.replacement if n.op_type == canon.original.op_type],
                                     rewrite.to_opset, CPU)
        if not listed or reference.supports([canon.original], rewrite.from_opset) is not None or \
                reference.supports(canon.replacement, rewrite.to_opset) is not None:
            return verified
        by_spec = self._both_sides_by_spec(rewrite, canon, specs, elems, combos)
        if by_spec.status != "failed":
            verified.details["versions_by_spec"] = f"{by_spec.status}: {by_spec.reason}"
            return verified
        said = (f"judged on both sides by lowerer's numpy reference, as onnxruntime's CPU kernel departs from "
                f"the spec here: {listed[0].statement}")
        by_spec.failure = f"{by_spec.failure or by_spec.reason}; {said}"
        by_spec.details["versions_by_spec"] = {"statement": said, "source": listed[0].source}
        return by_spec

    def _replacement_departs(self, rewrite: Rewrite, canon: _Canon, specs: list[Spec], elems: list[int],
                             combos: list[tuple[tuple[int, ...], ...]], failed: CheckResult) -> CheckResult | None:
        """A listed departure of a kernel of the replacement (a relabel's own op ...), judged as for the original.

        Where the failing inputs reach a replacement node whose onnxruntime CPU kernel departs from the spec
        on them (``departures.json``), the check runs once more with both sides judged by lowerer's numpy
        reference: verified there, the rewrite stands, the departure named. None: the failure stands.
        """
        if failed.status != "failed" or reference.supports(canon.replacement, rewrite.to_opset) is not None:
            return None
        feeds = (failed.evidence or {}).get("feeds") or {}
        listed = blame.replacement_departure(canon.replacement, rewrite.to_opset, CPU, feeds)
        if listed is None:
            return None
        by_spec = self._both_sides_by_spec(rewrite, canon, specs, elems, combos)
        if by_spec.status != "verified":
            return None
        return blame.kernel_departs_from_spec(rewrite, failed, by_spec, listed, side="replacement")

    def _both_sides_by_spec(self, rewrite: Rewrite, canon: _Canon, specs: list[Spec], elems: list[int],
                            combos: list[tuple[tuple[int, ...], ...]]) -> CheckResult:
        """The same input sets run once more with the original and the replacement judged by lowerer's reference."""
        self._both_by_spec = True
        try:
            return self._check_types(rewrite, canon, specs, elems, combos, self._cpu_sessions(), by_spec=True)
        finally:
            self._both_by_spec = False

    def _cpu_sessions(self) -> SessionMaker:
        if self._cpu is None:
            self._cpu = SessionMaker([CPU], self.worker, self._isolate_all)
        return self._cpu

    def _engine(self, model: onnx.ModelProto, opset: int, dtypes: list[np.dtype[Any]], side: str,
                sessions: SessionMaker, by_spec: bool = False) -> Engine | str:
        listed = blame.departures_of(model.graph.node, opset, sessions.providers[0]) if side == "original" else []
        ref_why = reference.supports(model.graph.node, opset)
        by_its_spec = side == "original" or (by_spec and self._both_by_spec)
        judged_by_spec = ReferenceEngine(model, opset, fallback_reason="; ".join(
            [blame.BY_SPEC, *(f"{d.statement} (source: {d.source})" for d in listed)])) if (
            ref_why is None and by_its_spec and (by_spec or listed)) else None
        if by_spec and judged_by_spec is not None:  # a second opinion (accepted only for a listed departure)
            return judged_by_spec
        why = ort_can_exchange(dtypes)
        if why is None:
            made = sessions.for_check(model)
            if not isinstance(made, str):
                # An op whose onnxruntime kernel departs from the spec on inputs departures.json lists is judged
                # by its spec where onnxruntime can run it (where it cannot, the reference alone judges it).
                return judged_by_spec or made
            why = f"onnxruntime cannot run the {side}: {made}"
        else:
            why = f"{why} for the {side}"
        if ref_why is None:
            return ReferenceEngine(model, opset, fallback_reason=why)
        return f"{why}; and {ref_why}"

    def _engines(self, rewrite: Rewrite, canon: _Canon, in_specs: list[Spec], dtypes: list[np.dtype[Any]],
                 sessions: SessionMaker, by_spec: bool = False) -> tuple[Engine, Engine] | CheckResult:
        """The engines that run the original and the replacement, or why the check stops before running."""
        derived = [(c, onnx.TensorProto.INT64, [len(r)]) for c, _, r in canon.derived]
        outputs = [c for c, _ in canon.outputs]
        fixed = canon.fixed_tensors
        orig_model = small_model([canon.original], fixed, [*in_specs, *derived], outputs, rewrite.from_opset)
        repl_model = small_model(canon.replacement, [*fixed, *canon.constants], [*in_specs, *derived], outputs,
                                 rewrite.to_opset)
        orig = self._engine(orig_model, rewrite.from_opset, dtypes, "original", sessions, by_spec)
        if isinstance(orig, str):
            return CheckResult("unverified", orig)
        invalid = invalid_graph(repl_model, orig_model)
        if invalid:
            return CheckResult("failed", "the replacement is not a valid ONNX graph", "onnx.checker",
                               failure=f"the replacement is not a valid ONNX graph at opset "
                                       f"{rewrite.to_opset}: {invalid}")
        repl = self._engine(repl_model, rewrite.to_opset, dtypes, "replacement", sessions, by_spec)
        if isinstance(repl, str):
            return CheckResult("unverified", repl)
        return orig, repl

    def _check_types(self, rewrite: Rewrite, canon: _Canon, specs: list[Spec], elems: list[int],
                     combos: list[tuple[tuple[int, ...], ...]], sessions: SessionMaker,
                     by_spec: bool = False, replay: dict[str, np.ndarray] | None = None) -> CheckResult:
        in_specs = [(c, e, d) for (c, _, d), e in zip(specs, elems, strict=True)]
        dtypes = [reference.np_dtype(e) for e in elems]
        engines = self._engines(rewrite, canon, in_specs, dtypes, sessions, by_spec)
        if isinstance(engines, CheckResult):
            return engines
        trial = Trial(rewrite, canon, *engines, elems, dtypes, self.exact, self.max_ulp)
        rng = np.random.default_rng([self.seed, zlib.crc32(repr(canon.key).encode())])
        kinds = set_kinds(elems)  # per input: a float input gets its inf/nan sets beside an index or a condition
        for shapes in combos:
            failed = run_shapes(trial, shapes, kinds, rng)
            if failed is not None:
                return failed
        result = trial.result()
        if replay is not None and result.status == "verified":  # both sides' outputs on another run's feeds
            result.evidence = {"feeds": replay, **trial.replay(replay)}
        return result


#: Ops whose onnxruntime kernel kills the process on an empty input: checked without the empty binding.
_ORT_DIES_ON_EMPTY = {
    "Einsum": "onnxruntime's Einsum dies of SIGFPE on an empty operand, so it is not run on one",
}

#: Ops whose known-fatal bindings (:func:`~.worker.aborts_on`) are not generated; the worker survives the rest.
_AVOIDED_ABORTS = set(KNOWN_ABORTS)
