"""Verification: every rewrite run before and after, in onnxruntime (or lowerer's numpy reference), compared.

* :mod:`.providers`: which execution providers run the checks;
* :mod:`.inputs`: seeded inputs and shape bindings that find bugs;
* :mod:`.models`: the small one-rewrite models;
* :mod:`.runner`: onnxruntime sessions and the reference engine;
* :mod:`.compare`: exact comparison, or within a :class:`~.compare.Tolerance`, and statistics;
* :mod:`.check`: the per-rewrite verifier, with reuse of identical checks;
* :mod:`.specs`: what a check decides before it runs (input specs, element types, the replacement's
  structure and validity) and how per-type outcomes combine;
* :mod:`.trial`: one check with one set of element types: input sets run on both sides and compared;
* :mod:`.narrowing`: no hidden narrowing (a static check of the Casts a replacement emits);
* :mod:`.feeds`: whole-model inputs (steered shapes and ranges, index-like inputs, .npz files);
* :mod:`.graph_inputs`: whole-model inputs' specs, ``--input-shapes`` and ``--val-range`` parsed;
* :mod:`.index_inputs`: graph inputs used as indices, and the range their data allows;
* :mod:`.budget`: the memory whole-model runs claim;
* :mod:`.whole`: whole-model comparison (``--verify-model``, ``lowerer verify``, ``--optimize``);
* :mod:`.ort_support`: which default-domain opsets and op-versions the installed onnxruntime opens.

Imports the step engine, facts, model I/O and core; never the passes, the API, the CLI, a rule or a
backend (they call it).
"""

from __future__ import annotations

from collections.abc import Sequence

from lowerer.verification.check import CheckCounter, RewriteVerifier

__all__ = ["make_verifier"]


def make_verifier(providers: Sequence[str] | None = None, seed: int = 0, progress: CheckCounter | None = None,
                  max_ulp: int | None = None, exact: bool = False) -> RewriteVerifier:
    """A callable that verifies one :class:`~lowerer.core.report.Rewrite` (its status set, or VerificationError).

    ``max_ulp`` is the error budget of function-body expansions (None: the per-type default of
    :data:`~lowerer.verification.compare.EXPANSION_ULPS`); ``exact`` accepts no difference at all.

    Raises:
        InputError: an unknown or unavailable provider.
    """
    return RewriteVerifier(providers, seed, progress, max_ulp, exact)

