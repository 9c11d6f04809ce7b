"""The runtimes lowerer can run a model on (its witnesses): one module each, read as a :class:`Runtime` record.

Each module of this package describes one runtime and runs models on it, in the witness worker
(:mod:`lowerer.backends.witness_worker` loads the module by path: it imports nothing of lowerer, only
the standard library, numpy and its runtime, inside its functions). A module holds:

* ``NAME`` (``openvino``: what ``--runtime`` of the probe suite and the worker name), ``LABEL``
  (``OpenVINO``), ``DEVICE`` (``CPU``; ``{param}`` stands for what follows ``NAME:``),
  ``DISTRIBUTION`` (the pip distribution whose metadata says it is installed), ``INSTALL`` (how a user
  installs it), ``BACKENDS`` (the backend profiles, ``lowerer/backends/<name>.json``, it witnesses),
  ``PRIORITY`` (among the witnesses of one backend, the lowest is tried first), ``BUDGET`` and
  ``BUDGET_SOURCE`` (the largest difference a float output may show there, relative to the output's
  largest magnitude, and where that figure comes from), and optionally ``RELEASE`` (the runtime whose
  release the version query also reports: onnxruntime-openvino's bundled OpenVINO), optionally
  ``PIP`` (the pip steps that install a release in a fresh venv, ``{version}`` standing for the release:
  ``benchmarks/backend_matrix.py`` builds its venvs with them; by default
  ``(("DISTRIBUTION=={version}", "numpy", "onnx"),)``), optionally ``NONFINITE``
  (``(op, statement, source)`` per op whose kernel there computes NaN or ±inf otherwise than onnxruntime
  does, measured: the deployment check records, not judges, a ±inf set whose first departing node is one),
  and optionally ``JUDGES_CHANGES`` (True: the deployment check judges what lowerer changed there, a failure
  or difference the original model shows there too being recorded, not a failed verification:
  onnxruntime-qnn, which users run with its CPU fallback, where the original's own failures are the runtime's),
  and optionally ``BOOL_AS_INT`` (True: the runtime holds bool tensors as integers, so a bool output comes
  back as 0 and 1: read as bool where the model declares it bool and every value is 0 or 1; MNN);
* ``version(param)``: ``{"version": ...}`` (and ``RELEASE``'s key when it has one), raising ImportError
  when the runtime is not installed;
* ``load(model_path, param)``, ``prepare(loaded, names, feeds, param)`` and
  ``infer(prepared, feeds, names, order)``: the three stages the worker reports a failure in (``load``,
  ``compile``, ``run``); ``names`` are the outputs wanted (None: the model's), ``feeds`` an input set by
  name, ``order`` the model's input names in order; optionally ``close(prepared)`` and
  ``placement(prepared)`` (JSON-ready: ``{"fallback": bool, "nodes": int, "provider": str, "on_cpu":
  [[name, op], ...]}``, where a runtime with a CPU fallback put the model's nodes).

Adding a runtime is its module here, its profile (``lowerer/backends/<backend>.json``), its measured
probe run (``lowerer/backends/measured/``) and a row of ``tests/test_runtimes.py``.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = ["Runtime", "runtime_of", "runtimes", "witnesses_for"]


@dataclass(frozen=True)
class Runtime:
    """One runtime a witness may be (see the package docstring for each field's meaning)."""

    name: str
    label: str
    device: str
    distribution: str
    install: str
    backends: tuple[str, ...]
    priority: int
    budget: float
    budget_source: str
    release: str
    pip: tuple[tuple[str, ...], ...]
    path: Path
    #: ``(op, statement, source)`` per op whose kernel computes NaN or ±inf otherwise than onnxruntime does.
    nonfinite: tuple[tuple[str, str, str], ...] = ()
    judges_changes: bool = False
    bool_as_int: bool = False

    def device_of(self, param: str) -> str:
        """The device a witness of this runtime runs on (``param``: what follows ``NAME:``)."""
        return self.device.replace("{param}", param)


def _record(module: ModuleType) -> Runtime:
    return Runtime(name=str(module.NAME), label=str(module.LABEL), device=str(module.DEVICE),
                   distribution=str(module.DISTRIBUTION), install=str(module.INSTALL),
                   backends=tuple(module.BACKENDS), priority=int(getattr(module, "PRIORITY", 0)),
                   budget=float(module.BUDGET), budget_source=str(module.BUDGET_SOURCE),
                   release=str(getattr(module, "RELEASE", "")),
                   pip=tuple(tuple(str(a) for a in step) for step in getattr(
                       module, "PIP", ((f"{module.DISTRIBUTION}=={{version}}", "numpy", "onnx"),))),
                   path=Path(str(module.__file__)),
                   nonfinite=tuple((str(op), str(said), str(source))
                                   for op, said, source in getattr(module, "NONFINITE", ())),
                   judges_changes=bool(getattr(module, "JUDGES_CHANGES", False)),
                   bool_as_int=bool(getattr(module, "BOOL_AS_INT", False)))


@functools.cache
def runtimes() -> dict[str, Runtime]:
    """Every runtime of this package, by name (modules are imported, their runtimes are not)."""
    found = [_record(importlib.import_module(f"{__name__}.{path.stem}"))
             for path in sorted(Path(__file__).parent.glob("[!_]*.py"))]
    return {r.name: r for r in sorted(found, key=lambda r: (r.priority, r.name))}


def runtime_of(name: str) -> Runtime | None:
    """The runtime ``name`` names (``onnxruntime:CUDAExecutionProvider``: ``onnxruntime``), or None."""
    return runtimes().get(name.split(":", 1)[0])


def witnesses_for(backend: str) -> tuple[Runtime, ...]:
    """The runtimes that witness backend ``backend`` (a profile's name), in the order they are tried."""
    return tuple(r for r in runtimes().values() if backend in r.backends)
