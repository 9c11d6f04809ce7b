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
    "save_model",
    "write_text_atomic",
]


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX model without loading its external data.

    Raises:
        InputError: the path is missing, a directory, empty, unreadable, not an ONNX model,
            or references external data outside its directory or missing.
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
    check_external_data(model, p.parent.resolve(), source=str(p))
    return model


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


def external_data_locations(model: onnx.ModelProto) -> list[str]:
    """The distinct external-data file locations the model references, in first-seen order."""
    seen: dict[str, None] = {}
    for tensor in iter_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location":
                    seen.setdefault(entry.value, None)
    return list(seen)


def check_external_data(model: onnx.ModelProto, base_dir: Path, source: str) -> None:
    """Refuse external-data locations that escape ``base_dir`` or do not exist."""
    for location in external_data_locations(model):
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
) -> None:
    """Write ``model`` to ``path`` atomically (temporary file in the same directory, then rename).

    External data files the model references (relative to ``source_dir``) are made available
    beside the output: nothing to do when the output sits beside the input, else a hard link,
    else a copy. An existing different file of the same name is never overwritten.

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
    data_pairs: list[tuple[Path, Path]] = []
    if source_dir is not None:
        src_dir = Path(source_dir).resolve()
        if src_dir != out_dir.resolve():
            for location in external_data_locations(model):
                src = _resolve_inside(location, src_dir)
                if src is None or not src.is_file():
                    raise InputError(f"external data file {location!r} is missing next to the input model")
                data_pairs.append((src, out_dir / location))
    payload = model.SerializeToString()
    for src, dst in data_pairs:
        _place_data_file(src, dst)
    _atomic_write(out, payload)


def _place_data_file(src: Path, dst: Path) -> None:
    if dst.exists():
        if os.path.samefile(src, dst) or filecmp.cmp(src, dst, shallow=False):
            return
        raise InputError(
            f"{dst}: a different file of that name already exists where the output's external data must go; "
            "move it or choose another output directory"
        )
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.lowerer-tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        import shutil

        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


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
