"""onnxruntime sessions that may kill their process, run in a worker process that an abort does not take down.

onnxruntime 1.32 calls ``std::terminate`` (SIGABRT, "terminate called without an active exception")
on some inputs: LSTM with batch 0, GRU with an empty sequence or batch (measured with one-node
LSTM-14/GRU-14 models on onnxruntime 1.32.0, CPU provider; RNN-14 does not abort). A check that
runs such a session in lowerer's own process kills lowerer, or the Python process that called
:func:`lowerer.convert`. So the checks whose models hold an op on :data:`KNOWN_ABORTS` run their
sessions in a :class:`VerificationWorker`: one child process per conversion, started on the first
such check (a conversion that never needs it pays nothing), reused by every later one. When the
child dies, the run that killed it raises :class:`OrtAbortedError` (the check drops that input set and
goes on); the next request starts a fresh child, and sessions are made again there on first use.

The child is a fresh interpreter (``python -c``) that imports only numpy and onnxruntime: it reads
pickled requests on its stdin and answers on its own copy of stdout (the real stdout is pointed at
its stderr, which goes to a temporary file whose tail names why it died).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, Any

import numpy as np
import onnx

__all__ = ["KNOWN_ABORTS", "OrtAbortedError", "VerificationWorker", "WorkerEngine", "aborts_on", "may_abort"]

#: Ops whose onnxruntime kernel calls std::terminate on some inputs (onnxruntime 1.32.0, CPU; measured
#: with one-node models of opset 14): the op, and the input condition it aborts on.
KNOWN_ABORTS = {
    "LSTM": "batch 0",
    "GRU": "an empty sequence or batch",
}

_HEADER = struct.Struct("<Q")

_CHILD = r"""
import os, pickle, struct, sys
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)  # whatever native code prints goes to stderr, not into the answers
inp = sys.stdin.buffer
import numpy as np
import onnxruntime as ort
getattr(ort, "disable_telemetry_events", lambda: None)()
H = struct.Struct("<Q")
sessions = {}
ro = ort.RunOptions()
ro.log_severity_level = 4
def options(entries):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    for k, v in entries.items():
        so.add_session_config_entry(k, v)
    return so
while True:
    head = inp.read(H.size)
    if len(head) < H.size:
        break
    msg = pickle.loads(inp.read(H.unpack(head)[0]))
    try:
        if msg[0] == "session":
            sessions[msg[1]] = ort.InferenceSession(msg[2], options(msg[3]), providers=msg[4])
            reply = ("ok", None)
        elif msg[0] == "run":
            reply = ("ok", [np.asarray(v) for v in sessions[msg[1]].run(None, msg[2], ro)])
        else:
            sessions.pop(msg[1], None)
            reply = ("ok", None)
    except Exception as e:
        reply = ("error", type(e).__name__, str(e))
    data = pickle.dumps(reply, protocol=4)
    out.write(H.pack(len(data)) + data)
    out.flush()
"""


class OrtAbortedError(RuntimeError):
    """onnxruntime killed the worker process (a signal, or an exit without an answer)."""


class WorkerError(RuntimeError):
    """onnxruntime raised an error in the worker (its message as it gave it)."""


def may_abort(model: onnx.ModelProto) -> list[str]:
    """The ops of ``model`` on :data:`KNOWN_ABORTS`, sorted."""
    return sorted({n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")} & set(KNOWN_ABORTS))


def aborts_on(op: str, shapes: Sequence[tuple[int, ...]]) -> str | None:
    """The known-fatal condition ``op`` meets with these input shapes (input 0 is X), or None.

    LSTM aborts with batch 0, GRU with any empty X; the check avoids both bindings (cheap), and
    its worker survives the ones it did not foresee.
    """
    if op not in KNOWN_ABORTS or not shapes or len(shapes[0]) != 3:
        return None
    return KNOWN_ABORTS[op] if 0 in shapes[0] else None


class VerificationWorker:
    """One child process that runs onnxruntime sessions for a conversion (started on first use)."""

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable
        self.generation = 0  # bumped at each start: sessions of an earlier child are gone
        self.starts = 0
        self.aborts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._next_key = 0

    def _start(self) -> None:
        env = dict(os.environ)
        env.setdefault("ORT_DISABLE_TELEMETRY", "1")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - kept open for the child's life
        self._proc = subprocess.Popen([self.python, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, env=env)
        self.generation += 1
        self.starts += 1

    @property
    def alive(self) -> bool:
        """Whether a child is running."""
        return self._proc is not None and self._proc.poll() is None

    def new_key(self) -> int:
        """A key for one session."""
        self._next_key += 1
        return self._next_key

    def request(self, message: tuple[Any, ...]) -> Any:
        """Send ``message``, return the child's answer.

        Raises:
            OrtAbortedError: the child died before answering (it is restarted on the next request).
            WorkerError: onnxruntime raised an error in the child.
        """
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        data = pickle.dumps(message, protocol=4)
        try:
            proc.stdin.write(_HEADER.pack(len(data)) + data)
            proc.stdin.flush()
            head = proc.stdout.read(_HEADER.size)
            body = proc.stdout.read(_HEADER.unpack(head)[0]) if len(head) == _HEADER.size else b""
            reply = pickle.loads(body) if body else None
        except (OSError, EOFError, pickle.UnpicklingError, struct.error):
            reply = None
        if reply is None:
            raise OrtAbortedError(self._death())
        if reply[0] == "error":
            raise WorkerError(reply[2])
        return reply[1]

    def _death(self) -> str:
        """Why the child ended (its signal, and the last line it printed); it is reaped."""
        proc, self._proc = self._proc, None
        self.aborts += 1
        code = None
        if proc is not None:
            with contextlib.suppress(Exception):
                code = proc.wait(timeout=10)
        tail = ""
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.seek(0)
                lines = [ln for ln in self._log.read().decode("utf-8", "replace").splitlines() if ln.strip()]
                tail = lines[-1].strip()[:200] if lines else ""
            self._log.close()
            self._log = None
        if code is not None and code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:
                how = f"signal {-code}"
        else:
            how = f"exit {code}" if code is not None else "no answer"
        return how + (f": {tail}" if tail else "")

    def close(self) -> None:
        """End the child (if any)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                with contextlib.suppress(OSError):
                    if stream is not None:
                        stream.close()
            with contextlib.suppress(Exception):
                proc.wait(timeout=5)
            if proc.poll() is None:
                proc.kill()
                with contextlib.suppress(Exception):
                    proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None


class WorkerEngine:
    """One side of a check whose session lives in a :class:`VerificationWorker` (the :class:`~.runner.Engine` API)."""

    def __init__(self, worker: VerificationWorker, data: bytes, entries: Mapping[str, str],
                 providers: Sequence[Any], label: str) -> None:
        self.label = label
        self.placement: str | None = None
        self.worker = worker
        self._message = (data, dict(entries), list(providers))
        self._key = worker.new_key()
        self._generation = -1

    def create(self) -> None:
        """Make the session in the worker now (errors as for :meth:`VerificationWorker.request`)."""
        self.worker.request(("session", self._key, *self._message))
        self._generation = self.worker.generation

    def resolve_placement(self) -> None:
        """Nothing to resolve: the worker's sessions are not profiled."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run the session in the worker (made again there when an abort restarted it)."""
        if self._generation != self.worker.generation or not self.worker.alive:
            self.create()
        outputs: list[np.ndarray] = self.worker.request(("run", self._key, dict(feeds)))
        return outputs
