"""The kernels of the installed onnxruntime, per provider: from the shipped table of its release, else a child.

``onnxruntime.capi._pybind_state.get_all_opkernel_def()`` creates every provider compiled into
the installed build; with onnxruntime-gpu and a missing library (TensorRT's ``libnvinfer``, CUDA's
``libcublasLt``) it kills the process with SIGSEGV. lowerer never calls it in its own process:

1. the installed release's table shipped with lowerer (``lowerer/backends/kernels/``, read from
   onnxruntime's ``docs/OperatorKernels.md`` at the release's tag; see
   :mod:`lowerer.backends.kernel_tables`) when there is one;
2. else a child process reads ``get_all_opkernel_def()`` and prints the rows;
3. a child that dies (a signal) or fails: the newest shipped table older than the release, named
   in one warning line.

Each answer is read once per process.
"""

from __future__ import annotations

import functools
import json
import logging
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path
from dataclasses import dataclass

__all__ = ["CACHE_ENV", "KernelRows", "installed_kernels", "installed_release"]

logger = logging.getLogger(__name__)

#: Per op (default domain), the kernels of one provider: (low, high or None, type constraints).
Rows = dict[str, list[tuple[int, int | None, Mapping[str, frozenset[str]]]]]

_CHILD = r"""
import json, sys
from onnxruntime.capi import _pybind_state as p
out = {}
for k in p.get_all_opkernel_def():
    if k.domain in ("", "ai.onnx"):
        low, high = k.version_range
        out.setdefault(k.provider, []).append(
            [k.op_name, int(low), int(high), {n: list(t) for n, t in k.type_constraints.items()}])
print(json.dumps(out))
"""
#: onnxruntime's "no upper bound" in a kernel's version range.
_OPEN = 2**31 - 1


@dataclass(frozen=True)
class KernelRows:
    """One provider's default-domain kernels in the installed onnxruntime, and where they were read."""

    provider: str
    rows: Rows
    source: str
    #: False when the rows are another release's (the installed one's could not be read).
    exact: bool = True
    #: The release whose table the rows are (``1.24.4``; empty when read from the installed one).
    source_release: str = ""


def installed_release() -> str:
    """The version of the onnxruntime that ``import onnxruntime`` loads (``1.32.0``), read without importing it.

    Package metadata cannot say: onnxruntime and onnxruntime-gpu install the same ``onnxruntime``
    folder, and the last one installed wins. Its ``__init__.py`` states ``__version__``.
    """
    import importlib.util
    import re

    spec = importlib.util.find_spec("onnxruntime")
    if spec is not None and spec.origin:
        try:
            with open(spec.origin, encoding="utf-8") as f:
                found = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", f.read(), re.MULTILINE)
            if found:
                return found[1]
        except OSError:
            pass
    from lowerer.verification.ort import load_onnxruntime

    return str(load_onnxruntime().__version__)


def _from_table(provider: str, release: str) -> KernelRows | None:
    """``release``'s shipped table of ``provider``, else the newest older one that lists the provider."""
    from lowerer.backends.kernel_tables import provider_table

    found = provider_table(release, provider)
    if found is None:
        return None
    table, exact = found
    rows: Rows = {}
    for op in sorted(table.ops(provider)):
        rows[op] = [(low, high, types) for low, high, types in table.ranges(provider, op)]
    return KernelRows(provider, rows, table.source, exact, table.version)


#: The folder the child's answer is kept in, when set (lowerer writes nothing to the user's home by itself).
CACHE_ENV = "LOWERER_CACHE_DIR"


