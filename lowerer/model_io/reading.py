"""Reading models: the file checked before it is opened, then its external data and structure.

:func:`load_input` (and :func:`read_model`, :func:`load_model`): the model file must be a regular
file (checked with ``os.stat`` before it is opened: a FIFO or a device is refused, never read) of
at most 2 GiB (:data:`PROTOBUF_LIMIT`). Every external-data reference is checked
(:func:`~lowerer.model_io.external_data.check_external_data`), then the model's structure
(:func:`lowerer.model_io.structure.check_structure`). Weights are never read.

In memory (:func:`working_copy`): a model with large inline weights is converted on a copy that
holds them back (:class:`HeldWeights`), so that it is never held twice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import onnx
from google.protobuf.message import DecodeError

from lowerer.core.errors import InputError, ModelRefusedError
from lowerer.model_io.external_data import _nbytes, check_external_data, iter_tensors
from lowerer.model_io.paths import kind_of, require_regular_file

if TYPE_CHECKING:
    from lowerer.model_io.input_check import InputCheck

__all__ = ["HEAVY_MODEL_BYTES", "HELD_LOCATION", "HELD_TENSOR_BYTES", "PROTOBUF_LIMIT", "HeldWeights", "InputModel",
           "load_input", "load_model", "read_model", "working_copy"]

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
    the conversion (:class:`lowerer.model_io.input_check.InputCheck`, in ``checks``); whoever converts the
    model joins them (:func:`lowerer.api.run` does) and a failing input ends in the same InputError.

    Raises:
        InputError: the path is missing, not a regular file (a directory, FIFO, device ...),
            empty, over 2 GiB, unreadable or not an ONNX model.
        ModelRefusedError: the model parses, but an external-data reference is unusable (see
            :func:`check_external_data`) or the model is structurally invalid (see
            :func:`lowerer.model_io.structure.check_structure`).
    """
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
    try:
        data_files, checks = _check_read(p, model, data, directory, beside)
    except ModelRefusedError:
        raise
    except InputError as e:  # the model was read: its refusal is the model's (a --report is written for it)
        raise ModelRefusedError(*e.args) from None
    return InputModel(p, model, data, directory, data_files, checks)


def _check_read(p: Path, model: onnx.ModelProto, data: bytes, directory: Path, beside: bool
                ) -> tuple[dict[str, Path], InputCheck | None]:
    """:func:`load_input`'s checks of a parsed model: its external data, then its structure (or beside)."""
    from lowerer.model_io.structure import check_structure

    data_files = check_external_data(model, directory, source=str(p), serialized=data)
    checks = None
    if beside:
        from lowerer.model_io.input_check import InputCheck

        try:
            check_structure(model, source=str(p), serialized=data, path=p if data_files else None, file=True,
                            deferred=True)
        except InputError:
            InputCheck(model, data, str(p), p if data_files else None, run_here=True).finish()  # the checker's first
            raise
        checks = InputCheck(model, data, str(p), p if data_files else None)
    else:
        check_structure(model, source=str(p), serialized=data, path=p if data_files else None, file=True)
    return data_files, checks


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
