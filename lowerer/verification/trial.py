"""One distinct check with one set of element types: its input sets run on both sides and compared.

:class:`Trial` holds the two engines and what the input sets run so far showed; :func:`run_shapes`
runs the seeded kinds and the constructed sets (:mod:`.special`) on one binding of the shapes;
:meth:`Trial.result` says what the check found once every set passed. :mod:`.check` makes the
engines and decides which shapes and element types are tried.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from lowerer.core.report import Rewrite
from lowerer.facts import reference
from lowerer.verification import blame
from lowerer.verification.canon import Canon
from lowerer.verification.compare import (
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
from lowerer.verification.inputs import JUDGED_KINDS, InputSet, generate, input_kind
from lowerer.verification.nan_judged import NAN_KINDS, judge_rows, nan_rule
from lowerer.verification.propagated import budget_kind
from lowerer.verification.result import CheckResult
from lowerer.verification.runner import Engine, OrtEngine, ReferenceEngine
from lowerer.verification.special import CONSTRUCTED_KINDS, constructed
from lowerer.verification.specs import short
from lowerer.verification.worker import OrtAbortedError, aborts_on

__all__ = ["STOP", "Trial", "budget_record", "derived_feeds", "node_positions", "run_shapes", "scale"]

#: What :meth:`Trial.run_set` answers when the original refuses an input set's shapes.
STOP = "stop"


def budget_record(budget: str, dtypes: list[np.dtype[Any]], max_ulp: int | None, op: str) -> dict[str, Any]:
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


def derived_feeds(canon: Canon, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The shape inputs computed from the generated inputs' shapes (see :attr:`Canon.derived`)."""
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


def scale(values: np.ndarray) -> float:
    """The largest finite magnitude in ``values`` (0 when there is none): what a sum's error scales with."""
    if values.dtype.kind != "f" and values.dtype != np.dtype(ml_dtypes.bfloat16):
        return 0.0
    finite = np.abs(values[np.isfinite(values)].astype(np.float64))
    return float(finite.max()) if finite.size else 0.0


def run_shapes(trial: Trial, shapes: tuple[tuple[int, ...], ...], kinds: Sequence[str],
               rng: np.random.Generator) -> CheckResult | None:
    """The seeded kinds, then the constructed sets (:mod:`.special`), on one binding of the shapes; a failure."""
    empty = all(0 in s for s in shapes)
    for kind in kinds[:1] if empty else kinds:  # an empty input has no values to vary
        outcome = trial.run_set(kind, shapes, rng)
        if isinstance(outcome, CheckResult):
            return outcome
        if outcome == STOP:
            return None  # the shape itself is unacceptable to the original
    if empty:
        trial.covered.append("empty dims")
        return None
    rewrite = trial.rewrite
    node_elems, node_shapes, generated = node_positions(trial.canon, trial.elems, shapes)
    if any(e == onnx.TensorProto.UNDEFINED for e, name in zip(node_elems, trial.canon.original.input, strict=True)
           if name):
        return None  # a constant input of a type lowerer has no numpy type for: no set is built around it
    for kind, by_position, covers in constructed(trial.canon.original, rewrite.from_version, node_elems,
                                                 node_shapes, rng):
        given = {generated[k]: v for k, v in by_position.items() if k in generated}
        if not given:  # it gives only inputs the model fixes (a scatter's constant indices): a normal set
            continue
        outcome = trial.run_set(kind, shapes, rng, given)
        if isinstance(outcome, CheckResult):
            return outcome
        if outcome == STOP:
            return None
        if covers not in trial.covered:
            trial.covered.append(covers)
    return None


def node_positions(canon: Canon, elems: Sequence[int], shapes: Sequence[tuple[int, ...]]
                   ) -> tuple[list[int], list[tuple[int, ...]], dict[int, int]]:
    """The element type and shape at each input position of the original node, and where each generated one is.

    The constructed sets (:mod:`.special`) address an op's inputs by position (a scatter's updates are its
    third input), while a check generates only the inputs the model does not fix: a scatter whose indices
    are constant generates its data and updates alone. Returns (element types, shapes) per position of
    ``canon.original``'s inputs (a constant input's from its value, a derived shape input's int64 of its
    length, an absent optional input's UNDEFINED and ``()``), and the map from a position to the index of
    its generated input (the first position of an input given twice).
    """
    index = {c: j for j, (c, _) in enumerate(canon.inputs)}
    fixed = {c: v for c, _, v in canon.fixed}
    derived = {c: len(r) for c, _, r in canon.derived}
    node_elems: list[int] = []
    node_shapes: list[tuple[int, ...]] = []
    generated: dict[int, int] = {}
    for k, name in enumerate(canon.original.input):
        if name in index:
            j = index[name]
            if j not in generated.values():
                generated[k] = j
            node_elems.append(elems[j])
            node_shapes.append(tuple(shapes[j]))
        elif name in fixed:
            value = fixed[name]
            node_elems.append(_elem_of(value.dtype))
            node_shapes.append(tuple(value.shape))
        elif name in derived:
            node_elems.append(onnx.TensorProto.INT64)
            node_shapes.append((derived[name],))
        else:
            node_elems.append(onnx.TensorProto.UNDEFINED)
            node_shapes.append(())
    return node_elems, node_shapes, generated


def _elem_of(dtype: np.dtype[Any]) -> int:
    """The ONNX element type of a constant input's numpy dtype (UNDEFINED where lowerer has no numpy type for it)."""
    try:
        elem = int(onnx.helper.np_dtype_to_tensor_dtype(dtype))
        reference.np_dtype(elem)
    except (KeyError, TypeError, ValueError):
        return onnx.TensorProto.UNDEFINED
    return elem


