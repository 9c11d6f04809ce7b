"""Constructed input sets for the sampling ops, DeformConv and GridSample: exact integer and border positions.

Random offsets and grids almost never put a sampling point exactly on a pixel or exactly on the border,
where a boundary written off by one (``h >= -1`` for ``h > -1``) changes the result only through
``0 * pixel``: NaN when that pixel is infinite. :func:`sampling_edges` builds the points there
(kind ``sampling-edges``, judged like the seeded kinds; NaN in the output compared by position):

* DeformConv (X ``[N, C, H, W]``, offsets ``[N, 2 * offset_group * kH * kW, H_out, W_out]``): offsets
  that put every sampling row exactly on ``-1`` (then on ``H``), every column on ``-1`` (then ``W``), the
  other coordinate on an integer pixel, with the image row (column) next to that border made of +inf,
  -inf and NaN but for pixel ``(0, 0)``, which onnxruntime's kernel reads with weight 0 for every point
  outside (so a non-finite one there makes every output NaN); then every point on an integer in
  ``[-1, H]`` x ``[-1, W]`` over a tie-heavy image. The sampling position is ``base + offset`` with an
  integer base (``y * stride - pad + i * dilation``), so these offsets land exactly (as the kernel adds them);
* GridSample (4-D X, grid ``[N, H_out, W_out, 2]``): grid coordinates that unnormalize (for the node's
  ``align_corners``) to ``-1``, ``-0.5``, ``0``, an integer inside, ``size - 1``, ``size - 0.5`` and ``size``
  on each axis, over a tie-heavy image, then over the same image with its border rows and columns
  made of +inf, -inf and NaN; then grid points whose coordinate on one axis unnormalizes (in the grid's
  type, as the kernel computes) exactly to ``±2**62`` or to the next value beyond it
  (:data:`COORDINATE_LIMIT`: onnxruntime samples a coordinate beyond it at the axis' lowest one, so a
  limit written inclusive (``<=`` for ``<``) reads another pixel there), over an image of distinct values.

Inputs not given (weights, bias, mask) are generated as ``normal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from lowerer.facts.reference import np_dtype
from lowerer.model_io.node_attributes import int_attribute, ints_attribute

__all__ = ["COORDINATE_LIMIT", "SAMPLED", "sampling_edges"]

#: The ops :func:`sampling_edges` builds sets for.
SAMPLED = frozenset({"DeformConv", "GridSample"})

#: The largest |pixel coordinate| onnxruntime's GridSample kernel samples as it is; beyond it (and NaN) it samples
#: at the axis' lowest coordinate (-0.5, or 0 with align_corners). Measured on onnxruntime 1.32.0 (GridSample-16,
#: float32 and float64: a coordinate of 2**62 is sampled as it is, the next representable value at the lowest one).
#: Stated here apart from the GridSample lowering's own limit: the checks do not take the rules' word for it.
COORDINATE_LIMIT = float(2 ** 62)

Constructed = tuple[str, dict[int, np.ndarray], str]
_NON_FINITE = np.array([np.inf, -np.inf, np.nan])


def _deform_conv(node: onnx.NodeProto, dtype: np.dtype[Any], shapes: Sequence[tuple[int, ...]],
                 rng: np.random.Generator) -> list[Constructed]:
    x_shape, w_shape, o_shape = shapes[0], shapes[1], shapes[2]
    if len(x_shape) != 4 or len(w_shape) != 4 or len(o_shape) != 4 or 0 in x_shape or 0 in o_shape:
        return []
    n, _, height, width = x_shape
    kh, kw = w_shape[2], w_shape[3]
    taps, groups = kh * kw, int_attribute(node, "offset_group", 1)
    if o_shape[1] != 2 * groups * taps:
        return []
    pads, strides = ints_attribute(node, "pads", [0, 0, 0, 0]), ints_attribute(node, "strides", [1, 1])
    dilations = ints_attribute(node, "dilations", [1, 1])
    out_h, out_w = o_shape[2], o_shape[3]
    i, j = np.repeat(np.arange(kh), kw), np.tile(np.arange(kw), kh)
    base_h = (np.arange(out_h)[None, :, None] * strides[0] - pads[0] + i[:, None, None] * dilations[0])
    base_w = (np.arange(out_w)[None, None, :] * strides[1] - pads[1] + j[:, None, None] * dilations[1])
    points = (n, groups, taps, out_h, out_w)

    def offsets(target_h: np.ndarray, target_w: np.ndarray) -> np.ndarray:
        both = np.stack([target_h - base_h, target_w - base_w], axis=3)  # [N, G, taps, 2, H_out, W_out]
        return both.reshape(o_shape).astype(dtype)

    image = rng.integers(-2, 3, size=x_shape).astype(np.float64)
    out: list[Constructed] = []
    for axis, border, line in ((0, -1, 0), (0, height, height - 1), (1, -1, 0), (1, width, width - 1)):
        edged = image.copy()
        index: list[Any] = [slice(None)] * 4
        index[2 + axis] = line
        edged[tuple(index)] = _NON_FINITE[rng.permutation(edged[tuple(index)].size) % 3].reshape(
            edged[tuple(index)].shape)
        edged[:, :, 0, 0] = image[:, :, 0, 0]  # the kernel reads pixel (0, 0) with weight 0 for a point outside
        inside = rng.integers(0, width if axis == 0 else height, size=points)
        on_border = np.full(points, border)
        target = (on_border, inside) if axis == 0 else (inside, on_border)
        out.append(("sampling-edges", {0: edged.astype(dtype), 2: offsets(*target)},
                    "sampling points exactly on the borders -1, H and W next to ±inf and NaN pixels"))
    grid = (rng.integers(-1, height + 1, size=points), rng.integers(-1, width + 1, size=points))
    out.append(("sampling-edges", {0: image.astype(dtype), 2: offsets(*grid)},
                "sampling points exactly on integer pixels and borders"))
    return out


def _unnormalized_pool(size: int, rng: np.random.Generator) -> np.ndarray:
    """Pixel coordinates on one axis: outside, on the borders and on integer pixels."""
    return np.array([-1.0, -0.5, 0.0, float(rng.integers(0, size)), size - 1.0, size - 0.5, float(size)])


def _normalized(pixels: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return pixels * 2.0 / (size - 1) - 1.0 if size > 1 else np.zeros_like(pixels)
    return (2.0 * pixels + 1.0) / size - 1.0


def _unnormalize(g: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    """A normalized coordinate in pixels, in its own type and in the kernel's order of operations."""
    one, two = g.dtype.type(1.0), g.dtype.type(2.0)
    if align_corners:
        return np.asarray((g + one) / two * g.dtype.type(size - 1))
    return np.asarray(((g + one) * g.dtype.type(size) - one) / two)


