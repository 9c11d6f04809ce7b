"""What the ``lowerer`` commands print: the conversion summary, whole-model statistics, progress on a terminal.

Only the CLI writes to the terminal; these helpers are called by the commands of :mod:`lowerer.cli`. Summaries go to
stderr (stdout stays free for data), are suppressed by ``-q``, and say what changed.
"""

from __future__ import annotations

import re
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from lowerer.core.progress import Progress
from lowerer.core.report import STATUSES

if TYPE_CHECKING:
    from lowerer.core.report import Report

__all__ = ["TerminalProgress", "change_rows", "describe_changes", "informational_warning", "model_check_table",
           "named", "print_convert_summary", "short_reason"]


def _echo(text: str, err: bool = True) -> None:
    click.echo(text, err=err)


def describe_changes(report: Report) -> str:
    """One line on what the conversion changed: ``opset import ai.onnx 11 -> 13; 3 nodes rewritten (3 verified)``."""
    parts: list[str] = []
    src, dst = report.source_opset, report.target_opset
    if dst is not None and src != dst:
        parts.append(f"opset import ai.onnx {src if src is not None else 'none'} -> {dst}")
    if report.source_ir_version is not None and report.ir_version is not None \
            and report.source_ir_version != report.ir_version:
        parts.append(f"IR version {report.source_ir_version} -> {report.ir_version}")
    n = len(report.rewrites)
    if n:
        by_status = report.summary()["by_status"]
        counts = ", ".join(f"{by_status[s]} {s}" for s in STATUSES if by_status.get(s))
        parts.append(f"{n} node{'s' if n != 1 else ''} rewritten ({counts})")
    elif parts:
        parts.append("no node needed rewriting")
    if not parts:
        what = f"imports ai.onnx {src}" if src is not None else "has no ai.onnx import"
        decomposed = f" and has no {'/'.join(report.decompose)} node to decompose" if report.decompose else ""
        return f"nothing changed: the model already {what}{decomposed}"
    return "; ".join(parts)


