"""The whole-model check's budget, propagated from the rewrites' own: judge the model as its rewrites were judged.

Each rewrite was verified against its own error budget (:mod:`.check`): exact for data movement and
selection, the expansion budget for a function body (:data:`~.compare.EXPANSION_ULPS`, or
``max_ulp``), the kernel budget for an op whose kernels compute (:func:`~.compare.tolerance_for`).
A :class:`ModelBudget` is the union of the budgets of the rewrites that were not exact, applied to
every float output of the whole model with that output's own scale: a value passes where any of
those rewrites' rules would have accepted it, i.e. within their largest number of ulp of its own
value, or within as many epsilons of the output tensor's largest magnitude (at least 1). The scale
term is what carries an expansion's error through a network: a reassociated reduction changes an
intermediate by an ulp or so of its scale, and that absolute error lands on outputs near zero as many
of their own ulps, but stays within a few ulp of the output's scale (measured on the real exports in
``tests/fixtures/real/``: at most 2 ulp of the scale in float32, against a budget of 8).

Where every rewrite was exact, the budget is empty and the whole-model check stays exact; with
``exact`` (``--exact``) it is empty whatever the rewrites were.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import ml_dtypes
import numpy as np

from lowerer.core.report import Rewrite
from lowerer.steps.expansion import EXPANSION_RULE
from lowerer.verification.compare import (
    ARITHMETIC_OPS,
    EXPANSION_ULPS,
    KERNEL_EPSILONS,
    Tolerance,
    dtype_eps,
    expansion_budget,
    tolerance_for,
)

__all__ = ["BudgetKind", "ModelBudget", "budget_kind", "model_budget"]

#: How a rewrite's float outputs are judged: bit-identical, the expansion budget, or the kernel budget.
BudgetKind = Literal["exact", "expansion", "kernel"]


def budget_kind(rewrite: Rewrite, exact: bool = False) -> BudgetKind:
    """The budget ``rewrite`` is judged by (the per-rewrite check and the whole-model budget share it)."""
    if exact:
        return "exact"
    if rewrite.rule == EXPANSION_RULE or any(c.kind == "expansion" or c.budgeted for c in rewrite.crossings):
        return "expansion"
    return "kernel" if rewrite.op_type in ARITHMETIC_OPS else "exact"


@dataclass(frozen=True)
class ModelBudget:
    """The error budget of a whole-model comparison, from the rewrites' own (see the module's documentation).

    Attributes:
        sources: ``(kind, op)`` of each distinct non-exact budget among the rewrites, sorted.
        counts: how many rewrites each kind covers (``{"expansion": 25}``).
        max_ulp: the expansions' budget in ulp (None: the per-type default of :data:`EXPANSION_ULPS`).
        exact_asked: ``--exact`` / ``exact=True`` emptied the budget.
    """

    sources: tuple[tuple[str, str], ...] = ()
    counts: tuple[tuple[str, int], ...] = ()
    max_ulp: int | None = None
    exact_asked: bool = False

    @property
    def exact(self) -> bool:
        """True when the budget accepts nothing (every rewrite was exact, or ``--exact``)."""
        return not self.sources

    def tolerance(self, dtype: np.dtype[Any], scale: float) -> Tolerance | None:
        """The union of the sources' tolerances for an output of ``dtype`` whose largest magnitude is ``scale``.

        None where nothing is accepted (an exact budget, or not a float type).
        """
        found: list[Tolerance] = []
        for kind, op in self.sources:
            tol = expansion_budget(dtype, scale, self.max_ulp) if kind == "expansion" else \
                tolerance_for(dtype, op, scale)
            if tol is not None:
                found.append(tol)
        if not found:
            return None
        return Tolerance(max(t.max_ulp for t in found), max(t.atol for t in found), max(t.rtol for t in found))

    def rule(self, dtype: np.dtype[Any]) -> tuple[int, float]:
        """``(ulps, epsilons of the output's scale)`` this budget accepts for ``dtype`` ((0, 0): exact)."""
        key = np.dtype(dtype)
        eps = dtype_eps(key)
        tol = self.tolerance(key, 1.0)
        if tol is None or not eps:
            return 0, 0.0
        return tol.max_ulp, round(tol.atol / eps, 3)

    def describe(self, dtypes: Iterable[str] = ("float32",)) -> str:
        """The budget in words: ``exact: every rewrite was exact``, or its rule per float type and its sources."""
        if self.exact:
            return "exact: --exact" if self.exact_asked else "exact: every rewrite was exact"
        rules: list[str] = []
        for name in sorted(set(dtypes)):
            try:
                key = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
            except TypeError:
                continue
            ulps, epsilons = self.rule(key)
            if ulps or epsilons:
                rules.append(f"{name}: {ulps} ulp or {epsilons:g} epsilons of the output's largest magnitude")
        counts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in self.counts)
        ops = ", ".join(sorted({op for _, op in self.sources}))
        return f"budget {'; '.join(rules) or 'for float outputs only'}; from {counts}: {ops}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: whether exact, why, the rule per float type and where it comes from."""
        if self.exact:
            return {"kind": "exact", "why": "--exact" if self.exact_asked else "every rewrite was exact"}
        per_type = {}
        for key in EXPANSION_ULPS:
            ulps, epsilons = self.rule(key)
            per_type[str(key)] = {"ulps": ulps, "epsilons_of_scale": epsilons}
        return {"kind": "propagated", "why": "the union of the non-exact rewrites' own budgets, applied to each "
                                             "output with its largest magnitude as the scale",
                "max_ulp": "per type" if self.max_ulp is None else self.max_ulp, "per_type": per_type,
                "from": dict(self.counts), "ops": sorted({op for _, op in self.sources}),
                "kernel_epsilons": KERNEL_EPSILONS}


def model_budget(rewrites: Iterable[Rewrite], max_ulp: int | None = None, exact: bool = False) -> ModelBudget:
    """The whole-model budget of a conversion made of ``rewrites`` (``max_ulp``, ``exact``: as for the rewrites)."""
    if exact:
        return ModelBudget(max_ulp=max_ulp, exact_asked=True)
    sources: set[tuple[str, str]] = set()
    counts: Counter[str] = Counter()
    for r in rewrites:
        kind = budget_kind(r)
        if kind == "exact":
            continue
        counts[kind] += 1
        sources.add((kind, r.op_type))
    return ModelBudget(tuple(sorted(sources)), tuple(sorted(counts.items())), max_ulp)
