"""Rewrites left ``unverified`` on the real torch exports, and what verification costs there.

Each fixture of ``tests/fixtures/real`` (its MANIFEST.json) is converted to opsets 17, 13 and 11 from
its path, as ``lowerer convert --target-opset N`` does, with verification and without; a conversion
lowerer refuses is counted as such. Printed: the rewrites by status, each ``unverified`` one with its
node and reason, and the wall time verified / ``--no-verify`` over all conversions (each the best of
``--repeat``; the CPU time too, steadier on a shared machine).

Usage: python benchmarks/real_unverified.py [--targets 17,13,11] [--repeat 1] [--only bert,gpt2]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections import Counter
from pathlib import Path

import lowerer
from lowerer.core.errors import LowererError

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "real"


def _timed(path: Path, target: int, verify: bool, repeat: int) -> tuple[float, float, lowerer.Report | str]:
    """The best wall and CPU seconds of ``repeat`` conversions, and the last one's report (or refusal)."""
    best, cpu, outcome = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            outcome = lowerer.convert(str(path), target_opset=target, verify=verify).report
        except LowererError as e:
            outcome = f"{type(e).__name__}: {str(e)[:160]}"
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    assert outcome is not None
    return best, cpu, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="17,13,11")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated model names (MANIFEST's 'model')")
    args = parser.parse_args()
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())["fixtures"]
    only = {s for s in args.only.split(",") if s}
    targets = [int(t) for t in args.targets.split(",")]
    logging.disable(logging.WARNING)  # the loop-form warnings, once per conversion
    first = FIXTURES / sorted(manifest)[0]
    _timed(first, targets[0], True, 1)  # imports and first sessions, outside the timings

    statuses: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    with_unverified = conversions = refused = 0
    totals = {True: 0.0, False: 0.0}
    cpu_totals = {True: 0.0, False: 0.0}
    for name, entry in sorted(manifest.items()):
        if only and entry["model"] not in only:
            continue
        for target in targets:
            seconds, cpu = {}, {}
            outcome: lowerer.Report | str = ""
            for verify in (False, True):
                seconds[verify], cpu[verify], outcome = _timed(FIXTURES / name, target, verify, args.repeat)
            if isinstance(outcome, str):
                refused += 1
                print(f"{name} -> {target}: refused: {outcome}")
                continue
            conversions += 1
            for verify in (False, True):
                totals[verify] += seconds[verify]
                cpu_totals[verify] += cpu[verify]
            counts = Counter(r.status for r in outcome.rewrites)
            statuses.update(counts)
            unverified = [r for r in outcome.rewrites if r.status == "unverified"]
            with_unverified += bool(unverified)
            print(f"{name} -> {target}: {dict(counts)}; {seconds[True]:.2f} s verified, {seconds[False]:.2f} s not")
            for r in unverified:
                reasons[f"{r.op_type}-{r.from_version}: {r.reason[:140]}"] += 1
                print(f"    unverified {r.node} ({r.op_type}-{r.from_version}): {r.reason[:200]}")
    print(f"\n{conversions} conversions ({refused} refused); rewrites by status: {dict(statuses)}; "
          f"{with_unverified} conversions with an unverified rewrite")
    for reason, n in reasons.most_common():
        print(f"  {n} x {reason}")
    if totals[False]:
        print(f"wall time: verified {totals[True]:.1f} s, --no-verify {totals[False]:.1f} s, "
              f"ratio {totals[True] / totals[False]:.2f}x; CPU time: verified {cpu_totals[True]:.1f} s, --no-verify "
              f"{cpu_totals[False]:.1f} s, ratio {cpu_totals[True] / cpu_totals[False]:.2f}x")


if __name__ == "__main__":
    main()