def change_rows(report: Report) -> list[str]:
    """One row per change (``  2 x Softmax 11 -> 13 coerced axis``), most frequent first.

    A row names the op, its versions and how it changed (:attr:`lowerer.core.report.Rewrite.change`; the report
    keeps the entry ids in ``rule``). Where the rows' checks differ, each row not wholly verified ends with
    its counts (``(1 unverified)``); the first line of the summary gives the totals.
    """
    rows: dict[str, Counter[str]] = {}
    for r in report.rewrites:
        rows.setdefault(r.change, Counter())[r.status] += 1
    mixed = len({s for counts in rows.values() for s in counts}) > 1
    width = len(str(max((sum(c.values()) for c in rows.values()), default=0)))
    lines = []
    for change, counts in sorted(rows.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(counts.values())
        tail = ", ".join(f"{counts[s]} {s}" for s in ("unverified", "failed") if counts[s]) if mixed else ""
        lines.append(f"  {total:>{width}} x {change}{f' ({tail})' if tail else ''}")
    return lines


_VALUES = re.compile(r"original (\S+?),? replacement (\S+?)(?:\s|;|$)")


def _short_number(text: str) -> str:
    try:
        return f"{float(text.rstrip(',;')):.3g}"
    except ValueError:
        return text


def informational_warning(report: Report) -> str | None:
    """One line summing up differences that were recorded but not judged (NaN inputs), or None.

    Only rewrites a NaN input can reach count (:attr:`Report.nan_unreached` leaves the others out).
    """
    found: list[str] = []
    count = 0
    for r in report.rewrites:
        if not r.nan_differs or (r.scope, r.node) in report.nan_unreached:
            continue
        count += 1
        if len(found) < 3:
            m = _VALUES.search(r.details["nan"])
            values = f": original {_short_number(m.group(1))}, replacement {_short_number(m.group(2))}" if m else ""
            found.append(f"{r.node} ({r.op_type}{values})")
    if not count:
        return None
    more = f" and {count - len(found)} more" if count > len(found) else ""
    return (f"{count} rewrite{'s compute' if count != 1 else ' computes'} differently from the original on NaN inputs "
            f"(recorded, not judged: ONNX leaves NaN handling open for these ops): {', '.join(found)}{more}; "
            "see details.nan in the report")


def _without_model_advice(reason: str) -> str:
    """A reason without its advice to run --verify-model (given after that check passed)."""
    clauses = [c for c in reason.split("; ") if "--verify-model" not in c]
    return "; ".join(clauses) or reason


#: onnxruntime's error text (``[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : ...``, with or without the prefix).
_ORT_ERROR = re.compile(r"(?:\[ONNXRuntimeError\]\s*:\s*)?\b\d+\s*:\s*([A-Z][A-Z_]+)\s*:\s*(.*)")
_NO_KERNEL = re.compile(r"Could not find an implementation for (\w+)\((\d+)\)")
_BAD_TYPE = re.compile(r"Type \((\w+\(\w+\))\) of (?:input|output) parameter \(.*?\) of operator \((\w+)\)")
_NO_OP = re.compile(r"No Op registered for (\w+) with domain_version of (\d+)")
_RUN_FAILED = re.compile(r"while running (\w+) node\..*?Status Message:\s*(.*)")
#: The longest clause an "unverified" line shows (the report keeps the whole reason).
_SHORT = 120


def short_reason(reason: str) -> str:
    """Why rewrites went unverified, in one short clause: the reason's first, onnxruntime's own text summed up.

    ``onnxruntime cannot run the replacement: 9 : NOT_IMPLEMENTED : Could not find an implementation
    for Reshape(19) node ...`` becomes ``onnxruntime cannot run the replacement (no kernel for
    Reshape-19)``; the whole reason is in the report (``unverified_reasons``, each rewrite's ``reason``).
    """
    clause = reason.split("; ", 1)[0].strip()
    found = _ORT_ERROR.search(clause)
    if found is not None:
        head = clause[:found.start()].rstrip(" :(")
        code, text = found.group(1), found.group(2).rstrip(")")
        kernel, typed, no_op, run = (p.search(text) for p in (_NO_KERNEL, _BAD_TYPE, _NO_OP, _RUN_FAILED))
        if kernel:
            what = f"no kernel for {kernel.group(1)}-{kernel.group(2)}"
        elif typed:
            what = f"its {typed.group(2)} takes no {typed.group(1)}"
        elif no_op:
            what = f"no {no_op.group(1)} at opset {no_op.group(2)}"
        elif run:
            message = re.split(r"(?<=[.,])\s", run.group(2), maxsplit=1)[0].rstrip(".,")
            what = f"{run.group(1)} failed: {message}"
        else:
            text = re.sub(r"^.*?failed:\s*", "", text)
            first = re.split(r"(?<=\.)\s", text, maxsplit=1)[0].rstrip(".")
            what = f"{code.lower().replace('_', ' ')}: {first}"
        clause = f"{head} ({what})" if head else f"onnxruntime: {what}"
    return clause if len(clause) <= _SHORT else clause[:_SHORT - 4].rsplit(" ", 1)[0] + " ..."


def print_convert_summary(report: Report, level: int) -> None:
    """What changed, one row per change, unverified reasons, whole-model checks and warnings (stderr)."""
    if level < 0:
        return
    _echo(describe_changes(report))
    for line in change_rows(report):
        _echo(line)
    model_passed = (report.model_check or {}).get("status") == "equal"
    shortened: dict[str, list[str]] = {}
    for r in report.rewrites:
        if r.status == "unverified":
            key = short_reason(_without_model_advice(r.reason) if model_passed else r.reason)
            shortened.setdefault(key, []).append(r.node)
    unverified = sorted(((reason, len(nodes)) for reason, nodes in shortened.items()), key=lambda kv: -kv[1])
    for reason, count in unverified[:3]:
        text = f"{reason}; the whole-model check covers them" if model_passed else reason
        _echo(f"unverified by per-rewrite checks ({count}: {named(shortened[reason])}): {text}")
    if len(unverified) > 3:
        rest = sum(count for _, count in unverified[3:])
        _echo(f"unverified by per-rewrite checks ({rest}): for {len(unverified) - 3} other reasons (the report's "
              "unverified_reasons lists each)")
    if unverified and not report.model_checks:
        _echo("to check what per-rewrite checks could not, run the whole models: use --verify-model")
    if report.optimization:
        opt = report.optimization
        _echo(f"optimized: {opt.get('nodes_before')} -> {opt.get('nodes_after')} nodes ({opt.get('tool')})")
    for name, check in report.model_checks.items():
        _echo(f"{name}: {check['status']}: {check['reason']}")
        if level >= 1 and check.get("outputs"):
            models = check.get("models") or ["A", "B"]
            for line in model_check_table(check["outputs"], (str(models[0]), str(models[1]))):
                _echo(line)
    warning = informational_warning(report)
    if warning:
        _echo(f"lowerer: warning: {warning}")


#: How many node names an "unverified" line shows before it counts the rest.
_NAMED = 3


def named(nodes: Sequence[str]) -> str:
    """The first :data:`_NAMED` node names, quoted, and how many more (``'a', 'b' and 3 more``)."""
    shown = ", ".join(repr(n) for n in nodes[:_NAMED])
    return shown + (f" and {len(nodes) - _NAMED} more" if len(nodes) > _NAMED else "")


def _fmt(x: Any) -> str:
    if isinstance(x, str):
        return x
    if x is None:
        return "-"
    if isinstance(x, float):
        return "0" if x == 0 else f"{x:.3g}"
    return str(x)


def model_check_table(outputs: Sequence[Mapping[str, Any]], names: tuple[str, str]) -> list[str]:
    """Rows of per-output statistics: max abs/rel difference, max ulp, mismatches, the worst value pair."""
    header = ["output", "type", "max abs", "max rel", "max ulp", "mismatches", f"worst (index: {names[0]} vs "
              f"{names[1]}, input set)"]
    rows = [header]
    for o in outputs:
        share = f"{o['mismatches']}/{o['count']}"
        if o["mismatches"]:
            share += f" ({100 * o['mismatch_share']:.3g}%)"
        worst = o.get("worst")
        if o.get("what"):
            where = o["what"]
        elif worst and o["max_abs"] == 0:
            where = "- (all equal)"
        elif worst:
            a, b = worst["values"]
            where = f"{worst['index']}: {a!r} vs {b!r} ({worst['input_set']})"
        else:
            where = "-"
        rows.append([o["name"], o["dtype"], _fmt(o["max_abs"]), _fmt(o["max_rel"]),
                     _fmt(o["max_ulp"]) if not o["discrete"] else "exact", share, where])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    return ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]


class TerminalProgress:
    """Draws :class:`~lowerer.core.progress.Progress` on one line of stderr; silent unless stderr is a terminal.

    Nothing is drawn during the first ``delay`` seconds (short runs stay quiet), then at most
    every ``interval`` seconds, and a phase's last update always.
    """

    def __init__(self, delay: float = 1.0, interval: float = 0.1, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self._clock = time.monotonic
        self._start = self._clock()
        self._delay = delay
        self._interval = interval
        self._last = 0.0
        self._shown = False

    def __call__(self, progress: Progress) -> None:
        """Show ``progress`` (when enabled, past the delay, and not too often)."""
        if not self.enabled:
            return
        now = self._clock()
        if now - self._start < self._delay:
            return
        if now - self._last < self._interval and not progress.finished:
            return
        self._last = now
        self._shown = True
        click.echo(f"\r\033[K{progress.describe()}", err=True, nl=False)

    def close(self) -> None:
        """Clear the line if anything was shown."""
        if self._shown:
            click.echo("\r\033[K", err=True, nl=False)
            self._shown = False
