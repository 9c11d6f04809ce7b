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

import ml_dtypes
import numpy as np
import onnx

from lowerer.core.errors import VerificationError
from lowerer.core.report import Rewrite, RewriteStatus
from lowerer.facts import reference
from lowerer.model_io.scopes import has_subgraphs
from lowerer.verification import blame
from lowerer.verification.canon import Canon as _Canon
from lowerer.verification.canon import canon_of
from lowerer.verification.compare import (
    ARITHMETIC_OPS,
    EXPANSION_ULPS,
    KERNEL_EPSILONS,
    SIGN_UNSTABLE_OPS,
    Tolerance,
    compare,
    expansion_budget,
    tolerance_for,
    worst_difference,
    zero_signs,
)
from lowerer.verification.domain import into_domain, outside_spec
from lowerer.verification.inputs import JUDGED_KINDS, InputSet, bind_shapes, generate, kinds_for, min_rank_for
from lowerer.verification.models import small_model
from lowerer.verification.narrowing import narrowing_problem
from lowerer.verification.propagated import budget_kind
from lowerer.verification.providers import CPU, cuda_settings, select_providers
from lowerer.verification.result import CheckResult
from lowerer.verification.runner import (
    Engine,
    OrtEngine,
    ReferenceEngine,
    SessionMaker,
    ort_can_exchange,
)
from lowerer.verification.special import KINDS as SPECIAL_KINDS
from lowerer.verification.special import constructed
from lowerer.verification.worker import KNOWN_ABORTS, OrtAbortedError, VerificationWorker, aborts_on

__all__ = ["ARITHMETIC_OPS", "CheckResult", "RewriteVerifier", "canon_of"]

Progress = Callable[[int, int], None]


def _budget_record(budget: str, dtypes: list[np.dtype[Any]], max_ulp: int | None, op: str) -> dict[str, Any]:
    """What a rewrite's float outputs were judged by, for its report record."""
    if budget == "exact":
        return {"kind": "exact", "why": "exact by construction (or --exact)"}
    if budget == "expansion":
        return {"kind": "expansion", "max_ulp": "per type" if max_ulp is None else max_ulp,
                "defaults": {str(k): v for k, v in EXPANSION_ULPS.items()},
                "why": "a function body computes in its own order of operations; an element passes within max_ulp "
                       "ulp, or within as many epsilons of the output's largest magnitude"}
    return {"kind": "kernel", "why": f"{op} computes its values; the two sides' kernels may round differently",
            "epsilons_of_scale": KERNEL_EPSILONS}


