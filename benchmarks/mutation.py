"""The mutation score: every mutant of ``tests/_mutant_list.py`` converted with default options, over seeds.

A mutant is killed when lowerer refuses it (nonzero exit) on every seed. Each mutant first gets a control
run (:func:`_mutants.control`): the real rules must convert its model with its options, and a mutant of a
rule must change what is written; one that does not is INVALID (it proves nothing) and counts as not killed.
Prints each survivor with why it may survive (its ``known_gap``), and the score by family (the kind of
registry entry patched), by rule area, by check, and by what the mutant hides behind; exits 1 when a mutant
without a known gap survives or a mutant is invalid. Usage::

    .venv/bin/python benchmarks/mutation.py [--seeds 0,1,2] [--only NAME ...] [--family F ...] [--check C ...]
    .venv/bin/python benchmarks/mutation.py --list
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's lowerer, not an installed one

from _mutant_list import MUTANTS
from _mutants import Mutant, control, run


def _chosen(args: argparse.Namespace) -> list[Mutant]:
    return [m for m in MUTANTS if (not args.only or m.name in args.only)
            and (not args.family or m.family in args.family or m.area in args.family)
            and (not args.check or m.check in args.check)]


def _table(title: str, killed: Counter[str], total: Counter[str]) -> None:
    print(f"-- by {title}")
    for key in sorted(total):
        print(f"  {key or '(nothing)':22} {killed[key]:3} / {total[key]}")


def main() -> int:
    """Run the mutants; print survivors and the score by family, area, check and hiding place."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--only", nargs="*", default=None, help="mutant names to run")
    parser.add_argument("--family", nargs="*", default=None, help="families or rule areas to run")
    parser.add_argument("--check", nargs="*", default=None, help="checks to run (rewrite, relabel, model ...)")
    parser.add_argument("--list", action="store_true", help="list the mutants (name, family, area, check, hides)")
    args = parser.parse_args()
    chosen = _chosen(args)
    if args.list:
        for m in chosen:
            gap = f"  [known gap: {m.known_gap}]" if m.known_gap else ""
            print(f"{m.name:40} {m.family:13} {m.area:18} {m.check:10} {m.hides}{gap}")
        print(f"{len(chosen)} mutants")
        return 0
    logging.disable(logging.WARNING)
    seeds = [int(s) for s in args.seeds.split(",")]
    tallies: dict[str, tuple[Counter[str], Counter[str]]] = {
        k: (Counter(), Counter()) for k in ("family", "area", "check", "hides")}
    unexpected = 0
    start = time.perf_counter()
    for mutant in chosen:
        keys = {"family": [mutant.family], "area": [mutant.area], "check": [mutant.check],
                "hides": [h for h in mutant.hides.split(", ") if h] or [""]}
        for k, values in keys.items():
            for v in values:
                tallies[k][1][v] += 1
        invalid = control(mutant)
        if invalid is not None:
            unexpected += 1
            print(f"INVALID {mutant.family}/{mutant.name}: {invalid}")
            continue
        outcomes = [run(mutant, seed) for seed in seeds]
        survived = [o for o in outcomes if not o.killed]
        if not survived:
            for k, values in keys.items():
                for v in values:
                    tallies[k][0][v] += 1
            continue
        unexpected += mutant.known_gap is None
        seeds_said = ", ".join(str(o.seed) for o in survived)
        print(f"SURVIVED {mutant.family}/{mutant.name} [{mutant.check}] (seeds {seeds_said}): "
              f"{mutant.known_gap or 'NO KNOWN GAP: ' + survived[0].how}")
    for k in ("family", "area", "check", "hides"):
        _table(k, *tallies[k])
    killed, total = tallies["family"]
    print(f"{'all':24} {sum(killed.values()):3} / {sum(total.values())}  "
          f"({len(seeds)} seeds, {time.perf_counter() - start:.1f} s)")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
