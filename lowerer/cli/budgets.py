"""The whole-model budget a conversion recorded, so that ``lowerer verify`` judges a pair as ``convert`` did.

``convert`` judges the whole converted model by the budget propagated from its rewrites' own
(:mod:`lowerer.verification.propagated`): exact where every rewrite was exact, else what the
expansions' and kernels' budgets accept. The command line records that budget where it is not exact:
in the converted model's metadata (``metadata_props``, key :data:`METADATA_KEY`, JSON) and in the
report (``summary.model_budget``). ``lowerer verify A B`` reads it from B's (or A's) metadata, or
from a report with ``--budget-from R.json`` (also an older report, from its rewrite records), and
says which it used; without one it compares exactly.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lowerer.core.errors import InputError

if TYPE_CHECKING:
    import onnx

    from lowerer.verification.propagated import ModelBudget

__all__ = ["METADATA_KEY", "from_model", "from_record", "from_report", "record_in_model", "to_record"]

#: The key of the recorded budget in a converted model's ``metadata_props``.
METADATA_KEY = "lowerer.model_budget"

_KINDS = ("expansion", "kernel")


def to_record(budget: ModelBudget) -> dict[str, Any]:
    """``budget`` as JSON-ready data that :func:`from_record` reads back: its sources, counts and ``max_ulp``."""
    return {"kind": "exact" if budget.exact else "propagated",
            "sources": [list(s) for s in budget.sources], "counts": dict(budget.counts),
            "max_ulp": budget.max_ulp, "exact_asked": budget.exact_asked,
            "described": budget.describe()}


def from_record(data: object, where: str) -> ModelBudget:
    """The budget a :func:`to_record` record states.

    Raises:
        InputError: ``data`` is not such a record (``where`` names it in the message).
    """
    from lowerer.verification.propagated import ModelBudget

    bad = InputError(f"{where}: not a budget lowerer recorded (expected sources, counts, max_ulp)")
    if not isinstance(data, dict):
        raise bad
    sources, counts, max_ulp = data.get("sources"), data.get("counts"), data.get("max_ulp")
    if not isinstance(sources, list) or not all(
            isinstance(s, list) and len(s) == 2 and s[0] in _KINDS and isinstance(s[1], str) for s in sources):
        raise bad
    if not isinstance(counts, dict) or not all(k in _KINDS and isinstance(v, int) for k, v in counts.items()):
        raise bad
    if max_ulp is not None and (not isinstance(max_ulp, int) or isinstance(max_ulp, bool) or max_ulp < 0):
        raise bad
    return ModelBudget(tuple(sorted((str(k), str(op)) for k, op in sources)), tuple(sorted(counts.items())),
                       max_ulp, bool(data.get("exact_asked", False)))


def _union(a: ModelBudget, b: ModelBudget) -> ModelBudget:
    """What either budget accepts (a model converted twice: each conversion's rewrites)."""
    from lowerer.verification.propagated import ModelBudget

    counts = Counter(dict(a.counts)) + Counter(dict(b.counts))
    max_ulp = None if a.max_ulp is None or b.max_ulp is None else max(a.max_ulp, b.max_ulp)
    return ModelBudget(tuple(sorted({*a.sources, *b.sources})), tuple(sorted(counts.items())), max_ulp)


def from_model(model: onnx.ModelProto, name: str) -> ModelBudget | None:
    """The budget recorded in ``model``'s metadata, or None.

    Raises:
        InputError: the entry is there and is not such a record.
    """
    for entry in model.metadata_props:
        if entry.key == METADATA_KEY:
            try:
                data = json.loads(entry.value)
            except ValueError:
                data = None
            return from_record(data, f"{name}: metadata {METADATA_KEY!r}")
    return None


def record_in_model(model: onnx.ModelProto, budget: ModelBudget) -> ModelBudget:
    """Record ``budget`` in ``model``'s metadata (unless exact); a budget already there (from the input) is kept too.

    Returns the budget recorded (the union with the one already there), or ``budget`` when nothing was.
    """
    try:
        earlier = from_model(model, "the input")
    except InputError:
        earlier = None
    if earlier is not None and not earlier.exact:
        budget = _union(earlier, budget)
    if budget.exact:
        return budget
    kept = [e for e in model.metadata_props if e.key != METADATA_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    entry = model.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, json.dumps(to_record(budget), sort_keys=True)
    return budget


def from_report(path: Path) -> ModelBudget:
    """The budget a ``convert`` report records: ``summary.model_budget``, or one rebuilt from its rewrite records.

    An older report (without ``model_budget``) gives each rewrite's budget by its rule and crossings,
    as the conversion judged it, with ``--max-ulp`` / ``--exact`` from the command it records.

    Raises:
        InputError: the file cannot be read, or is not a lowerer report.
    """
    from lowerer.core.report import Crossing, Rewrite
    from lowerer.verification.propagated import model_budget

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"--budget-from {path}: cannot read it ({e.strerror})") from None
    except ValueError:
        raise InputError(f"--budget-from {path}: not JSON (give the report convert --report wrote)") from None
    summary = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(summary, dict) or not isinstance(data.get("rewrites"), list):
        raise InputError(f"--budget-from {path}: not a lowerer report (no summary and rewrites)")
    recorded = summary.get("model_budget")
    if recorded is not None:
        return from_record(recorded, f"--budget-from {path}: summary.model_budget")
    command = [str(c) for c in data.get("command") or []]
    max_ulp = None
    if "--max-ulp" in command[:-1]:
        try:
            max_ulp = int(command[command.index("--max-ulp") + 1])
        except ValueError:
            max_ulp = None
    rewrites = []
    for r in data["rewrites"]:
        if not isinstance(r, dict) or not isinstance(r.get("rule"), str) or not isinstance(r.get("op_type"), str):
            raise InputError(f"--budget-from {path}: a rewrite record without rule and op_type")
        crossings = [Crossing(kind=str(c.get("kind", "")), entry=str(c.get("entry", "")), op=str(c.get("op", "")),
                              start=0, budgeted=bool(c.get("budgeted", False)))
                     for c in r.get("crossings") or [] if isinstance(c, dict)]
        rewrites.append(Rewrite(node=str(r.get("node", "")), op_type=r["op_type"], scope="", from_version=0,
                                to_opset=0, rule=r["rule"], emitted=[], crossings=crossings))
    return model_budget(rewrites, max_ulp, "--exact" in command)
