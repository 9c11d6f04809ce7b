"""Runtime witnesses: a model run in a backend's real runtime, where that runtime is installed.

A witness is a runtime that can run a model here, on the CPU: one of :mod:`lowerer.backends.runtimes`
(OpenVINO, onnxruntime-openvino, rknn-toolkit2's simulator, onnxruntime-qnn's HTP simulator, tract,
MNN, TVM), or onnxruntime with a named execution provider. None is a dependency of lowerer: a witness
exists where its package is installed in the Python the witnesses run in (:func:`witness_python`), and
:func:`find_witness` says why not otherwise. Each run happens in a process of its own
(:mod:`lowerer.backends.witness_worker`), so a runtime that crashes (a plugin's segfault,
``std::terminate``) is reported as that runtime's failure and never takes lowerer or its caller down.
The model and inputs go through a temporary folder of the system's (never the model's folder);
nothing is left behind.

A witness is a witness, not the truth: what it computes is compared with onnxruntime's CPU provider
on the original model (:mod:`lowerer.backends.deployment`), and a difference names the party that
departs.
"""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from lowerer.backends.runtimes import runtime_of, witnesses_for

__all__ = ["WITNESS_PYTHON", "Ran", "Witness", "WitnessError", "executable", "find_witness", "installed_release",
           "installed_version", "release_of", "witness_python"]

_WORKER = Path(__file__).with_name("witness_worker.py")
#: Seconds a version query may take (it imports the runtime) and a run may take.
VERSION_TIMEOUT = 120.0
RUN_TIMEOUT = 900.0
#: The environment variable naming the Python the witnesses run in (see :func:`witness_python`).
WITNESS_PYTHON = "LOWERER_WITNESS_PYTHON"


