"""Path checks: what lowerer may read and write, decided before anything is opened.

* Inputs are regular files (never a FIFO, a device, a socket or a directory: those are refused
  from ``os.stat`` alone, before any ``open``).
* Outputs are regular files or absent, in an existing writable directory.
* A location a model names (external data) stays inside its folder: relative, no ``..``, no
  symbolic link on the way (onnx refuses to load data through one, and one could lead out).
* Every unusable name (too long, a NUL, a part that is not a directory, no permission) is an
  :class:`~lowerer.core.errors.InputError` with one line, not an internal error.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from lowerer.core.errors import InputError

__all__ = [
    "check_output_path",
    "kind_of",
    "location_problem",
    "require_regular_file",
    "same_file",
    "stat_path",
]


def kind_of(mode: int) -> str | None:
    """None for a regular file, else what it is (``a directory``, ``a FIFO (named pipe)`` ...)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def stat_path(path: Path) -> os.stat_result | None:
    """``os.stat(path)`` (following links); None when nothing is there (or a link leads nowhere).

    Raises:
        InputError: the name cannot be used (too long, a NUL, a part not a directory, no access ...).
    """
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise InputError(f"{path}: a part of this path is not a directory") from None
    except ValueError:
        raise InputError(f"{path}: the path contains a NUL character") from None
    except OSError as e:
        raise InputError(f"{path}: cannot use this path ({e.strerror})") from None


def require_regular_file(path: Path, what: str) -> os.stat_result:
    """The ``os.stat`` of ``path``, which must be an existing regular file (checked without opening it).

    Raises:
        InputError: missing, or a directory, FIFO, device or socket, or an unusable name.
    """
    st = stat_path(path)
    if st is None:
        raise InputError(f"{path}: no such file; give the path of {what}")
    kind = kind_of(st.st_mode)
    if kind is not None:
        raise InputError(f"{path}: is {kind}, not {what}; lowerer reads only regular files")
    return st


def check_output_path(path: Path, what: str) -> os.stat_result | None:
    """Check that ``path`` can take an output: absent or a regular file, in an existing writable directory.

    Returns:
        The ``os.stat`` of the existing file there, or None.

    Raises:
        InputError: ``path`` is a directory, FIFO, device or socket, its directory is missing or
            not writable, or the name is unusable.
    """
    directory = path.parent if str(path.parent) else Path(".")
    st_dir = stat_path(directory)
    if st_dir is None:
        raise InputError(f"{path}: the output directory {directory} does not exist; create it first")
    if not stat.S_ISDIR(st_dir.st_mode):
        raise InputError(f"{path}: {directory} is not a directory")
    st = stat_path(path)
    if st is not None:
        kind = kind_of(st.st_mode)
        if kind is not None:
            if kind == "a directory":
                raise InputError(f"{path}: is a directory; give a file path for the {what}")
            raise InputError(f"{path}: is {kind}; lowerer writes the {what} only as a regular file (it would "
                             "replace the special file): give a file path")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{path}: the output directory {directory} is not writable")
    return st


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same file (same resolved path, or the same inode)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def location_problem(location: str, base_dir: Path | None, folder: str) -> str | None:
    """Why ``location`` (relative to ``base_dir``) may not be used, as words after the location; None if it may.

    ``folder`` names ``base_dir`` in the words (``the model's directory`` ...). A location may
    not be empty, absolute or drive-qualified, go up with ``..``, or pass through a symbolic
    link (one leading out escapes the folder; one inside is refused too: onnx will not load
    external data through a link). With ``base_dir`` None only the name is judged.
    """
    if not location:
        return f"is empty; it must name a file in {folder}"
    if "\0" in location:
        return "contains a NUL character"
    if os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        return f"escapes {folder} (an absolute path); lowerer reads and writes only files beside the model"
    if ".." in Path(location.replace("\\", "/")).parts:
        return f"escapes {folder} ('..'); lowerer reads and writes only files beside the model"
    if base_dir is None:
        return None
    here = base_dir
    for part in Path(location).parts:
        here = here / part
        if os.path.islink(here):
            target = here.resolve()
            if target != base_dir and base_dir not in target.parents:
                return (f"escapes {folder} (the symbolic link {str(here.relative_to(base_dir))!r} leads out); "
                        "lowerer reads and writes only files beside the model")
            return (f"passes through the symbolic link {str(here.relative_to(base_dir))!r} in {folder}; onnx "
                    "refuses to load external data through links: give the real path")
    return None
