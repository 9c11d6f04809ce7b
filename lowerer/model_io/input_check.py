"""The input's own checks, beside the conversion: onnx's checker and strict inference in a worker process.

A model file is checked by onnx's checker, its tensors' data against their types
(:func:`lowerer.model_io.structure.check_structure`), and onnx's strict shape and type inference (the
composition argument of :func:`lowerer.passes.checker_gate.validate_output` rests on it). None of it changes
what the conversion does, so :class:`InputCheck` runs it in a worker forked once the model is
parsed, from the model's bytes, while the conversion goes on; the conversion joins it
(:meth:`InputCheck.finish`) before anything is written or returned, and a failing input ends in the
InputError it always did. The worker runs the checker and the tensors' check first, then strict
inference; when a rule needs a type or shape the model does not state, the conversion runs strict
inference itself (:meth:`InputCheck.inferred`: it needs the inferred model at once) and the worker
stops before its own.

The worker is a fork (no interpreter or import to pay): it reads the parent's parsed model and
bytes as they were at the fork. Where fork is not available (Windows, macOS), or the worker dies,
the same checks run in the process, in the same order.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lowerer.core.errors import InputError

if TYPE_CHECKING:
    import onnx

__all__ = ["BESIDE_FROM", "InputCheck"]

logger = logging.getLogger(__name__)

#: Models from this many bytes are checked in a worker (smaller ones in the process: a fork costs more).
BESIDE_FROM = 1 << 20
_HEADER = struct.Struct("<cQ")
#: Messages: the strict inference's outcome, the checks' outcome.
_STRICT, _CHECKED = b"S", b"C"


def _fork_available() -> bool:
    return hasattr(os, "fork") and sys.platform.startswith("linux") and not os.environ.get("LOWERER_NO_WORKER")


def _infer(serialized: bytes, lenient: bool = True) -> tuple[onnx.ModelProto | None, bool, str]:
    """The model as onnx's strict inference (check_type, data_prop) types it; when it fails, the lenient one's.

    Where the main graph has no subgraph, only what the facts read of the inferred model is kept
    (its graph's inputs, outputs, initializers and value_info; see :func:`_typed_only`).
    """
    from onnx.onnx_cpp2py_export import shape_inference as c_inference

    try:
        return _typed_only(c_inference.infer_shapes(serialized, True, True, True), serialized), True, ""
    except Exception as strict_error:
        why = " ".join(str(strict_error).split())
        if not lenient:
            return None, False, why
        try:
            return _typed_only(c_inference.infer_shapes(serialized, False, False, True), serialized), False, why
        except Exception:  # inference is best effort for the facts: rules refuse when still unknown
            return None, False, why


#: An attribute of type GRAPH or GRAPHS (AttributeProto.type, field 20, as encoded).
_GRAPH_ATTRIBUTE = (b"\xa0\x01\x05", b"\xa0\x01\x0a")


def _typed_only(inferred: bytes, given: bytes) -> onnx.ModelProto:
    """The inferred model's bytes parsed; without the nodes when the model has no subgraph.

    :class:`lowerer.facts.shapes.ShapeIndex` reads the inferred main graph's statements (inputs, outputs,
    initializers, value_info), and its nodes only to find a subgraph: a model whose bytes hold no
    graph attribute has none, and its nodes (most of the inferred model) are skipped, never built.
    """
    import onnx

    model = onnx.ModelProto()
    if any(marker in given for marker in _GRAPH_ATTRIBUTE):
        model.ParseFromString(inferred)
        return model
    light = _statements_class()()
    light.ParseFromString(inferred)
    light.DiscardUnknownFields()
    model.graph.ParseFromString(light.graph.SerializeToString())
    return model


_STATEMENTS: list[Any] = []


def _statements_class() -> Any:
    """A message with the model's graph's statements only (fields of onnx.ModelProto/GraphProto, same numbers)."""
    if not _STATEMENTS:
        import onnx
        from google.protobuf import descriptor_pb2, message_factory

        f = descriptor_pb2.FieldDescriptorProto
        file = descriptor_pb2.FileDescriptorProto(name="lowerer/inferred_statements.proto",
                                                  package="lowerer_statements", syntax="proto2")
        file.dependency.append(onnx.ModelProto.DESCRIPTOR.file.name)
        graph = file.message_type.add(name="Graph")
        for name, number, kind in (("initializer", 5, ".onnx.TensorProto"), ("input", 11, ".onnx.ValueInfoProto"),
                                   ("output", 12, ".onnx.ValueInfoProto"),
                                   ("value_info", 13, ".onnx.ValueInfoProto")):
            graph.field.add(name=name, number=number, label=f.LABEL_REPEATED, type=f.TYPE_MESSAGE, type_name=kind)
        model = file.message_type.add(name="Model")
        model.field.add(name="graph", number=7, label=f.LABEL_OPTIONAL, type=f.TYPE_MESSAGE,
                        type_name=".lowerer_statements.Graph")
        pool = onnx.ModelProto.DESCRIPTOR.file.pool
        with contextlib.suppress(TypeError):  # added already (another import of this module)
            pool.Add(file)
        _STATEMENTS.append(message_factory.GetMessageClass(pool.FindMessageTypeByName("lowerer_statements.Model")))
    return _STATEMENTS[0]


def _checks(model: onnx.ModelProto, serialized: bytes, source: str, path: Path | None) -> str | None:
    """The InputError message of onnx's checker, then of the tensors' data check, or None when both pass."""
    from lowerer.model_io.structure import check_file

    try:
        check_file(model, serialized, source, path)
    except InputError as e:
        return str(e)
    return None


class InputCheck:
    """The checks of one input, running beside the conversion (see the module docstring).

    Args:
        model: the parsed input (read by the worker as it is now; not changed by it).
        serialized: the bytes it was parsed from.
        source: how messages name it (its path).
        path: the model file, when onnx's checker must read it (external data beside it), else None.
        checker: also run onnx's checker and the tensors' check (a file); False: inference only.
        run_here: no worker: the checks run now, in the process.
    """

    def __init__(self, model: onnx.ModelProto, serialized: bytes, source: str, path: Path | None = None,
                 checker: bool = True, run_here: bool = False) -> None:
        self._model = model
        self._serialized = serialized
        self._source = source
        self._path = path
        self._checker = checker
        self._pid: int | None = None
        self._inbox: dict[bytes, bytes] = {}
        self._done = False
        self._error: str | None = None
        self._strict: bool | None = None
        self._inferred: onnx.ModelProto | None = None
        self._inferred_strict: bool | None = None
        if _fork_available() and not run_here and len(serialized) >= BESIDE_FROM:
            try:
                self._fork()
            except OSError as e:
                logger.debug("no worker for the input's checks (%s): they run in the process", e)
                self._pid = None
        if self._pid is None and checker:
            self._error = _checks(model, serialized, source, path)
            self._done_checks()

    # -- the worker ------------------------------------------------------------------------------
    def _fork(self) -> None:
        results_r, results_w = os.pipe()
        asks_r, asks_w = os.pipe()
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 0
            try:
                os.close(results_r)
                os.close(asks_w)
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles interrupts, and ends us
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                _end_with(parent)
                self._work(results_w, asks_r)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(results_w)
        os.close(asks_r)
        self._pid, self._results, self._asks = pid, results_r, asks_w

    def _work(self, out: int, asks: int) -> None:
        import select

        error = _checks(self._model, self._serialized, self._source, self._path) if self._checker else None
        _send(out, _CHECKED, b"" if error is None else b"E" + error.encode("utf-8", "replace"))
        if select.select([asks], [], [], 0)[0]:
            return  # the parent ran strict inference itself (a rule needed its facts)
        _send(out, _STRICT, b"1" if _infer(self._serialized, lenient=False)[1] else b"0")

    # -- the parent ------------------------------------------------------------------------------
    def _receive(self, kind: bytes) -> bytes | None:
        """The worker's message ``kind`` (None when the worker ended without sending it)."""
        while kind not in self._inbox:
            header = _read_exactly(self._results, _HEADER.size)
            if header is None:
                return None
            got, size = _HEADER.unpack(header)
            payload = _read_exactly(self._results, size)
            if payload is None:
                return None
            self._inbox[got] = payload
        return self._inbox.pop(kind)

    def inferred(self) -> tuple[onnx.ModelProto | None, bool]:
        """The input as onnx's strict inference types it (lenient where strict fails), and whether strict passed.

        Run here, once, when a rule needs a fact the model does not state (the worker then stops
        before its own strict inference).
        """
        if self._inferred_strict is None:
            if self._pid is not None:
                with contextlib.suppress(OSError):
                    os.write(self._asks, b"1")
            self._inferred, self._inferred_strict, _ = _infer(self._serialized)
        return self._inferred, self._inferred_strict

    def finish(self) -> bool | None:
        """Join the checks: InputError when the input fails them; else whether it passed strict inference.

        None: strict inference did not run (no worker, and no rule needed it).
        """
        if not self._done:
            self._done = True
            if self._pid is not None:
                checked = self._receive(_CHECKED) if self._checker else b""
                flag = self._receive(_STRICT) if self._inferred_strict is None and checked is not None else None
                if self._inferred_strict is not None and self._pid is not None:
                    with contextlib.suppress(OSError):
                        os.kill(self._pid, signal.SIGKILL)  # its strict inference is not needed
                self._reap()
                if checked is None:  # the worker died (killed?): the checks run here
                    logger.debug("the worker checking the input ended early: the checks run in the process")
                    if self._checker:
                        self._error = _checks(self._model, self._serialized, self._source, self._path)
                elif checked:
                    self._error = checked[1:].decode("utf-8", "replace")
                if flag is not None:
                    self._strict = flag == b"1"
            if self._inferred_strict is not None:
                self._strict = self._inferred_strict
        self._done_checks()
        return self._strict

    def input_error(self) -> InputError | None:
        """After the conversion failed: the input's own InputError, when it fails its checks (joined here)."""
        try:
            self.finish()
        except InputError as e:
            return e
        return None

    def _done_checks(self) -> None:
        if self._error is not None:
            raise InputError(self._error)

    def cancel(self) -> None:
        """End the worker (an interrupt, or the conversion given up)."""
        if self._pid is not None and not self._done:
            self._done = True
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            self._reap()

    def _reap(self) -> None:
        pid, self._pid = self._pid, None
        for fd in (self._results, self._asks):
            with contextlib.suppress(OSError):
                os.close(fd)
        if pid is not None:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)

    def __del__(self) -> None:
        if getattr(self, "_pid", None) is not None:
            self.cancel()


def _end_with(parent: int) -> None:
    """The worker ends when its parent does (Linux's parent-death signal), whatever ends the parent."""
    import ctypes

    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _send(fd: int, kind: bytes, payload: bytes) -> None:
    for part in (_HEADER.pack(kind, len(payload)), payload):
        data = memoryview(part)
        while data:
            data = data[os.write(fd, data):]


def _read_exactly(fd: int, size: int) -> bytes | None:
    chunks = []
    left = size
    while left:
        chunk = os.read(fd, min(left, 1 << 24))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