def _cache_file() -> Path | None:
    """Where the child's answer for this onnxruntime is kept (None: no cache asked for, or no onnxruntime).

    Named after the onnxruntime build: its release and the name, size and time of each library in
    its ``capi`` folder (onnxruntime-gpu over onnxruntime, a reinstall: another file).
    """
    import hashlib
    import importlib.util
    import os
    from pathlib import Path

    spec = importlib.util.find_spec("onnxruntime")
    if spec is None or not spec.origin:
        return None
    capi = Path(spec.origin).parent / "capi"
    try:
        libs = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(capi)
                      if ".so" in e.name or e.name.endswith((".dll", ".dylib", ".pyd")))
    except OSError:
        return None
    key = hashlib.sha256(repr((spec.origin, libs)).encode()).hexdigest()[:16]
    root = os.environ.get(CACHE_ENV)
    if not root:  # nothing is written outside what the user names: no cache unless asked for
        return None
    return Path(root) / f"onnxruntime-{installed_release()}-kernels-{key}.json"


def _child_json(python: str | None) -> str:
    """The child's JSON answer; for this interpreter, read once per onnxruntime build and kept on disk."""
    import os

    cache = _cache_file() if python is None else None
    if cache is not None:
        try:
            return str(cache.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError):
            pass
    done = subprocess.run([python or sys.executable, "-c", _CHILD], capture_output=True, timeout=300, check=False)
    if done.returncode != 0:
        how = f"died by signal {-done.returncode}" if done.returncode < 0 else f"ended with exit {done.returncode}"
        raise _ChildError(f"reading its kernel table in a child process {how}")
    text = done.stdout.decode("utf-8", "replace").strip().splitlines()[-1] if done.stdout.strip() else ""
    if cache is not None and text.startswith("{"):
        try:  # best effort: a cache that cannot be written is read again next time
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}")
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, cache)
        except OSError:
            pass
    return text


class _ChildError(Exception):
    pass


@functools.lru_cache(maxsize=2)
def _child_rows(python: str | None = None) -> dict[str, Rows] | str:
    """Every provider's default-domain kernels, read once in a child process (or why they could not be)."""
    try:
        text = _child_json(python)
    except _ChildError as e:
        return str(e)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"reading its kernel table failed ({e})"
    try:
        raw = json.loads(text)
        assert isinstance(raw, dict)
    except (ValueError, AssertionError):
        return "reading its kernel table gave no answer"
    out: dict[str, Rows] = {}
    for provider, kernels in raw.items():
        rows = out.setdefault(str(provider), {})
        for op, low, high, types in kernels:
            constraints = {str(n): frozenset(str(t) for t in ts) for n, ts in types.items()}
            rows.setdefault(str(op), []).append((int(low), None if int(high) >= _OPEN else int(high), constraints))
    return out


def _from_child(provider: str, python: str | None = None) -> Rows | str:
    read = _child_rows(python)
    if isinstance(read, str):
        return read
    return read.get(provider) or f"its registry lists no {provider} kernel"


_WARNED: set[str] = set()


def _warn_once(key: str, text: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning("%s", text)


@functools.lru_cache(maxsize=8)
def installed_kernels(provider: str = "CPUExecutionProvider", python: str | None = None,
                      warn: bool = True) -> KernelRows | None:
    """``provider``'s default-domain kernels in the installed onnxruntime (see the module docstring).

    None when neither a table of the release (or an older one) nor the child gave them; that is a warning
    line unless ``warn`` is False (a caller that says so itself, as the placement statement does).
    """
    release = installed_release()
    shipped = _from_table(provider, release)
    if shipped is not None and shipped.exact:
        return shipped
    read = _from_child(provider, python)
    if not isinstance(read, str):
        return KernelRows(provider, read, f"onnxruntime {release}'s own registry (get_all_opkernel_def, read in a "
                                          "child process)")
    if shipped is not None:
        _warn_once(read, f"onnxruntime {release}: {read}; its kernels are taken from the newest table lowerer ships "
                         f"that is not newer (onnxruntime {shipped.source_release}'s docs/OperatorKernels.md)")
        return shipped
    if warn:
        _warn_once(read, f"onnxruntime {release}: {read}, and lowerer ships no table of it or an older release: "
                         "kernels are not looked up")
    return None
