"""What a named onnxruntime release runs: the opset a model goes to for it, read from the release's kernel table.

``--for onnxruntime==1.15`` (or ``cuda==1.20`` ...) names a release. The highest opset it loads
(``docs/Versioning.md``) is not enough: onnxruntime 1.15 loads opset 19 but has no CPU kernel of
Reshape-19 (it came in 1.16), so a model taken to 19 does not open there. The target is therefore
the highest opset, at most the one the release loads and the model's own, at which every
default-domain op the model holds (every scope, functions included) has a kernel of the profile's
provider for its since-version in the release's table (``lowerer/backends/kernels/``, read from
onnxruntime's ``docs/OperatorKernels.md`` at the release's tag). Ops with no kernel at any opset
are left to the conversion (an op the target lacks is expanded or lowered; one it keeps is recorded
as unverified).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import onnx

__all__ = ["ReleaseTable", "kernel_opset", "release_table", "runs_here", "target_for_release"]


@dataclass(frozen=True)
class ReleaseTable:
    """The provider's default-domain kernels in the release named."""

    release: str
    provider: str
    #: op -> (low, high or None) since-version ranges that have a kernel.
    ranges: dict[str, tuple[tuple[int, int | None], ...]]
    source: str
    #: False when the table is an older release's (the named one is not shipped).
    exact: bool

    def has(self, op: str, version: int) -> bool:
        """Whether some kernel of ``op`` covers since-version ``version``."""
        from lowerer.backends.kernel_tables import holds

        return any(holds(lo, hi, version) for lo, hi in self.ranges.get(op, ()))

    def describe(self) -> str:
        """``onnxruntime 1.15's CPUExecutionProvider kernel table (source)``."""
        older = "" if self.exact else " (the newest shipped table not newer than it)"
        return f"onnxruntime {self.release}'s {self.provider} kernel table{older} ({self.source})"


@functools.lru_cache(maxsize=32)
def release_table(release: str, provider: str) -> ReleaseTable | None:
    """The kernel table of ``provider`` in onnxruntime ``release`` (None: no shipped table holds it)."""
    from lowerer.backends.kernel_tables import provider_table

    found = provider_table(release, provider)
    if found is None:
        return None
    table, exact = found
    ranges = {op: tuple((lo, hi) for lo, hi, _ in table.ranges(provider, op)) for op in table.ops(provider)}
    return ReleaseTable(release, provider, ranges, table.source, exact)


def _default_ops(model: onnx.ModelProto) -> frozenset[str]:
    from lowerer.model_io.scopes import walk_nodes

    return frozenset(n.op_type for n in walk_nodes(model) if n.domain in ("", "ai.onnx"))


def kernel_opset(ops: Iterable[str], ceiling: int, table: ReleaseTable, floor: int = 7) -> tuple[int, list[str]]:
    """The highest opset from ``ceiling`` down to ``floor`` at which every op in ``ops`` has a kernel in ``table``.

    An op with no kernel at any opset from ``floor`` to ``ceiling`` (and an op that does not exist at
    an opset: it is expanded or lowered there) does not hold the choice back.

    Returns:
        The opset, and the ops with no kernel at ``ceiling`` that decided it (empty: ``ceiling`` itself).
    """
    from lowerer.core.opsets import since_version

    wanted = sorted(set(ops))
    blockers: list[str] = []
    for op in wanted:
        versions = {v for v in (since_version(op, o) for o in range(floor, ceiling + 1)) if v is not None}
        if versions and not any(table.has(op, v) for v in versions):
            continue  # no kernel at any opset: not the opset's fault
        v = since_version(op, ceiling)
        if v is not None and not table.has(op, v):
            blockers.append(f"{op}-{v}")
    for opset in range(ceiling, floor - 1, -1):
        ok = True
        for op in wanted:
            v = since_version(op, opset)
            if v is None or table.has(op, v):
                continue
            versions = {w for w in (since_version(op, o) for o in range(floor, ceiling + 1)) if w is not None}
            if any(table.has(op, w) for w in versions):
                ok = False
                break
        if ok:
            return opset, blockers
    return ceiling, blockers


def runs_here(release: str) -> bool:
    """Whether the installed onnxruntime is ``release`` (same major and minor)."""
    from lowerer.backends.installed_kernels import installed_release

    return installed_release().split(".")[:2] == release.split(".")[:2]


def target_for_release(model: onnx.ModelProto, ceiling: int, release: str, provider: str) -> tuple[int, str | None]:
    """The opset to take ``model`` to for ``release`` (at most ``ceiling``), and why it is below ``ceiling``."""
    table = release_table(release, provider)
    if table is None:
        return ceiling, None
    opset, blockers = kernel_opset(_default_ops(model), ceiling, table)
    if opset == ceiling:
        return opset, None
    return opset, (f"opset {opset}, not {ceiling}: {table.describe()} has no kernel for "
                   f"{', '.join(blockers[:5])}{' ...' if len(blockers) > 5 else ''} at {ceiling}")
