"""Loading and saving models: every input checked before it is read, every output planned before any work.

Loading (:func:`load_input`, :func:`read_model`, :func:`load_model`): the model file must be a
regular file (checked with ``os.stat`` before it is opened: a FIFO or a device is refused, never
read) of at most 2 GiB (protobuf's limit). Every external-data reference, wherever it is
(initializers, sparse initializers' values and indices, tensor and sparse-tensor attributes such
as Constant's ``value`` / ``sparse_value``, subgraphs at any depth, model-local functions), goes
through one check (:func:`check_external_data`): a location inside the model's folder with no
symbolic link on the way, an existing regular file, and an ``offset`` / ``length`` that are plain
non-negative integers lying within that file and matching the tensor's type and shape. Then the
model's structure is checked (:func:`lowerer.structure.check_structure`). Weights are never read.

Saving (:func:`plan_outputs`, then :func:`write_outputs`; :func:`save_model` does both): every
path to be written (the model, its data files, a report) is checked against the others and
against the input's files before any work; see :func:`plan_outputs`. The writing goes through a
:class:`lowerer.files.Transaction`: unique temporaries, committed all together, nothing left
behind on a failure or a signal.
"""

from __future__ import annotations

import filecmp
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from google.protobuf.message import DecodeError

from lowerer.errors import InputError, InternalError
from lowerer.files import Transaction

if TYPE_CHECKING:
    from lowerer.input_check import InputCheck
from lowerer.paths import check_output_path, kind_of, location_problem, require_regular_file, same_file, stat_path

__all__ = [
    "PROTOBUF_LIMIT",
    "InputModel",
    "OutputPlan",
    "check_external_data",
    "external_data_locations",
    "iter_tensors",
    "load_input",
    "load_model",
    "plan_outputs",
    "read_model",
    "save_model",
    "working_copy",
    "write_outputs",
    "write_single_data_file",
]

#: The largest message protobuf parses or writes (2 GiB - 1).
PROTOBUF_LIMIT = (1 << 31) - 1


@dataclass(frozen=True)
class InputModel:
    """A model read from a file, with every file it was read from.

    Attributes:
        path: the path as given.
        model: the parsed model (external data not loaded).
        serialized: the bytes it was parsed from.
        directory: the folder its external data is found in (the given path's folder, resolved).
        data_files: each external-data location the model names, and the file it resolves to.
        checks: onnx's checker, the tensors' check and strict inference, running beside the
            conversion (``load_input(..., beside=True)``), to be joined before anything is written; None:
            the checker and tensors' check passed already.
    """

    path: Path
    model: onnx.ModelProto
    serialized: bytes
    directory: Path
    data_files: dict[str, Path] = field(default_factory=dict)
    checks: InputCheck | None = None


def load_model(path: str | os.PathLike[str]) -> onnx.ModelProto:
    """Read an ONNX model without loading its external data.

    Raises:
        InputError: see :func:`load_input`.
    """
    return load_input(path).model


def read_model(path: str | os.PathLike[str]) -> tuple[onnx.ModelProto, bytes]:
    """Like :func:`load_model`, also returning the bytes the model was parsed from.

    Raises:
        InputError: see :func:`load_input`.
    """
    loaded = load_input(path)
    return loaded.model, loaded.serialized


def load_input(path: str | os.PathLike[str], *, beside: bool = False) -> InputModel:
    """Read the model at ``path`` (its external data stays unread), checking everything first.

    ``beside``: onnx's checker and the tensors' check (and strict inference) run in a worker beside
    the conversion (:class:`lowerer.input_check.InputCheck`, in ``checks``); whoever converts the
    model joins them (:func:`lowerer.api.run` does) and a failing input ends in the same InputError.

    Raises:
        InputError: the path is missing, not a regular file (a directory, FIFO, device ...),
            empty, over 2 GiB, unreadable or not an ONNX model; an external-data reference is
            unusable (see :func:`check_external_data`); the model is structurally invalid (see
            :func:`lowerer.structure.check_structure`).
    """
    from lowerer.structure import check_structure

    p = Path(path)
    data = _read_regular_file(p)
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise InputError(
            f"{p}: not an ONNX model (the protobuf does not parse; truncated or another format?)"
        ) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise InputError(f"{p}: parses as protobuf but is not an ONNX model (no IR version or no graph)")
    directory = p.parent.resolve()  # external data is found beside the path as given, as onnx.load does
    data_files = check_external_data(model, directory, source=str(p), serialized=data)
    checks = None
    if beside:
        from lowerer.input_check import InputCheck

        try:
            check_structure(model, source=str(p), serialized=data, path=p if data_files else None, file=True,
                            deferred=True)
        except InputError:
            InputCheck(model, data, str(p), p if data_files else None, run_here=True).finish()  # the checker's first
            raise
        checks = InputCheck(model, data, str(p), p if data_files else None)
    else:
        check_structure(model, source=str(p), serialized=data, path=p if data_files else None, file=True)
    return InputModel(p, model, data, directory, data_files, checks)


