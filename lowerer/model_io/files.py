"""Creating files safely: unique temporaries, all-or-nothing commits, undo on failure or signal.

Everything lowerer puts on disk goes through a :class:`Transaction`:

* each output is first written to a temporary file with a unique name (``.lowerer-<random>.tmp``)
  in its destination's directory;
* directories it has to create are recorded;
* :meth:`Transaction.commit` renames the temporaries into place, all of them, with signals held
  back meanwhile (see :func:`holding_signals`), so that either every output is in place or,
  after a failure, none that this run created;
* leaving the ``with`` block without a commit (an exception) removes every temporary and every
  directory it created; :func:`undo_all` does the same for every open transaction (the command
  line's signal handler calls it, see :mod:`lowerer.core.interrupts`).

Every path is recorded *before* it is created, so an interruption at any moment leaves nothing
unrecorded; removing a path that was not created yet is a no-op.
"""

from __future__ import annotations

import contextlib
import filecmp
import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

from lowerer.core.errors import InputError

__all__ = ["Transaction", "committed", "defer_signal", "holding_signals", "undo_all"]

#: Transactions open now (innermost last).
_OPEN: list[Transaction] = []
#: Outputs committed so far in this process (for the interrupt message).
_COMMITTED: list[str] = []
_held = 0
_pending: int | None = None

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


class Transaction:
    """A set of files written together: all are renamed into place by :meth:`commit`, or none stays.

    Example::

        with Transaction() as tx:
            fd, tmp = tx.temp_file(out.parent)
            ...  # write fd
            tx.stage(tmp, out, replace=True)
            tx.commit()
    """

    def __init__(self) -> None:
        #: ("file" | "dir", path) of everything created and not yet committed, in creation order.
        self._created: list[tuple[str, Path]] = []
        #: (temporary, destination, may replace an existing file) to rename at commit, in order.
        self._staged: list[tuple[Path, Path, bool]] = []
        self.committed = False

    def __enter__(self) -> Transaction:
        _OPEN.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if not self.committed:
                self.rollback()
        finally:
            with contextlib.suppress(ValueError):
                _OPEN.remove(self)

    def temp_file(self, directory: Path, mode_like: Path | None = None) -> tuple[int, Path]:
        """Create a new empty file with a unique name in ``directory``; return its descriptor and path.

        Its permissions are those of ``mode_like`` when that exists (the file it will replace),
        else what the umask gives a new file.
        """
        while True:
            path = directory / f".lowerer-{secrets.token_hex(8)}.tmp"
            self._created.append(("file", path))
            try:
                fd = os.open(path, _CREATE, 0o600)
            except FileExistsError:
                self._created.pop()
                continue
            except OSError as e:
                self._created.pop()
                raise InputError(f"{directory}: cannot create a file there ({e.strerror})") from None
            break
        try:
            mode = os.stat(mode_like).st_mode & 0o7777 if mode_like is not None else None
        except OSError:
            mode = None
        if mode is None:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        with contextlib.suppress(OSError):
            os.fchmod(fd, mode) if hasattr(os, "fchmod") else os.chmod(path, mode)
        return fd, path

    def make_dirs(self, directory: Path) -> None:
        """Create ``directory`` and its missing parents, recording each one created."""
        missing: list[Path] = []
        p = directory
        while not os.path.lexists(p):
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
        for d in reversed(missing):
            self._created.append(("dir", d))
            try:
                os.mkdir(d)
            except FileExistsError:
                self._created.pop()
            except OSError as e:
                self._created.pop()
                raise InputError(f"{d}: cannot create the directory ({e.strerror})") from None

    def stage(self, temporary: Path, destination: Path, *, replace: bool) -> None:
        """Rename ``temporary`` to ``destination`` at :meth:`commit`.

        With ``replace=False`` an existing destination is never replaced: when it holds the same
        bytes it is kept (the temporary is dropped), else :meth:`commit` fails.
        """
        self._staged.append((temporary, destination, replace))

    def discard(self, temporary: Path) -> None:
        """Remove a temporary that turned out not to be needed."""
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        with contextlib.suppress(ValueError):
            self._created.remove(("file", temporary))

    def commit(self) -> None:
        """Rename every staged temporary into place, with signals held back until all are done.

        Raises:
            InputError: a destination that must not be replaced holds different bytes, or a rename
                failed; every output this transaction created is then removed again.
        """
        with holding_signals():
            placed: list[str] = []
            try:
                for tmp, dst, replace in self._staged:
                    self._place(tmp, dst, replace)
                    placed.append(str(dst))
            except BaseException:
                self.rollback()
                raise
            self._created.clear()
            self._staged.clear()
            self.committed = True
            _COMMITTED.extend(placed)

    def _place(self, tmp: Path, dst: Path, replace: bool) -> None:
        try:
            if replace:
                if not os.path.lexists(dst):
                    self._created.append(("file", dst))
                os.replace(tmp, dst)
                return
            if not os.path.lexists(dst):
                self._created.append(("file", dst))
                try:
                    os.link(tmp, dst)  # fails when dst exists: never replaces a file that appeared meanwhile
                except FileExistsError:
                    self._created.pop()
                except OSError:  # no hard links on this file system: a rename
                    os.rename(tmp, dst)
                    return
                else:
                    os.unlink(tmp)
                    return
            if not filecmp.cmp(tmp, dst, shallow=False):
                raise InputError(f"{dst}: a different file of that name already exists; lowerer never replaces "
                                 "it: move it or choose another output directory or name")
            os.unlink(tmp)  # the same bytes are there already: keep them
        except OSError as e:
            raise InputError(f"{dst}: cannot put the output there ({e.strerror})") from None

    def rollback(self) -> None:
        """Remove every temporary, every file and every directory this transaction created (newest first)."""
        while self._created:
            kind, path = self._created[-1]
            with contextlib.suppress(OSError):
                if kind == "dir":
                    os.rmdir(path)
                else:
                    os.unlink(path)
            self._created.pop()
        self._staged.clear()


def undo_all() -> None:
    """Roll back every open transaction (for a signal handler: then the process exits)."""
    for tx in reversed(list(_OPEN)):
        tx.rollback()


def committed() -> list[str]:
    """The outputs committed so far by this process."""
    return list(_COMMITTED)


@contextlib.contextmanager
def holding_signals() -> Iterator[None]:
    """Hold back the command line's signals meanwhile; one that came is raised again at the end.

    Only the handler of :mod:`lowerer.core.interrupts` looks at this (through :func:`defer_signal`):
    without it (library use) signals behave as usual.
    """
    global _held, _pending
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if _held == 0 and _pending is not None:
            signum, _pending = _pending, None
            signal.raise_signal(signum)


def defer_signal(signum: int) -> bool:
    """For a signal handler: True when signals are held back now (``signum`` is then raised later)."""
    global _pending
    if _held:
        _pending = signum
        return True
    return False
