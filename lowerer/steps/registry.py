"""The one registry of how each version step is crossed: adapters keyed by (op, version, direction).

For every step of every default-domain op, the table (:mod:`lowerer.steps.table`) says what
changed. Crossing it in a direction is done by, in order of precedence:

1. an op-wide *rule* lowerer owns (Hardmax/Softmax/LogSoftmax, ArgMax/ArgMin: they convert any
   version to any other in one go, see :mod:`lowerer.rules`);
2. an *adapter* registered here for ``(op, version, direction)`` (``version`` is the newer side
   of the step), written in :mod:`lowerer.rules` one module per op family;
3. the *generic* handling of the step's changes (:mod:`lowerer.steps.generic`), which refuses
   what it cannot cross exactly (every :class:`~lowerer.steps.changes.Semantics` change).

:func:`explain` lists, for an op and two versions, each step crossed and what crosses it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from lowerer.steps.changes import Step

if TYPE_CHECKING:
    from lowerer.rules.base import Emitter, Rule

__all__ = ["DOWN", "UP", "Adapter", "adapter", "adapter_for", "explain", "span_rule"]

DOWN = "down"
UP = "up"

#: Emits ``em.node`` across ``step`` in ``direction`` into ``em`` (whose opset is the far side).
Adapter = Callable[["Emitter", Step, str], None]

_ADAPTERS: dict[tuple[str, int, str], Adapter] = {}
_NAMES: dict[tuple[str, int, str], str] = {}
#: Modules that register adapters (imported on first use).
_MODULES = (
    "lowerer.rules.control_flow",
    "lowerer.rules.elementwise",
    "lowerer.rules.pooling",
    "lowerer.rules.reduction",
    "lowerer.rules.shape_ops",
    "lowerer.rules.tensor_ops",
    "lowerer.rules.normalization",
    "lowerer.rules.cast",
    "lowerer.rules.quantization",
    "lowerer.rules.attention",
    "lowerer.rules.grid_sample",
    "lowerer.rules.group_norm",
    "lowerer.rules.resize",
    "lowerer.rules.scan",
    "lowerer.rules.scatter",
)
_loaded = False


def adapter(ops: str | tuple[str, ...], version: int | tuple[int, ...], *directions: str
            ) -> Callable[[Adapter], Adapter]:
    """Register the decorated function as the adapter of ``ops``' step into ``version``(s), in ``directions``.

    Example::

        @adapter("Shape", 15, DOWN)
        def shape_15_13(em: Emitter, step: Step, direction: str) -> None: ...
    """
    names = (ops,) if isinstance(ops, str) else ops
    versions = (version,) if isinstance(version, int) else version

    def register(fn: Adapter) -> Adapter:
        for op in names:
            for v, direction in ((v, d) for v in versions for d in directions or (DOWN, UP)):
                key = (op, v, direction)
                if key in _ADAPTERS:
                    raise RuntimeError(f"two adapters for {op} step into {version} ({direction})")
                _ADAPTERS[key] = fn
                _NAMES[key] = fn.__name__
        return fn

    return register


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for module in _MODULES:
            importlib.import_module(module)


def adapter_for(op: str, version: int, direction: str) -> Adapter | None:
    """The adapter registered for ``op``'s step into ``version`` in ``direction``, or None."""
    _load()
    return _ADAPTERS.get((op, version, direction))


def adapter_name(op: str, version: int, direction: str) -> str | None:
    """The registered adapter's name (for reports), or None."""
    _load()
    return _NAMES.get((op, version, direction))


def span_rule(op: str) -> Rule | None:
    """The op-wide rule lowerer owns for ``op`` (it crosses every step itself), or None."""
    from lowerer import rules

    return rules._BY_OP.get(op)


def explain(op: str, source_version: int, target_version: int) -> list[str]:
    """One line per step crossed going from ``source_version`` to ``target_version``: changes and handler."""
    from lowerer.steps.table import steps_between

    rule = span_rule(op)
    lines = []
    direction = DOWN if target_version < source_version else UP
    for step in steps_between(op, source_version, target_version):
        if rule is not None:
            how = f"rule {rule.name!r}"
        else:
            name = adapter_name(op, step.version, direction)
            how = f"adapter {name}" if name else "generic"
        lines.append(f"{step.describe()} [{direction}: {how}]")
    return lines
