"""onnx's node test cases through lowerer: convert each to target opsets and classify what came out.

One place for the logic that ``benchmarks/node_cases.py`` (the full survey) and
``tests/test_node_cases.py`` (a CI subset) share. Each (case, target) gets one status:

* ``converted-ok``: exit 0, ``onnx.checker.check_model(full_check=True)`` passes, onnxruntime loads
  and runs the model, and its outputs match the original model's ORT outputs on the case's inputs:
  discrete outputs exactly, floats exactly or within :data:`MAX_ULP` (see ``_compare.ulp_error``;
  such matches are counted apart). Where the original cannot run in ORT, the outputs are compared
  with the case's expected outputs, with the case's own rtol/atol (onnx's backend-test defaults are
  rtol=1e-3, atol=1e-7). Cases with a random op (:data:`RANDOM_OPS`, or a Dropout in training
  mode) are compared in dtypes and shapes only.
* ``converted-unloadable-by-ort``: valid for the checker, but ORT cannot load or run it, and that
  says nothing about lowerer: the target is outside the opsets ORT supports (below 7), or ORT
  cannot load or run the original either.
* ``refused``: a :class:`lowerer.LowererError`; grouped by a normalized reason and by op.
* ``INVALID``: exit 0, but the checker rejects the model, its default-domain opset is not the
  target, or ORT refuses to load or run it where it loads and runs the original. Must be zero.
* ``WRONG``: exit 0, valid, but the outputs differ. Must be zero.
* ``crash``: any exception that is not a ``LowererError``: a bug.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import multiprocessing
import re
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import onnx
from _compare import ORT_MIN_OPSET, compare, ort_max_opset, ort_session, to_numpy

__all__ = [
    "BAD",
    "DEFAULT_TARGETS",
    "MAX_ULP",
    "STATUSES",
    "Outcome",
    "classify_case",
    "load_cases",
    "parse_targets",
    "plan",
    "run_cases",
    "source_opset",
    "summary_table",
    "targets_for",
]

#: Float outputs that differ from the original's within this many ulp (of the tensor's magnitude)
#: still count as converted-ok, reported apart. Single-op conversions are exact by construction; a
#: difference here is ORT running another kernel version (other vectorization) for the same math.
MAX_ULP = 8.0

STATUSES = ("converted-ok", "converted-unloadable-by-ort", "refused", "INVALID", "WRONG", "crash")
#: The statuses that must never happen.
BAD = frozenset({"INVALID", "WRONG", "crash"})

#: Ops whose outputs are random draws: their cases are compared in structure, dtypes and shapes only.
RANDOM_OPS = frozenset({"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
                        "RandomUniformLike"})

#: The survey's targets: fixed opsets, and ``-1``/``+1`` relative to the case's own opset.
DEFAULT_TARGETS = "7,9,11,13,17,21,-1,+1"


@dataclass
class Outcome:
    """What happened to one case converted to one target.

    Attributes:
        case: the case's name (``test_abs`` ...).
        ops: the op types of the case's graph (top level), ``+``-joined.
        source: the case's default-domain opset.
        target: the opset asked for.
        status: one of :data:`STATUSES`.
        blocking_op: for a refusal, the ``Op-version`` the message names (else the case's ops).
        group: the normalized reason (refusals, INVALID, crashes, unloadable).
        detail: the first line of the message or of what differs.
        basis: what the outputs were compared with: ``original`` (the original model in ORT) or
            ``expected`` (the case's expected outputs), with ``, shapes only (random op)`` added
            for random ops; empty when not compared.
        max_ulp: the largest float distance seen, in ulp (0 when exact).
        seconds: wall time of the conversion.
    """

    case: str
    ops: str
    source: int
    target: int
    status: str
    blocking_op: str = ""
    group: str = ""
    detail: str = ""
    basis: str = ""
    max_ulp: float = 0.0
    seconds: float = 0.0

    @property
    def direction(self) -> str:
        """``down`` or ``up``."""
        return "down" if self.target < self.source else "up"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {**asdict(self), "direction": self.direction}


# -- cases and targets -------------------------------------------------------------------------------
@functools.cache
def _collected() -> tuple[Any, ...]:
    """onnx's node test cases, collected once per process (onnx builds each case's data: about 18 s here)."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return tuple(sorted(node.collect_testcases(""), key=lambda c: c.name))


def load_cases(pattern: str = "") -> list[Any]:
    """onnx's node test cases whose name matches the regex ``pattern`` (all when empty), by name.

    Each call gets its own copy of each case's model (a test may change it); the data are shared.
    """
    regex = re.compile(pattern) if pattern else None
    out = []
    for c in _collected():
        if regex is None or regex.search(c.name):
            model = c.model
            if model is not None:
                model = onnx.ModelProto()
                model.CopyFrom(c.model)
            out.append(dataclasses.replace(c, model=model))
    return out


def source_opset(model: onnx.ModelProto) -> int | None:
    """The model's default-domain opset (None when it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def parse_targets(spec: str) -> list[str]:
    """``"7,11,-1,+1"`` -> the items; absolute opsets or ``-N``/``+N`` relative to the source."""
    items = [s.strip() for s in spec.split(",") if s.strip()]
    for item in items:
        if not re.fullmatch(r"[+-]?\d+", item):
            raise ValueError(f"bad target {item!r}: give opsets (11) or offsets from the source (-1, +1)")
    return items


def targets_for(source: int, spec: Sequence[str]) -> list[int]:
    """The distinct targets of ``spec`` for a case at ``source``, in range, the source left out."""
    newest = onnx.defs.onnx_opset_version()
    out: set[int] = set()
    for item in spec:
        target = source + int(item) if item[0] in "+-" else int(item)
        if 1 <= target <= newest and target != source:
            out.add(target)
    return sorted(out)


# -- classification ------------------------------------------------------------------------------------
_OP_VERSION = re.compile(r"\b([A-Z][A-Za-z0-9]*)-(\d+)\b")


def _graph_ops(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graph_ops(attr.g)
            for sub in attr.graphs:
                yield from _graph_ops(sub)


def normalize_reason(message: str, model: onnx.ModelProto) -> str:
    """A message with what varies between cases taken out, so that like refusals group together.

    The lead-in naming the node (``node 'n' (Op-13, in graph) cannot be converted to opset 9:``)
    goes (the op is kept apart, see :func:`blocking_op`); then source locations and assertion
    expressions of onnx's C++ converter, node names, the case's op types (-> ``OP``), quoted text
    and numbers (-> ``N``).
    """
    text = message.strip().splitlines()[0] if message.strip() else ""
    text = re.sub(r"^node .*? cannot be converted to opset \d+:\s*", "", text)
    text = re.sub(r"[^\s(]+\.(?:h|cc|cpp|c|py):\d+:\s*", "", text)
    text = re.sub(r"Assertion `.*?` failed:\s*", "", text)
    names = {n.name for n in _graph_ops(model.graph) if n.name}
    for name in sorted(names, key=len, reverse=True):
        text = text.replace(f"'{name}'", "'NODE'").replace(f"<{name}>", "<NODE>")
    ops = {n.op_type for n in _graph_ops(model.graph)}
    for op in sorted(ops, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(op)}\b", "OP", text)
    text = re.sub(r"\$?\b\d+(\.\d+)?\b", "N", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:160]


def blocking_op(message: str, model: onnx.ModelProto) -> str:
    """The ``Op-version`` a message names first (else the case's top-level ops)."""
    found = _OP_VERSION.search(message)
    if found:
        return found.group(0)
    return "+".join(n.op_type for n in model.graph.node)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def _ort_outputs(model: onnx.ModelProto, inputs: Sequence[Any]) -> tuple[list[Any] | None, str, str]:
    """(outputs, '', '') or (None, stage, error): stage ``load`` or ``run``."""
    try:
        session = ort_session(model)
    except Exception as e:
        return None, "load", _first_line(e)
    names = [i.name for i in model.graph.input]
    feeds = {n: v for n, v in zip(names, inputs, strict=False) if v is not None}
    try:
        return list(session.run(None, feeds)), "", ""
    except Exception as e:
        return None, "run", _first_line(e)


ConvertFn = Callable[..., Any]


def _default_convert() -> ConvertFn:
    import lowerer

    return lowerer.convert  # type: ignore[no-any-return]


def classify_case(case: Any, targets: Sequence[int], *, verify: bool = False,
                  convert: ConvertFn | None = None) -> list[Outcome]:
    """Convert ``case.model`` to each target and classify the result (see the module docstring).

    Args:
        case: an ``onnx.backend.test.case`` TestCase (``name``, ``model``, ``data_sets``, ``rtol``, ``atol``).
        targets: the opsets to convert to.
        verify: lowerer's per-rewrite verification.
        convert: the converter (``lowerer.convert`` unless a test hands a broken one in).
    """
    import lowerer

    convert = convert or _default_convert()
    model: onnx.ModelProto = case.model
    source = source_opset(model)
    assert source is not None
    ops = "+".join(n.op_type for n in model.graph.node)
    data = [([to_numpy(v) for v in ins], [to_numpy(v) for v in outs]) for ins, outs in case.data_sets]
    original = [_ort_outputs(model, ins) for ins, _ in data]
    original_runs = all(o[0] is not None for o in original)
    names = [o.name for o in model.graph.output]
    try:
        onnx.checker.check_model(model, full_check=True)
        original_valid = True
    except Exception:
        original_valid = False
    random = any(n.op_type in RANDOM_OPS or (n.op_type == "Dropout" and len(n.input) > 2 and n.input[2])
                 for n in _graph_ops(model.graph))
    results = []
    for target in targets:
        out = Outcome(case.name, ops, source, target, "")
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = convert(model, target_opset=target, verify=verify)
                converted = result.model
                recorded = [n for n in getattr(getattr(result, "report", None), "notes", []) or []
                            if str(n).startswith("unverified: onnxruntime")]
        except lowerer.LowererError as e:
            out.seconds = time.perf_counter() - start
            out.status, out.detail = "refused", _first_line(e)
            out.group, out.blocking_op = normalize_reason(str(e), model), blocking_op(str(e), model)
            results.append(out)
            continue
        except Exception as e:
            out.seconds = time.perf_counter() - start
            out.status, out.detail = "crash", _first_line(e)
            out.group, out.blocking_op = normalize_reason(f"{type(e).__name__}: {e}", model), ops
            results.append(out)
            continue
        out.seconds = time.perf_counter() - start
        results.append(_judge(out, converted, model, data, original, original_runs, names, case, random,
                              original_valid, recorded))
    return results


#: onnxruntime's "no kernel" error: ``Could not find an implementation for Max(6) node``.
_KERNEL = re.compile(r"implementation for (\w+)\((\d+)\)")


def _judge(out: Outcome, converted: onnx.ModelProto, model: onnx.ModelProto, data: list[tuple[list[Any], list[Any]]],
           original: list[tuple[list[Any] | None, str, str]], original_runs: bool, names: list[str],
           case: Any, random: bool, original_valid: bool, recorded: Sequence[str] = ()) -> Outcome:
    """Classify one converted model (the conversion itself exited 0).

    ``recorded``: the conversion's "unverified: onnxruntime ... has no kernel for Op-N" notes. A model
    onnxruntime cannot open for a kernel the conversion recorded as missing is onnxruntime's gap, said
    on the way out (``converted-unloadable-by-ort``), not an invalid model.
    """
    out.blocking_op = out.ops
    try:
        onnx.checker.check_model(converted, full_check=True)
    except Exception as e:
        out.status, out.detail = "INVALID", "checker: " + _first_line(e)
        out.group = ("checker: " if original_valid else "checker (the original fails it too): ") + normalize_reason(
            str(e), model)
        return out
    opset = source_opset(converted)
    if opset != out.target:
        out.status, out.detail = "INVALID", f"default-domain opset is {opset}, not {out.target}"
        out.group = "opset import is not the target"
        return out
    ort_supports = ORT_MIN_OPSET <= out.target <= ort_max_opset()
    worst = 0.0
    for (inputs, expected), (want, _, _) in zip(data, original, strict=True):
        got, stage, error = _ort_outputs(converted, inputs)
        if got is None:
            missing = _KERNEL.search(error)
            noted = missing is not None and any(f"has no kernel for {missing[1]}-{missing[2]}" in n for n in recorded)
            if not ort_supports or not original_runs or noted:
                out.status, out.detail = "converted-unloadable-by-ort", f"ORT {stage}: {error}"
                out.group = ("opset outside ORT's range" if not ort_supports
                             else "ORT cannot run the original either" if not original_runs
                             else "ORT has no kernel for an op-version of the target (recorded as unverified)")
            else:
                out.status, out.detail = "INVALID", f"ORT {stage} fails where the original {stage}s: {error}"
                out.group = f"ORT {stage}: " + normalize_reason(error, model)
            return out
        if want is not None:
            out.basis = "original"
            result = compare(got, want, max_ulp=MAX_ULP, names=names, values=not random)
        else:
            out.basis = "expected"
            result = compare(got, expected, tolerance=(case.rtol, case.atol), names=names, values=not random)
        if random:
            out.basis += ", shapes only (random op)"
        if not result.same and want is not None and not random:
            # onnxruntime's kernel may depart from the spec where a rewrite (an expansion into the spec's own
            # function body) follows it: judge both against the case's expected outputs then.
            spec = compare(got, expected, tolerance=(case.rtol, case.atol), names=names, values=True)
            ort_spec = compare(want, expected, tolerance=(case.rtol, case.atol), names=names, values=True)
            if spec.same and not ort_spec.same:
                out.basis = "expected (onnxruntime departs from the spec on the original)"
                result = spec
        if not result.same:
            out.status, out.detail = "WRONG", result.detail
            out.max_ulp = result.max_ulp
            return out
        worst = max(worst, result.max_ulp)
    out.status, out.max_ulp = "converted-ok", worst
    return out


# -- running many --------------------------------------------------------------------------------------
def _work(job: tuple[Any, list[int], bool]) -> list[Outcome]:
    case, targets, verify = job
    return classify_case(case, targets, verify=verify)


def _init_worker() -> None:
    warnings.simplefilter("ignore")
    np.seterr(all="ignore")


def plan(cases: Iterable[Any], target_spec: Sequence[str]) -> list[tuple[Any, list[int]]]:
    """(case, targets) for every case with a default-domain opset and at least one target in range."""
    out = []
    for case in cases:
        source = source_opset(case.model)
        targets = targets_for(source, target_spec) if source is not None else []
        if targets:
            out.append((case, targets))
    return out


def run_cases(work: Sequence[tuple[Any, list[int]]], *, verify: bool = False, jobs: int = 2,
              progress: Callable[[int, int], None] | None = None) -> list[Outcome]:
    """Classify each (case, targets) of ``work`` (see :func:`plan`) on ``jobs`` spawned processes (1: here).

    Returns the outcomes sorted by case and target.
    """
    jobs_args = [(case, targets, verify) for case, targets in work]
    outcomes: list[Outcome] = []
    if jobs <= 1:
        _init_worker()
        for i, job in enumerate(jobs_args):
            outcomes.extend(_work(job))
            if progress:
                progress(i + 1, len(jobs_args))
    else:
        # spawn, not fork: the parent may hold onnxruntime threads; cases travel pickled (~10 MB in all)
        context = multiprocessing.get_context("spawn")
        with context.Pool(jobs, initializer=_init_worker) as pool:
            for i, result in enumerate(pool.imap_unordered(_work, jobs_args, chunksize=4)):
                outcomes.extend(result)
                if progress:
                    progress(i + 1, len(jobs_args))
    outcomes.sort(key=lambda o: (o.case, o.target))
    return outcomes


# -- the table ------------------------------------------------------------------------------------------
def summary_table(outcomes: Sequence[Outcome], *, top: int = 25) -> str:
    """Counts per status, down and up; the largest refusal groups and blocking ops; every bad case."""
    lines = []
    count: collections.Counter[tuple[str, str]] = collections.Counter((o.status, o.direction) for o in outcomes)
    lines.append(f"{'status':<38}{'down':>8}{'up':>8}{'total':>8}")
    for status in STATUSES:
        d, u = count[status, "down"], count[status, "up"]
        lines.append(f"{status:<38}{d:>8}{u:>8}{d + u:>8}")
        if status == "converted-ok":
            for label, pick in ((f"  of which within {MAX_ULP:g} ulp, not exact", lambda o: o.max_ulp > 0),
                                ("  of which compared with expected", lambda o: o.basis.startswith("expected")),
                                ("  of which random: shapes only", lambda o: "random" in o.basis)):
                sub = collections.Counter(o.direction for o in outcomes if o.status == status and pick(o))
                lines.append(f"{label:<38}{sub['down']:>8}{sub['up']:>8}{sub['down'] + sub['up']:>8}")
    lines.append(f"{'all':<38}{sum(v for (_, d), v in count.items() if d == 'down'):>8}"
                 f"{sum(v for (_, d), v in count.items() if d == 'up'):>8}{len(outcomes):>8}")
    cases = {o.case for o in outcomes}
    lines.append(f"({len(cases)} cases; {sum(o.seconds for o in outcomes):.1f} s spent converting)")

    def groups(status: str, limit: int) -> None:
        picked = [o for o in outcomes if o.status == status]
        if not picked:
            return
        by_group: dict[str, list[Outcome]] = collections.defaultdict(list)
        for o in picked:
            by_group[o.group].append(o)
        lines.append("")
        lines.append(f"{status} by reason ({len(by_group)} groups; top {min(limit, len(by_group))}): "
                     "count down up  reason  [ops]")
        for group, members in sorted(by_group.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:limit]:
            down = sum(o.direction == "down" for o in members)
            op_count = collections.Counter(o.blocking_op.split("-")[0] for o in members)
            op_names = ", ".join(op for op, _ in op_count.most_common(8))
            more = f" +{len(op_count) - 8}" if len(op_count) > 8 else ""
            lines.append(f"{len(members):>6} {down:>5} {len(members) - down:>4}  {group}  [{op_names}{more}]")

    groups("refused", top)
    refused = [o for o in outcomes if o.status == "refused"]
    if refused:
        by_op = collections.Counter(o.blocking_op for o in refused)
        lines.append("")
        lines.append(f"refused by blocking op-version (top {min(top, len(by_op))} of {len(by_op)}):")
        lines.append("  " + ", ".join(f"{op} {n}" for op, n in by_op.most_common(top)))
    for status in ("INVALID", "WRONG", "crash"):
        groups(status, 1000)
        bad = [o for o in outcomes if o.status == status]
        if bad:
            lines.append(f"{status} cases ({len(bad)}):")
            lines.extend(f"  {o.case} {o.source}->{o.target}: {o.detail}" for o in bad)
    return "\n".join(lines)
