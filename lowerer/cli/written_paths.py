"""The check of a path a ``lowerer`` command writes besides its output model (``--save-inputs``)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from lowerer.core.errors import InputError

__all__ = ["check_written_path"]


def check_written_path(path: Path, option: str, *, reads: Iterable[Path], writes: Iterable[Path]) -> None:
    """Refuse a path lowerer would write that is one it reads or another output, a directory, FIFO or device.

    Raises:
        InputError: as above, naming ``option``.
    """
    target = _identity(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise InputError(f"{option} {path}: is {kind}; give a file path")
    for other in reads:
        if _identity(other) == target:
            raise InputError(f"{option} {path}: is {other}, which lowerer reads; writing there would destroy it")
    for other in writes:
        if _identity(other) == target:
            raise InputError(f"{option} {path}: is also where {other} is written; give another path")


def _identity(path: Path) -> tuple[int, int] | Path:
    """The file's (device, inode) when it exists, else its resolved path."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return Path(os.path.abspath(path)).resolve()
