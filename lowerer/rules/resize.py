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

import numpy as np
import onnx

from lowerer.steps import generic
from lowerer.steps.changes import InputAdded, OptionalInput, Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.generic import attribute_value, remove_attribute, set_attribute
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
    node = generic.copy_of(em.node)
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


def _scales_of_sizes(em: Emitter, data: str, sizes: str) -> str:
    """Constant scales that give exactly ``sizes``: each size is the data's own dim, or a static dim times an integer.

    An integer ratio is exactly representable, and onnxruntime derives the scale of a sized Resize as
    size / dim, the same value: the same output size and the same coordinate mapping.
    """
    entries = em.facts.shape_entries(sizes)
    dims = em.dims(data)
    if entries is None or dims is None or len(entries) != len(dims):
        em.refuse(f"it is sized by input 'sizes' ({sizes!r}), Resize-10 takes scales only, and the sizes are not "
                  "known in terms of the input's dims (make the input's resized dims static)")
    ratios = []
    for k, (entry, dim) in enumerate(zip(entries, dims, strict=True)):
        if entry == (data, k) or (isinstance(entry, int) and entry == dim):
            ratios.append(1.0)
        elif isinstance(entry, int) and dim and entry % dim == 0:
            ratios.append(float(entry // dim))
        else:
            em.refuse(f"it is sized by input 'sizes' ({sizes!r}) and size {k} is not the input's dim {k} times a "
                      "constant integer (Resize-10 takes scales only; make that dim static)")
    return em.const(np.array(ratios, dtype=np.float32), "scales")


@adapter("Resize", 11, DOWN)
def resize_11_10(em: Emitter, step: Step, direction: str) -> None:
    """Resize-11 → Resize-10 when it uses Resize-10's settings: scales given, asymmetric, floor/ceil nearest."""
    node = generic.copy_of(em.node)
    mode = str(attribute_value(node, "mode") or "nearest")
    if mode not in ("nearest", "linear"):
        em.refuse(f"mode={mode!r}; Resize-10 has nearest and linear only")
    scales = node.input[2] if len(node.input) > 2 else ""
    if len(node.input) > 3 and node.input[3]:
        scales = _scales_of_sizes(em, node.input[0], node.input[3])
    if not scales:
        em.refuse("it has no scales; Resize-10 needs them")
    if mode == "nearest" and _rounds_like_floor(em, node, scales):
        pass
    else:
        _require(em, node, "coordinate_transformation_mode", "asymmetric", "half_pixel", "maps x to x / scale")
    if mode == "nearest" and attribute_value(node, "coordinate_transformation_mode") in (None, "asymmetric"):
        wanted = _nearest_mode(em, scales, "going down")
        _require(em, node, "nearest_mode", wanted, "round_prefer_floor",
                 f"rounds {'down' if wanted == 'floor' else 'up'} on these scales")
    _require(em, node, "exclude_outside", 0, 0, "weighs every sampled position")
    for name in ("coordinate_transformation_mode", "nearest_mode", "exclude_outside", "cubic_coeff_a",
                 "extrapolation_value"):
        remove_attribute(node, name)  # the ones that matter are checked; the others are not read
    node.input[:] = [node.input[0], scales]
    generic.cross(em, step, direction, node, handled=(Semantics, InputAdded))


@adapter("Resize", 13, DOWN, UP)
def resize_13(em: Emitter, step: Step, direction: str) -> None:
    """Down: an omitted roi or scales becomes an empty constant; up: tf_half_pixel_for_nn is refused."""
    node = generic.copy_of(em.node)
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
    """Resize-10 → Upsample (its meaning at 9: the same inputs, modes and coordinate mapping)."""
    node = em.node
    mode = attribute_value(node, "mode")
    em.op("Upsample", list(node.input), list(node.output), mode=None if mode is None else str(mode))


@adapter("Resize", 18, DOWN)
def resize_18_13(em: Emitter, step: Step, direction: str) -> None:
    """``axes`` spread: scales 1 and sizes the input's dims on the axes it leaves out; the rest is generic."""
    node = generic.copy_of(em.node)
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