def _identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Same element type, shape and bytes (NaN payloads and the sign of zero included)."""
    return a.dtype == b.dtype and a.shape == b.shape and not a.dtype.hasobject and (
        a.size == 0 or np.array_equal(np.ascontiguousarray(a).view(np.uint8), np.ascontiguousarray(b).view(np.uint8)))


class Trial:
    """One distinct check with one set of element types: the input sets run so far and what they showed."""

    def __init__(self, rewrite: Rewrite, canon: Canon, orig: Engine, repl: Engine, elems: list[int],
                 dtypes: list[np.dtype[Any]], exact: bool, max_ulp: int | None) -> None:
        self.rewrite, self.canon, self.orig, self.repl = rewrite, canon, orig, repl
        self.elems, self.dtypes, self.max_ulp = elems, dtypes, max_ulp
        self.dtype_names = [str(d) for d in dtypes]  # numpy's dtype names are slow to make, once per set
        self.provider = orig.label if orig.label == repl.label else \
            f"{orig.label} (original), {repl.label} (replacement)"
        self.budget = budget_kind(rewrite, exact)
        arithmetic = self.budget != "exact" or (exact and budget_kind(rewrite) != "exact")
        # Range edges overflow in an order-dependent way in arithmetic kernels (a sum of +-3.4e38
        # terms is inf in one order, finite in another): recorded for them, not judged.
        self.judged = (JUDGED_KINDS - {"edges"} if arithmetic else JUDGED_KINDS) | CONSTRUCTED_KINDS
        #: How outputs on NaN inputs are judged (:mod:`.nan_judged`; None: recorded only).
        self.nan_rule = nan_rule(canon.original)
        if self.nan_rule == "equal":
            self.judged |= NAN_KINDS
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
        """Run both sides on one input set: a failure, :data:`STOP` (the original refused it), or None.

        ``given``: constructed inputs by position (the others generated as ``normal``).
        """
        canon, orig, repl = self.canon, self.orig, self.repl
        made = ["normal" if given is not None else input_kind(kind, e) for e in self.elems]
        desc = InputSet(kind, shapes).describe(self.shown_names, self.dtype_names,
                                               None if given is not None else made)
        feeds = {n: given[k] if given is not None and k in given else generate(m, e, s, rng)
                 for k, (n, e, s, m) in enumerate(zip(self.names, self.elems, shapes, made, strict=True))}
        feeds.update(derived_feeds(canon, dict(zip(self.names, shapes, strict=True))))
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
            self.first_error = self.first_error or f"{desc}: {short(e)}"
            self.skipped.append(f"{desc}: the original does not run on it")
            return STOP
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
                self.skipped.append(f"{desc}: the reference cannot evaluate the replacement ({short(e)}) "
                                    f"although {orig.label} runs the original")
                return None
            return CheckResult("failed", "the replacement raised an error where the original ran", self.provider,
                               {"input_set": desc},
                               failure=f"input set {desc}: the original runs but the replacement raises: {short(e)}",
                               evidence={"feeds": feeds, "original": expected, "replacement": None})
        if isinstance(repl, OrtEngine):
            repl.resolve_placement()
        self.used_sets.append(desc)
        for (_, orig_out), exp, act in zip(canon.outputs, expected, actual, strict=True):
            failure = self._compare_output(kind, desc, orig_out, exp, act,
                                           feeds.get(self.names[0]) if self.names else None)
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
                        act: np.ndarray, first: np.ndarray | None = None) -> CheckResult | None:
        """Compare one output on one input set; a failure, or None (statistics noted).

        ``first``: the first input's values, which the arg forms' NaN rows are found in (:mod:`.nan_judged`).
        """
        op = self.rewrite.op_type
        if _identical(exp, act):  # bit for bit: every statistic is 0, nothing to judge (the common case)
            self.comparisons += 1
            return None
        if kind in NAN_KINDS and self.nan_rule in ("arg-index", "one-hot") and first is not None:
            return self._nan_rows_judged(kind, desc, orig_out, exp, act, first)
        t = (expansion_budget(exp.dtype, scale(exp), self.max_ulp) if self.budget == "expansion" else
             tolerance_for(exp.dtype, op, scale(exp)) if self.budget == "kernel" else None)
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

    def _nan_rows_judged(self, kind: str, desc: str, orig_out: str, exp: np.ndarray, act: np.ndarray,
                         first: np.ndarray) -> CheckResult | None:
        """An arg form's output on NaN inputs: equal on rows without NaN, in range on rows with (else recorded)."""
        self.comparisons += 1
        diff, _ = compare(exp, act)
        if diff is None:
            return None
        wrong = judge_rows(self.canon.original, self.rewrite.from_version, str(self.nan_rule), first, exp, act)
        if wrong is None:
            self.nan_notes.append(f"{desc}: output {orig_out!r} {diff.describe()} (a row holding NaN: recorded, "
                                  "in range)")
            return None
        return CheckResult("failed", "outputs differ", self.provider,
                           {"input_set": desc, "output": orig_out, "tolerance": "exact"},
                           failure=f"input set {desc}: output {orig_out!r} {wrong.describe()}")

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
            "budget": budget_record(self.budget, self.dtypes, self.max_ulp, op),
            "tolerance": "exact" if tol is None else {
                **tol.to_dict(), "why": f"{op} computes its values; the kernels on the two sides "
                                        "(op versions, layouts or engines) may round differently"},
            "nan": "; ".join(self.nan_notes) if self.nan_notes else (
                "equal" if any(s.startswith("nan") for s in self.used_sets) else "not generated"),
            "nan_judged": {"equal": "NaN at the same positions", "arg-index": "an index in range on a NaN row",
                           "one-hot": "0 and 1, at most one 1, on a NaN row"}.get(str(self.nan_rule), "recorded"),
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
