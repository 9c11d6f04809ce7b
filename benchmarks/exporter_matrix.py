"""Exporter fixtures taken across opsets: per exporter, right / wrong / refused / invalid.

Every model of ``tests/fixtures/exporters`` (skl2onnx, onnxmltools, tf2onnx, paddle2onnx; see
``make_fixtures.py`` there) goes one and two opsets down, to 13 and 11, and one up (the targets of
``tests/test_exporters.py``), by lowerer (``lowerer.convert``, verification on) or by onnx's version
converter. A conversion is *refused* when it raises, *invalid* when onnx's checker (``full_check``)
rejects the result or onnxruntime (CPU, default session options) cannot run it, *right* when the
outputs on seven input sets (the sample inputs, rows all equal, zeros, x100, negated, rounded, 1e-30)
are identical to the original's (ZipMap's maps key by key) and *wrong* otherwise.

Examples::

    python benchmarks/exporter_matrix.py                          # lowerer of this tree
    python benchmarks/exporter_matrix.py --converter onnx         # onnx.version_converter
    python benchmarks/exporter_matrix.py --tree /path/to/older/checkout   # an older lowerer, these fixtures
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "exporters"
KINDS = ("right", "wrong", "refused", "invalid")


def targets(model: onnx.ModelProto) -> list[int]:
    """One and two opsets down, 13 and 11, one up (a model importing no default domain: from 15)."""
    source = next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), None) or 15
    top = onnx.defs.onnx_opset_version()
    return sorted(t for t in {source - 1, source - 2, 13, 11, source + 1} - {source} if 7 <= t <= top)


def input_sets(name: str) -> list[dict[str, np.ndarray]]:
    """The fixture's sample inputs and six variants of them."""
    x = dict(np.load(FIXTURES / f"{name}.npz"))
    return [x, {k: np.broadcast_to(v[:1], v.shape).copy() for k, v in x.items()},
            {k: np.zeros_like(v) for k, v in x.items()}, {k: v * 100 for k, v in x.items()},
            {k: -v for k, v in x.items()}, {k: np.round(v) for k, v in x.items()},
            {k: np.full_like(v, 1e-30) for k, v in x.items()}]


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[Any]:
    """The model's outputs in onnxruntime on CPU with default session options."""
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return list(session.run(None, feeds))


def same(before: list[Any], after: list[Any]) -> bool:
    """Identical outputs: arrays bit for bit (NaN equal to NaN), sequences of maps key by key."""
    if len(before) != len(after):
        return False
    for a, b in zip(before, after, strict=True):
        if isinstance(a, list):
            if not isinstance(b, list) or len(a) != len(b):
                return False
            if any(set(x) != set(y) or any(not np.array_equal(x[k], y[k], equal_nan=True) for k in x)
                   for x, y in zip(a, b, strict=True)):
                return False
            continue
        a, b = np.asarray(a), np.asarray(b)
        if a.dtype != b.dtype or a.shape != b.shape or not np.array_equal(a, b, equal_nan=a.dtype.kind == "f"):
            return False
    return True


def judge(path: Path, target: int, converter: str) -> tuple[str, str]:
    """One conversion's kind and, unless it is right, why."""
    original = onnx.load(path)
    try:
        if converter == "lowerer":
            import lowerer

            converted = lowerer.convert(str(path), target_opset=target).model
        else:
            converted = onnx.version_converter.convert_version(original, target)
    except Exception as e:  # every failure to convert is a refusal here
        return "refused", str(e).splitlines()[0]
    try:
        onnx.checker.check_model(converted, full_check=True)
        pairs = [(run(original, feeds), run(converted, feeds)) for feeds in input_sets(path.stem)]
    except Exception as e:  # the checker's or onnxruntime's
        return "invalid", str(e).splitlines()[0]
    return ("right", "") if all(same(a, b) for a, b in pairs) else ("wrong", "outputs differ")


def main() -> None:
    """Print the table (and with --json, write it with every conversion that is not right)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--converter", choices=("lowerer", "onnx"), default="lowerer")
    parser.add_argument("--tree", type=Path, default=FIXTURES.parents[2],
                        help="import lowerer from this checkout (default: the one holding this script)")
    parser.add_argument("--json", type=Path, help="write the counts and the failures here")
    args = parser.parse_args()
    sys.path.insert(0, str(args.tree.resolve()))
    warnings.filterwarnings("ignore")
    logging.disable(logging.CRITICAL)
    ort.set_default_logger_severity(3)
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    failures: list[dict[str, Any]] = []
    start = time.perf_counter()
    for path in sorted(FIXTURES.glob("*.onnx")):
        for target in targets(onnx.load(path)):
            kind, why = judge(path, target, args.converter)
            counts[manifest[path.stem]["exporter"]][kind] += 1
            if kind != "right":
                failures.append({"model": path.stem, "target": target, "kind": kind, "why": why})
    counts["all"] = sum(counts.values(), Counter())
    if args.converter == "lowerer":
        import lowerer

        print(f"lowerer {lowerer.__version__} from {Path(lowerer.__file__).parent}")
    for exporter, c in counts.items():
        print(f"{exporter:12s} " + " ".join(f"{k} {c[k]:3d}" for k in KINDS) + f"  of {sum(c.values())}")
    print(f"{time.perf_counter() - start:.1f} s")
    for f in failures:
        print(f"{f['model']} -> {f['target']}: {f['kind']}: {f['why'][:200]}")
    if args.json is not None:
        args.json.write_text(json.dumps({"converter": args.converter, "counts": counts, "failures": failures},
                                        indent=1))


if __name__ == "__main__":
    main()
