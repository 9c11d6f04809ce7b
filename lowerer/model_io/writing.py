"""Writing bytes into a transaction: a file's bytes, and the one data file every weight can go to.

:func:`write_single_data_file` (``--external-data``): every weight into one file, copied range by
range in the kernel (``copy_file_range``) or moved from inline, each at an aligned offset
(:data:`DATA_ALIGNMENT`). Everything is staged in a :class:`lowerer.model_io.files.Transaction`: unique
temporaries, committed all together, nothing left behind on a failure or a signal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from lowerer.core.errors import InputError
from lowerer.model_io.external_data import _nbytes, _reference, check_external_data, iter_tensors
from lowerer.model_io.files import Transaction
from lowerer.model_io.paths import kind_of, location_problem, stat_path
from lowerer.model_io.reading import _light_copy

__all__ = ["DATA_ALIGNMENT", "DATA_THRESHOLD", "write_single_data_file"]

def _check_new_file_path(path: Path, what: str) -> bool:
    """Check a path lowerer may create (with missing folders); True when a regular file is there already."""
    st = stat_path(path)
    if st is None and os.path.lexists(path):
        raise InputError(f"{path}: a dangling symbolic link is where {what} must go; remove it or choose another "
                         "output directory")
    if st is not None:
        kind = kind_of(st.st_mode)
        if kind is not None:
            raise InputError(f"{path}: {what} would go there, but it is {kind}")
    ancestor = path.parent
    while stat_path(ancestor) is None:
        ancestor = ancestor.parent
    if not os.path.isdir(ancestor):
        raise InputError(f"{path}: {ancestor} is not a directory, so {what} cannot go there")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise InputError(f"{path}: {ancestor} is not writable, so {what} cannot go there")
    return st is not None


def _stage_bytes(tx: Transaction, path: Path, payload: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tx.temp_file(directory, mode_like=path)
    try:
        _write_all(fd, payload, 0)
    finally:
        os.close(fd)
    tx.stage(tmp, path, replace=True)


#: Offsets in a data file lowerer writes are aligned to this (what memory-mapping loaders like).
DATA_ALIGNMENT = 4096
#: Inline tensors at least this large (bytes of ``raw_data``) move to the data file.
DATA_THRESHOLD = 1024


def write_single_data_file(model: onnx.ModelProto, out_dir: str | os.PathLike[str], location: str,
                           source_dir: str | os.PathLike[str] | None) -> onnx.ModelProto:
    """Write every weight of ``model`` into ``out_dir/location``; return a copy that points there.

    Tensors already external are copied from their files (relative to ``source_dir``) with
    ``copy_file_range``, never through Python's memory; inline tensors whose ``raw_data`` has
    :data:`DATA_THRESHOLD` bytes or more are moved. Each lands at an offset aligned to
    :data:`DATA_ALIGNMENT`; identical source ranges are stored once. The file is written
    under a temporary name and put into place (an existing different file of that name is
    never overwritten). ``model`` is not modified.

    Raises:
        InputError: ``location`` is not a plain relative name inside ``out_dir``, a source data
            reference is bad (see :func:`check_external_data`), or a different file is in the way.
    """
    out_root = Path(out_dir).resolve()
    problem = location_problem(location, out_root, "the output's directory")
    if problem is not None or Path(location).name in ("", ".", ".."):
        raise InputError(f"external data file {location!r}: give a file name relative to the output's "
                         "directory that stays inside it (no '..', no absolute path, no link leading out)")
    _check_new_file_path(out_root / location, f"external data file {location!r}")
    with Transaction() as tx:
        result = _stage_single_data_file(tx, model, out_root, location,
                                         Path(source_dir).resolve() if source_dir is not None else None)
        tx.commit()
    return result


def _stage_single_data_file(tx: Transaction, model: onnx.ModelProto, out_root: Path, location: str,
                            src_root: Path | None) -> onnx.ModelProto:
    """Write the single data file under a temporary name and stage it; return the repointed copy of ``model``."""
    files = check_external_data(model, src_root, source="the model") if src_root is not None else {}
    dst = out_root / location
    # The copy leaves the large inline weights out (placeholders): they are written from the caller's
    # tensors straight to the data file, so a model that only just fits in memory is never held twice.
    result, held = _light_copy(model)
    tx.make_dirs(dst.parent)
    fd, tmp = tx.temp_file(dst.parent)
    data = _DataFile(fd, files)
    wrote = False
    try:
        for tensor in iter_tensors(result):
            placed = _place(data, tensor, held.tensors)
            if placed is None:
                continue
            wrote = True
            del tensor.external_data[:]
            for key_name, value in (("location", location), ("offset", str(placed[0])), ("length", str(placed[1]))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key_name, value
        os.ftruncate(fd, data.end)
    finally:
        os.close(fd)
        data.close_sources()
    if wrote:
        tx.stage(tmp, dst, replace=False)
    else:
        tx.discard(tmp)
    return result


def _place(data: _DataFile, tensor: onnx.TensorProto, held: dict[str, onnx.TensorProto]
           ) -> tuple[int, int] | None:
    """Put ``tensor``'s bytes into ``data`` (a held-back weight's, an external range, a large inline one).

    Returns their (offset, length) there, or None for a tensor that stays as it is (small, inline).
    """
    weight = held.get(_location(tensor)) if held else None
    if weight is not None:
        return data.append(weight.raw_data)
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return data.copy(tensor)
    if tensor.HasField("raw_data") and len(tensor.raw_data) >= DATA_THRESHOLD:
        placed = data.append(tensor.raw_data)
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        return placed
    return None


@dataclass
class _DataFile:
    """The single data file being written: its descriptor, its end, the source data files open for copying.

    Attributes:
        fd: the data file's descriptor.
        files: the model's data locations and the files they resolve to.
        end: where the bytes written so far end.
        sources: each source file read, and its descriptor.
        placed: each source range copied (file, offset, length), and where it landed (copied once).
    """

    fd: int
    files: dict[str, Path]
    end: int = 0
    sources: dict[Path, int] = field(default_factory=dict)
    placed: dict[tuple[Path, int, int], int] = field(default_factory=dict)

    def append(self, raw: bytes) -> tuple[int, int]:
        """Write ``raw`` at the next aligned offset; return (offset, length)."""
        offset = self.end = _align(self.end)
        _write_all(self.fd, raw, offset)
        self.end += len(raw)
        return offset, len(raw)

    def copy(self, tensor: onnx.TensorProto) -> tuple[int, int]:
        """Copy an external tensor's range from its file (each distinct range once); return (offset, length)."""
        ref = _reference(tensor, "the model")
        src = self.files.get(ref.location)
        if src is None:
            raise InputError(f"tensor {tensor.name!r}: its external data file {ref.location!r} is missing or "
                             "outside the input's directory")
        if src not in self.sources:
            self.sources[src] = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
        expected = _nbytes(tensor)
        length = ref.length if ref.length is not None else (
            expected if expected is not None else os.fstat(self.sources[src]).st_size - ref.offset)
        key = (src, ref.offset, length)
        if key not in self.placed:
            self.placed[key] = self.end = _align(self.end)
            _copy_range(self.sources[src], self.fd, ref.offset, self.end, length)
            self.end += length
        return self.placed[key], length

    def close_sources(self) -> None:
        """Close the source files opened for copying."""
        for src_fd in self.sources.values():
            os.close(src_fd)


