"""onnxruntime's registered kernels per release, from its sources (no onnxruntime import).

The tables are data, ``kernels/<runtime>-<MAJOR.MINOR>.json`` beside this file, written by
``benchmarks/make_kernel_tables.py``: for 1.15 to 1.24 from ``docs/OperatorKernels.md`` at each
release (CPU, CUDA and DirectML; the file's ``source`` names the tag, or the release-branch commit
where no tag could be had), for 1.25 to 1.32 from the PyPI wheel's own registry
(``get_all_opkernel_def()`` run in that release; CPU only, the CUDA and DirectML rows then come from
the newest documented release: :func:`provider_table`). A kernel row is
``(low, high, types)``: it serves nodes whose op's since-version is in ``[low, high]``; ``high`` is
None for the doc's open ``N+`` rows, which serve since-version ``N`` only: onnxruntime matches a
kernel registered without an end version to a node only when the node's since-version equals the
kernel's start ("exact match ... if it does not [have an end version], all we know is that the
kernel supported the start version when it was created", ``VerifyVersion`` in
``onnxruntime/core/framework/kernel_registry.cc``). So onnxruntime 1.15, whose doc lists Reshape
``14+``, has no kernel for Reshape-19 (``Could not find an implementation for Reshape(19)``).

``max_opset`` and ``max_ir`` are the release's row of onnxruntime's version matrix
(``docs/reference/compatibility.md``), None where the matrix has no row for it.

Typical use::

    table = kernel_table("1.16.3")
    table.has_kernel("CPUExecutionProvider", "Reshape", 19)    # True
    found = nearest_table(onnxruntime.__version__)             # (table, exact?) or None
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeAlias

__all__ = ["KernelRange", "KernelTable", "holds", "kernel_table", "nearest_table", "provider_table", "shipped_releases"]

_PACKAGE = "lowerer.backends.kernels"
_RELEASE = re.compile(r"^(\d+)\.(\d+)(?:[.+\-].*)?$")

KernelRange: TypeAlias = tuple[int, int | None, Mapping[str, frozenset[str]]]
"""One kernel row: since-versions ``low`` .. ``high`` (None: open) and the types per type constraint."""


@dataclass(frozen=True)
class KernelTable:
    """One runtime release's kernel table, per execution provider, domain and op.

    Attributes:
        runtime: the runtime (``onnxruntime``).
        version: the release the doc was read at (``1.15.1``).
        source: where the rows come from (repository, path, tag or commit).
        max_opset: the highest default-domain opset the release loads (None: not in the source).
        max_ir: the highest IR version the release loads (None: not in the source).
        versioning_source: where ``max_opset`` and ``max_ir`` come from (None when both are None).
    """

    runtime: str
    version: str
    source: str
    max_opset: int | None
    max_ir: int | None
    versioning_source: str | None
    _rows: Mapping[str, Mapping[str, Mapping[str, tuple[KernelRange, ...]]]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def providers(self) -> tuple[str, ...]:
        """The execution providers the doc lists, sorted (``CPUExecutionProvider``, ...)."""
        return tuple(sorted(self._rows))

    def ranges(self, provider: str, op: str, domain: str = "") -> tuple[KernelRange, ...]:
        """The kernel rows of ``op`` in ``domain`` (``""``: ONNX), in the doc's order (newest first).

        Args:
            provider: the execution provider (``CPUExecutionProvider``).
            op: the op type (``Reshape``).
            domain: the op's domain, ``""`` for the default ONNX domain.

        Returns:
            ``(low, high, types)`` rows; empty when the provider has no kernel for the op.
        """
        return self._rows.get(provider, {}).get(domain, {}).get(op, ())

    def has_kernel(self, provider: str, op: str, version: int, domain: str = "") -> bool:
        """Whether some row serves since-version ``version`` (an open row only its own start: :func:`holds`).

        Args:
            provider: the execution provider.
            op: the op type.
            version: the since-version of the op's schema the node uses (not the model's opset).
            domain: the op's domain, ``""`` for ONNX.

        Returns:
            True when a kernel row covers ``version``.
        """
        return any(_holds(row, version) for row in self.ranges(provider, op, domain))

    def types(self, provider: str, op: str, version: int, domain: str = "") -> dict[str, frozenset[str]] | None:
        """The types per constraint the kernels for ``version`` accept (union over the rows holding it).

        Args:
            provider: the execution provider.
            op: the op type.
            version: the since-version of the op's schema.
            domain: the op's domain, ``""`` for ONNX.

        Returns:
            ``{"T": frozenset({"tensor(float)", ...}), ...}``, or None when no row holds ``version``.
        """
        held = [row for row in self.ranges(provider, op, domain) if _holds(row, version)]
        if not held:
            return None
        out: dict[str, frozenset[str]] = {}
        for _, _, types in held:
            for name, allowed in types.items():
                out[name] = out.get(name, frozenset()) | allowed
        return out

    def ops(self, provider: str, domain: str = "") -> frozenset[str]:
        """The op types ``provider`` has any kernel for in ``domain`` (``""``: ONNX)."""
        return frozenset(self._rows.get(provider, {}).get(domain, {}))


def _holds(row: KernelRange, version: int) -> bool:
    return holds(row[0], row[1], version)


def holds(low: int, high: int | None, version: int) -> bool:
    """Whether a kernel registered for since-versions ``low`` .. ``high`` (None: no end) serves ``version``.

    onnxruntime's rule (``VerifyVersion``, ``onnxruntime/core/framework/kernel_registry.cc``): the
    start version matches exactly, or the kernel has an end version and ``version`` is in the range.
    """
    return version == low or (high is not None and low <= version <= high)


def _minor(release: str) -> tuple[int, int]:
    """``"1.15.1"``, ``"1.15"``, ``"1.20.0+cu121"`` -> ``(1, 15)``.

    Raises:
        ValueError: when ``release`` does not start with MAJOR.MINOR.
    """
    m = _RELEASE.match(release.strip())
    if not m:
        raise ValueError(f"not a release version (MAJOR.MINOR[.PATCH]): {release!r}")
    return int(m.group(1)), int(m.group(2))


@functools.cache
def _shipped(runtime: str) -> Mapping[tuple[int, int], str]:
    prefix = f"{runtime}-"
    found: dict[tuple[int, int], str] = {}
    for entry in resources.files(_PACKAGE).iterdir():
        name = entry.name
        if name.startswith(prefix) and name.endswith(".json"):
            try:
                found[_minor(name[len(prefix) : -len(".json")])] = name
            except ValueError:
                continue
    return found


def shipped_releases(runtime: str = "onnxruntime") -> tuple[str, ...]:
    """The MAJOR.MINOR releases with a shipped table, oldest first (``("1.15", "1.16", ...)``).

    Args:
        runtime: the runtime whose tables to list.

    Returns:
        The releases, ordered by version (1.9 before 1.10).
    """
    return tuple(f"{major}.{minor}" for major, minor in sorted(_shipped(runtime)))


def _types(value: Any, lists: list[list[str]]) -> frozenset[str]:
    """A constraint's types: a list of names, or an index into the file's shared ``type_lists``."""
    return frozenset(lists[value] if isinstance(value, int) else value)


#: Kernels registered without type constraints, which ``docs/OperatorKernels.md`` leaves out (its
#: generator lists rows by their type constraints): added to every onnxruntime table. Source:
#: ``onnxruntime/core/providers/{cpu,cuda}/object_detection/non_max_suppression.cc`` at v1.15.1 and
#: v1.22.1 (``ONNX_OPERATOR_VERSIONED_KERNEL_EX(NonMaxSuppression, kOnnxDomain, 10, 10, ...)`` and
#: ``ONNX_OPERATOR_KERNEL_EX(NonMaxSuppression, kOnnxDomain, 11, ...)``); onnxruntime 1.32's registry
#: lists exactly these (CPU) with no type constraints.
_UNDOCUMENTED: dict[str, dict[str, tuple[KernelRange, ...]]] = {
    provider: {"NonMaxSuppression": ((11, None, {}), (10, 10, {}))}
    for provider in ("CPUExecutionProvider", "CUDAExecutionProvider")
}


@functools.cache
def _load(runtime: str, name: str) -> KernelTable:
    data = json.loads(resources.files(_PACKAGE).joinpath(name).read_text(encoding="utf-8"))
    lists: list[list[str]] = data.get("type_lists", [])
    rows: dict[str, dict[str, dict[str, tuple[KernelRange, ...]]]] = {
        provider: {
            domain: {
                op: tuple(
                    (int(low), None if high is None else int(high), {c: _types(v, lists) for c, v in types.items()})
                    for low, high, types in op_rows
                )
                for op, op_rows in ops.items()
            }
            for domain, ops in domains.items()
        }
        for provider, domains in data["providers"].items()
    }
    if runtime == "onnxruntime":
        for provider, extra in _UNDOCUMENTED.items():
            if provider in rows:
                rows[provider].setdefault("", {})
                for op, op_rows in extra.items():
                    rows[provider][""].setdefault(op, op_rows)
    return KernelTable(
        runtime=data.get("runtime", runtime),
        version=str(data["version"]),
        source=str(data["source"]),
        max_opset=data.get("max_opset"),
        max_ir=data.get("max_ir"),
        versioning_source=data.get("versioning_source"),
        _rows=rows,
    )


@functools.cache
def kernel_table(release: str, runtime: str = "onnxruntime") -> KernelTable | None:
    """The shipped table of ``release``'s MAJOR.MINOR (``"1.15.1"`` and ``"1.15"`` both give 1.15's).

    Args:
        release: the release, ``MAJOR.MINOR`` or longer (a local suffix such as ``+cu121`` is ignored).
        runtime: the runtime.

    Returns:
        The table, or None when no table of that MAJOR.MINOR is shipped.

    Raises:
        ValueError: when ``release`` does not start with MAJOR.MINOR.
    """
    name = _shipped(runtime).get(_minor(release))
    return None if name is None else _load(runtime, name)


def nearest_table(release: str, runtime: str = "onnxruntime") -> tuple[KernelTable, bool] | None:
    """``release``'s own table, else the newest shipped one older than it.

    Args:
        release: the release, ``MAJOR.MINOR`` or longer.
        runtime: the runtime.

    Returns:
        ``(table, True)`` for an exact MAJOR.MINOR match, ``(table, False)`` for the newest older
        release's table, None when ``release`` is older than every shipped table.

    Raises:
        ValueError: when ``release`` does not start with MAJOR.MINOR.
    """
    want = _minor(release)
    older = [key for key in _shipped(runtime) if key <= want]
    if not older:
        return None
    best = max(older)
    table = kernel_table(f"{best[0]}.{best[1]}", runtime)
    return None if table is None else (table, best == want)


def provider_table(release: str, provider: str, runtime: str = "onnxruntime") -> tuple[KernelTable, bool] | None:
    """The table of ``release`` that lists ``provider``, else the newest older one that does.

    Tables read from a CPU wheel's own registry list the CPU provider only; the CUDA and DirectML
    rows then come from the newest documented release before it.

    Returns:
        ``(table, exact)``: ``exact`` when it is ``release``'s own; None when no shipped table of
        ``release`` or older lists the provider.
    """
    want = _minor(release)
    older = sorted((key for key in _shipped(runtime) if key <= want), reverse=True)
    for key in older:
        table = kernel_table(f"{key[0]}.{key[1]}", runtime)
        if table is not None and provider in table.providers():
            return table, key == want
    return None
