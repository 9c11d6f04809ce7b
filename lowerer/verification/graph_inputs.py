"""The graph inputs of whole-model checks: their specs, and the user's shapes and ranges for them.

:func:`model_inputs` reads a model's inputs that need values as :class:`InputSpec`; :func:`merge_specs`
makes one list of the two models' (they must agree); :func:`parse_input_shapes` and
:func:`parse_value_range` read ``--input-shapes`` and ``--val-range``. :mod:`.feeds` generates, loads
and saves the input sets (:class:`FeedSet`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from lowerer.core.errors import InputError
from lowerer.facts.reference import np_dtype

__all__ = [
    "FeedSet",
    "InputSpec",
    "listing",
    "merge_specs",
    "model_inputs",
    "parse_input_shapes",
    "parse_value_range",
    "type_name",
]


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
        return f"{self.name}: {type_name(self.elem_type)}[{','.join(map(str, self.dims))}]"


@dataclass
class FeedSet:
    """One set of inputs for both models, and its label (``normal (ids: int64[1,4])``)."""

    label: str
    feeds: dict[str, np.ndarray]


def type_name(elem_type: int) -> str:
    """The element type's name for messages: numpy's dtype name, else onnx's (lowercase)."""
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
        problems.append(f"{names[0]} takes {listing(only_a)} which {names[1]} does not")
    if only_b:
        problems.append(f"{names[1]} takes {listing(only_b)} which {names[0]} does not")
    merged: list[InputSpec] = []
    for sa in a:
        sb = by_b.get(sa.name)
        if sb is None:
            continue
        if sa.elem_type != sb.elem_type:
            problems.append(f"input {sa.name!r} is {type_name(sa.elem_type)} in {names[0]} and "
                            f"{type_name(sb.elem_type)} in {names[1]}")
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


def listing(names: Sequence[str]) -> str:
    """``input 'a'`` or ``inputs 'a', 'b'``: input names for a message."""
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
