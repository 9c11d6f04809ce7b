"""Inputs of whole-model checks: the models' graph inputs, steered shapes and ranges, loaded and saved sets.

By default each dynamic dim is bound to 1, then to 2 (one value per named dim, shared between
inputs), and each binding gets three seeded input sets (``normal``, ``ties``, ``all-equal``, see
:mod:`lowerer.verification.inputs`). The user may steer that:

* ``input_shapes``: the concrete shape of an input (``--input-shapes ids:1x128``); named dims it
  fixes hold for every input that shares them;
* ``value_ranges``: an inclusive range per input, or for every input (``--val-range ids:0,30521``);
* ``load_inputs``: real inputs from ``.npz`` files instead of generated ones (``--load-inputs``);
* ``save_inputs``: the sets that ran, written to an ``.npz`` file (``--save-inputs``).

Index-like integer inputs (those that reach an index input of Gather, GatherElements, GatherND,
ScatterElements, ScatterND or OneHot, directly or through Cast, Reshape, Unsqueeze and other ops
that only move values) are generated inside the range the data allows: ``0 .. size - 1`` of the
indexed dim, where that size is static (or bound by the generated shapes).

The inputs' specs and the options' parsing live in :mod:`.graph_inputs`, the index-like inputs in
:mod:`.index_inputs`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from lowerer.core.errors import InputError
from lowerer.verification.graph_inputs import (
    FeedSet,
    InputSpec,
    listing,
    type_name,
)
from lowerer.verification.index_inputs import find_index_uses, index_range
from lowerer.verification.inputs import generate

__all__ = [
    "generate_sets",
    "load_sets",
    "model_sets",
    "recorded",
    "save_sets",
]

logger = logging.getLogger(__name__)

_BF16 = np.dtype(ml_dtypes.bfloat16)
#: The kinds of generated input sets, per binding of the dynamic dims.
MODEL_SET_KINDS = ("normal", "ties", "all-equal")
#: The kinds added where an input is float and ``special`` is asked (the whole-model and deployment checks):
#: ±inf sprinkled in (judged) and NaN sprinkled in (recorded, not judged); see :mod:`lowerer.verification.inputs`.
MODEL_SPECIAL_KINDS = ("inf", "nan")
#: Of the kinds, those whose comparison is recorded, never judged.
RECORDED_KINDS = frozenset({"nan"})
#: The sizes dynamic dims are bound to (one binding each), unless ``input_shapes`` fixes them all.
SIZES = (1, 2)
#: The key of the metadata entry in a saved ``.npz``.
META_KEY = "__lowerer_inputs__"


# -- generation ------------------------------------------------------------------------------------------

def _bindings(specs: Sequence[InputSpec], shapes: Mapping[str, tuple[int, ...]]) -> list[dict[str, tuple[int, ...]]]:
    """The concrete shape of every input, per binding of the dynamic dims left free."""
    fixed: dict[str, int] = {}
    for s in specs:
        given = shapes.get(s.name)
        if given is not None:
            for d, g in zip(s.dims, given, strict=True):
                if isinstance(d, str):
                    fixed.setdefault(d, g)
    free = {d for s in specs if s.name not in shapes for d in s.dims if isinstance(d, str) and d not in fixed}
    out: list[dict[str, tuple[int, ...]]] = []
    for size in SIZES if free else SIZES[:1]:
        binding: dict[str, tuple[int, ...]] = {}
        for s in specs:
            if s.name in shapes:
                binding[s.name] = tuple(shapes[s.name])
            else:
                binding[s.name] = tuple(d if isinstance(d, int) else fixed.get(d, size) for d in s.dims)
        out.append(binding)
    return out


def check_shapes(specs: Sequence[InputSpec], shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Refuse ``input_shapes`` that name no input or contradict the model's rank or static dims.

    Raises:
        InputError: as above.
    """
    by_name = {s.name: s for s in specs}
    for name, shape in shapes.items():
        spec = by_name.get(name)
        if spec is None:
            raise InputError(f"--input-shapes names {name!r}, which is not an input of the model (inputs: "
                             f"{', '.join(repr(s.name) for s in specs) or 'none'})")
        if len(shape) != len(spec.dims):
            raise InputError(f"--input-shapes {name}: gives rank {len(shape)}, the model's input {spec.describe()} "
                             f"has rank {len(spec.dims)}")
        for i, (d, g) in enumerate(zip(spec.dims, shape, strict=True)):
            if isinstance(d, int) and d != g:
                raise InputError(f"--input-shapes {name}: dim {i} is {g}, the model fixes it to {d} "
                                 f"({spec.describe()})")


