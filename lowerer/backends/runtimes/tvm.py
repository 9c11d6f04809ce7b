"""Apache TVM: its Relax ONNX frontend, compiled for the ``llvm`` target, run on its virtual machine (CPU).

``from_onnx`` with the shapes of the first input set (``shape_dict``), ``DecomposeOpsForInference``,
``tvm.compile(mod, target="llvm")``, ``relax.VirtualMachine``. Loaded by path in the witness worker:
imports only the standard library, numpy, onnx (TVM's frontend reads the model with it) and tvm.
"""

from __future__ import annotations

import importlib
from typing import Any

NAME = "apache-tvm"
LABEL = "TVM"
DEVICE = "llvm (Relax)"
DISTRIBUTION = "apache-tvm"
INSTALL = "pip install apache-tvm onnx"
BACKENDS = ("tvm",)
BUDGET = 1e-5
BUDGET_SOURCE = "the probe budget (llvm target, float32)"


def version(param: str) -> dict[str, str]:
    """TVM's version (ImportError: not installed)."""
    from importlib import metadata

    importlib.import_module("tvm")
    return {"version": metadata.version(DISTRIBUTION)}


def load(model: str, param: str) -> Any:
    """The ONNX model as onnx reads it (TVM's frontend converts it when the shapes are known)."""
    return importlib.import_module("onnx").load(model)


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """The model imported with the feeds' shapes and compiled for llvm; again for inputs of other shapes.

    TVM's frontend bakes the shapes into the compiled function (a batch of 2 after one of 1 fails its
    ``match_cast``), so each input signature gets its own compilation.
    """
    outputs = [o.name for o in loaded.graph.output]
    missing = [n for n in names or [] if n not in outputs]
    if missing:
        raise RuntimeError(f"TVM computes only the model's outputs, not {missing[0]!r}")
    positions = [outputs.index(n) for n in names] if names else list(range(len(outputs)))
    order = [i.name for i in loaded.graph.input if i.name in feeds]
    return {"model": loaded, "positions": positions, "order": order, "outputs": len(outputs),
            _signature(feeds): _compiled(loaded, feeds)}


def _signature(feeds: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return tuple((n, tuple(v.shape), v.dtype.name) for n, v in sorted(feeds.items()))


def _compiled(loaded: Any, feeds: dict[str, Any]) -> Any:
    """A Relax virtual machine running the model compiled for the feeds' shapes."""
    tvm = importlib.import_module("tvm")
    relax = importlib.import_module("tvm.relax")
    frontend = importlib.import_module("tvm.relax.frontend.onnx")
    mod = frontend.from_onnx(loaded, shape_dict={n: list(v.shape) for n, v in feeds.items()},
                             keep_params_in_input=False)
    mod = relax.transform.DecomposeOpsForInference()(mod)
    return relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run (inputs in the model's order), compiled first for a signature not seen yet."""
    tvm = importlib.import_module("tvm")
    key = _signature(feeds)
    if key not in prepared:
        prepared[key] = _compiled(prepared["model"], feeds)
    machine, positions, inputs = prepared[key], prepared["positions"], prepared["order"]
    make = getattr(tvm.runtime, "tensor", None) or tvm.nd.array
    found = machine["main"](*[make(feeds[n]) for n in inputs])
    # One output comes back as itself, many as an array of them: a single Shape output is a shape tuple, which
    # has a length too (read as the outputs, its first dim came out as the whole answer: shape () for (N,)).
    single = prepared["outputs"] == 1 or hasattr(found, "numpy") or not hasattr(found, "__len__")
    values = [found] if single else list(found)
    return [_array(values[k]) for k in positions]


def _array(value: Any) -> Any:
    """A tensor's array; a shape (Shape's output, which TVM keeps as a shape tuple) as int64."""
    import numpy as np

    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(list(value) if hasattr(value, "__len__") else value, dtype=np.int64)
