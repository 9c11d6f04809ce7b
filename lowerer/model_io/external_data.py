"""External data: every reference a model makes, wherever it is, checked before any weight is read.

Every external-data reference (initializers, sparse initializers' values and indices, tensor and
sparse-tensor attributes such as Constant's ``value`` / ``sparse_value``, subgraphs at any depth,
model-local functions; :func:`iter_tensors` finds them all) goes through one check
(:func:`check_external_data`): a location inside the model's folder with no symbolic link on the
way, an existing regular file, and an ``offset`` / ``length`` that are plain non-negative integers
lying within that file and matching the tensor's type and shape. Weights are never read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import onnx

from lowerer.core.errors import InputError
from lowerer.model_io.paths import kind_of, location_problem, stat_path

__all__ = ["check_external_data", "external_data_locations", "iter_tensors"]

def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model, in all graphs (at any depth) and functions.

    Initializers, sparse initializers' values and indices, and tensor, tensors, sparse-tensor
    and sparse-tensors attributes (Constant's ``value`` and ``sparse_value`` ...).

    The walk reads which fields are set, not the attributes' declared types (unlike
    :func:`lowerer.model_io.scopes.walk_graphs`): a tensor stored in a mis-typed attribute of a hostile
    model is still found, and so still checked.
    """

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
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values
                    yield attr.sparse_tensor.indices
                for sparse in attr.sparse_tensors:
                    yield sparse.values
                    yield sparse.indices
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


_DIGITS = re.compile(r"[0-9]+")
_PACKED_BITS = {getattr(onnx.TensorProto, name): bits for name, bits in
                (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
                if hasattr(onnx.TensorProto, name)}


@dataclass(frozen=True)
class _Reference:
    location: str
    offset: int
    length: int | None


def _reference(tensor: onnx.TensorProto, source: str) -> _Reference:
    """A tensor's external-data entries, parsed strictly (each key once, offsets and lengths plain digits)."""
    found: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key in ("location", "offset", "length"):
            if entry.key in found:
                raise InputError(f"{source}: tensor {tensor.name!r} gives its external data {entry.key} twice")
            found[entry.key] = entry.value
    location = found.get("location", "")
    if not location:
        raise InputError(f"{source}: tensor {tensor.name!r} is stored externally but names no location")
    numbers: dict[str, int | None] = {}
    for key in ("offset", "length"):
        text = found.get(key)
        if text is not None and not _DIGITS.fullmatch(text):
            raise InputError(f"{source}: tensor {tensor.name!r}: external data {key} {text!r} is not a non-negative "
                             "integer")
        numbers[key] = int(text) if text is not None else None
    return _Reference(location, numbers["offset"] or 0, numbers["length"])


def _nbytes(tensor: onnx.TensorProto) -> int | None:
    """The bytes the tensor's data takes, from its type and dims (None for strings and unknown types)."""
    if any(d < 0 for d in tensor.dims):
        return None
    count = math.prod(tensor.dims)
    bits = _PACKED_BITS.get(tensor.data_type)
    if bits is not None:
        return int(-(-count * bits // 8))
    try:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)
    except (KeyError, ValueError, TypeError):
        return None
    if dtype.kind in "OUS":
        return None
    return int(count * dtype.itemsize)


def check_external_data(model: onnx.ModelProto, base_dir: Path | None, source: str,
                        serialized: bytes | None = None) -> dict[str, Path]:
    """The one check of every external-data reference in ``model``; returns location -> file.

    Each reference must give one non-empty location that stays inside ``base_dir`` with no
    symbolic link on the way (see :func:`lowerer.model_io.paths.location_problem`), naming an existing
    regular file (checked with ``os.stat``: nothing is opened); ``offset`` and ``length``, when
    given, must be plain non-negative integers; the range they claim (to the end of the file
    without a length) must lie within the file and, where the tensor's type and shape give its
    size, match it. With ``base_dir`` None (a model in memory) only the names and numbers are
    checked. ``serialized``: the model's bytes, when at hand (see :func:`external_data_locations`).

    Raises:
        InputError: the first reference that breaks a rule, named with its tensor.
    """
    if serialized is not None and b"location" not in serialized:
        return {}
    files: dict[str, tuple[Path, int]] = {}
    for tensor in iter_tensors(model):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        ref = _reference(tensor, source)
        if base_dir is None or ref.location not in files:
            problem = location_problem(ref.location, base_dir, "the model's directory")
            if problem is not None:
                raise InputError(f"{source}: external data location {ref.location!r} {problem}")
        if base_dir is None:
            continue
        if ref.location not in files:
            path = base_dir / ref.location
            st = stat_path(path)
            if st is None:
                raise InputError(f"{source}: external data file {ref.location!r} is missing next to the model")
            kind = kind_of(st.st_mode)
            if kind is not None:
                raise InputError(f"{source}: external data file {ref.location!r} is {kind}, not a regular file")
            files[ref.location] = (path, st.st_size)
        path, size = files[ref.location]
        expected = _nbytes(tensor)
        length = ref.length if ref.length is not None else (expected if expected is not None else size - ref.offset)
        where = f"{source}: tensor {tensor.name!r} (external data in {ref.location!r}, {size} bytes)"
        if ref.length is not None and expected is not None and ref.length != expected:
            raise InputError(f"{where}: its length {ref.length} does not match its type and shape ({expected} bytes)")
        if ref.offset > size or ref.offset + length > size:
            raise InputError(f"{where}: claims bytes {ref.offset} to {ref.offset + length}, past the end of the file")
    return {location: path for location, (path, _) in files.items()}
