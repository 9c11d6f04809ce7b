"""The command line's answer to SIGINT, SIGTERM and SIGHUP: undo, one line, exit ``128 + signal``.

The handlers go in before anything heavy is imported: ``lowerer/__init__`` holds signals back from
its first line when the process may be the ``lowerer`` command and hands over to :func:`take_over`
(``python -m lowerer``, the console script; see :func:`started_as_command`); the entry point calls
:func:`install` too. On a signal the handler removes every temporary file, file and directory this
run created and has not committed (:func:`lowerer.model_io.files.undo_all`), prints one line
(``lowerer: error: interrupted by SIGINT; nothing was written``) and ends the process at once with
status 130 (SIGINT), 143 (SIGTERM) or 129 (SIGHUP): no traceback, whatever was running. While
outputs are being renamed into place (:func:`lowerer.model_io.files.holding_signals`, microseconds) the
signal waits until all of them are in place; the line then names them. Signals ignored when the
process started (``nohup``, background jobs) stay ignored. This module must be cheap to import:
it uses the builtin ``_signal`` module, not ``signal``, whose enums take milliseconds to build.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]
import os
import sys

__all__ = ["install", "started_as_command", "take_over"]

_NAMES = ("SIGINT", "SIGTERM", "SIGHUP")
#: The signal numbers this platform has, by name.
_SIGNALS = {name: getattr(_signal, name) for name in _NAMES if hasattr(_signal, name)}


def started_as_command() -> bool:
    """True while the ``lowerer`` command itself imports the package (so the handlers go in at once).

    That is ``python -m lowerer`` (runpy sets ``sys.argv[0]`` to ``-m`` while it imports the
    package) or the ``lowerer`` console script (the main module is the script ``sys.argv[0]``).
    """
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":
        argv = list(getattr(sys, "orig_argv", []))
        for i, arg in enumerate(argv):
            if arg == "-m":
                return argv[i + 1: i + 2] in (["lowerer"], ["lowerer.__main__"])
            if arg.startswith("-m"):
                return arg[2:] in ("lowerer", "lowerer.__main__")
        return False
    name = os.path.basename(argv0)
    for suffix in (".exe", "-script.pyw", "-script.py"):
        name = name.removesuffix(suffix)
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return name == "lowerer" and main_file is not None and os.path.abspath(main_file) == os.path.abspath(argv0)


def install() -> None:
    """Handle SIGINT, SIGTERM and SIGHUP as described above (idempotent)."""
    for signum in _SIGNALS.values():
        current = _signal.getsignal(signum)
        if current is _signal.SIG_IGN or current is _handle:
            continue
        _signal.signal(signum, _handle)


def take_over(before: dict[int, object], held: list[int]) -> None:
    """From ``lowerer/__init__``, which held signals back while this module was imported.

    For the ``lowerer`` command (see :func:`started_as_command`) the handlers go in and a signal
    that came meanwhile is handled; in any other process the handlers that were there before are
    put back and such a signal is raised again, for them.
    """
    command = started_as_command()
    for signum, handler in before.items():
        if command and handler is not _signal.SIG_IGN:
            _signal.signal(signum, _handle)
        else:
            _signal.signal(signum, handler)
    if command:
        install()
    for signum in held:
        if before.get(signum) is _signal.SIG_IGN:
            continue  # ignored before lowerer's first line: stays ignored
        if command:
            _handle(signum, None)
        else:
            _signal.raise_signal(signum)


def _handle(signum: int, frame: object) -> None:
    # Any module may be half imported here (the signal can come during an import): look names up
    # defensively, and whatever happens, end the process.
    files = sys.modules.get("lowerer.model_io.files")
    try:
        if files is not None and files.defer_signal(signum):
            return
    except Exception:  # lowerer.model_io.files half imported: nothing of it is in use yet
        files = None
    try:
        for other in _SIGNALS.values():
            _signal.signal(other, _signal.SIG_IGN)
        note = "nothing was written"
        if files is not None:
            files.undo_all()
            done = files.committed()
            if done:
                note = f"after writing {', '.join(done)} (complete)"
        name = next((n for n, number in _SIGNALS.items() if number == signum), f"signal {signum}")
        line = f"lowerer: error: interrupted by {name}; {note}"
        try:
            from lowerer.core.errors import one_line

            line = one_line(line)
        except Exception:  # lowerer.core.errors half imported: the line holds no path yet, only ASCII words
            pass
        try:  # noqa: SIM105 (contextlib may not be imported yet)
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass
        try:  # noqa: SIM105
            os.write(2, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
    finally:
        os._exit(128 + signum)