def _check_ranges(specs: Sequence[InputSpec], ranges: Mapping[str, tuple[float, float]]) -> None:
    by_name = {s.name: s for s in specs}
    for name, (low, high) in ranges.items():
        targets = [by_name[name]] if name else list(specs)
        if name and name not in by_name:
            raise InputError(f"--val-range names {name!r}, which is not an input of the model (inputs: "
                             f"{', '.join(repr(s.name) for s in specs) or 'none'})")
        for spec in targets:
            dtype = spec.dtype
            if dtype.kind == "b" and name:
                raise InputError(f"--val-range {name}: the input is bool; a range does not apply")
            if dtype.kind in "iu":
                info = np.iinfo(dtype)
                if name and (low < info.min or high > info.max):
                    raise InputError(f"--val-range {name}:{low:g},{high:g} does not fit the input's type {dtype} "
                                     f"({info.min}..{info.max})")


def _in_range(kind: str, dtype: np.dtype[Any], shape: tuple[int, ...], low: float, high: float, integral: bool,
              rng: np.random.Generator) -> np.ndarray:
    """Values of ``kind`` inside ``[low, high]`` (whole numbers when ``integral``)."""
    if integral:
        lo, hi = int(np.ceil(low)), int(np.floor(high))
        if lo > hi:
            raise InputError(f"the range {low:g},{high:g} holds no whole number")
        if kind == "all-equal":
            values = np.full(shape, rng.integers(lo, hi + 1))
        elif kind == "ties":
            values = rng.integers(lo, min(lo + 1, hi) + 1, size=shape)
        else:
            values = rng.integers(lo, hi + 1, size=shape)
        return values.astype(dtype)
    if kind == "all-equal":
        floats = np.full(shape, rng.uniform(low, high))
    elif kind == "ties":
        floats = np.where(rng.integers(0, 2, size=shape) == 1, high, low)
    else:
        floats = rng.uniform(low, high, size=shape)
    return np.asarray(floats, dtype=np.float64).astype(dtype)