def _read_regular_file(p: Path) -> bytes:
    """The bytes of the regular file ``p``, refused (without opening it) when it is anything else or too big."""
    st = require_regular_file(p, "an .onnx model")
    if st.st_size == 0:
        raise InputError(f"{p}: the file is empty, not an ONNX model")
    if st.st_size > PROTOBUF_LIMIT:
        raise InputError(f"{p}: is {st.st_size / (1 << 30):.1f} GiB; protobuf cannot parse a model file over 2 GiB "
                         "(an ONNX model that large keeps its weights in external data files)")
    try:  # O_NONBLOCK: should the path have become a FIFO since the stat, the open does not wait for a writer
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
                     | getattr(os, "O_BINARY", 0))
    except OSError as e:
        raise InputError(f"{p}: cannot read it ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        kind = kind_of(st.st_mode)
        if kind is not None:
            raise InputError(f"{p}: is {kind}, not an .onnx model; lowerer reads only regular files")
        chunks = []
        left = min(st.st_size, PROTOBUF_LIMIT + 1)  # read no more than the size seen: a growing file is not followed
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 30))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as e:
        raise InputError(f"{p}: cannot read it ({e.strerror})") from None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if not data:
        raise InputError(f"{p}: the file is empty, not an ONNX model")
    return data


# -- models in memory ------------------------------------------------------------------------------
#: An in-memory model whose main-graph initializers hold more than this inline is converted without
#: copying its large weights (see :func:`working_copy`).
HEAVY_MODEL_BYTES = 512 << 20
#: In such a model, inline initializers of at least this many bytes are held back.
HELD_TENSOR_BYTES = 1 << 20
#: The external-data location that marks a held-back weight in the working copy (never a real file).
HELD_LOCATION = "lowerer-held-weight"


@dataclass
class HeldWeights:
    """The caller's large inline weights, stood in for in a working copy by external-data placeholders.

    Attributes:
        tensors: each placeholder's location -> the caller's tensor (not copied, not modified).
    """

    tensors: dict[str, onnx.TensorProto] = field(default_factory=dict)

    def restore(self, model: onnx.ModelProto) -> onnx.ModelProto:
        """Put the held weights back in place of their placeholders in ``model`` (in place); returns it.

        Placeholders a conversion renamed keep their new name; those it removed stay removed.
        """
        if not self.tensors:
            return model
        for tensor in iter_tensors(model):
            if tensor.data_location != onnx.TensorProto.EXTERNAL:
                continue
            location = next((e.value for e in tensor.external_data if e.key == "location"), "")
            held = self.tensors.get(location)
            if held is not None:
                name = tensor.name
                tensor.CopyFrom(held)
                tensor.name = name
        return model


