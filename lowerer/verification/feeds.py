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
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx

from lowerer.core.errors import InputError
from lowerer.facts.reference import np_dtype
from lowerer.model_io.scopes import node_graphs
from lowerer.verification.inputs import generate

__all__ = [
    "FeedSet",
    "IndexUse",
    "InputSpec",
    "find_index_uses",
    "generate_sets",
    "load_sets",
    "merge_specs",
    "model_inputs",
    "parse_input_shapes",
    "parse_value_range",
    "save_sets",
]

logger = logging.getLogger(__name__)

_BF16 = np.dtype(ml_dtypes.bfloat16)
#: The kinds of generated input sets, per binding of the dynamic dims.
KINDS = ("normal", "ties", "all-equal")
#: The sizes dynamic dims are bound to (one binding each), unless ``input_shapes`` fixes them all.
SIZES = (1, 2)
#: The key of the metadata entry in a saved ``.npz``.
META_KEY = "__lowerer_inputs__"


@dataclass(frozen=True)
class InputSpec:
    """A graph input: name, element type, dims (an int, or a str naming a dynamic dim)."""

    name: str
    elem_type: int
    dims: tuple[int | str, ...]

    @property
    def dtype(self) -> np.dtype[Any]:
        """The numpy dtype of the element type."""
        return np_dtype(self.elem_type)

    def describe(self) -> str:
        """``ids: int64[batch,seq]``."""
        return f"{self.name}: {_type_name(self.elem_type)}[{','.join(map(str, self.dims))}]"


@dataclass
class FeedSet:
    """One set of inputs for both models, and its label (``normal (ids: int64[1,4])``)."""

    label: str
    feeds: dict[str, np.ndarray]


@dataclass(frozen=True)
class IndexUse:
    """One place an input's values are used as indices: the node, and the size they index (None: unknown).

    ``size_from`` names a graph input and axis when the size is that input's (dynamic) dim.
    """

    node: str
    size: int | None
    size_from: tuple[str, int] | None = None


def _type_name(elem_type: int) -> str:
    try:
        return str(np_dtype(elem_type))
    except Exception:  # an element type numpy has no dtype for
        if elem_type in onnx.TensorProto.DataType.values():
            return str(onnx.TensorProto.DataType.Name(elem_type)).lower()
        return f"type {elem_type}"


def model_inputs(model: onnx.ModelProto) -> list[InputSpec] | str:
    """The graph inputs that need values (not initializers), or why none can be made."""
    inits = {t.name for t in model.graph.initializer} | {s.values.name for s in model.graph.sparse_initializer}
    out: list[InputSpec] = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            return f"graph input {vi.name!r} is not a tensor (lowerer generates tensors only)"
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            return f"graph input {vi.name!r} has no shape (give it with --input-shapes {vi.name}:DIMS)"
        dims: list[int | str] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or f"?{vi.name}:{i}")
                                 for i, d in enumerate(tt.shape.dim)]
        out.append(InputSpec(vi.name, tt.elem_type, tuple(dims)))
    return out


def merge_specs(a: Sequence[InputSpec], b: Sequence[InputSpec], names: tuple[str, str]) -> list[InputSpec] | str:
    """One spec per input for two models that must take the same inputs, or what differs, in words.

    A dim static in one model and dynamic in the other takes the static size.
    """
    by_b = {s.name: s for s in b}
    problems: list[str] = []
    only_a = [s.name for s in a if s.name not in by_b]
    only_b = [s.name for s in b if s.name not in {x.name for x in a}]
    if only_a:
        problems.append(f"{names[0]} takes {_listing(only_a)} which {names[1]} does not")
    if only_b:
        problems.append(f"{names[1]} takes {_listing(only_b)} which {names[0]} does not")
    merged: list[InputSpec] = []
    for sa in a:
        sb = by_b.get(sa.name)
        if sb is None:
            continue
        if sa.elem_type != sb.elem_type:
            problems.append(f"input {sa.name!r} is {_type_name(sa.elem_type)} in {names[0]} and "
                            f"{_type_name(sb.elem_type)} in {names[1]}")
            continue
        if len(sa.dims) != len(sb.dims):
            problems.append(f"input {sa.name!r} has rank {len(sa.dims)} in {names[0]} and rank {len(sb.dims)} "
                            f"in {names[1]}")
            continue
        dims: list[int | str] = []
        for i, (da, db) in enumerate(zip(sa.dims, sb.dims, strict=True)):
            if isinstance(da, int) and isinstance(db, int) and da != db:
                problems.append(f"dim {i} of input {sa.name!r} is {da} in {names[0]} and {db} in {names[1]}")
            dims.append(da if isinstance(da, int) else db)
        merged.append(InputSpec(sa.name, sa.elem_type, tuple(dims)))
    if problems:
        return "; ".join(problems)
    return merged


def _listing(names: Sequence[str]) -> str:
    quoted = [repr(n) for n in names]
    return ("input " if len(quoted) == 1 else "inputs ") + ", ".join(quoted)


# -- option parsing ----------------------------------------------------------------------------------------

