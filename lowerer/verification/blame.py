"""Second opinions: when a check fails, which party departs — the rewrite, or a runtime's kernel.

A runtime is a witness, not the truth. onnxruntime's CUDA Upsample-7/9 kernel rounds each scale
up to an integer (``ceil(scales[i])``, ``onnxruntime/core/providers/cuda/tensor/upsample.cc``) and
so differs from its own CPU kernel and from Resize; onnxruntime 1.31's CPU ArgMax-12 with
``select_last_index=1`` returns a wrong shape on an empty input. A failed check is therefore
checked again before the rewrite is blamed (:meth:`lowerer.verification.check.RewriteVerifier._judged`):

* on the CPU provider, when it ran on another: both sides agreeing there means the other
  provider's kernel departs. The rewrite stands, verified on the CPU; the result names the kernel
  that departs (the side whose outputs differ between the two providers on the failing inputs)
  and one warning line says so;
* with the original judged by lowerer's numpy reference (the op's spec), when the CPU disagrees
  too: the replacement agreeing with the spec means onnxruntime's CPU kernel of the original
  departs from the spec. The rewrite stands, verified against the spec; one warning line says so.

Otherwise the failure stands and the rewrite is refused, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lowerer.verification.result import CheckResult

if TYPE_CHECKING:
    from lowerer.report import Rewrite

__all__ = ["BY_SPEC", "kernel_departs_from_spec", "provider_departs", "worst_gap"]

logger = logging.getLogger(__name__)

#: Why a second opinion ran the original with the numpy reference.
BY_SPEC = "second opinion: the original judged by its spec (lowerer's numpy reference)"

_WARNED: set[str] = set()


def worst_gap(a: Sequence[np.ndarray] | None, b: Sequence[np.ndarray] | None) -> str | None:
    """How two runs' outputs differ, in a few words (None: identical, NaNs equal)."""
    if a is None or b is None:
        return None if a is None and b is None else "one of them raises"
    for x, y in zip(a, b, strict=False):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return f"shapes {list(x.shape)} and {list(y.shape)}"
        if x.dtype.kind in "fc":
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
            if not same.all():
                with np.errstate(invalid="ignore"):
                    gap = np.abs(xf - yf)[~same]
                finite = gap[np.isfinite(gap)]
                worst = f"{float(finite.max()):.3g}" if finite.size else "inf"
                return f"max |diff| {worst} ({int((~same).sum())} of {same.size} values)"
        elif not np.array_equal(x, y):
            return f"{int((x != y).sum())} of {x.size} values differ"
    return None


def _warn_once(key: str, text: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning("%s", text)


def provider_departs(rewrite: Rewrite, failed: CheckResult, on_cpu: CheckResult, provider: str) -> CheckResult:
    """The CPU verified what failed on ``provider``: the rewrite stands; name the kernel that departs."""
    short = provider.replace("ExecutionProvider", "")
    original = f"{rewrite.op_type}-{rewrite.from_version}"
    replacement = " + ".join(rewrite.emitted) + f" (opset {rewrite.to_opset})"
    here, there = failed.evidence or {}, on_cpu.evidence or {}
    parties = []
    for side, name in (("original", original), ("replacement", replacement)):
        if side in here and side in there:
            gap = worst_gap(here[side], there[side])
            if gap is not None:
                parties.append(f"{provider}'s {name} kernel differs from its CPU kernel here ({gap})")
    said = "; ".join(parties) or (f"{provider}'s kernels of {original} or of {replacement} differ from its CPU "
                                  "kernels on these inputs")
    details: dict[str, Any] = {**on_cpu.details, "provider_departure": {
        "provider": provider, "statement": said, "failure_on_provider": failed.failure or failed.reason}}
    _warn_once(f"{provider}:{original}:{rewrite.rule}",
               f"{said}; node {rewrite.node!r}'s rewrite ({original} -> {replacement}) is verified on "
               f"CPUExecutionProvider instead (it failed on {short}: {failed.failure or failed.reason})")
    return CheckResult("verified", f"{on_cpu.reason}; {said}", on_cpu.provider, details)


def kernel_departs_from_spec(rewrite: Rewrite, failed: CheckResult, by_spec: CheckResult) -> CheckResult:
    """The spec (numpy reference) agrees with the replacement where onnxruntime's original did not."""
    original = f"{rewrite.op_type}-{rewrite.from_version}"
    on = failed.provider or "CPUExecutionProvider"
    said = (f"onnxruntime's {on} kernel of {original} departs from the ONNX spec here "
            f"(lowerer's numpy reference of {original} agrees with the replacement)")
    details: dict[str, Any] = {**by_spec.details, "kernel_departure": {
        "kernel": f"{on} {original}", "statement": said, "failure_on_provider": failed.failure or failed.reason}}
    _warn_once(f"spec:{on}:{original}:{rewrite.rule}",
               f"{said}; node {rewrite.node!r}'s rewrite is verified against the spec "
               f"(onnxruntime: {failed.failure or failed.reason})")
    return CheckResult("verified", f"{by_spec.reason}; {said}", by_spec.provider, details)