def generate_sets(model: onnx.ModelProto, specs: Sequence[InputSpec], *, seed_key: Sequence[int],
                  input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                  value_ranges: Mapping[str, tuple[float, float]] | None = None,
                  special: bool = False, kinds: Sequence[str] = MODEL_SET_KINDS) -> tuple[list[FeedSet], list[str]]:
    """The generated input sets, and notes on how index-like inputs and ranges were chosen.

    ``kinds``: the kinds made per binding (a prefix of :data:`MODEL_SET_KINDS`, so that the sets made are
    those the full call starts with, for a seed).

    ``special``: after the :data:`MODEL_SET_KINDS` sets, one set per :data:`MODEL_SPECIAL_KINDS` kind and binding
    where an input is float (not steered by a range or an index use), the others ``normal`` there.

    Raises:
        InputError: ``input_shapes`` or ``value_ranges`` that do not fit the model's inputs.
    """
    shapes = dict(input_shapes or {})
    ranges = dict(value_ranges or {})
    check_shapes(specs, shapes)
    _check_ranges(specs, ranges)
    uses = find_index_uses(model, specs)
    rng = np.random.default_rng(list(seed_key))
    notes: list[str] = []
    sets: list[FeedSet] = []
    for binding in _bindings(specs, shapes):
        for kind in kinds:
            feeds: dict[str, np.ndarray] = {}
            for spec in specs:
                shape = binding[spec.name]
                dtype = spec.dtype
                integral = dtype.kind in "iu"
                chosen = ranges.get(spec.name)
                why = f"{spec.name}: --val-range {chosen[0]:g},{chosen[1]:g}" if chosen else ""
                if chosen is None and spec.name in uses:
                    low, high, why = index_range(uses[spec.name], binding)
                    chosen, integral, why = (float(low), float(high)), True, f"{spec.name}: {why}"
                if chosen is None and "" in ranges and dtype.kind != "b":
                    chosen = ranges[""]
                    why = f"{spec.name}: --val-range {chosen[0]:g},{chosen[1]:g}"
                if chosen is None or dtype.kind == "b":
                    feeds[spec.name] = generate(kind, spec.elem_type, shape, rng)
                else:
                    feeds[spec.name] = _in_range(kind, dtype, shape, chosen[0], chosen[1], integral, rng)
                if why and why not in notes:
                    notes.append(why)
            sets.append(FeedSet(_label(kind, specs, feeds), feeds))
    if special:
        sets += _special_sets(specs, shapes, ranges, uses, rng)
    return sets, notes


def model_sets(model: onnx.ModelProto, specs: Sequence[InputSpec], *, seed: int,
               input_shapes: Mapping[str, tuple[int, ...]] | None = None,
               value_ranges: Mapping[str, tuple[float, float]] | None = None,
               load_inputs: Sequence[str | os.PathLike[str]] = ()) -> list[FeedSet]:
    """The whole-model check's input sets of ``model``: loaded from ``load_inputs``, else generated with its seed.

    The same sets :func:`lowerer.verification.whole.compare_models` runs ``model`` on (the seed keyed by
    the graph's name).

    Raises:
        InputError: options or loaded arrays that do not fit the model's inputs.
    """
    if load_inputs:
        return load_sets(load_inputs, specs)
    key = [seed, zlib.crc32(model.graph.name.encode())]
    return generate_sets(model, specs, seed_key=key, input_shapes=input_shapes, value_ranges=value_ranges)[0]


def _special_sets(specs: Sequence[InputSpec], shapes: Mapping[str, tuple[int, ...]],
                  ranges: Mapping[str, tuple[float, float]], uses: Mapping[str, Any],
                  rng: np.random.Generator) -> list[FeedSet]:
    """The :data:`MODEL_SPECIAL_KINDS` sets (after the others, so that those stay as they were for a seed)."""
    free = [s for s in specs if (s.dtype.kind == "f" or s.dtype == _BF16) and s.name not in ranges
            and s.name not in uses and "" not in ranges]
    if not free:
        return []
    out: list[FeedSet] = []
    for binding in _bindings(specs, shapes):
        for kind in MODEL_SPECIAL_KINDS:
            feeds: dict[str, np.ndarray] = {}
            for spec in specs:
                shape = binding[spec.name]
                if spec in free:
                    feeds[spec.name] = generate(kind, spec.elem_type, shape, rng)
                elif spec.name in ranges or spec.name in uses or ("" in ranges and spec.dtype.kind != "b"):
                    chosen = ranges.get(spec.name) or ranges.get("")
                    low, high = (index_range(uses[spec.name], binding)[:2] if chosen is None else chosen)
                    feeds[spec.name] = _in_range("normal", spec.dtype, shape, float(low), float(high),
                                                 chosen is None or spec.dtype.kind in "iu", rng)
                else:
                    feeds[spec.name] = generate("normal", spec.elem_type, shape, rng)
            out.append(FeedSet(_label(kind, specs, feeds), feeds))
    return out


def recorded(label: str) -> bool:
    """Whether the set labelled ``label`` is of a kind recorded, never judged (:data:`RECORDED_KINDS`)."""
    return label.split(" ", 1)[0] in RECORDED_KINDS


