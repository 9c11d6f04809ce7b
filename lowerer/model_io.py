"""Loading and saving models: clear errors for bad input, external data kept external, atomic writes."""

from __future__ import annotations

import contextlib
import filecmp
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from lowerer.errors import InputError

__all__ = [
    "external_data_locations",
    "iter_tensors",
    "load_model",
    "read_model",
    "write_single_data_file",
    "save_model",
    "write_text_atomic",
]


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX model without loading its external data.

    Raises:
        InputError: the path is missing, a directory, empty, unreadable, not an ONNX model,
            or references external data outside its directory or missing.
    """
    return read_model(path)[0]


def read_model(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, bytes]:
    """Like :func:`load_model`, also returning the bytes the model was parsed from.

    Raises:
        InputError: as :func:`load_model`.
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file; give the path of an .onnx model")
    if p.is_dir():
        raise InputError(f"{p}: is a directory, not an .onnx model file")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InputError(f"{p}: cannot read it ({e.strerror})") from None
    if not data:
        raise InputError(f"{p}: the file is empty, not an ONNX model")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise InputError(
            f"{p}: not an ONNX model (the protobuf does not parse; truncated or another format?)"
        ) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputError(f"{p}: parses as protobuf but is not an ONNX model (no IR version or no graph)")
    check_external_data(model, p.parent.resolve(), source=str(p), serialized=data)
    _check_model(model, p, data)
    return model, data


def _check_model(model: onnx.ModelProto, p: Path, data: bytes) -> None:
    """Refuse a model that fails onnx's checker (by path when it has external data, to find the files)."""
    try:
        onnx.checker.check_model(str(p) if external_data_locations(model, data) else data)
    except Exception as e:  # ValidationError, or the checker's other C++ errors
        text = " ".join(str(e).split())
        raise InputError(f"{p}: not a valid ONNX model: onnx's checker says: {text}") from None


