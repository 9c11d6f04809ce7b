"""Survey: onnx's node test cases converted by lowerer through many target opsets, classified.

Every case of ``onnx.backend.test.case.node`` (1,884 with onnx 1.23; those importing no
default-domain opset are left out) is converted to each target of ``--targets`` (default: 7, 9, 11,
13, 17, 21 and the case's own opset -1 and +1; the source itself and opsets onnx does not know are
skipped), and each result is classified (the logic lives in ``tests/_node_cases.py``, shared with
``tests/test_node_cases.py``):

``converted-ok`` (checker full_check, ORT loads and runs it, outputs equal the original's in ORT:
exact for discrete outputs, floats exact or within a few ulp, counted apart; against the case's
expected outputs with its rtol/atol where the original cannot run in ORT),
``converted-unloadable-by-ort`` (valid, but the target is below ORT's range or ORT cannot run the
original either), ``refused`` (a ``LowererError``: grouped by a normalized reason and by op),
``INVALID`` (exit 0 but the checker or ORT rejects it: must be zero), ``WRONG`` (outputs differ:
must be zero), ``crash`` (any other exception: a bug).

Usage::

    python benchmarks/node_cases.py                          # all cases, default targets, 2 jobs
    python benchmarks/node_cases.py --cases 'test_reduce' --targets 11,13,-1
    python benchmarks/node_cases.py --verify --jobs 2 --json out.json

Runtime (onnx 1.23.2, onnxruntime 1.32.0, lowerer at main f953bf1), all cases, default targets,
``--no-verify``, 2 jobs on the 2-core dev machine: 215 s wall (239 s of CPU), 372 s while other
work loaded the machine heavily; 10-13 s of it is collecting the cases.
Nearly all of the rest is lowerer converting (13,670 conversions, most refusals the costliest).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _node_cases import (  # tests/ is put on the path first
    DEFAULT_TARGETS,
    MAX_ULP,
    load_cases,
    parse_targets,
    plan,
    run_cases,
    source_opset,
    summary_table,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", metavar="PATTERN", help="regex on case names (default: all)")
    parser.add_argument("--targets", default=DEFAULT_TARGETS,
                        help=f"opsets, or -N/+N relative to each case's opset (default {DEFAULT_TARGETS})")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=False,
                        help="lowerer's per-rewrite verification (default: off, for speed)")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2; 1: no pool)")
    parser.add_argument("--json", type=Path, help="write every (case, target) outcome here")
    parser.add_argument("--top", type=int, default=25, help="refusal groups to print (default 25)")
    args = parser.parse_args(argv)
    spec = parse_targets(args.targets)

    import onnx
    import onnxruntime

    import lowerer

    start = time.perf_counter()
    cases = load_cases(args.cases)
    loaded = time.perf_counter() - start
    skipped = [c.name for c in cases if source_opset(c.model) is None]

    def progress(done: int, total: int) -> None:
        if done % 200 == 0 or done == total:
            print(f"  {done}/{total} cases ({time.perf_counter() - start:.0f} s)", file=sys.stderr)

    outcomes = run_cases(plan(cases, spec), verify=args.verify, jobs=args.jobs, progress=progress)
    elapsed = time.perf_counter() - start
    header = (f"lowerer {lowerer.__version__}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, "
              f"python {platform.python_version()}; {len(cases)} cases matched ({len(skipped)} left out: no "
              f"default-domain opset); targets {','.join(spec)}; verify {'on' if args.verify else 'off'}; "
              f"jobs {args.jobs}; float budget {MAX_ULP:g} ulp; {elapsed:.0f} s ({loaded:.0f} s loading cases)")
    print(header)
    print(summary_table(outcomes, top=args.top))
    if args.json:
        args.json.write_text(json.dumps({"header": header, "skipped": skipped,
                                         "outcomes": [o.to_dict() for o in outcomes]}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