def parse_input_shapes(items: Iterable[str]) -> dict[str, tuple[int, ...]]:
    """``name:1x3x224x224`` items (also several per item, separated by spaces or commas) as a mapping.

    The name is everything before the last ``:`` (names may contain ``:``); an empty shape is a scalar.

    Raises:
        InputError: an item without a name or with a dim that is not a whole number >= 0.
    """
    out: dict[str, tuple[int, ...]] = {}
    for item in items:
        for part in item.replace(",", " ").split():
            name, sep, text = part.rpartition(":")
            if not sep or not name:
                raise InputError(f"--input-shapes {part!r}: give NAME:DIMS, e.g. ids:1x128 (dims joined by 'x')")
            dims: list[int] = []
            for d in filter(None, text.lower().split("x")):
                if not d.isdigit():
                    raise InputError(f"--input-shapes {part!r}: dim {d!r} is not a whole number >= 0")
                dims.append(int(d))
            if name in out and out[name] != tuple(dims):
                raise InputError(f"--input-shapes gives input {name!r} two shapes")
            out[name] = tuple(dims)
    return out


def parse_value_range(items: Iterable[str]) -> dict[str, tuple[float, float]]:
    """``name:lo,hi`` items (inclusive) as a mapping; a bare ``lo,hi`` (key ``""``) applies to every other input.

    Raises:
        InputError: malformed numbers, or ``lo > hi``.
    """
    out: dict[str, tuple[float, float]] = {}
    for item in items:
        name, sep, text = item.rpartition(":")
        if not sep:
            name, text = "", item
        bounds = [b.strip() for b in text.strip().strip("[]()").split(",")]
        try:
            if len(bounds) != 2:
                raise ValueError
            low, high = float(bounds[0]), float(bounds[1])
        except ValueError:
            raise InputError(f"--val-range {item!r}: give NAME:LOW,HIGH (inclusive), e.g. ids:0,30521") from None
        if not (np.isfinite(low) and np.isfinite(high)) or low > high:
            raise InputError(f"--val-range {item!r}: LOW and HIGH must be finite numbers with LOW <= HIGH")
        out[name] = (low, high)
    return out


# -- index-like inputs -------------------------------------------------------------------------------------

#: Ops whose index input (position) holds indices into another input (data position, attribute of the axis).
_INDEX_OPS: dict[str, tuple[int, int | None, str | None]] = {
    "Gather": (1, 0, "axis"),
    "GatherElements": (1, 0, "axis"),
    "ScatterElements": (1, 0, "axis"),
    "Scatter": (1, 0, "axis"),
    "GatherND": (1, 0, None),
    "ScatterND": (1, 0, None),
    "OneHot": (0, None, None),  # indices into ``depth`` (input 1), out-of-range ones give zeros
}
#: Ops that pass values through unchanged (only reshaped, moved or selected): input positions that carry them.
_PASS_THROUGH: dict[str, tuple[int, ...] | None] = {
    "Cast": (0,), "CastLike": (0,), "Identity": (0,), "Reshape": (0,), "Unsqueeze": (0,), "Squeeze": (0,),
    "Flatten": (0,), "Expand": (0,), "Transpose": (0,), "Slice": (0,), "Tile": (0,), "Split": (0,),
    "Concat": None, "Gather": (0,), "GatherElements": (0,), "GatherND": (0,), "Where": (1, 2),
}


