"""Progress of long phases: what lowerer's phases report, and the callback type that receives it.

The library never writes to the terminal. A phase (the scan, per-rewrite verification, a
whole-model run, writing) calls a :data:`ProgressCallback` with a :class:`Progress`; the CLI
draws it on a terminal, an application may log it or ignore it.

Example::

    def show(p: lowerer.core.progress.Progress) -> None:
        print(p.describe())

    lowerer.convert("model.onnx", target_opset=13, progress=show)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["PHASES", "Progress", "ProgressCallback", "notify"]

#: The phases lowerer reports, in the order they run.
PHASES = ("scan", "verify", "model-check", "optimize", "write")


@dataclass(frozen=True)
class Progress:
    """Where one phase stands.

    Attributes:
        phase: one of :data:`PHASES` (``scan``, ``verify``, ``model-check``, ``optimize``, ``write``).
        done: units of work finished so far.
        total: units in all, when known (None: unknown yet).
        unit: what a unit is (``nodes``, ``rewrites``, ``runs``, ``bytes``).
        detail: anything else worth showing (``7 distinct checks``).
    """

    phase: str
    done: int
    total: int | None = None
    unit: str = ""
    detail: str = ""

    @property
    def finished(self) -> bool:
        """True when ``done`` reached a known ``total``."""
        return self.total is not None and self.done >= self.total

    def describe(self) -> str:
        """One short line: ``verify: 120/300 rewrites (40%), 7 distinct checks``."""
        unit = f" {self.unit}" if self.unit else ""
        if self.total is None:
            text = f"{self.phase}: {self.done}{unit}"
        else:
            share = 100 * self.done // self.total if self.total else 100
            text = f"{self.phase}: {self.done}/{self.total}{unit} ({share}%)"
        return f"{text}, {self.detail}" if self.detail else text


#: Receives :class:`Progress` updates; must return quickly (it is called often).
ProgressCallback = Callable[[Progress], None]


def notify(callback: ProgressCallback | None, phase: str, done: int, total: int | None = None, unit: str = "",
           detail: str = "") -> None:
    """Call ``callback`` (when there is one) with a :class:`Progress`."""
    if callback is not None:
        callback(Progress(phase, done, total, unit, detail))