def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers and tensor attributes, in all graphs and functions."""

    def from_graph(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield sparse.values
            yield sparse.indices
        yield from from_nodes(graph.node)

    def from_nodes(nodes: object) -> Iterator[onnx.TensorProto]:
        for node in nodes:  # type: ignore[attr-defined]
            for attr in node.attribute:
                if attr.HasField("t"):
                    yield attr.t
                yield from attr.tensors
                if attr.HasField("g"):
                    yield from from_graph(attr.g)
                for g in attr.graphs:
                    yield from from_graph(g)

    yield from from_graph(model.graph)
    for function in model.functions:
        yield from from_nodes(function.node)


def external_data_locations(model: onnx.ModelProto, serialized: bytes | None = None) -> list[str]:
    """The distinct external-data file locations the model references, in first-seen order.

    ``serialized`` (the model's bytes, when at hand) lets the walk over every tensor be skipped
    when no ``location`` key can exist: protobuf stores the key verbatim.
    """
    if serialized is not None and b"location" not in serialized:
        return []
    seen: dict[str, None] = {}
    for tensor in iter_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    seen.setdefault(entry.value, None)
    return list(seen)


def check_external_data(model: onnx.ModelProto, base_dir: Path, source: str,
                        serialized: bytes | None = None) -> None:
    """Refuse external-data locations that escape ``base_dir`` or do not exist.

    ``serialized``: the model's bytes, when at hand (see :func:`external_data_locations`).
    """
    for location in external_data_locations(model, serialized):
        resolved = _resolve_inside(location, base_dir)
        if resolved is None:
            raise InputError(
                f"{source}: external data location {location!r} escapes the model's directory; "
                "lowerer reads and writes only files beside the model"
            )
        if not resolved.is_file():
            raise InputError(f"{source}: external data file {location!r} is missing next to the model")


def _resolve_inside(location: str, base_dir: Path) -> Path | None:
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        return None
    parts = Path(location.replace("\\", "/")).parts
    if ".." in parts:
        return None
    resolved = (base_dir / location).resolve()
    if base_dir != resolved and base_dir not in resolved.parents:
        return None  # a symbolic link pointing outside
    return resolved


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    *,
    source_dir: str | os.PathLike[str] | None = None,
    external_data: str | None = None,
) -> None:
    """Write ``model`` to ``path`` atomically (temporary file in the same directory, then rename).

    With ``external_data`` (a file name relative to the output's directory), every weight is
    written into that one file instead (see :func:`write_single_data_file`): tensors already
    external are copied there range by range in the kernel, inline ones of 1 KiB or more moved
    there; the input's data files are then not needed beside the output.

    External data files the model references (relative to ``source_dir``) are made available
    beside the output under the same relative locations: nothing to do when the output sits
    beside the input, else a copy (``copy_file_range``: in-kernel, a reflink on file systems
    that have them; never a hard link, which ``onnx.load`` refuses as a "hardlink attack"). An
    existing different file of the same name is never overwritten, and no destination may lead
    out of the output directory (through a symbolic link). Every destination is checked before
    anything is written.

    Raises:
        InputError: the output directory is missing or not writable, or a data file would clash.
    """
    out = Path(path)
    out_dir = out.parent if str(out.parent) else Path(".")
    if not out_dir.is_dir():
        raise InputError(f"{out}: the output directory {out_dir} does not exist; create it first")
    if out.is_dir():
        raise InputError(f"{out}: is a directory; give an output file path")
    if not os.access(out_dir, os.W_OK):
        raise InputError(f"{out}: the output directory {out_dir} is not writable")
    # The serialization, made once: it is written, and (no "location" in it) spares a walk over every tensor.
    payload = model.SerializeToString() if external_data is None else None
    locations = external_data_locations(model, payload)
    # The model file must not land on a data file it references (or is about to reference).
    out_resolved = out.resolve()
    for location in [*locations, *([external_data] if external_data else [])]:
        if _resolve_inside(location, out_dir.resolve()) == out_resolved:
            raise InputError(f"{out}: is the model's external data file {location!r}; writing the model there "
                             "would destroy the weights. Choose another output name")
    if external_data is not None:
        model = write_single_data_file(model, out_dir, external_data, source_dir)
        _atomic_write(out, model.SerializeToString())
        return
    data_pairs: list[tuple[Path, Path]] = []
    assert payload is not None
    if source_dir is not None:
        src_dir = Path(source_dir).resolve()
        if src_dir != out_dir.resolve():
            for location in locations:
                src = _resolve_inside(location, src_dir)
                if src is None or not src.is_file():
                    raise InputError(f"external data file {location!r} is missing next to the input model")
                if _resolve_inside(location, out_dir.resolve()) is None:
                    raise InputError(
                        f"external data location {location!r} escapes the output directory {out_dir} "
                        "(a symbolic link there leads out); lowerer writes only files beside the output")
                data_pairs.append((src, out_dir / location))
    pending = [(src, dst) for src, dst in data_pairs if not _same_data_present(src, dst)]
    for src, dst in pending:
        _place_data_file(src, dst)
    _atomic_write(out, payload)


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
    under a temporary name and renamed into place; an existing different file of that name is
    never overwritten. ``model`` is not modified.

    Raises:
        InputError: ``location`` is not a plain relative name inside ``out_dir``, a source data
            file is missing or escapes ``source_dir``, or a different file is in the way.
    """
    out_root = Path(out_dir).resolve()
    dst = _resolve_inside(location, out_root)
    if dst is None or dst == out_root:
        raise InputError(f"external data file {location!r}: give a file name relative to the output's "
                         "directory that stays inside it (no '..', no absolute path, no link leading out)")
    if dst.is_dir():
        raise InputError(f"external data file {location!r}: is a directory beside the output")
    result = onnx.ModelProto()
    result.CopyFrom(model)
    src_root = Path(source_dir).resolve() if source_dir is not None else None
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dst.name}.", suffix=".lowerer-tmp", dir=dst.parent)
    sources: dict[Path, int] = {}
    placed: dict[tuple[Path, int, int], int] = {}
    wrote = False
    try:
        with os.fdopen(fd, "wb") as out:
            end = 0
            for tensor in iter_tensors(result):
                if tensor.data_location == onnx.TensorProto.EXTERNAL:
                    info = {e.key: e.value for e in tensor.external_data}
                    src = _resolve_inside(info.get("location", ""), src_root) if src_root is not None else None
                    if src is None or not src.is_file():
                        raise InputError(f"tensor {tensor.name!r}: its external data file "
                                         f"{info.get('location', '')!r} is missing or outside the input's directory")
                    if src not in sources:
                        sources[src] = os.open(src, os.O_RDONLY)
                    start = int(info.get("offset", "0"))
                    length = int(info["length"]) if "length" in info else os.fstat(sources[src]).st_size - start
                    key = (src, start, length)
                    if key not in placed:
                        placed[key] = end = _align(end)
                        _copy_range(sources[src], out.fileno(), start, end, length)
                        end += length
                    offset = placed[key]
                elif tensor.HasField("raw_data") and len(tensor.raw_data) >= DATA_THRESHOLD:
                    length = len(tensor.raw_data)
                    offset = end = _align(end)
                    os.pwrite(out.fileno(), tensor.raw_data, offset)
                    end += length
                    tensor.ClearField("raw_data")
                    tensor.data_location = onnx.TensorProto.EXTERNAL
                else:
                    continue
                wrote = True
                del tensor.external_data[:]
                for key_name, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
                    entry = tensor.external_data.add()
                    entry.key, entry.value = key_name, value
            out.truncate(end)
        if not wrote:
            os.unlink(tmp_name)
            return result
        if dst.exists() and not filecmp.cmp(tmp_name, dst, shallow=False):
            raise InputError(
                f"{dst}: a different file of that name already exists where the output's external data must "
                "go; choose another --external-data name or output directory")
        os.replace(tmp_name, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    finally:
        for src_fd in sources.values():
            os.close(src_fd)
    return result


def _align(offset: int) -> int:
    return -(-offset // DATA_ALIGNMENT) * DATA_ALIGNMENT


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
                             "bytes)")
        os.pwrite(dst_fd, chunk, dst_offset + done)
        done += len(chunk)


def _same_data_present(src: Path, dst: Path) -> bool:
    """True when ``dst`` already holds ``src``'s bytes; raises when a different file is there."""
    if not dst.exists():
        if dst.is_symlink():
            raise InputError(f"{dst}: a dangling symbolic link is where the output's external data must go; "
                             "remove it or choose another output directory")
        return False
    if os.path.samefile(src, dst) or filecmp.cmp(src, dst, shallow=False):
        return True
    raise InputError(
        f"{dst}: a different file of that name already exists where the output's external data must go; "
        "move it or choose another output directory"
    )


def _place_data_file(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.lowerer-tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        _copy_file(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _copy_file(src: Path, dst: Path) -> None:
    """Copy without passing the bytes through Python (``copy_file_range`` where there is one)."""
    src_fd = os.open(src, os.O_RDONLY)
    try:
        dst_fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            _copy_range(src_fd, dst_fd, 0, 0, os.fstat(src_fd).st_size)
        finally:
            os.close(dst_fd)
    finally:
        os.close(src_fd)


def _atomic_write(out: Path, payload: bytes) -> None:
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".lowerer-tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        if out.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp_name, out.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp_name, 0o666 & ~umask)
        os.replace(tmp_name, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write a text file atomically (for reports).

    Raises:
        InputError: the directory is missing or not writable.
    """
    out = Path(path)
    out_dir = out.parent if str(out.parent) else Path(".")
    if not out_dir.is_dir():
        raise InputError(f"{out}: the directory {out_dir} does not exist; create it first")
    if not os.access(out_dir, os.W_OK):
        raise InputError(f"{out}: the directory {out_dir} is not writable")
    _atomic_write(out, text.encode())