class _Walker:
    """Follows graph inputs forward to the index inputs they reach."""

    def __init__(self, model: onnx.ModelProto, static: Mapping[str, Sequence[int | None]],
                 graph_inputs: Iterable[str]) -> None:
        self.static = static
        self.graph_inputs = set(graph_inputs)
        self.functions = {(f.domain, f.name): f for f in model.functions}
        self.constants: dict[str, np.ndarray] = {}
        for t in model.graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL and len(t.dims) <= 1:
                with contextlib.suppress(Exception):
                    self.constants[t.name] = onnx.numpy_helper.to_array(t)

    @staticmethod
    def consumers(nodes: Iterable[onnx.NodeProto]) -> dict[str, list[tuple[onnx.NodeProto, int]]]:
        found: dict[str, list[tuple[onnx.NodeProto, int]]] = {}

        def add(node_list: Iterable[onnx.NodeProto]) -> None:
            for node in node_list:
                for k, name in enumerate(node.input):
                    if name:
                        found.setdefault(name, []).append((node, k))
                for g in node_graphs(node):
                    add(g.node)  # bodies read outer values by name

        add(nodes)
        return found

    def uses(self, start: str, nodes: Sequence[onnx.NodeProto], in_function: bool = False,
             depth: int = 0) -> Iterator[IndexUse]:
        table = self.consumers(nodes)
        seen = {start}
        todo = [start]
        while todo:
            value = todo.pop()
            for node, k in table.get(value, []):
                default = node.domain in ("", "ai.onnx")
                spec = _INDEX_OPS.get(node.op_type) if default else None
                if spec is not None and spec[0] == k:
                    yield self._use(node, spec, in_function)
                function = None if default else self.functions.get((node.domain, node.op_type))
                if function is not None:
                    if depth < 8 and k < len(function.input):
                        yield from self.uses(function.input[k], list(function.node), True, depth + 1)
                    continue
                positions = _PASS_THROUGH.get(node.op_type, ())
                if default and (positions is None or k in positions):
                    for out in node.output:
                        if out and out not in seen:
                            seen.add(out)
                            todo.append(out)

    def _use(self, node: onnx.NodeProto, spec: tuple[int, int | None, str | None], in_function: bool) -> IndexUse:
        label = f"{node.op_type} {node.name!r}" if node.name else node.op_type
        _, data_pos, axis_attr = spec
        if node.op_type == "OneHot":
            depth = None if in_function or len(node.input) < 2 else self.constants.get(node.input[1])
            size = int(depth.reshape(-1)[0]) if depth is not None and depth.size else None
            return IndexUse(label, size)
        assert data_pos is not None
        data = node.input[data_pos]
        dims = None if in_function else self.static.get(data)
        if dims is None:
            return IndexUse(label, None)
        if axis_attr is None:  # GatherND / ScatterND: the smallest of the dims the indices may address
            batch = next((int(a.i) for a in node.attribute if a.name == "batch_dims"), 0)
            addressed = list(dims[batch:])
            if not addressed or any(d is None for d in addressed):
                return IndexUse(label, None)
            return IndexUse(label, min(int(d) for d in addressed if d is not None))
        axis = next((int(a.i) for a in node.attribute if a.name == axis_attr), 0)
        if axis < 0:
            axis += len(dims)
        if not 0 <= axis < len(dims):
            return IndexUse(label, None)
        size = dims[axis]
        if size is not None:
            return IndexUse(label, int(size))
        return IndexUse(label, None, (data, axis)) if data in self.graph_inputs else IndexUse(label, None)


def find_index_uses(model: onnx.ModelProto, specs: Sequence[InputSpec]) -> dict[str, list[IndexUse]]:
    """For each graph input that is used as indices (directly or through ops that only move values): where.

    Sizes come from initializers, stated and inferred value types (onnx's shape inference on
    the model without its external data), and graph inputs' own dims.
    """
    static: dict[str, Sequence[int | None]] = {}
    for t in model.graph.initializer:
        static[t.name] = [int(d) for d in t.dims]
    typed = list(model.graph.value_info)
    with contextlib.suppress(Exception):  # shape inference is a help here, never a requirement
        if model.ByteSize() < (1 << 30):
            typed += list(onnx.shape_inference.infer_shapes(model).graph.value_info)
    for vi in typed:
        if vi.name not in static and vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            static[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in vi.type.tensor_type.shape.dim]
    graph_inputs: dict[str, Sequence[int | None]] = {}
    for s in specs:
        graph_inputs[s.name] = [d if isinstance(d, int) else None for d in s.dims]
    static.update(graph_inputs)
    walker = _Walker(model, static, graph_inputs)
    found: dict[str, list[IndexUse]] = {}
    for s in specs:
        if np.dtype(s.dtype).kind not in "iuf":
            continue
        uses = list(walker.uses(s.name, list(model.graph.node)))
        if uses:
            found[s.name] = uses
    return found


def _index_range(uses: Sequence[IndexUse], shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, int, str]:
    """The inclusive range indices may take at every use, and a word on where it comes from."""
    sizes: list[int] = []
    for use in uses:
        if use.size is not None:
            sizes.append(use.size)
        elif use.size_from is not None and use.size_from[0] in shapes:
            name, axis = use.size_from
            sizes.append(shapes[name][axis])
    if not sizes:
        return 0, 0, f"indices for {uses[0].node} into a dim of unknown size: set to 0 (give --val-range)"
    size = min(sizes)
    return 0, max(size - 1, 0), f"indices for {uses[0].node}: 0..{max(size - 1, 0)}"


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
                  value_ranges: Mapping[str, tuple[float, float]] | None = None) -> tuple[list[FeedSet], list[str]]:
    """The generated input sets, and notes on how index-like inputs and ranges were chosen.

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
        for kind in KINDS:
            feeds: dict[str, np.ndarray] = {}
            for spec in specs:
                shape = binding[spec.name]
                dtype = spec.dtype
                integral = dtype.kind in "iu"
                chosen = ranges.get(spec.name)
                why = f"{spec.name}: --val-range {chosen[0]:g},{chosen[1]:g}" if chosen else ""
                if chosen is None and spec.name in uses:
                    low, high, why = _index_range(uses[spec.name], binding)
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
    return sets, notes


def _label(kind: str, specs: Sequence[InputSpec], feeds: Mapping[str, np.ndarray]) -> str:
    parts = [f"{s.name}: {_type_name(s.elem_type)}[{','.join(map(str, feeds[s.name].shape))}]" for s in specs]
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
        raise InputError(f"--load-inputs {p}: holds {_listing(unknown)} that the model does not take "
                         f"(inputs: {', '.join(repr(s.name) for s in specs) or 'none'})")
    if missing:
        raise InputError(f"--load-inputs {p}: lacks {_listing(missing)}")
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
