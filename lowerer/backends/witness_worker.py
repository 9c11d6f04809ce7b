"""Run one ONNX model on one runtime, in a process of its own: the worker behind :mod:`lowerer.backends.witnesses`.

A runtime's crash (a segfault in a plugin, ``std::terminate`` in a kernel) ends this process, not
lowerer or its caller. It imports nothing of lowerer (it is run by path, ``python witness_worker.py``),
only numpy and the runtime named: the runtime's module of :mod:`lowerer.backends.runtimes` is loaded by
path (the module whose ``NAME`` is the runtime's, ``RUNTIME`` being ``NAME`` or ``NAME:PARAM``), and
its ``load``, ``prepare`` and ``infer`` are the stages a failure is reported in (``load``,
``compile``, ``run``).

Usage: ``witness_worker.py version RUNTIME`` prints the module's ``version(PARAM)`` as JSON
(``{"version": ...}``) and exits 0, or exits 3 when the runtime is not installed;
``witness_worker.py run RUNTIME MODEL FEEDS.npz OUT_DIR [OUTPUTS.json]`` writes ``OUT_DIR/outputs.npz``
(arrays ``s<set>_<k>`` in the order of the output names given, or the model's; with
``OUT_DIR/placement.json``, the module's ``placement(prepared)``, where it has one) or ``OUT_DIR/error.json``
(``{"stage": "load"|"compile"|"run", "message": ...}``); ``witness_worker.py batch RUNTIME JOBS.json``
does ``run`` for each ``[MODEL, FEEDS, OUT_DIR, OUTPUTS|null]`` of the list in one process (one runtime
import for many small models), in order, so that a caller can tell from the folders which job a crash
ended and go on with the next.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import os
import sys
from types import ModuleType
from typing import Any

NOT_INSTALLED = 3
_RUNTIMES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtimes")


class _StageError(Exception):
    def __init__(self, stage: str, error: BaseException, input_set: int | None = None) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.stage = stage
        self.input_set = input_set


@functools.lru_cache(maxsize=4)
def runtime_module(runtime: str) -> ModuleType:
    """The module of ``runtime`` (``NAME`` or ``NAME:PARAM``), loaded by path (ImportError: none)."""
    name = runtime.split(":", 1)[0]
    for path in sorted(glob.glob(os.path.join(_RUNTIMES, "[!_]*.py"))):
        spec = importlib.util.spec_from_file_location(f"_lowerer_runtime_{os.path.basename(path)[:-3]}", path)
        if spec is None or spec.loader is None:
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if getattr(module, "NAME", None) == name:
            return module
    raise ImportError(f"unknown runtime {runtime!r}")


def _param(runtime: str) -> str:
    return runtime.split(":", 1)[1] if ":" in runtime else ""


def _execute(runtime: str, model: str, sets: list[dict[str, Any]], names: list[str] | None, order: list[str]
             ) -> tuple[list[list[Any]], Any]:
    """The outputs of every set, and the module's ``placement(prepared)`` where it has one (else None)."""
    module = runtime_module(runtime)
    try:
        loaded = module.load(model, _param(runtime))
    except Exception as e:
        raise _StageError("load", e) from None
    try:
        prepared = module.prepare(loaded, names, sets[0] if sets else {}, _param(runtime))
    except Exception as e:
        raise _StageError("compile", e) from None
    values = []
    try:
        for k, feeds in enumerate(sets):
            try:
                values.append(list(module.infer(prepared, feeds, names, order)))
            except Exception as e:
                raise _StageError("run", e, k) from None
        placed = module.placement(prepared) if hasattr(module, "placement") else None
    finally:
        if hasattr(module, "close"):
            module.close(prepared)
    return values, placed


def _run(runtime: str, model: str, feeds_path: str, out_dir: str, outputs_path: str | None) -> None:
    import numpy as np

    with np.load(feeds_path, allow_pickle=False) as data:
        order = json.loads(str(data["__order__"]))
        count = int(data["__sets__"])
        sets = [{name: data[f"s{k}_in{i}"] for i, name in enumerate(order)} for k in range(count)]
    names = None
    if outputs_path:
        with open(outputs_path, encoding="utf-8") as f:
            names = json.load(f)
    try:
        values, placed = _execute(runtime, model, sets, names, order)
    except _StageError as e:
        with open(os.path.join(out_dir, "error.json"), "w", encoding="utf-8") as f:
            json.dump({"stage": e.stage, "message": " ".join(str(e).split())[:2000], "input_set": e.input_set}, f)
        return
    arrays: dict[str, Any] = {f"s{k}_{j}": np.asarray(v) for k, row in enumerate(values) for j, v in enumerate(row)}
    np.savez(os.path.join(out_dir, "outputs.npz"), **arrays)
    if placed is not None:
        with open(os.path.join(out_dir, "placement.json"), "w", encoding="utf-8") as f:
            json.dump(placed, f)


def main(argv: list[str]) -> int:
    """Entry point (see the module docstring)."""
    if len(argv) >= 2 and argv[0] == "version":
        try:
            found = runtime_module(argv[1]).version(_param(argv[1]))
        except Exception as e:
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
            return NOT_INSTALLED
        print(json.dumps(found))
        return 0
    if len(argv) in (5, 6) and argv[0] == "run":
        _run(argv[1], argv[2], argv[3], argv[4], argv[5] if len(argv) == 6 else None)
        return 0
    if len(argv) == 3 and argv[0] == "batch":
        with open(argv[2], encoding="utf-8") as f:
            jobs = json.load(f)
        for model, feeds, out_dir, outputs in jobs:
            _run(argv[1], model, feeds, out_dir, outputs)
            with open(os.path.join(out_dir, "done"), "w", encoding="utf-8") as f:
                f.write("1")
        return 0
    print("usage: witness_worker.py version RUNTIME | run RUNTIME MODEL FEEDS.npz OUT_DIR [OUTPUTS.json] | "
          "batch RUNTIME JOBS.json",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
