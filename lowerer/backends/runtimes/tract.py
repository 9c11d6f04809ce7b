"""Tract (Sonos' ONNX runtime in Rust, its Python wheel): ``tract.onnx().load``, input facts from the feeds, run.

The model is typed by its own input facts, each symbolic dim of an input (``batch``) bound to the size the
inputs give it (``transform(SetSymbols({"batch": 2}))``, tract's way for a model with symbolic dims: a
torch dynamo export's value_info names the same symbols, which concrete input facts cannot unify with);
where that fails (dims not given) or the inputs do not fit
them, by the inputs' (``set_input_fact(i, "2,16,i64")``), again for an input set of other shapes; then
made runnable and run; the outputs wanted are the model's (tract names an output after the node that makes it, so a
list as long as the graph's outputs is taken as those). tract computes in float32 as the model says.
Loaded by path in the witness worker: imports only the standard library, numpy and tract.
"""

from __future__ import annotations

import importlib
from typing import Any

NAME = "tract"
LABEL = "tract"
DEVICE = "CPU"
DISTRIBUTION = "tract"
INSTALL = "pip install tract"
BACKENDS = ("tract",)
#: Kernels that compute ±inf and NaN otherwise than onnxruntime (the deployment check records such a set, not judges).
NONFINITE = (
    ("Attention", "tract's Attention gives NaN on a row whose every key the mask hides, where onnxruntime gives 0 "
                  "(onnx's body: 0, its RowAllMasked guard), so on ±inf sets too",
     "measured on tract 0.23.9 (2026-12-02): the one-node Attention-23 of probe_models.EXPANSIONS "
     "Attention-23-bool-mask, given the float mask, on the deployment check's inf input set of seed 3 (batch 0, query "
     "0 wholly masked): NaN on tract where onnxruntime 1.32.0 CPU gives 0; the same with finite inputs "
     "(a one-node Attention-23, float mask, one row all -inf)"),
)
BUDGET = 1e-5
BUDGET_SOURCE = "the probe budget (tract computes float32 as the model says)"
_TYPES = {"float32": "f32", "float64": "f64", "float16": "f16", "int64": "i64", "int32": "i32", "int16": "i16",
          "int8": "i8", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "bool"}


def version(param: str) -> dict[str, str]:
    """The version of tract (ImportError: not installed)."""
    from importlib import metadata

    importlib.import_module("tract")
    return {"version": metadata.version(DISTRIBUTION)}


def load(model: str, param: str) -> Any:
    """The model's path, once read by tract's ONNX frontend (it is read again for each typing)."""
    importlib.import_module("tract").onnx().load(model)
    return model


def _symbols(loaded: Any, feeds: dict[str, Any]) -> dict[str, int]:
    """Each input dim the model names by a symbol (``batch``), bound to that dim's size in the feeds."""
    found: dict[str, int] = {}
    for i in range(loaded.input_count()):
        dims = str(loaded.input_fact(i)).split(",")[:-1]  # "batch,3,32,32,f32"
        for dim, size in zip(dims, feeds[loaded.input_name(i)].shape, strict=False):
            if dim.isidentifier():
                found[dim] = int(size)
    return found


def _runnable(path: str, names: list[str] | None, feeds: dict[str, Any], facts: bool) -> Any:
    tract = importlib.import_module("tract")
    loaded = tract.onnx().load(path)
    symbols = {} if facts else _symbols(loaded, feeds)
    if facts:
        for i in range(loaded.input_count()):
            value = feeds[loaded.input_name(i)]
            loaded.set_input_fact(i, ",".join([*(str(d) for d in value.shape), _TYPES[value.dtype.name]]))
    outputs = [loaded.output_name(i) for i in range(loaded.output_count())]
    if names and all(n in outputs for n in names):
        positions = [outputs.index(n) for n in names]
    elif not names or len(names) == len(outputs):  # tract names an output after its node: the graph's, in order
        positions = list(range(len(outputs)))
    else:
        raise RuntimeError(f"tract computes only the model's {len(outputs)} outputs, not {len(names)} values")
    order = [loaded.input_name(i) for i in range(loaded.input_count())]
    model = loaded.into_model()
    if symbols:
        model.transform(importlib.import_module("tract.transform").SetSymbols(symbols))
    return model.into_runnable(), positions, order, facts


def _typed(path: str, names: list[str] | None, feeds: dict[str, Any]) -> Any:
    """Typed by the model's own facts, else by the feeds' (a model whose inputs' dims are not given)."""
    try:
        return _runnable(path, names, feeds, False)
    except Exception:
        return _runnable(path, names, feeds, True)


def _signature(feeds: dict[str, Any]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return tuple((n, tuple(v.shape), v.dtype.name) for n, v in sorted(feeds.items()))


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """The model typed (its own facts, else the feeds') and made runnable; again for inputs of other shapes."""
    return {"path": loaded, _signature(feeds): _typed(loaded, names, feeds)}


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run (inputs in the model's order)."""
    key = _signature(feeds)
    if key not in prepared:
        prepared[key] = _typed(prepared["path"], names, feeds)
    runnable, positions, inputs, facts = prepared[key]
    try:
        found = runnable.run([feeds[n] for n in inputs])
    except Exception:
        if facts:
            raise
        prepared[key] = _runnable(prepared["path"], names, feeds, True)  # the model's facts do not fit these inputs
        runnable, positions, inputs, _ = prepared[key]
        found = runnable.run([feeds[n] for n in inputs])
    return [found[k].to_numpy() for k in positions]
