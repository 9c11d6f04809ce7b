"""The mutation score: every mutant of ``tests/_mutant_list.py`` converted with default options, over seeds.

A mutant is killed when lowerer refuses it (nonzero exit) on every seed. Prints each survivor with why
it may survive (its ``known_gap``), and the score by family; exits 1 when a mutant without a known gap
survives. Usage::

    .venv/bin/python benchmarks/mutation.py [--seeds 0,1,2] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _mutant_list import MUTANTS
from _mutants import run


def main() -> int:
    """Run the mutants; print survivors and the score by family."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default 0,1,2)")
    parser.add_argument("--only", nargs="*", default=None, help="mutant names to run")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    seeds = [int(s) for s in args.seeds.split(",")]
    killed: Counter[str] = Counter()
    total: Counter[str] = Counter()
    unexpected = 0
    start = time.perf_counter()
    for mutant in MUTANTS:
        if args.only and mutant.name not in args.only:
            continue
        total[mutant.family] += 1
        outcomes = [run(mutant, seed) for seed in seeds]
        survived = [o for o in outcomes if not o.killed]
        if not survived:
            killed[mutant.family] += 1
            continue
        unexpected += mutant.known_gap is None
        seeds_said = ", ".join(str(o.seed) for o in survived)
        print(f"SURVIVED {mutant.family}/{mutant.name} (seeds {seeds_said}): "
              f"{mutant.known_gap or 'NO KNOWN GAP: ' + survived[0].how}")
    for family in sorted(total):
        print(f"{family:14} {killed[family]:3} / {total[family]}")
    print(f"{'all':14} {sum(killed.values()):3} / {sum(total.values())}  "
          f"({len(seeds)} seeds, {time.perf_counter() - start:.1f} s)")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