def _label(kind: str, specs: Sequence[InputSpec], feeds: Mapping[str, np.ndarray]) -> str:
    parts = [f"{s.name}: {type_name(s.elem_type)}[{','.join(map(str, feeds[s.name].shape))}]" for s in specs]
    return f"{kind} ({'; '.join(parts)})"


# -- loading and saving ------------------------------------------------------------------------------------

def load_sets(paths: Sequence[str | os.PathLike[str]], specs: Sequence[InputSpec]) -> list[FeedSet]:
    """Input sets from ``.npz`` files: one set per file keyed by input name, or the sets a ``--save-inputs`` wrote.

    Raises:
        InputError: a file that cannot be read, or arrays that do not fit the model's inputs
            (missing or unknown names, other element types, ranks or static dims).
    """
    out: list[FeedSet] = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"--load-inputs {p}: no such file")
        try:
            with np.load(p, allow_pickle=False) as data:
                arrays = {k: np.asarray(data[k]) for k in data.files}
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise InputError(f"--load-inputs {p}: not a readable .npz file ({' '.join(str(e).split())})") from None
        if META_KEY in arrays:
            try:
                meta = json.loads(str(arrays.pop(META_KEY)))
                groups = [(str(g["label"]), {str(n): arrays[str(k)] for n, k in g["keys"].items()})
                          for g in meta["sets"]]
            except (ValueError, KeyError, TypeError):
                raise InputError(f"--load-inputs {p}: its {META_KEY} entry is damaged") from None
        else:
            groups = [(f"loaded ({p.name})", arrays)]
        for label, feeds in groups:
            _check_loaded(p, feeds, specs)
            out.append(FeedSet(label if label.startswith("loaded") else f"loaded {label}",
                               {s.name: feeds[s.name] for s in specs}))
    return out


def _check_loaded(p: Path, feeds: Mapping[str, np.ndarray], specs: Sequence[InputSpec]) -> None:
    names = {s.name for s in specs}
    unknown = sorted(set(feeds) - names)
    missing = [s.name for s in specs if s.name not in feeds]
    if unknown:
        raise InputError(f"--load-inputs {p}: holds {listing(unknown)} that the model does not take "
                         f"(inputs: {', '.join(repr(s.name) for s in specs) or 'none'})")
    if missing:
        raise InputError(f"--load-inputs {p}: lacks {listing(missing)}")
    for s in specs:
        value = feeds[s.name]
        if np.dtype(value.dtype) != s.dtype:
            raise InputError(f"--load-inputs {p}: input {s.name!r} is {value.dtype}, the model takes {s.dtype}")
        if value.ndim != len(s.dims) or any(isinstance(d, int) and d != v for d, v in zip(s.dims, value.shape,
                                                                                          strict=True)):
            raise InputError(f"--load-inputs {p}: input {s.name!r} has shape {list(value.shape)}, the model takes "
                             f"{s.describe()}")


def save_sets(path: str | os.PathLike[str], sets: Sequence[FeedSet]) -> None:
    """Write input sets to an ``.npz`` file (atomically); :func:`load_sets` reads it back.

    A single set is stored under the input names (as ``np.savez(path, **feeds)`` would); the
    labels and the grouping go into a :data:`META_KEY` entry.

    Raises:
        InputError: the folder is missing or not writable.
    """
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"--save-inputs {p}: the folder {folder} does not exist; create it first")
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, list[dict[str, Any]]] = {"sets": []}
    for i, feed_set in enumerate(sets):
        keys: dict[str, str] = {}
        for name, value in feed_set.feeds.items():
            key = name if len(sets) == 1 and name != META_KEY else f"set{i}.{len(keys)}"
            arrays[key] = value
            keys[name] = key
        meta["sets"].append({"label": feed_set.label, "keys": keys})
    arrays[META_KEY] = np.array(json.dumps(meta))
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".lowerer-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)  # type: ignore[arg-type]
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