def _at_limit(target: float, size: int, align_corners: bool, dtype: np.dtype[Any]) -> np.ndarray:
    """The normalized coordinate (of ``dtype``) that unnormalizes to ``target`` exactly, or the nearest found."""
    goal = dtype.type(target)
    g = np.asarray(_normalized(np.array(float(goal)), size, align_corners), dtype)
    best = g
    for _ in range(64):  # a few representable steps from the float64 inverse reach it
        got = _unnormalize(g, size, align_corners)
        if got == goal:
            return g
        if abs(float(got) - float(goal)) < abs(float(_unnormalize(best, size, align_corners)) - float(goal)):
            best = g
        g = np.asarray(np.nextafter(g, dtype.type(np.inf) if got < goal else dtype.type(-np.inf)))
    return best


def _limit_grid(grid: np.ndarray, sizes: tuple[int, int], align_corners: bool) -> np.ndarray:
    """``grid`` with one coordinate of each point unnormalizing to ``±2**62`` or just beyond (x, y in turn).

    The point's other coordinate is put on pixel 0 of its axis: were it outside (the random grid's ``-1`` or
    ``size``), the point would read the padding on both readings of the limit, and the set would show
    nothing on that seed.
    """
    dtype = grid.dtype
    limit = dtype.type(COORDINATE_LIMIT)
    beyond = np.nextafter(limit, dtype.type(np.inf))
    out = grid.reshape(-1, 2).copy()
    for j, target in enumerate((beyond, -beyond, limit, -limit)):  # point k gets target k % 4 on axis k % 2
        axis = j % 2
        if not (align_corners and sizes[axis] == 1):  # else every coordinate unnormalizes to 0
            out[j::4, axis] = _at_limit(float(target), sizes[axis], align_corners, dtype)
            other = 1 - axis
            out[j::4, other] = _normalized(np.array(0.0), sizes[other], align_corners)
    limited: np.ndarray = out.reshape(grid.shape)
    return limited


def _distinct(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """An image of 1, 2, ... 250 in turn (exact in every float type): reading another pixel shows, whatever the seed."""
    values = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64) % 250 + 1
    return values.reshape(shape).astype(np.float64).astype(dtype)


def _grid_sample(node: onnx.NodeProto, dtype: np.dtype[Any], shapes: Sequence[tuple[int, ...]],
                 rng: np.random.Generator) -> list[Constructed]:
    x_shape, g_shape = shapes[0], shapes[1]
    if len(x_shape) != 4 or len(g_shape) != 4 or g_shape[-1] != 2 or 0 in x_shape or 0 in g_shape:
        return []
    height, width = x_shape[2], x_shape[3]
    align = bool(int_attribute(node, "align_corners", 0))
    count = int(np.prod(g_shape[:-1], dtype=np.int64))
    xs, ys = _unnormalized_pool(width, rng), _unnormalized_pool(height, rng)
    pick_x, pick_y = rng.permutation(count) % len(xs), rng.permutation(count) % len(ys)
    grid = np.stack([_normalized(xs[pick_x], width, align), _normalized(ys[pick_y], height, align)], axis=-1)
    grid = grid.reshape(g_shape).astype(dtype)
    image = rng.integers(-2, 3, size=x_shape).astype(np.float64)
    edged = image.copy()
    border = np.zeros((height, width), bool)
    border[[0, -1], :] = True
    border[:, [0, -1]] = True
    mask = np.broadcast_to(border, x_shape)
    edged[mask] = _NON_FINITE[rng.permutation(int(mask.sum())) % 3]
    return [("sampling-edges", {0: image.astype(dtype), 1: grid},
             "grid points exactly on integer pixels, -0.5, 0, size - 1, size - 0.5 and outside"),
            ("sampling-edges", {0: edged.astype(dtype), 1: grid},
             "grid points exactly on integer and border pixels next to ±inf and NaN pixels"),
            ("sampling-edges", {0: _distinct(x_shape, dtype), 1: _limit_grid(grid, (width, height), align)},
             "grid coordinates on ±2**62 and just beyond, where onnxruntime samples at the lowest coordinate")]


def sampling_edges(node: onnx.NodeProto, elems: Sequence[int], shapes: Sequence[tuple[int, ...]],
                   rng: np.random.Generator) -> list[Constructed]:
    """The ``sampling-edges`` sets of a DeformConv or GridSample node (none for other ops or shapes)."""
    if not elems or len(shapes) < (3 if node.op_type == "DeformConv" else 2):
        return []
    dtype = np_dtype(elems[0])
    if dtype.kind != "f":
        return []
    if node.op_type == "DeformConv":
        return _deform_conv(node, dtype, shapes, rng)
    if node.op_type == "GridSample":
        return _grid_sample(node, dtype, shapes, rng)
    return []
