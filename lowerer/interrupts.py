"""The command line's answer to SIGINT, SIGTERM and SIGHUP: undo, one line, exit ``128 + signal``.

:func:`install` is the first thing the ``lowerer`` command runs (before click, onnx or numpy are
imported; under ``python -m lowerer`` already while the package is imported). On a signal the
handler removes every temporary file, file and directory this run created and has not committed
(:func:`lowerer.files.undo_all`), prints one line (``lowerer: error: interrupted by SIGINT;
nothing was written``) and ends the process at once with status 130 (SIGINT), 143 (SIGTERM) or
129 (SIGHUP): no traceback, whatever was running. While outputs are being renamed into place
(:func:`lowerer.files.holding_signals`, microseconds) the signal waits until all of them are in
place; the line then names them. Signals that were ignored when the process started (``nohup``)
stay ignored. This module imports only the standard library: it must be cheap to import.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from types import FrameType

__all__ = ["install", "started_as_module"]

_NAMES = ("SIGINT", "SIGTERM", "SIGHUP")


def started_as_module() -> bool:
    """True while ``python -m lowerer`` imports the package (runpy sets ``sys.argv[0]`` to ``-m`` then)."""
    if sys.argv[:1] != ["-m"]:
        return False
    argv = list(getattr(sys, "orig_argv", []))
    for i, arg in enumerate(argv):
        if arg == "-m":
            return argv[i + 1: i + 2] in (["lowerer"], ["lowerer.__main__"])
        if arg.startswith("-m"):
            return arg[2:] in ("lowerer", "lowerer.__main__")
    return False


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP as described above (idempotent)."""
    for name in _NAMES:
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        current = signal.getsignal(signum)
        if current in (signal.SIG_IGN, _handle):
            continue
        signal.signal(signum, _handle)


def _handle(signum: int, frame: FrameType | None) -> None:
    files = sys.modules.get("lowerer.files")
    if files is not None and files.defer_signal(signum):
        return
    for name in _NAMES:
        other = getattr(signal, name, None)
        if other is not None:
            signal.signal(other, signal.SIG_IGN)
    note = "nothing was written"
    try:
        if files is not None:
            files.undo_all()
            done = files.committed()
            if done:
                note = f"after writing {', '.join(done)} (complete)"
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        from lowerer.errors import one_line

        line = one_line(f"lowerer: error: interrupted by {name}; {note}") + "\n"
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        with contextlib.suppress(OSError, ValueError):
            os.write(2, line.encode("utf-8", "replace"))
    finally:
        os._exit(128 + signum)

