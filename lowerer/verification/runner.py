"""Running one side of a check: an onnxruntime session, or the numpy reference."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import ml_dtypes
import numpy as np
import onnx

from lowerer.facts import reference
from lowerer.verification.ort import load_onnxruntime
from lowerer.verification.providers import CPU, session_providers
from lowerer.verification.worker import OrtAbortedError, VerificationWorker, WorkerEngine, WorkerError, may_abort

__all__ = ["EXTERNAL_DATA_FOLDER", "Engine", "OrtEngine", "ReferenceEngine", "SessionMaker", "quiet_session_options"]

#: onnxruntime's session option naming the folder external data is read from, for a model given as bytes
#: (without it, onnxruntime resolves the locations against the working directory).
EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"

_BF16 = np.dtype(ml_dtypes.bfloat16)


class Engine(Protocol):
    """Something that runs one side of a check."""

    #: ``CPUExecutionProvider``, ``CUDAExecutionProvider``, ``numpy-reference`` ...
    label: str
    #: Where nodes ran, when not all on ``label`` (None when all did, or when unknown).
    placement: str | None

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs, in the model's output order."""
        ...


class OrtEngine:
    """An onnxruntime session."""

    def __init__(self, session: Any, label: str, placement: str | None, profiled: bool = False) -> None:
        self.session = session
        self.label = label
        self.placement = placement
        self._profiled = profiled
        self._run_options: Any = None

    def resolve_placement(self) -> None:
        """After a run of a profiled session (made only when nodes fell back to the CPU): name where ops ran."""
        if self._profiled:
            self._profiled = False
            where = placement_from_profile(self)
            on_cpu = sorted({op for op, p in where.items() if p == CPU})
            if on_cpu:
                self.placement = f"{self.placement}; on {CPU}: {', '.join(on_cpu)}"

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Run the session (errors are raised, not logged)."""
        if self._run_options is None:
            onnxruntime = load_onnxruntime()
            self._run_options = onnxruntime.RunOptions()
            self._run_options.log_severity_level = 4
        return [np.asarray(v) for v in self.session.run(None, dict(feeds), self._run_options)]


class ReferenceEngine:
    """lowerer's numpy reference (:mod:`lowerer.facts.reference`)."""

    label = "numpy-reference"
    placement: str | None = None

    def __init__(self, model: onnx.ModelProto, opset: int, fallback_reason: str | None = None) -> None:
        #: Why onnxruntime did not run this side.
        self.fallback_reason = fallback_reason
        self.nodes = list(model.graph.node)
        self.opset = opset
        self.constants = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
        self.outputs = [o.name for o in model.graph.output]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Evaluate the nodes."""
        return reference.evaluate(self.nodes, self.opset, {**self.constants, **feeds}, self.outputs)


def quiet_session_options(ort: Any = None) -> Any:
    """The session options of checks: no graph optimizations, one thread, no log output.

    ``ort``: the onnxruntime module to use (tests pass a fake one); imported when None.
    """
    if ort is None:
        import onnxruntime

        ort = onnxruntime
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    return so


class SessionMaker:
    """Creates lean onnxruntime sessions (no graph optimizations, one thread, no profiling) and counts them.

    With a ``worker``, :meth:`for_check` gives a model that holds an op onnxruntime may abort on
    (:func:`~.worker.may_abort`), or every model when ``isolate_all``, a session in that worker process.
    """

    def __init__(self, providers: Sequence[str], worker: VerificationWorker | None = None,
                 isolate_all: bool = False) -> None:
        self.providers = list(providers)
        self.sessions = 0
        self.worker = worker
        self.isolate_all = isolate_all
        self._ort: Any = None

    def _in_worker(self, model: onnx.ModelProto, worker: VerificationWorker) -> WorkerEngine | str:
        """A session for ``model`` in the worker, or why onnxruntime refused (or aborted) it."""
        engine = WorkerEngine(worker, model.SerializeToString(), {}, session_providers(self.providers),
                              self.providers[0])
        try:
            engine.create()
        except OrtAbortedError as e:
            return f"onnxruntime aborted creating the session ({e})"
        except WorkerError as e:
            return _short(e)
        self.sessions += 1
        return engine

    def _options(self, strict: bool = False, profile: bool = False, data_dir: str | None = None) -> Any:
        so = quiet_session_options(self._ort)
        if data_dir is not None:  # external data of a model given as bytes: beside the model, not in the cwd
            so.add_session_config_entry(EXTERNAL_DATA_FOLDER, data_dir)
        if strict:
            so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"lowerer-placement-{os.getpid()}")
        return so

    def for_check(self, model: onnx.ModelProto) -> OrtEngine | WorkerEngine | str:
        """A session for one side of a check: in the worker when the model may abort onnxruntime, else here."""
        if self.worker is not None and (self.isolate_all or may_abort(model)):
            return self._in_worker(model, self.worker)
        return self.create(model)

    def create(self, model: onnx.ModelProto | bytes, data_dir: str | os.PathLike[str] | None = None) -> OrtEngine | str:
        """A session for ``model``, or the reason onnxruntime refused it.

        ``data_dir``: the folder the model's external data locations are relative to (the
        model's own folder); onnxruntime reads the data files itself, from there only.

        When the first provider is not the CPU, the session is first created with CPU fallback
        disabled; if that fails, it is created again with fallback and the nodes that went to
        the CPU are found by profiling that one session and named in ``placement``.
        """
        if self._ort is None:
            self._ort = load_onnxruntime()
        data = model if isinstance(model, bytes) else model.SerializeToString()
        folder = None if data_dir is None else os.fspath(Path(data_dir).resolve())
        primary = self.providers[0]
        if primary != CPU:
            try:
                # Without the CPU provider: onnxruntime refuses CPU in the list together with disabled fallback
                # ("Conflicting session configuration"), which would make every strict attempt fail.
                session = self._ort.InferenceSession(data, self._options(strict=True, data_dir=folder),
                                                     providers=session_providers([p for p in self.providers
                                                                                  if p != CPU]))
                self.sessions += 1
                return OrtEngine(session, primary, None)
            except Exception as e:
                strict_error = _short(e)
            try:
                session = self._ort.InferenceSession(data, self._options(profile=True, data_dir=folder),
                                                     providers=session_providers(self.providers))
                self.sessions += 1
            except Exception as e:
                return _short(e)
            return OrtEngine(session, primary, f"some nodes ran on {CPU}, not {primary} ({strict_error})", True)
        try:
            session = self._ort.InferenceSession(data, self._options(data_dir=folder),
                                                 providers=session_providers(self.providers))
        except Exception as e:
            return _short(e)
        self.sessions += 1
        return OrtEngine(session, primary, None)


def placement_from_profile(engine: OrtEngine) -> dict[str, str]:
    """After one run of a profiled session: the provider each node ran on (and ends profiling)."""
    path = engine.session.end_profiling()
    try:
        with open(path, encoding="utf-8") as f:
            events = json.load(f)
        out: dict[str, str] = {}
        for ev in events:
            args = ev.get("args", {})
            if ev.get("cat") == "Node" and "provider" in args:
                out[str(args.get("op_name", ev.get("name")))] = str(args["provider"])
        return out
    except (OSError, ValueError):
        return {}
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def ort_can_exchange(dtypes: Sequence[np.dtype[Any]]) -> str | None:
    """None when onnxruntime's Python API can take these input dtypes, else why not."""
    if any(np.dtype(d) == _BF16 for d in dtypes):
        return "onnxruntime's Python API does not exchange bfloat16 arrays (and has few bfloat16 kernels)"
    return None


def _short(e: BaseException, limit: int = 600) -> str:
    """The error's message on one line, without onnxruntime's prefix, cut (at a word) after ``limit`` characters."""
    text = " ".join(str(e).split())
    text = text.replace("[ONNXRuntimeError] : ", "")
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " ..."