def _location(tensor: onnx.TensorProto) -> str:
    """An external tensor's location ("" for an inline one)."""
    if tensor.data_location != onnx.TensorProto.EXTERNAL:
        return ""
    return next((e.value for e in tensor.external_data if e.key == "location"), "")


def _align(offset: int) -> int:
    return -(-offset // DATA_ALIGNMENT) * DATA_ALIGNMENT


def _write_all(fd: int, data: bytes, offset: int) -> None:
    """``pwrite`` all of ``data`` at ``offset`` (one call writes at most about 2 GiB on Linux)."""
    view = memoryview(data)
    done = 0
    while done < len(view):
        done += os.pwrite(fd, view[done: done + (1 << 30)], offset + done)


def _copy_range(src_fd: int, dst_fd: int, src_offset: int, dst_offset: int, length: int) -> None:
    """Copy ``length`` bytes between file offsets in the kernel (``copy_file_range``), else in chunks."""
    copy_range = getattr(os, "copy_file_range", None)
    done = 0
    if copy_range is not None:
        try:
            while done < length:
                n = copy_range(src_fd, dst_fd, min(length - done, 128 << 20), src_offset + done, dst_offset + done)
                if n == 0:
                    break
                done += n
        except OSError:
            pass  # not supported here: finish with plain reads and writes
    while done < length:
        chunk = os.pread(src_fd, min(length - done, 8 << 20), src_offset + done)
        if not chunk:
            raise InputError(f"an external data file is shorter than its tensors say (missing {length - done} "
                             "bytes); was it changed during the conversion?")
        _write_all(dst_fd, chunk, dst_offset + done)
        done += len(chunk)


def _copy_file(src: Path, dst_fd: int) -> None:
    """Copy ``src`` into the open ``dst_fd`` without passing the bytes through Python where possible."""
    src_fd = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    try:
        st = os.fstat(src_fd)
        if kind_of(st.st_mode) is not None:
            raise InputError(f"{src}: is {kind_of(st.st_mode)}, not a regular file")
        _copy_range(src_fd, dst_fd, 0, 0, st.st_size)
    finally:
        os.close(src_fd)