class WitnessError(Exception):
    """The runtime did not produce outputs: it refused the model, failed to compile or run it, or died.

    Attributes:
        stage: ``load``, ``compile``, ``run``, ``crash`` (a signal or an exit without a result) or ``timeout``.
        witness: the runtime's label (``OpenVINO 2026.4.1 CPU``).
        input_set: the input set that failed to run (None: the failure is not a run's).
    """

    def __init__(self, stage: str, witness: str, message: str, input_set: int | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.witness = witness
        self.input_set = input_set


@dataclass(frozen=True)
class Ran:
    """What a witness run gave: the outputs per input set, and where the runtime put the nodes (None: it does not say).

    ``placement``: the runtime module's ``placement(prepared)`` (:mod:`lowerer.backends.runtimes`):
    ``{"fallback": bool, "nodes": int, "provider": str, "on_cpu": [[name, op], ...]}``.
    """

    values: list[list[np.ndarray]]
    placement: dict[str, Any] | None = None


@dataclass(frozen=True)
class Witness:
    """An installed runtime that can run a model: its name, version and the device it runs on."""

    runtime: str
    version: str
    python: str = sys.executable

    @property
    def label(self) -> str:
        """``OpenVINO 2026.4.1 CPU``, ``rknn-toolkit2 2.5.0 simulator``."""
        record = runtime_of(self.runtime)
        if record is None:
            return f"{self.runtime} {self.version}"
        return f"{record.label} {self.version} {record.device_of(self.runtime.partition(':')[2])}".strip()

    def run(self, model: onnx.ModelProto, feeds: Mapping[str, np.ndarray],
            outputs: Sequence[str] | None = None, timeout: float = RUN_TIMEOUT) -> list[np.ndarray]:
        """Run ``model`` on ``feeds`` in this runtime; the values of ``outputs`` (None: the model's outputs).

        ``model`` must hold its weights (no external data). Feeds are given by input name.

        Raises:
            WitnessError: the runtime refused, failed or died (see :attr:`WitnessError.stage`).
        """
        return self.run_sets(model, [feeds], outputs, timeout)[0]

    def run_sets(self, model: onnx.ModelProto, sets: Sequence[Mapping[str, np.ndarray]],
                 outputs: Sequence[str] | None = None, timeout: float = RUN_TIMEOUT) -> list[list[np.ndarray]]:
        """:meth:`run` on several input sets (same input names), the model loaded and compiled once.

        Raises:
            WitnessError: as :meth:`run`; its ``input_set`` says which set failed to run (None: not a run).
        """
        return self.run_placed(model, sets, outputs, timeout).values

    def run_placed(self, model: onnx.ModelProto, sets: Sequence[Mapping[str, np.ndarray]],
                   outputs: Sequence[str] | None = None, timeout: float = RUN_TIMEOUT) -> Ran:
        """:meth:`run_sets`, with where the runtime put the nodes when it says (a CPU fallback's placement).

        Raises:
            WitnessError: as :meth:`run_sets`.
        """
        with tempfile.TemporaryDirectory(prefix="lowerer-witness-") as folder:
            work = Path(folder)
            model_path = work / "model.onnx"
            model_path.write_bytes(model.SerializeToString())
            order = list(sets[0]) if sets else []
            arrays: dict[str, Any] = {f"s{k}_in{i}": np.asarray(feeds[n]) for k, feeds in enumerate(sets)
                                      for i, n in enumerate(order)}
            np.savez(work / "feeds.npz", __order__=np.array(json.dumps(order)), __sets__=np.array(len(sets)),
                     **arrays)
            wanted = [o.name for o in model.graph.output] if outputs is None else list(outputs)
            (work / "outputs.json").write_text(json.dumps(wanted), encoding="utf-8")
            args = [executable(self.python), str(_WORKER), "run", self.runtime, str(model_path),
                    str(work / "feeds.npz"), str(work), str(work / "outputs.json")]
            self._call(args, timeout, work)
            error = work / "error.json"
            if error.exists():
                found = json.loads(error.read_text(encoding="utf-8"))
                raise WitnessError(str(found["stage"]), self.label, str(found["message"]), found.get("input_set"))
            placed = work / "placement.json"
            placement = json.loads(placed.read_text(encoding="utf-8")) if placed.exists() else None
            with np.load(work / "outputs.npz", allow_pickle=False) as data:
                count = len(data.files) // max(len(sets), 1)
                values = [[np.array(data[f"s{k}_{j}"]) for j in range(count)] for k in range(len(sets))]
            return Ran(self._bools_read_back(model, wanted, values), placement)

    def _bools_read_back(self, model: onnx.ModelProto, wanted: list[str],
                         values: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        """A runtime that holds bools as integers (``BOOL_AS_INT``): its 0/1 outputs the model declares bool, as bool.

        Any other value is left as it is, so the comparison still sees it.
        """
        record = runtime_of(self.runtime)
        if record is None or not record.bool_as_int:
            return values
        declared = {v.name: v.type.tensor_type.elem_type
                    for v in [*model.graph.output, *model.graph.value_info, *model.graph.input]}
        bools = {j for j, name in enumerate(wanted) if declared.get(name) == onnx.TensorProto.BOOL}
        return [[v.astype(bool) if j in bools and v.dtype.kind in "iu" and np.isin(v, (0, 1)).all() else v
                 for j, v in enumerate(row)] for row in values]

    def _call(self, args: list[str], timeout: float, work: Path) -> None:
        """The worker run with ``work`` as its current directory.

        A runtime that writes files there (rknn-toolkit2's ``y_*.npy``) writes them into the witness's temporary
        folder, never the user's.
        """
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_quiet_env(),
                                  check=False, cwd=work)
        except subprocess.TimeoutExpired:
            raise WitnessError("timeout", self.label, f"{self.label} did not finish within {timeout:g} s") from None
        if done.returncode < 0:
            raise WitnessError("crash", self.label, f"{self.label} died with {_signal_name(-done.returncode)}"
                                                    f"{_tail(done.stderr)}")
        if done.returncode != 0:
            raise WitnessError("crash", self.label, f"{self.label} exited with status {done.returncode}"
                                                    f"{_tail(done.stderr)}")


def executable(python: str) -> str:
    """``python`` as the worker is started with it from another directory (a relative path made absolute)."""
    return os.path.abspath(python) if os.sep in python else python


def _quiet_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("OPENVINO_LOG_LEVEL", "0")
    env.setdefault("PYTHONWARNINGS", "ignore")
    return env


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(text: str, limit: int = 300) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return f" ({' '.join(lines[-1].split())[:limit]})" if lines else ""


@functools.lru_cache(maxsize=16)
def _query(runtime: str, python: str) -> tuple[str | None, str]:
    """The installed version of ``runtime`` (None when not installed) and why not."""
    record = runtime_of(runtime)
    if record is None:
        return None, f"lowerer has no witness for runtime {runtime!r}"
    if python == sys.executable and not _distribution(record.distribution):
        return None, f"{record.label} is not installed in this Python ({python}): {record.install}"
    try:
        done = subprocess.run([python, str(_WORKER), "version", runtime], capture_output=True, text=True,
                              timeout=VERSION_TIMEOUT, env=_quiet_env(), check=False)
    except subprocess.TimeoutExpired:
        return None, f"{runtime} did not say its version within {VERSION_TIMEOUT:g} s"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    found = json.loads(lines[-1]) if lines else {}
    if done.returncode == 0 and "version" in found:
        bundled = f" ({_label(record.release)} {found[record.release]})" if found.get(record.release) else ""
        return f"{found['version']}{bundled}", ""
    why = found.get("error") or (f"died with {_signal_name(-done.returncode)}" if done.returncode < 0 else
                                 f"exited with status {done.returncode}")
    return None, f"{record.label} cannot be imported here: {why}"


def _label(name: str) -> str:
    """The label of runtime ``name`` (its name when lowerer has no module for it)."""
    record = runtime_of(name)
    return record.label if record is not None else name


def _distribution(name: str) -> bool:
    """Whether the distribution ``name`` is installed (cheap: package metadata, nothing imported)."""
    from importlib import metadata

    try:
        metadata.version(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def installed_version(runtime: str) -> str | None:
    """The installed version of ``runtime`` (None: not installed), where the witnesses run.

    In lowerer's own Python it is read from the package metadata (nothing is imported); in another
    (:data:`WITNESS_PYTHON`) that Python is asked.
    """
    from importlib import metadata

    record = runtime_of(runtime)
    if record is None:
        return None
    if witness_python() != sys.executable:
        return _query(runtime, witness_python())[0]
    try:
        return metadata.version(record.distribution)
    except metadata.PackageNotFoundError:
        return None


def release_of(witness: Witness) -> str:
    """The backend release a witness stands for (onnxruntime-openvino: the OpenVINO it bundles, when it says)."""
    bundled = re.search(r"\(\S.* (\d+(?:\.\d+)*)\)$", witness.version)
    return bundled.group(1) if bundled else witness.version


def installed_release(backend: str) -> tuple[str, str] | None:
    """The release of ``backend`` installed where the witnesses run, and the witness's label; None: none is.

    The runtimes that witness it are asked in their order (:func:`lowerer.backends.runtimes.witnesses_for`):
    ``openvino`` is OpenVINO itself, else the OpenVINO onnxruntime-openvino bundles (asked of that package:
    its own version is onnxruntime's).
    """
    for record in witnesses_for(backend):
        version = installed_version(record.name)
        if version is None:
            continue
        if record.release:
            witness, _ = find_witness(record.name)
            if witness is None:
                continue
            return release_of(witness), witness.label
        return version, f"{record.label} {version}"
    return None


def witness_python() -> str:
    """The Python the witnesses run in.

    ``LOWERER_WITNESS_PYTHON`` when set (a runtime installed in another environment, such as an older
    OpenVINO), else the one lowerer runs in.
    """
    return os.environ.get(WITNESS_PYTHON) or sys.executable


def find_witness(runtime: str) -> tuple[Witness | None, str]:
    """The witness for ``runtime`` in :func:`witness_python`, or None and why there is none."""
    python = witness_python()
    version, why = _query(runtime, python)
    if version is None:
        return None, why
    return Witness(runtime, version, python), ""
