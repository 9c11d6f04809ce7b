"""Verification: every rewrite run before and after, in onnxruntime (or lowerer's numpy reference), compared.

* :mod:`.providers`: which execution providers run the checks;
* :mod:`.inputs`: seeded inputs and shape bindings that find bugs;
* :mod:`.models`: the small one-rewrite models;
* :mod:`.runner`: onnxruntime sessions and the reference engine;
* :mod:`.compare`: exact comparison (tolerance only where arithmetic may differ);
* :mod:`.check`: the per-rewrite verifier, with reuse of identical checks;
* :mod:`.whole`: whole-model comparison (``--verify-model``, ``lowerer verify``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import onnx

from lowerer.report import Report
from lowerer.verification.check import CheckResult, Progress, RewriteVerifier
from lowerer.verification.providers import available_providers, select_providers

__all__ = [
    "CheckResult",
    "RewriteVerifier",
    "available_providers",
    "make_verifier",
    "select_providers",
    "verify_models",
]


def make_verifier(providers: Sequence[str] | None = None, seed: int = 0,
                  progress: Progress | None = None) -> RewriteVerifier:
    """A callable that verifies one :class:`~lowerer.report.Rewrite` (sets its status, or raises VerificationError).

    Raises:
        InputError: an unknown or unavailable provider.
    """
    return RewriteVerifier(providers, seed, progress)


def verify_models(original: onnx.ModelProto, converted: onnx.ModelProto, *, providers: Sequence[str] | None,
                  seed: int, base_dir: Path | None, report: Report) -> None:
    """Run both whole models on the same inputs and compare every output; record it in ``report``.

    Raises:
        VerificationError: an output differs.
    """
    from lowerer.verification.whole import verify_models as run

    run(original, converted, providers=providers, seed=seed, base_dir=base_dir, report=report)