def working_copy(model: onnx.ModelProto, *, whole: bool = False) -> tuple[onnx.ModelProto, bytes | None, HeldWeights]:
    """The copy of an in-memory model that lowerer converts, its bytes, and the weights held back from it.

    A model with up to :data:`HEAVY_MODEL_BYTES` of inline initializers is copied whole, by way of
    its bytes. A larger one (unless ``whole``) is never serialized or copied whole: its inline
    main-graph initializers of :data:`HELD_TENSOR_BYTES` or more are replaced in the copy by
    external-data placeholders of the same name, type and dims (located at :data:`HELD_LOCATION`),
    so that every check runs on a small model, as for a model with external data; the bytes
    returned are the copy's. :meth:`HeldWeights.restore` puts the weights back at the end (the one
    copy of them the result needs). Before any work, the memory that copy needs is compared with
    what the system has available.

    Args:
        model: the caller's model (not modified).
        whole: the whole model must be at hand (it is run in onnxruntime afterwards: ``verify_model``,
            ``optimize``, a backend's placement proof); a model too large to serialize is then refused.

    Raises:
        InputError: a held weight's data disagrees with its type and dims, the model is too large for
            what ``whole`` asks, or the system lacks the memory the conversion needs.
    """
    sizes = [_inline_bytes(t) for t in model.graph.initializer]
    total = sum(sizes)
    if total <= HEAVY_MODEL_BYTES or (whole and total <= PROTOBUF_LIMIT):
        proto = onnx.ModelProto()
        try:  # the copy, by way of the bytes (as fast as CopyFrom)
            serialized: bytes | None = model.SerializeToString()
            proto.ParseFromString(serialized)
        except Exception:  # protobuf's EncodeError: over 2 GiB after all (nested tensors)
            serialized = None
            proto.CopyFrom(model)
        return proto, serialized, HeldWeights()
    gib = total / (1 << 30)
    if whole:
        raise InputError(f"the model holds {gib:.1f} GiB of weights inline; verify_model, optimize and for_backend "
                         "run it in onnxruntime, which takes models up to 2 GiB from memory: save it with its weights "
                         "in a data file (save_model(..., external_data='weights.bin')) and convert the file")
    held_bytes = sum(size for size in sizes if size >= HELD_TENSOR_BYTES)
    _check_memory(held_bytes, gib)
    light, held = _light_copy(model)
    return light, light.SerializeToString(), held


def _inline_bytes(tensor: onnx.TensorProto) -> int:
    """The bytes of a tensor's inline data, from its type and dims (0 for external data or unknown types)."""
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return 0
    if tensor.HasField("raw_data"):
        return _nbytes(tensor) or 0
    return max(len(tensor.float_data), len(tensor.int32_data), len(tensor.int64_data), len(tensor.double_data),
               len(tensor.uint64_data)) * 8


def _check_memory(needed: int, gib: float) -> None:
    """Refuse, before any work, a conversion that needs more memory than the system has available."""
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return  # not Linux: nothing to measure with
    needed += 256 << 20  # the working copy, its checks and the conversion itself
    if needed > available:
        raise InputError(f"the model holds {gib:.1f} GiB of weights in memory; converting it needs about "
                         f"{needed / (1 << 30):.1f} GiB more memory, and {available / (1 << 30):.1f} GiB is "
                         "available: free memory, or save the model with its weights in a data file "
                         "(save_model(..., external_data='weights.bin')) and convert the file")


def _copy_fields(source: object, target: object, skip: str) -> None:
    """Copy every field of the message ``source`` into ``target`` except the field named ``skip``."""
    for fd, value in source.ListFields():  # type: ignore[attr-defined]
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(target, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(target, fd.name).CopyFrom(value)
        else:
            setattr(target, fd.name, value)


def _light_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, HeldWeights]:
    """``model`` with its large inline initializers replaced by placeholders; the weights held back."""
    light = onnx.ModelProto()
    _copy_fields(model, light, "graph")
    _copy_fields(model.graph, light.graph, "initializer")
    held = HeldWeights()
    for tensor in model.graph.initializer:
        size = _inline_bytes(tensor)
        if size < HELD_TENSOR_BYTES or not tensor.HasField("raw_data"):
            light.graph.initializer.add().CopyFrom(tensor)
            continue
        length = len(tensor.raw_data)
        if length != size:
            raise InputError(f"the model: initializer {tensor.name!r} of type {tensor.data_type} and dims "
                             f"{list(tensor.dims)} has {length} bytes of raw_data, not {size}")
        location = f"{HELD_LOCATION}/{len(held.tensors)}"
        held.tensors[location] = tensor
        stand_in = light.graph.initializer.add()
        stand_in.name, stand_in.data_type = tensor.name, tensor.data_type
        stand_in.data_location = onnx.TensorProto.EXTERNAL
        stand_in.dims.extend(tensor.dims)
        for key, value in (("location", location), ("length", str(size))):
            entry = stand_in.external_data.add()
            entry.key, entry.value = key, value
    return light, held


