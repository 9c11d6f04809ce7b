"""Version-step adapters for Upsample and Resize, whose inputs and settings moved between versions.

* ``Upsample`` 9 → 10: Upsample is deprecated at 10 for Resize-10 (the same inputs, modes and
  meaning): up, the node becomes Resize-10; down, an Upsample-10 node (already invalid) is Upsample-9.
* ``Resize`` 10 ↔ 11: Resize-10 maps an output coordinate x to x / scale (``asymmetric``) and, for
  ``nearest``, rounds down on upsampled axes and up on downsampled ones (onnxruntime's kernel).
  Up: an empty ``roi`` goes in before ``scales``, ``coordinate_transformation_mode=asymmetric`` and,
  for nearest, ``nearest_mode`` floor (every resized axis upsampled) or ceil (every one
  downsampled), which needs constant scales. Down: exactly those settings, with scales.
  Also down: ``nearest`` with ``half_pixel`` coordinates and round-to-nearest on integer upsampling
  factors picks exactly what asymmetric floor picks (see :func:`_rounds_like_floor`).
* ``Resize`` 13 ↔ 18: ``axes`` (18) names the axes ``scales``/``sizes`` cover. Down: they are spread
  over every axis, 1 (scales), the input's own dim (sizes: static, else read with Shape) or the
  whole axis (roi: 0 to 1) on the others: the same resize. ``antialias`` and
  ``keep_aspect_ratio_policy`` cross as the generic step.
* ``Resize`` below 10 (lowering): Resize-10 means what Upsample-9 means (the same inputs and modes),
  so it becomes Upsample, which goes on down (Upsample-7 takes constant scales as an attribute).
* ``Resize`` 11 ↔ 13: ``roi`` and ``scales`` became optional at 13. Down: an omitted one becomes an
  empty constant (``roi`` is only read with ``tf_crop_and_resize``; Resize-11 takes an empty
  ``scales`` next to ``sizes``). Up: ``tf_half_pixel_for_nn`` (removed at 13) is refused.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import onnx

from lowerer.core.remedies import ADD_SHAPES, MAKE_CONSTANT
from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, remove_attribute, set_attribute
from lowerer.steps.changes import InputAdded, OptionalInput, Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter, lowering

__all__ = ["resize_10_11", "resize_10_lowering", "resize_11_10", "resize_13", "resize_18_13", "upsample_10"]


@adapter("Upsample", 10, DOWN, UP)
def upsample_10(em: Emitter, step: Step, direction: str) -> None:
    """Upsample-9 → Resize-10 going up (the same meaning); Upsample-10 → Upsample-9 going down."""
    node = em.node
    if direction == DOWN:
        generic.cross(em, step, direction, handled=(Semantics,))
        return
    mode = attribute_value(node, "mode")
    em.op("Resize", list(node.input), list(node.output), mode=None if mode is None else str(mode))


def _nearest_mode(em: Emitter, scales: str, why: str) -> str:
    """``floor`` when every resized axis of the constant ``scales`` upsamples, ``ceil`` when each downsamples."""
    value = em.constant(scales)
    if value is None:
        em.refuse(f"scales {scales!r} are not a constant: Resize-10's nearest rounds down on upsampled axes and "
                  f"up on downsampled ones, and {why} needs to know which")
    resized = value.reshape(-1)[value.reshape(-1) != 1]
    if resized.size == 0 or bool(np.all(resized > 1)):
        return "floor"
    if bool(np.all(resized < 1)):
        return "ceil"
    em.refuse(f"scales {scales!r} = {value.tolist()} upsample some axes and downsample others: Resize-10's nearest "
              "rounds them differently (down, up), which no single nearest_mode of Resize-11 does")


@adapter("Resize", 11, UP)
def resize_10_11(em: Emitter, step: Step, direction: str) -> None:
    """Resize-10 [X, scales] → Resize-11 [X, empty roi, scales], asymmetric, nearest_mode floor or ceil."""
    node = copy_of(em.node)
    mode = str(attribute_value(node, "mode") or "nearest")
    if mode == "nearest":
        set_attribute(node, "nearest_mode", _nearest_mode(em, node.input[1], "Resize-11's nearest_mode"))
    set_attribute(node, "coordinate_transformation_mode", "asymmetric")
    roi = em.const(np.zeros([0], dtype=np.float32), "roi")
    node.input[:] = [node.input[0], roi, node.input[1]]
    generic.cross(em, step, direction, node, handled=(Semantics,))


def _require(em: Emitter, node: onnx.NodeProto, name: str, wanted: object, default: object, why: str) -> None:
    """Refuse unless attribute ``name`` (``default`` when absent) is ``wanted``."""
    value = attribute_value(node, name)
    value = default if value is None else value
    if value != wanted:
        em.refuse(f"{name}={value!r}, and Resize-10 {why} (only {name}={wanted!r} means the same)")


def _rounds_like_floor(em: Emitter, node: onnx.NodeProto, scales: str) -> bool:
    """Whether a half-pixel nearest Resize picks what Resize-10's asymmetric floor picks: integer upsampling.

    With an integer scale s, output x = k*s + j (0 <= j < s) maps to k + (j + 0.5)/s - 0.5, strictly
    within 0.5 of k, so round_prefer_floor and round_prefer_ceil both pick k = floor(x / s).
    """
    ctm = attribute_value(node, "coordinate_transformation_mode") or "half_pixel"
    rounding = attribute_value(node, "nearest_mode") or "round_prefer_floor"
    value = em.constant(scales)
    if ctm not in ("half_pixel", "pytorch_half_pixel") or rounding not in ("round_prefer_floor", "round_prefer_ceil") \
            or value is None or value.size == 0:
        return False
    flat = value.reshape(-1).astype(np.float64)
    return bool(np.all(flat >= 1) and np.all(flat == np.floor(flat)))


def _integer_coordinates(value: np.ndarray) -> bool:
    """Whether every downsampling scale is 1/2^n exactly: x / scale is then the integer x * 2^n, in float too.

    Every nearest_mode picks an integer as it is, so Resize-10's rounding (up, when downsampling) picks the same.
    """
    flat = value.reshape(-1).astype(np.float64)
    down = flat[flat < 1]
    if down.size == 0 or bool(np.any(down <= 0)):
        return False
    inverse = 1.0 / down
    return bool(np.all((inverse == np.floor(inverse)) & (np.frexp(inverse)[0] == 0.5)))


# -- nearest picks, axis by axis -----------------------------------------------------------------------

#: The coordinate modes whose nearest picks :func:`_picks` computes.
_PICKED_MODES = ("asymmetric", "half_pixel", "pytorch_half_pixel")


def _picks(size: int, dim: int, scale: Fraction, scale32: np.float32, ctm: str, rounding: str
           ) -> tuple[np.ndarray, np.ndarray]:
    """The input index each output index of one axis picks: exactly (the spec) and in float32 (onnxruntime).

    ``scale``: the scale as the spec has it (a sized Resize: size / dim); ``scale32``: the float32
    scale onnxruntime computes with. ``rounding`` is a nearest_mode, or ``simple``: Resize-10's
    (down when upsampling, up when downsampling). Both are clamped to the axis, as onnxruntime does.
    """
    x = np.arange(size, dtype=np.int64)
    num, den = scale.numerator, scale.denominator
    # exact: the original coordinate as a fraction n / d with d > 0
    if ctm == "asymmetric":
        n, d = x * den, np.full_like(x, num)
    else:  # (x + 1/2) / scale - 1/2 = ((2x + 1) * den - num) / (2 * num)
        n, d = (2 * x + 1) * den - num, np.full_like(x, 2 * num)
        if ctm == "pytorch_half_pixel" and size <= 1:
            n = np.zeros_like(x)
    floor = np.floor_divide(n, d)
    rem2 = 2 * (n - floor * d)  # twice the fraction, times d
    x32 = x.astype(np.float32)
    if ctm == "asymmetric":
        f = x32 / scale32
    else:
        f = (x32 + np.float32(0.5)) / scale32 - np.float32(0.5)
        if ctm == "pytorch_half_pixel" and size <= 1:
            f = np.zeros_like(f)
    f_floor = np.floor(f)
    half = (f - f_floor) == np.float32(0.5)
    if rounding == "simple":
        rounding = "ceil" if scale < 1 else "floor"
    if rounding == "floor":
        exact, fast = floor, f_floor
    elif rounding == "ceil":
        exact, fast = floor + (rem2 > 0), np.ceil(f)
    elif rounding == "round_prefer_ceil":
        exact, fast = floor + (rem2 >= d), np.where(half, f_floor + 1, np.round(f))
    else:  # round_prefer_floor
        exact, fast = floor + (rem2 > d), np.where(half, f_floor, np.round(f))
    return np.clip(exact, 0, dim - 1), np.clip(fast.astype(np.int64), 0, dim - 1)


def _same_picks(em: Emitter, node: onnx.NodeProto, dims: list[int], scales: list[tuple[Fraction, np.float32]]
                ) -> None:
    """Refuse unless Resize-10 (asymmetric, its rounding) picks what ``node`` picks on every resized axis.

    ``dims``: the input's static dims; ``scales``: per axis, the scale as the spec has it and the
    float32 scale Resize-10 gets. Compared exactly and in float32, output index by output index.
    """
    ctm = str(attribute_value(node, "coordinate_transformation_mode") or "half_pixel")
    rounding = str(attribute_value(node, "nearest_mode") or "round_prefer_floor")
    if ctm not in _PICKED_MODES:
        em.refuse(f"coordinate_transformation_mode={ctm!r}, and Resize-10 maps x to x / scale (only "
                  "coordinate_transformation_mode='asymmetric' means the same)")
    for axis, (dim, (scale, scale32)) in enumerate(zip(dims, scales, strict=True)):
        if scale == 1:
            continue
        size = int(np.floor(np.float32(dim) * scale32))
        theirs = _picks(size, dim, scale, scale32, ctm, rounding)
        ours = _picks(size, dim, Fraction(float(scale32)), scale32, "asymmetric", "simple")
        for mine, other in ((ours[0], theirs[0]), (ours[1], theirs[1]), (ours[0], ours[1])):
            wrong = np.flatnonzero(mine != other)
            if wrong.size:
                i = int(wrong[0])
                em.refuse(f"on axis {axis} ({dim} -> {size}) its nearest picks ({ctm}, {rounding}) differ from "
                          f"Resize-10's (asymmetric, rounding {'up' if scale < 1 else 'down'}): output index {i} "
                          f"takes input index {int(theirs[0][i])}, Resize-10's {int(ours[0][i])}")


def _scales_of_sizes(em: Emitter, data: str, sizes: str, mode: str) -> tuple[str, list[Fraction], list[int] | None]:
    """Constant scales that give exactly ``sizes``: the input's dims, or static dims times or divided by integers.

    Returns the scales' name, each axis's scale as the spec has it (size / dim), and the input's dims
    when every resized one is static. onnxruntime derives the scale of a sized Resize as
    float(size) / float(dim), the same float32 as the constant made here: the same output size and
    coordinate mapping; ``linear`` needs that float32 to be the ratio exactly (an integer, or 1/2^n).
    """
    entries = em.facts.shape_entries(sizes)
    dims = em.dims(data)
    if dims is None:
        em.refuse(f"it is sized by input 'sizes' ({sizes!r}), Resize-10 takes scales only, and the rank of the input "
                  f"{data!r} is unknown; {ADD_SHAPES}")
    if entries is None or len(entries) != len(dims):
        em.refuse(f"it is sized by input 'sizes' ({sizes!r}), Resize-10 takes constant scales only, and the sizes are "
                  f"computed at run time; {MAKE_CONSTANT}")
    ratios: list[Fraction] = []
    for k, (entry, dim) in enumerate(zip(entries, dims, strict=True)):
        if entry == (data, k) or (isinstance(entry, int) and entry == dim):
            ratios.append(Fraction(1))
            continue
        if not isinstance(entry, int):
            em.refuse(f"it is sized by input 'sizes' ({sizes!r}), Resize-10 takes constant scales only, and the size "
                      f"of axis {k} is computed at run time; {MAKE_CONSTANT}")
        if dim is None:
            em.refuse(f"it is sized by input 'sizes' ({sizes!r}) and resizes axis {k} to {entry} while the input's "
                      f"axis {k} is dynamic, and Resize-10 takes scales only (the scale is {entry} / that dim); "
                      f"{ADD_SHAPES}")
        if dim == 0 or entry == 0 or (entry % dim and dim % entry):
            em.refuse(f"it is sized by input 'sizes' ({sizes!r}) and resizes axis {k} from {dim} to {entry}, not by "
                      "an integer factor or divisor: Resize-10 takes scales only, and no float scale gives that "
                      "size and that coordinate mapping exactly")
        ratio = Fraction(entry, dim)
        scale32 = np.float32(entry) / np.float32(dim)
        if int(np.float32(dim) * scale32) != entry or int(dim * Fraction(float(scale32))) != entry:
            em.refuse(f"it is sized by input 'sizes' ({sizes!r}) and resizes axis {k} from {dim} to {entry}, and "
                      f"Resize-10's scale {float(scale32)!r} gives another size")
        if mode != "nearest" and Fraction(float(scale32)) != ratio:
            em.refuse(f"it is sized by input 'sizes' ({sizes!r}) and resizes axis {k} from {dim} to {entry} "
                      f"({mode}): the scale {ratio} has no exact float32, and Resize-10 takes scales only")
        ratios.append(ratio)
    scales = np.array([np.float32(r.numerator) / np.float32(r.denominator) for r in ratios], dtype=np.float32)
    static = [d for d in dims if d is not None]
    return em.const(scales, "scales"), ratios, static if len(static) == len(dims) else None


@adapter("Resize", 11, DOWN)
def resize_11_10(em: Emitter, step: Step, direction: str) -> None:
    """Resize-11 → Resize-10 when it computes what Resize-10 does: the same scales, coordinates and nearest picks.

    The scales are constant, or sizes that are static dims times or divided by integers. Nearest
    picks are compared output index by output index where the resized dims are static (exactly and
    in float32, :func:`_same_picks`); else by rule: asymmetric with the rounding Resize-10 has (down
    on upsampled axes, up on downsampled ones), any rounding where every coordinate is an integer
    (:func:`_integer_coordinates`), or half-pixel integer upsampling (:func:`_rounds_like_floor`).
    """
    node = copy_of(em.node)
    mode = str(attribute_value(node, "mode") or "nearest")
    if mode not in ("nearest", "linear"):
        em.refuse(f"mode={mode!r}; Resize-10 has nearest and linear only")
    data = node.input[0]
    scales = node.input[2] if len(node.input) > 2 else ""
    ratios: list[Fraction] | None = None
    dims: list[int] | None = None
    if len(node.input) > 3 and node.input[3]:
        scales, ratios, dims = _scales_of_sizes(em, data, node.input[3], mode)
    if not scales:
        em.refuse("it has no scales; Resize-10 needs them")
    value = em.constant(scales)
    if mode == "nearest" and value is not None and value.size:
        flat = value.reshape(-1).astype(np.float32)
        if dims is None:
            known = em.dims(data)
            resized = [k for k in range(flat.size) if flat[k] != 1]
            if known is not None and len(known) == flat.size and all(known[k] is not None for k in resized):
                dims = [1 if d is None else d for d in known]
        if dims is not None and len(dims) == flat.size:
            spec = ratios or [Fraction(float(s)) for s in flat]
            _same_picks(em, node, dims, list(zip(spec, flat, strict=True)))
        elif not _rounds_like_floor(em, node, scales):
            _require(em, node, "coordinate_transformation_mode", "asymmetric", "half_pixel", "maps x to x / scale")
            if not _integer_coordinates(flat):
                wanted = _nearest_mode(em, scales, "going down")
                _require(em, node, "nearest_mode", wanted, "round_prefer_floor",
                         f"rounds {'down' if wanted == 'floor' else 'up'} on these scales")
    else:
        _require(em, node, "coordinate_transformation_mode", "asymmetric", "half_pixel", "maps x to x / scale")
        if mode == "nearest":
            _nearest_mode(em, scales, "going down")  # refuses: the scales are not a constant
    _require(em, node, "exclude_outside", 0, 0, "weighs every sampled position")
    for name in ("coordinate_transformation_mode", "nearest_mode", "exclude_outside", "cubic_coeff_a",
                 "extrapolation_value"):
        remove_attribute(node, name)  # the ones that matter are checked; the others are not read
    node.input[:] = [node.input[0], scales]
    generic.cross(em, step, direction, node, handled=(Semantics, InputAdded))


@adapter("Resize", 13, DOWN, UP)
def resize_13(em: Emitter, step: Step, direction: str) -> None:
    """Down: an omitted roi or scales becomes an empty constant; up: tf_half_pixel_for_nn is refused."""
    node = copy_of(em.node)
    if direction == UP:
        if attribute_value(node, "coordinate_transformation_mode") == "tf_half_pixel_for_nn":
            em.refuse("coordinate_transformation_mode='tf_half_pixel_for_nn' was removed at Resize-13, and no "
                      "other mode maps coordinates the same way")
        generic.cross(em, step, direction, node, handled=(Semantics,))
        return
    while len(node.input) < 3:
        node.input.append("")
    for index in (1, 2):
        if not node.input[index]:
            node.input[index] = em.const(np.zeros([0], dtype=np.float32), ("roi", "scales")[index - 1])
    generic.cross(em, step, direction, node, handled=(Semantics, OptionalInput))


@lowering("Resize", 10)
def resize_10_lowering(em: Emitter) -> None:
    """Resize-10 → Upsample (its meaning at 9: the same inputs, modes and coordinate mapping), for scales >= 1.

    Upsample takes scales of 1 or more only (its schema; onnxruntime refuses others): constant scales
    that downsample an axis are refused.
    """
    node = em.node
    value = em.constant(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if value is not None and value.size and bool(np.any(value.reshape(-1) < 1)):
        axis = int(np.flatnonzero(value.reshape(-1) < 1)[0])
        em.refuse(f"it downsamples axis {axis} (scale {float(value.reshape(-1)[axis])!r}), and below opset 10 "
                  "Resize is Upsample, which takes scales of 1 or more only")
    mode = attribute_value(node, "mode")
    em.op("Upsample", list(node.input), list(node.output), mode=None if mode is None else str(mode))


@adapter("Resize", 18, DOWN)
def resize_18_13(em: Emitter, step: Step, direction: str) -> None:
    """``axes`` spread: scales 1 and sizes the input's dims on the axes it leaves out; the rest is generic."""
    node = copy_of(em.node)
    axes = attribute_value(node, "axes")
    if isinstance(axes, list):
        rank = em.require_rank(node.input[0], "to spread the scales or sizes of 'axes' over every axis")
        picked = [int(a) + rank if int(a) < 0 else int(a) for a in axes]
        if len(node.input) > 1 and node.input[1]:
            node.input[1] = _spread_roi(em, node.input[1], picked, rank)
        if len(node.input) > 2 and node.input[2]:
            node.input[2] = _spread_scales(em, node.input[2], picked, rank)
        if len(node.input) > 3 and node.input[3]:
            node.input[3] = _spread_sizes(em, node.input[0], node.input[3], picked, rank)
        remove_attribute(node, "axes")
    generic.cross(em, step, direction, node)


