"""Memory budget of whole-model runs: the bytes a model's tensors claim, against the memory there is.

A model's weights may live in external data files. What onnxruntime will hold is what the
tensors *claim* (each external tensor's ``length``, or the rest of its file), not the size of
the files: twelve tensors may each claim all of one file. The claims are checked against the
files (offset and length inside the file) before onnxruntime opens anything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx

from lowerer.model_io.external_data import iter_tensors

__all__ = ["available_memory", "claimed_bytes", "external_tensors"]


def external_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every tensor stored in external data: initializers, sparse ones, attributes, subgraphs, functions."""
    for tensor in iter_tensors(model):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            yield tensor


def claimed_bytes(model: onnx.ModelProto, base_dir: Path | None) -> int | str:
    """The bytes the model's tensors claim (inline ones and external ranges), or why the claims are wrong.

    External locations are taken relative to ``base_dir`` (the model's folder); each range
    (offset, length) must be whole numbers inside its file.
    """
    total = int(model.ByteSize())
    sizes: dict[str, int] = {}
    for tensor in external_tensors(model):
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if base_dir is None:
            return f"tensor {tensor.name!r} is in external data ({location!r}) and the model's folder is not known"
        if location not in sizes:
            if not _inside(location, base_dir):
                return (f"tensor {tensor.name!r}: its external data location {location!r} leads out of the "
                        "model's folder")
            try:
                sizes[location] = os.stat(base_dir / location).st_size
            except OSError as e:
                return f"tensor {tensor.name!r}: its external data file {location!r} cannot be read ({e.strerror})"
        size = sizes[location]
        try:
            offset = int(info.get("offset", "0"))
            length = int(info["length"]) if "length" in info else size - offset
        except ValueError:
            return (f"tensor {tensor.name!r}: its external data offset {info.get('offset')!r} or length "
                    f"{info.get('length')!r} is not a whole number")
        if offset < 0 or length < 0 or offset + length > size:
            return (f"tensor {tensor.name!r} claims bytes {offset}..{offset + length} of {location!r}, "
                    f"which has {size} bytes")
        total += length
    return total


def _inside(location: str, base_dir: Path) -> bool:
    """Whether ``location`` (relative, no ``..``, no link leading out) stays inside ``base_dir``."""
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location:
        return False
    if ".." in Path(location.replace("\\", "/")).parts:
        return False
    root = base_dir.resolve()
    resolved = (root / location).resolve()
    return resolved == root or root in resolved.parents


def available_memory() -> int | None:
    """The bytes of memory available to a new allocation now (Linux: MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def gib(n: int) -> str:
    """``1.5 GiB`` / ``300 MiB``."""
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.0f} MiB"