def _derived_feeds(canon: _Canon, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The shape inputs computed from the generated inputs' shapes (see :attr:`_Canon.derived`)."""
    out: dict[str, np.ndarray] = {}
    canonical = {orig: c for c, orig in canon.inputs}
    for c, _, recipe in canon.derived:
        values = []
        for entry in recipe:
            if isinstance(entry, int):
                values.append(entry)
            else:
                source, index = entry
                shape = shapes.get(canonical.get(source, source))
                values.append(shape[index] if shape is not None and index < len(shape) else 1)
        out[c] = np.array(values, dtype=np.int64)
    return out


def _scale(values: np.ndarray) -> float:
    """The largest finite magnitude in ``values`` (0 when there is none): what a sum's error scales with."""
    if values.dtype.kind != "f" and values.dtype != np.dtype(ml_dtypes.bfloat16):
        return 0.0
    finite = np.abs(values[np.isfinite(values)].astype(np.float64))
    return float(finite.max()) if finite.size else 0.0


def _schema_types(node: onnx.NodeProto, opset: int) -> list[int]:
    """Element types the schema of ``node`` allows for its first input."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return []
    type_str = schema.inputs[0].type_str if schema.inputs else ""
    allowed = [tc.allowed_type_strs for tc in schema.type_constraints if tc.type_param_str == type_str]
    strs = allowed[0] if allowed else [type_str]
    out = []
    for s in strs:
        if s.startswith("tensor(") and s.endswith(")"):
            name = s[len("tensor("):-1].upper()
            name = {"FLOAT": "FLOAT", "BFLOAT16": "BFLOAT16"}.get(name, name)
            if name in onnx.TensorProto.DataType.keys():  # noqa: SIM118 - a protobuf enum
                out.append(onnx.TensorProto.DataType.Value(name))
    return out


_GENERATED = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
              onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
              onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
              onnx.TensorProto.BOOL}


class RewriteVerifier:
    """The :data:`lowerer.passes.pipeline.Verifier`: checks each rewrite, reusing results of identical ones.

    Args:
        providers: execution providers (see :func:`~lowerer.verification.providers.select_providers`).
        seed: seed of the generated inputs (each distinct check derives its own stream from it).
        progress: called with (rewrites seen, distinct checks run) after each rewrite.
    """

    def __init__(self, providers: Sequence[str] | None = None, seed: int = 0, progress: Progress | None = None,
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
        problem = _structure_problem(canon) or narrowing_problem(rewrite)
        if problem is not None:
            return problem
        specs = _input_specs(rewrite, canon)
        if isinstance(specs, CheckResult):
            return specs
        elem_sets = _element_sets(rewrite, specs)
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
        return _combined(elem_sets, outcomes)

    def _judged(self, rewrite: Rewrite, canon: _Canon, specs: list[_Spec], elems: list[int],
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
        if result.status != "failed" or result.provider == "onnx.checker":
            return result
        if self.providers[0] != CPU:
            on_cpu = self._check_types(rewrite, canon, specs, elems, combos, self._cpu_sessions(),
                                       replay=(result.evidence or {}).get("feeds"))
            if on_cpu.status == "verified":
                return blame.provider_departs(rewrite, result, on_cpu, self.providers[0])
            result = on_cpu if on_cpu.status == "failed" else result
        if reference.supports([canon.original], rewrite.from_opset) is None:
            by_spec = self._check_types(rewrite, canon, specs, elems, combos, self._cpu_sessions(), by_spec=True)
            if by_spec.status == "verified":
                feeds = (result.evidence or {}).get("feeds") or {}
                listed = blame.listed_departure(rewrite.op_type, rewrite.from_version, result.provider or CPU,
                                                [feeds[c] for c, _ in canon.inputs if c in feeds])
                if listed is not None:
                    return blame.kernel_departs_from_spec(rewrite, result, by_spec, listed)
                result.details["spec_agrees"] = blame.unlisted(rewrite, result)
        return result

    def _cpu_sessions(self) -> SessionMaker:
        if self._cpu is None:
            self._cpu = SessionMaker([CPU], self.worker, self._isolate_all)
        return self._cpu

    def _engine(self, model: onnx.ModelProto, opset: int, dtypes: list[np.dtype[Any]], side: str,
                sessions: SessionMaker, by_spec: bool = False) -> Engine | str:
        listed = blame.departures_of(model.graph.node, opset, sessions.providers[0]) if side == "original" else []
        ref_why = reference.supports(model.graph.node, opset)
        judged_by_spec = ReferenceEngine(model, opset, fallback_reason="; ".join(
            [blame.BY_SPEC, *(f"{d.statement} (source: {d.source})" for d in listed)])) if (
            ref_why is None and side == "original" and (by_spec or listed)) else None
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

    def _engines(self, rewrite: Rewrite, canon: _Canon, in_specs: list[_Spec], dtypes: list[np.dtype[Any]],
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
        invalid = _invalid(repl_model, orig_model)
        if invalid:
            return CheckResult("failed", "the replacement is not a valid ONNX graph", "onnx.checker",
                               failure=f"the replacement is not a valid ONNX graph at opset "
                                       f"{rewrite.to_opset}: {invalid}")
        repl = self._engine(repl_model, rewrite.to_opset, dtypes, "replacement", sessions)
        if isinstance(repl, str):
            return CheckResult("unverified", repl)
        return orig, repl

    def _check_types(self, rewrite: Rewrite, canon: _Canon, specs: list[_Spec], elems: list[int],
                     combos: list[tuple[tuple[int, ...], ...]], sessions: SessionMaker,
                     by_spec: bool = False, replay: dict[str, np.ndarray] | None = None) -> CheckResult:
        in_specs = [(c, e, d) for (c, _, d), e in zip(specs, elems, strict=True)]
        dtypes = [reference.np_dtype(e) for e in elems]
        engines = self._engines(rewrite, canon, in_specs, dtypes, sessions, by_spec)
        if isinstance(engines, CheckResult):
            return engines
        trial = _Trial(rewrite, canon, *engines, elems, dtypes, self.exact, self.max_ulp)
        rng = np.random.default_rng([self.seed, zlib.crc32(repr(canon.key).encode())])
        kinds = [k for k in kinds_for(elems[0]) if all(k in kinds_for(e) for e in elems)] if elems else ['normal']
        for shapes in combos:
            failed = _run_shapes(trial, shapes, kinds, rng)
            if failed is not None:
                return failed
        result = trial.result()
        if replay is not None and result.status == "verified":  # both sides' outputs on another run's feeds
            result.evidence = {"feeds": replay, **trial.replay(replay)}
        return result


#: Generated inputs of one distinct check: (canonical name, element type, dims or None).
_Spec = tuple[str, int, list[int | None] | None]
#: What :meth:`_Trial.run_set` answers when the original refuses an input set's shapes.
_STOP = "stop"


def _run_shapes(trial: _Trial, shapes: tuple[tuple[int, ...], ...], kinds: Sequence[str],
                rng: np.random.Generator) -> CheckResult | None:
    """The seeded kinds, then the constructed sets (:mod:`.special`), on one binding of the shapes; a failure."""
    empty = all(0 in s for s in shapes)
    for kind in kinds[:1] if empty else kinds:  # an empty input has no values to vary
        outcome = trial.run_set(kind, shapes, rng)
        if isinstance(outcome, CheckResult):
            return outcome
        if outcome == _STOP:
            return None  # the shape itself is unacceptable to the original
    if empty:
        trial.covered.append("empty dims")
        return None
    rewrite = trial.rewrite
    for kind, given, covers in constructed(trial.canon.original, rewrite.from_version, trial.elems, shapes, rng):
        outcome = trial.run_set(kind, shapes, rng, given)
        if isinstance(outcome, CheckResult):
            return outcome
        if outcome == _STOP:
            return None
        if covers not in trial.covered:
            trial.covered.append(covers)
    return None


def _structure_problem(canon: _Canon) -> CheckResult | None:
    """Why the replacement cannot be checked (or is wrong) by its structure alone, or None."""
    produced = {o for n in canon.replacement for o in n.output if o} | {t.name for t in canon.constants}
    missing = [orig for c, orig in canon.outputs if c not in produced]
    if missing:
        return CheckResult("failed", "replacement does not produce every output", "structure",
                           failure=f"the replacement does not produce output(s) {missing}")
    known = {c for c, _ in canon.inputs} | {t.name for t in canon.constants} | {c for c, _, _ in canon.fixed} \
        | {c for c, _, _ in canon.derived}
    free: list[str] = []
    for n in canon.replacement:
        free += [i for i in n.input if i and i not in known]
        known.update(o for o in n.output if o)
    if free:
        return CheckResult("unverified", "the replacement reads values the original node does not take")
    if any(n.domain not in ("", "ai.onnx") for n in (canon.original, *canon.replacement)):
        return CheckResult("unverified", "nodes outside the default domain are not verified")
    return None


def _input_specs(rewrite: Rewrite, canon: _Canon) -> list[_Spec] | CheckResult:
    """The generated inputs' specs, or why the check cannot run (an input's type is unknown)."""
    specs: list[_Spec] = []
    for c, orig in canon.inputs:
        vt = rewrite.input_types.get(orig)
        if vt is None:
            return CheckResult("unverified", f"the type of input {orig!r} is unknown")
        specs.append((c, int(vt[0]), None if vt[1] is None else list(vt[1])))
    return specs


def _element_sets(rewrite: Rewrite, specs: list[_Spec]) -> list[list[int]] | CheckResult:
    """The element types to check the inputs with (each type the schema allows when the one input's is unknown)."""
    unknown = [s for s in specs if s[1] == 0]
    if unknown and len(specs) > 1:
        return CheckResult("unverified", f"the element type of input {unknown[0][0]!r} is unknown")
    if unknown:
        candidates = [t for t in _schema_types(rewrite.original, rewrite.from_opset) if t in _GENERATED]  # type: ignore[arg-type]
        if not candidates:
            return CheckResult("unverified", "the input's element type is unknown and the op's schema lists none "
                                             "lowerer can generate")
        return [[t] for t in candidates]
    bad = [s for s in specs if s[1] not in _GENERATED]
    if bad:
        name = onnx.TensorProto.DataType.Name(bad[0][1])
        return CheckResult("unverified", f"inputs of element type {name} are not generated")
    return [[s[1] for s in specs]]


def _combined(elem_sets: list[list[int]], outcomes: list[CheckResult]) -> CheckResult:
    """One result from the checks with each element type: the first failure, else all verified or not."""
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        return failed[0]
    if len(outcomes) == 1:
        return outcomes[0]
    names = [onnx.TensorProto.DataType.Name(e[0]).lower() for e in elem_sets]
    not_done = [f"{n}: {o.reason}" for n, o in zip(names, outcomes, strict=True)
                if o.status not in ("verified", "reference-only")]
    details = {"element_type": "unknown; checked each type the schema allows",
               "by_type": {n: {"status": o.status, "provider": o.provider, **o.details}
                           for n, o in zip(names, outcomes, strict=True)}}
    providers = sorted({o.provider for o in outcomes if o.provider})
    if not_done:
        return CheckResult("unverified", "element type unknown; not verified for " + "; ".join(not_done),
                           ", ".join(providers) or None, details)
    status: RewriteStatus = "reference-only" if any(o.status == "reference-only" for o in outcomes) else "verified"
    return CheckResult(status, f"element type unknown; {status} for each of {', '.join(names)}",
                       ", ".join(providers), details)


class _Trial:
    """One distinct check with one set of element types: the input sets run so far and what they showed."""

    def __init__(self, rewrite: Rewrite, canon: _Canon, orig: Engine, repl: Engine, elems: list[int],
                 dtypes: list[np.dtype[Any]], exact: bool, max_ulp: int | None) -> None:
        self.rewrite, self.canon, self.orig, self.repl = rewrite, canon, orig, repl
        self.elems, self.dtypes, self.max_ulp = elems, dtypes, max_ulp
        self.provider = orig.label if orig.label == repl.label else \
            f"{orig.label} (original), {repl.label} (replacement)"
        self.budget = budget_kind(rewrite, exact)
        arithmetic = self.budget != "exact" or (exact and budget_kind(rewrite) != "exact")
        # Range edges overflow in an order-dependent way in arithmetic kernels (a sum of +-3.4e38
        # terms is inf in one order, finite in another): recorded for them, not judged.
        self.judged = (JUDGED_KINDS - {"edges"} if arithmetic else JUDGED_KINDS) | SPECIAL_KINDS
        #: What the constructed sets covered (:mod:`.special`), for the report.
        self.covered: list[str] = []
        self.names = [c for c, _ in canon.inputs]
        self.shown_names = [orig for _, orig in canon.inputs]  # the inputs' names in the model
        self.tol: Tolerance | None = None  # set once a tolerance was needed
        self.worst_ulp = self.worst_abs = self.worst_scaled = 0.0
        self.used_sets: list[str] = []
        self.skipped: list[str] = []
        self.nan_notes: list[str] = []
        self.comparisons = 0
        self.max_diff = 0.0
        #: Some output was equal only up to the sign of zero (an op of SIGN_UNSTABLE_OPS).
        self.zero_sign = False
        self.first_error: str | None = None

    def run_set(self, kind: str, shapes: tuple[tuple[int, ...], ...], rng: np.random.Generator,
                given: dict[int, np.ndarray] | None = None) -> CheckResult | str | None:
        """Run both sides on one input set: a failure, :data:`_STOP` (the original refused it), or None.

        ``given``: constructed inputs by position (the others generated as ``normal``).
        """
        canon, orig, repl = self.canon, self.orig, self.repl
        desc = InputSet(kind, shapes).describe(self.shown_names, self.dtypes)
        made = "normal" if given is not None else kind
        feeds = {n: given[k] if given is not None and k in given else generate(made, e, s, rng)
                 for k, (n, e, s) in enumerate(zip(self.names, self.elems, shapes, strict=True))}
        feeds.update(_derived_feeds(canon, dict(zip(self.names, shapes, strict=True))))
        into_domain(canon.original, feeds)
        outside = outside_spec(canon.original, feeds, {c: v for c, _, v in canon.fixed})
        if outside:
            self.skipped.append(f"{desc}: {outside}")
            return None
        try:
            expected = orig.run(feeds)
        except OrtAbortedError as e:
            self._drop(self._aborted(desc, shapes, "original", e))
            return None
        except Exception as e:
            self.first_error = self.first_error or f"{desc}: {_short(e)}"
            self.skipped.append(f"{desc}: the original does not run on it")
            return _STOP
        if isinstance(orig, OrtEngine):
            orig.resolve_placement()
        try:
            actual = repl.run(feeds)
        except OrtAbortedError as e:
            self._drop(self._aborted(desc, shapes, "replacement", e))
            return None
        except Exception as e:
            if isinstance(e, reference.ReferenceEvalError) and orig.label != repl.label:
                # Engines differ: the reference may be stricter than onnxruntime here.
                self.skipped.append(f"{desc}: the reference cannot evaluate the replacement ({_short(e)}) "
                                    f"although {orig.label} runs the original")
                return None
            return CheckResult("failed", "the replacement raised an error where the original ran", self.provider,
                               {"input_set": desc},
                               failure=f"input set {desc}: the original runs but the replacement raises: {_short(e)}",
                               evidence={"feeds": feeds, "original": expected, "replacement": None})
        if isinstance(repl, OrtEngine):
            repl.resolve_placement()
        self.used_sets.append(desc)
        for (_, orig_out), exp, act in zip(canon.outputs, expected, actual, strict=True):
            failure = self._compare_output(kind, desc, orig_out, exp, act)
            if failure is not None:
                failure.evidence = {"feeds": feeds, "original": expected, "replacement": actual}
                return failure
        return None

    def _drop(self, line: str) -> None:
        self.skipped.append(line)
        self.first_error = self.first_error or line

    def _aborted(self, desc: str, shapes: tuple[tuple[int, ...], ...], side: str, e: OrtAbortedError) -> str:
        """The line that reports an input set dropped because onnxruntime killed the worker running ``side``."""
        rewrite = self.rewrite
        if side == "original":
            ops, what = [rewrite.op_type], f"{rewrite.op_type}-{rewrite.from_version}"
        else:
            ops = list(dict.fromkeys(n.op_type for n in self.canon.replacement))
            what = f"the replacement ({' + '.join(ops)} at opset {rewrite.to_opset})"
        why = next((c for c in (aborts_on(op, shapes) for op in ops) if c), None)
        return (f"{desc}: onnxruntime aborted running {what}" + (f" with {why}" if why else "")
                + f" ({e}); the input set is dropped")

    def _compare_output(self, kind: str, desc: str, orig_out: str, exp: np.ndarray,
                        act: np.ndarray) -> CheckResult | None:
        """Compare one output on one input set; a failure, or None (statistics noted)."""
        op = self.rewrite.op_type
        t = (expansion_budget(exp.dtype, _scale(exp), self.max_ulp) if self.budget == "expansion" else
             tolerance_for(exp.dtype, op, _scale(exp)) if self.budget == "kernel" else None)
        judged = kind in self.judged
        if judged:
            ulp, absolute, scaled = worst_difference(exp, act)
            self.worst_ulp, self.worst_abs = max(self.worst_ulp, ulp), max(self.worst_abs, absolute)
            self.worst_scaled = max(self.worst_scaled, scaled)
        signed = op not in SIGN_UNSTABLE_OPS
        diff, md = compare(exp, act, t, signed_zero=signed)
        if not signed and diff is None and t is None and compare(exp, act)[0] is not None:
            self.zero_sign = True  # equal only up to the sign of zero, which the original's kernel does not fix
        if diff is None and t is not None and kind == "signed-zeros":  # built to make exact -0.0: its sign judged
            diff = zero_signs(exp, act)
        if t is not None and diff is None and judged and compare(exp, act)[0] is not None:
            self.tol = t
        self.comparisons += 1
        if not judged:
            if diff is not None:
                self.nan_notes.append(f"{desc}: output {orig_out!r} {diff.describe()} (recorded, not judged)")
            return None
        self.max_diff = max(self.max_diff, md)
        if diff is None:
            return None
        return CheckResult("failed", "outputs differ", self.provider,
                           {"input_set": desc, "output": orig_out, "max_difference": md,
                            "tolerance": "exact" if t is None else t.to_dict()},
                           failure=f"input set {desc}: output {orig_out!r} {diff.describe()}")

    def replay(self, feeds: dict[str, np.ndarray]) -> dict[str, list[np.ndarray] | None]:
        """Both sides' outputs on ``feeds`` (None for a side that raises)."""
        out: dict[str, list[np.ndarray] | None] = {}
        for side, engine in (("original", self.orig), ("replacement", self.repl)):
            try:
                out[side] = engine.run(feeds)
            except Exception:
                out[side] = None
        return out

    def result(self) -> CheckResult:
        """The outcome once every input set ran without a failure."""
        if not self.used_sets:
            return CheckResult("unverified", f"the original could not run on any generated input ({self.first_error})")
        tol, op = self.tol, self.rewrite.op_type
        details: dict[str, Any] = {
            "engines": {"original": self.orig.label, "replacement": self.repl.label},
            "element_types": [str(d) for d in self.dtypes],
            "input_sets": self.used_sets,
            "comparisons": self.comparisons,
            "max_difference": self.max_diff,
            "zero_sign": ("exact up to the sign of zero: the maximum (minimum) of +0 and -0 is not fixed by the spec "
                          "or onnxruntime's kernels" if self.zero_sign else None),
            "worst": {"ulp": self.worst_ulp, "abs": self.worst_abs, "ulp_of_scale": round(self.worst_scaled, 3)},
            "budget": _budget_record(self.budget, self.dtypes, self.max_ulp, op),
            "tolerance": "exact" if tol is None else {
                **tol.to_dict(), "why": f"{op} computes its values; the kernels on the two sides "
                                        "(op versions, layouts or engines) may round differently"},
            "nan": "; ".join(self.nan_notes) if self.nan_notes else (
                "equal" if any(s.startswith("nan") for s in self.used_sets) else "not generated"),
        }
        for side, engine in (("original", self.orig), ("replacement", self.repl)):
            fallback = getattr(engine, "fallback_reason", None)
            if fallback:
                details[f"{side}_fallback"] = fallback
            if engine.placement:
                details[f"{side}_placement"] = engine.placement
        if self.covered:
            details["special_cases"] = self.covered
        if self.skipped:
            details["skipped"] = self.skipped
        how = "exactly" if tol is None else (f"within {tol.max_ulp} ulp (worst {self.worst_scaled:.2g} ulp of the "
                                             f"output's scale, {self.worst_abs:.3g} absolute)")
        said = f"{len(self.used_sets)} input sets compared {how} on {self.provider}"
        alone = [side for side, engine in (("original", self.orig), ("replacement", self.repl))
                 if isinstance(engine, ReferenceEngine)
                 and not (engine.fallback_reason or "").startswith(blame.BY_SPEC)]
        if alone:  # onnxruntime could not run a side: lowerer's numpy reference alone judged it
            details["reference_only"] = alone
            return CheckResult("reference-only", f"{said} (onnxruntime could not run the {' and the '.join(alone)}: "
                                                 "judged by lowerer's numpy reference alone)", self.provider, details)
        return CheckResult("verified", said, self.provider, details)


#: Ops whose onnxruntime kernel kills the process on an empty input: checked without the empty binding.
_ORT_DIES_ON_EMPTY = {
    "Einsum": "onnxruntime's Einsum dies of SIGFPE on an empty operand, so it is not run on one",
}

#: Ops whose known-fatal bindings (:func:`~.worker.aborts_on`) are not generated; the worker survives the rest.
_AVOIDED_ABORTS = set(KNOWN_ABORTS)


def strict_check(model: onnx.ModelProto) -> onnx.ModelProto:
    """Check every node against its schema, then run strict shape and type inference; the inferred model.

    Nodes with subgraphs (If, Loop, Scan) are left to inference: onnx's node checker sees a
    subgraph without its outer scope and would refuse the outer values it reads.

    Raises:
        Exception: onnx's checker or inference error (ValidationError, InferenceError ...).
    """
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    for node in model.graph.node:
        if not has_subgraphs(node):
            onnx.checker.check_node(node, ctx)
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def _invalid(model: onnx.ModelProto, reference_model: onnx.ModelProto) -> str | None:
    """Why ``model`` is not a valid ONNX model, when ``reference_model`` (the original) is; else None."""
    try:
        strict_check(reference_model)
    except Exception:
        return None
    try:
        strict_check(model)
    except Exception as e:
        return _short(e)
    return None


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")
    return text if len(text) <= 300 else text[:297] + "..."