def _spread_roi(em: Emitter, roi: str, axes: list[int], rank: int) -> str:
    """The roi of ``axes`` (starts, then ends) spread over every axis: the whole axis (0 to 1) elsewhere."""
    value = em.constant(roi)
    if value is None:
        em.refuse(f"it resizes only axes {axes}, and its roi {roi!r} is not a constant to spread over every axis")
    flat = value.reshape(-1)
    if flat.size == 0:
        return roi
    full = np.concatenate([np.zeros(rank), np.ones(rank)]).astype(value.dtype)
    full[axes] = flat[:len(axes)]
    full[[rank + a for a in axes]] = flat[len(axes):]
    return em.const(full, "roi")


def _spread_scales(em: Emitter, scales: str, axes: list[int], rank: int) -> str:
    value = em.constant(scales)
    if value is None:
        em.refuse(f"it resizes only axes {axes}, and its scales {scales!r} are not a constant to spread over "
                  "every axis (Resize-13 has no 'axes')")
    full = np.ones(rank, dtype=value.dtype)
    full[axes] = value.reshape(-1)
    return em.const(full, "scales")


def _spread_sizes(em: Emitter, x: str, sizes: str, axes: list[int], rank: int) -> str:
    value, dims = em.constant(sizes), em.dims(x) or [None] * rank
    if value is not None and all(dims[k] is not None for k in range(rank) if k not in axes):
        full = np.array([0 if d is None else d for d in dims], dtype=np.int64)
        full[axes] = value.reshape(-1)
        return em.const(full, "sizes")
    # The input's own dims, read at run time, with the given sizes scattered in at ``axes``.
    shape = em.op("Shape", [x])
    order = [k for k in range(rank) if k not in axes] + axes
    parts = em.op("Concat", [em.op("Gather", [shape, em.const(np.array([k for k in range(rank) if k not in axes],
                                                                      dtype=np.int64), "kept")], axis=0),
                             em.op("Cast", [sizes], to=onnx.TensorProto.INT64)], axis=0)
    inverse = np.argsort(np.array(order)).astype(np.int64)
    return em.op("Gather", [parts, em.const(inverse, "order")], axis=0)