# -- external data --------------------------------------------------------------------------------
def iter_tensors(model: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model, in all graphs (at any depth) and functions.

    Initializers, sparse initializers' values and indices, and tensor, tensors, sparse-tensor
    and sparse-tensors attributes (Constant's ``value`` and ``sparse_value`` ...).

    The walk reads which fields are set, not the attributes' declared types (unlike
    :func:`lowerer.scopes.walk_graphs`): a tensor stored in a mis-typed attribute of a hostile
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
    symbolic link on the way (see :func:`lowerer.paths.location_problem`), naming an existing
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


# -- saving -----------------------------------------------------------------------------------------
@dataclass
class OutputPlan:
    """Every file a conversion will write, checked (see :func:`plan_outputs`); then :func:`write_outputs`.

    Attributes:
        model: the output model's path.
        directory: its folder, resolved (external-data locations of the output are relative to it).
        report: the report's path, or None.
        external_data: the one data file for every weight (relative to ``directory``), or None.
        source_dir: where the model's own data files are found (resolved), or None.
        copies: for each of the model's data locations that must be copied beside the output:
            (the file there now, its destination). Locations whose destination already holds the
            same bytes, or that need no copy (the output beside the input), are absent.
        locations: the data locations planned for (the written model may reference no others).
    """

    model: Path
    directory: Path
    report: Path | None = None
    external_data: str | None = None
    source_dir: Path | None = None
    copies: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    locations: tuple[str, ...] = ()


def plan_outputs(output: str | os.PathLike[str], *, locations: Sequence[str] = (),
                 source_dir: str | os.PathLike[str] | None = None, input_model: Path | None = None,
                 external_data: str | None = None, report: str | os.PathLike[str] | None = None) -> OutputPlan:
    """Check every path a conversion will write, before any work, and say what will be written where.

    Args:
        output: the output model's path.
        locations: the external-data locations of the model to be written.
        source_dir: where those data files are now (None: they are already where the output's
            references expect them).
        input_model: the input model's file, when there is one (it may only be replaced by the
            output model: converting in place).
        external_data: write every weight into this one file (relative to the output's folder).
        report: the report's path.

    Each output must be absent or a regular file (never a directory, FIFO or device) in an
    existing writable directory, with a usable name. None may be one of the input's files,
    except that the output model may replace the input model itself (converting in place); no
    two outputs may be the same file. Data files copied beside the output never replace a
    different file, and no destination may pass through a symbolic link.

    Raises:
        InputError: the first rule broken, in one line.
    """
    out = Path(output)
    check_output_path(out, "output model")
    out_dir = out.parent.resolve()
    src_dir = Path(source_dir).resolve() if source_dir is not None else None
    reads = _InputFiles(input_model, src_dir, locations)
    _check_sources(out, out_dir, src_dir, locations)
    plan = OutputPlan(out, out_dir, source_dir=src_dir, locations=tuple(locations))
    written: list[tuple[Path, str]] = [(out, "output model")]
    if report is not None:
        plan.report = _plan_report(Path(report), out, reads)
        written.append((plan.report, "report"))
    if external_data is not None:
        written.append((_plan_external_data(external_data, out, out_dir, reads), "external data file"))
        plan.external_data = external_data
    elif src_dir is not None and src_dir != out_dir:
        for location in locations:
            dst = _plan_copy(location, src_dir, out_dir, reads)
            if dst is not None:
                plan.copies[location] = (src_dir / location, dst)
                written.append((dst, "external data file"))
    for i, (a, what_a) in enumerate(written):
        for b, what_b in written[i + 1:]:
            if same_file(a, b):
                raise InputError(f"{b}: the {what_b} would be the same file as the {what_a}; give them different paths")
    return plan


class _InputFiles:
    """The files a conversion reads (the input model, its data files), which no output may replace."""

    def __init__(self, input_model: Path | None, src_dir: Path | None, locations: Sequence[str]) -> None:
        self.input_model = input_model
        self.data_reads: dict[Path, str] = {}
        if src_dir is not None:
            for location in locations:
                self.data_reads[src_dir / location] = location
        self.files = [*([input_model] if input_model is not None else []), *self.data_reads]

    def clash(self, path: Path, what: str) -> None:
        """Refuse to write the ``what`` at ``path`` when it is one of the files read."""
        for f in self.files:
            if same_file(path, f):
                name = ("the input model" if f == self.input_model
                        else f"the input's external data file {self.data_reads.get(f, f.name)!r}")
                raise InputError(f"{path}: is {name}; writing the {what} there would destroy it. Choose another path")


def _check_sources(out: Path, out_dir: Path, src_dir: Path | None, locations: Sequence[str]) -> None:
    """The output model lands on none of its data files, and each data file to read is usable."""
    for location in locations:  # the model must not land on a data file it references
        if (src_dir is not None and same_file(out, src_dir / location)) or same_file(out, out_dir / location):
            raise InputError(f"{out}: is the model's external data file {location!r}; writing the model there "
                             "would destroy the weights. Choose another output name")
    if src_dir is not None:
        for location in locations:
            src = src_dir / location
            problem = location_problem(location, src_dir, "the input's directory")
            if problem is not None:
                raise InputError(f"external data location {location!r} {problem}")
            require_regular_file(src, f"the model's external data file {location!r}")


def _plan_report(report_path: Path, out: Path, reads: _InputFiles) -> Path:
    """Check the report's path; return it."""
    check_output_path(report_path, "report")
    reads.clash(report_path, "report")
    if same_file(report_path, out):
        raise InputError(f"{report_path}: is the output model too; give the report another path")
    return report_path


def _plan_external_data(external_data: str, out: Path, out_dir: Path, reads: _InputFiles) -> Path:
    """Check the one data file every weight goes to; return its path."""
    problem = location_problem(external_data, out_dir, "the output's directory")
    if problem is not None or Path(external_data).name in ("", ".", ".."):
        raise InputError(f"external data file {external_data!r}: give a file name relative to the output's "
                         "directory that stays inside it (no '..', no absolute path, no link leading out)")
    dst = out_dir / external_data
    _check_new_file_path(dst, f"external data file {external_data!r}")
    if same_file(dst, out):
        raise InputError(f"{out}: is the model's external data file {external_data!r}; writing the model there "
                         "would destroy the weights. Choose another output name")
    reads.clash(dst, "weights")
    return dst


def _plan_copy(location: str, src_dir: Path, out_dir: Path, reads: _InputFiles) -> Path | None:
    """Where data file ``location`` is copied beside the output, or None when the same bytes are there."""
    problem = location_problem(location, out_dir, "the output directory")
    if problem is not None:
        problem = problem.replace("beside the model", "beside the output")
        raise InputError(f"external data location {location!r} {problem}")
    src, dst = src_dir / location, out_dir / location
    if _check_new_file_path(dst, f"the external data file {location!r}"):
        if same_file(src, dst) or filecmp.cmp(src, dst, shallow=False):
            return None  # the same bytes are there already
        raise InputError(f"{dst}: a different file of that name already exists where the output's external "
                         "data must go; move it or choose another output directory")
    reads.clash(dst, "external data")
    return dst


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


def write_outputs(plan: OutputPlan, model: onnx.ModelProto | None, report_text: str | None = None) -> None:
    """Write what ``plan`` says, all or nothing: data files, the report, then the model, committed together.

    ``model`` None writes only the report (after a failed verification). ``model`` is not modified.

    Raises:
        InputError: the model is over 2 GiB with its weights inline (protobuf cannot write it: use
            ``external_data``), a different file appeared where a data file must go, or a write failed.
    """
    try:
        _write_outputs(plan, model, report_text)
    except MemoryError:
        raise InputError("not enough memory to write the model (nothing was written): store its weights in a data "
                         "file (API: save_model(..., external_data='weights.bin'); CLI: --external-data "
                         "weights.bin), or free memory") from None


def _write_outputs(plan: OutputPlan, model: onnx.ModelProto | None, report_text: str | None) -> None:
    with Transaction() as tx:
        if model is not None:
            if plan.external_data is not None:
                model = _stage_single_data_file(tx, model, plan.directory, plan.external_data, plan.source_dir)
            payload = _serialize(model)
            if plan.external_data is None:
                missing = [loc for loc in external_data_locations(model, payload) if loc not in plan.locations]
                if missing:
                    raise InternalError(f"the converted model references data files that were not planned: {missing}")
                for src, dst in plan.copies.values():
                    tx.make_dirs(dst.parent)
                    fd, tmp = tx.temp_file(dst.parent)
                    try:
                        _copy_file(src, fd)
                    finally:
                        os.close(fd)
                    tx.stage(tmp, dst, replace=False)
        if plan.report is not None and report_text is not None:
            _stage_bytes(tx, plan.report, report_text.encode())
        if model is not None:
            _stage_bytes(tx, plan.model, payload)
        tx.commit()


def _serialize(model: onnx.ModelProto) -> bytes:
    """The model's bytes; a model protobuf cannot write (over 2 GiB) is an InputError saying what to do."""
    try:
        payload = model.SerializeToString()
    except Exception:  # protobuf's EncodeError (its ByteSize fails the same way)
        payload = None
    if payload is None or len(payload) > PROTOBUF_LIMIT:
        raise InputError("the model is over 2 GiB with its weights inline; protobuf cannot write a model that "
                         "large: store the weights in a data file (API: save_model(..., "
                         "external_data='weights.bin'); CLI: --external-data weights.bin)")
    return bytes(payload)


def _stage_bytes(tx: Transaction, path: Path, payload: bytes) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    fd, tmp = tx.temp_file(directory, mode_like=path)
    try:
        _write_all(fd, payload, 0)
    finally:
        os.close(fd)
    tx.stage(tmp, path, replace=True)


def save_model(
    model: onnx.ModelProto,
    path: str | os.PathLike[str],
    *,
    source_dir: str | os.PathLike[str] | None = None,
    external_data: str | None = None,
) -> None:
    """Write ``model`` to ``path`` atomically, with its external data (see :func:`plan_outputs`).

    With ``external_data`` (a file name relative to the output's directory), every weight is
    written into that one file instead (see :func:`write_single_data_file`): tensors already
    external are copied there range by range in the kernel, inline ones of 1 KiB or more moved
    there; the input's data files are then not needed beside the output.

    External data files the model references (relative to ``source_dir``) are made available
    beside the output under the same relative locations: nothing to do when the output sits
    beside the input, else a copy (``copy_file_range``: in-kernel, a reflink on file systems
    that have them; never a hard link, which ``onnx.load`` refuses as a "hardlink attack"). An
    existing different file of the same name is never overwritten, and no destination may pass
    through a symbolic link. Every destination is checked before anything is written, and every
    reference is checked (:func:`check_external_data`) against the files in ``source_dir``.

    Raises:
        InputError: a path is unusable or would destroy a file, a data file would clash, a
            reference is bad, or the model cannot be written (see :func:`write_outputs`).
    """
    try:
        payload = model.SerializeToString() if external_data is None else None
    except Exception:  # over 2 GiB, protobuf's EncodeError: said clearly by write_outputs, before any write
        payload = None
    check_external_data(model, Path(source_dir).resolve() if source_dir is not None else None, source="the model",
                        serialized=payload)
    plan = plan_outputs(path, locations=external_data_locations(model, payload), source_dir=source_dir,
                        external_data=external_data)
    write_outputs(plan, model)


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
    sources: dict[Path, int] = {}
    placed: dict[tuple[Path, int, int], int] = {}
    wrote = False
    try:
        end = 0
        for tensor in iter_tensors(result):
            weight = held.tensors.get(_location(tensor)) if held.tensors else None
            if weight is not None:
                raw = weight.raw_data
                length = len(raw)
                offset = end = _align(end)
                _write_all(fd, raw, offset)
                del raw
                end += length
            elif tensor.data_location == onnx.TensorProto.EXTERNAL:
                ref = _reference(tensor, "the model")
                src = files.get(ref.location)
                if src is None:
                    raise InputError(f"tensor {tensor.name!r}: its external data file {ref.location!r} is missing or "
                                     "outside the input's directory")
                if src not in sources:
                    sources[src] = os.open(src, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
                expected = _nbytes(tensor)
                length = ref.length if ref.length is not None else (
                    expected if expected is not None else os.fstat(sources[src]).st_size - ref.offset)
                key = (src, ref.offset, length)
                if key not in placed:
                    placed[key] = end = _align(end)
                    _copy_range(sources[src], fd, ref.offset, end, length)
                    end += length
                offset = placed[key]
            elif tensor.HasField("raw_data") and len(tensor.raw_data) >= DATA_THRESHOLD:
                raw = tensor.raw_data
                length = len(raw)
                offset = end = _align(end)
                _write_all(fd, raw, offset)
                del raw
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
        os.ftruncate(fd, end)
    finally:
        os.close(fd)
        for src_fd in sources.values():
            os.close(src_fd)
    if wrote:
        tx.stage(tmp, dst, replace=False)
    else:
        tx.discard(tmp)
    return result


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
