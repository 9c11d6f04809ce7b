"""GridSample: the version-step adapter 16 ↔ 20, and the lowering of GridSample-16 below opset 16.

Adapter. GridSample-20 renamed ``bilinear`` → ``linear`` (the new default) and ``bicubic`` → ``cubic``
(``nearest`` kept), and accepts X of any rank >= 3 where GridSample-16 took 4-D X only. Up: rename
(an absent ``mode`` means the default on both sides). Down: rename back; X must be 4-D.

Lowering (GridSample-20/22 step down to 16 through the adapter first). X [N, C, H_in, W_in] with
H_in, W_in static (N, C, H_out, W_out may be dynamic), float or double; modes ``bilinear`` and
``nearest``, padding ``zeros`` and ``border``, either ``align_corners``; from opset 11 (GatherElements,
Round). ``bicubic`` and ``reflection`` are refused. Written as onnxruntime 1.32's CPU kernel computes:

* unnormalize: align_corners=1: ``(g + 1) / 2 * (W_in - 1)``; 0: ``((g + 1) * W_in - 1) / 2``; a
  coordinate that is NaN, infinite or beyond ``±2**62`` is sampled at the axis' lowest coordinate
  (-0.5, or 0 with align_corners), as the kernel does (measured);
* nearest: ``Round`` (half to even, the kernel's ``nearbyint``) and the pixel there;
* bilinear: ``x1 = floor(x)``, ``x2 = x1 + 1``, weights ``x2 - x`` and ``x - x1`` (the same for y);
* the neighbours are read by ``GatherElements`` on X reshaped to [N, C, H_in * W_in] at the flat
  index ``y * W_in + x`` (broadcast over C with Expand). Zeros padding: an index outside the image is
  replaced by 0 for the gather and its pixel by 0 with ``Where`` (never a weight times a possibly
  infinite pixel); border padding: the index is clamped into the image (the coordinates are not);
* the sum in the kernel's order: ``dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22)``,
  except zeros padding without align_corners, where onnxruntime's precomputed path adds
  ``w11 * p11 + w12 * p12 + w21 * p21 + w22 * p22`` (``w11 = dy2 * dx2`` ...) and gives 0 where no
  neighbour is inside.

Budget. Nearest is exact. Bilinear measured 0 ulp against onnxruntime 1.32's CPU kernel (float32,
random images and grids in [-1.2, 1.2], every padding and align_corners); it is registered
``budgeted`` because other kernels sum in another order: onnxruntime's own two orders differ by up
to 3 ulp of the output's scale, within the float32 expansion budget of 8 ulp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from lowerer.core.remedies import ADD_SHAPES
from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, set_attribute
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter, lowering

__all__ = ["grid_sample_16", "grid_sample_20"]

#: GridSample-16 mode → GridSample-20 mode.
_UP_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest"}
_DOWN_MODES = {new: old for old, new in _UP_MODES.items()}


@adapter("GridSample", 20, DOWN, UP)
def grid_sample_20(em: Emitter, step: Step, direction: str) -> None:
    """Rename ``mode`` across the step; going down, X must be 4-D (GridSample-16's only form)."""
    node = copy_of(em.node)
    renames = _DOWN_MODES if direction == DOWN else _UP_MODES
    mode = attribute_value(node, "mode")
    if mode is not None:
        if mode not in renames:
            em.refuse(f"mode={mode!r} has no GridSample-{step.previous if direction == DOWN else step.version} "
                      f"name (those are {sorted(renames.values())})")
        set_attribute(node, "mode", renames[str(mode)])
    if direction == DOWN:
        rank = em.require_rank(node.input[0], "(GridSample-16 takes 4-D X only)")
        if rank != 4:
            em.refuse(f"X is {rank}-D and GridSample-16 takes 4-D X only (N, C, H, W); "
                      "choose a target opset >= 20")
    generic.cross(em, step, direction, node, handled=(Semantics,))


# -- lowering below 16 (see the module docstring) -----------------------------------------------------
#: X's element types the lowering takes (onnxruntime's GridSample kernels: float and double).
_LOWERED_TYPES: dict[int, type[np.floating[Any]]] = {onnx.TensorProto.FLOAT: np.float32,
                                                      onnx.TensorProto.DOUBLE: np.float64}
#: The ops the lowering needs first exist at 11 (GatherElements, Round).
_LOWEST_OPSET = 11
#: The largest |pixel coordinate| onnxruntime samples as it is (beyond, and NaN: at the axis' lowest coordinate).
_COORDINATE_LIMIT = float(2 ** 62)


@dataclass(frozen=True)
class _Sampling:
    """What one GridSample-16 node samples: X's static height and width, its float type and attributes."""

    height: int
    width: int
    dtype: type[np.floating[Any]]
    mode: str
    padding: str
    align_corners: bool


def _sampling(em: Emitter) -> _Sampling:
    """The node's attributes and X's static spatial dims, or a refusal naming the condition that failed."""
    x, grid = em.node.input[0], em.node.input[1]
    mode = str(attribute_value(em.node, "mode") or "bilinear")
    padding = str(attribute_value(em.node, "padding_mode") or "zeros")
    if mode not in ("bilinear", "nearest"):
        em.refuse(f"mode={mode!r} is not lowered (bilinear and nearest are); choose a target opset >= 16")
    if padding not in ("zeros", "border"):
        em.refuse(f"padding_mode={padding!r} is not lowered (zeros and border are); choose a target opset >= 16")
    if em.target < _LOWEST_OPSET:
        em.refuse(f"the lowering needs GatherElements and Round (opset >= {_LOWEST_OPSET}); the lowest opset "
                  f"this node can be taken to is {_LOWEST_OPSET}")
    for name in (x, grid):
        elem = em.elem_type(name)
        if elem not in _LOWERED_TYPES:
            found = "unknown" if elem is None else onnx.TensorProto.DataType.Name(elem).lower()
            em.refuse(f"the element type of input {name!r} is {found}, and the lowering takes float and double "
                      "(onnxruntime's GridSample kernels)")
    if em.elem_type(x) != em.elem_type(grid):
        em.refuse(f"X {x!r} and grid {grid!r} have different element types, and the lowering computes in one")
    dims = em.dims(x)
    if dims is None or len(dims) != 4 or not isinstance(dims[2], int) or not isinstance(dims[3], int) \
            or min(dims[2], dims[3]) < 1:
        shown = "unknown" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        em.refuse(f"X {x!r} has shape {shown}, and the lowering needs its H_in and W_in (dims 2 and 3) static "
                  f"and > 0; {ADD_SHAPES}")
    elem = em.elem_type(x)
    assert elem is not None
    return _Sampling(int(dims[2]), int(dims[3]), _LOWERED_TYPES[elem], mode, padding,
                     bool(attribute_value(em.node, "align_corners") or 0))


class _Builder:
    """Emits the lowering's arithmetic in X's float type, on [N, 1, H_out * W_out] coordinate planes."""

    def __init__(self, em: Emitter, s: _Sampling) -> None:
        self.em = em
        self.s = s

    def num(self, value: float) -> str:
        """A scalar constant of X's float type."""
        return self.em.const(np.array(value, dtype=self.s.dtype), "c")

    def op(self, op: str, *inputs: str, **attrs: object) -> str:
        """One node of ``op`` on ``inputs``; its output."""
        return self.em.op(op, list(inputs), None, **attrs)

    def plane(self, grid: str, component: int) -> str:
        """Component ``component`` (0: x, 1: y) of the grid as an [N, 1, H_out * W_out] plane."""
        em = self.em
        picked = self.op("Gather", grid, em.const(np.array(component, dtype=np.int64), "component"), axis=3)
        flat = self.op("Flatten", picked, axis=1)
        return self.op("Unsqueeze", flat, em.const(np.array([1], dtype=np.int64), "axes"))

    def denormalize(self, g: str, length: int) -> str:
        """The normalized coordinate ``g`` in pixels, rounded as onnxruntime's ``GsDenormalize`` does."""
        one, two = self.num(1.0), self.num(2.0)
        if self.s.align_corners:  # (n + 1) / 2 * (length - 1)
            return self.op("Mul", self.op("Div", self.op("Add", g, one), two), self.num(length - 1))
        # ((n + 1) * length - 1) / 2
        return self.op("Div", self.op("Sub", self.op("Mul", self.op("Add", g, one), self.num(length)), one), two)

    def sanitize(self, x: str) -> str:
        """``x`` where ``|x| <= 2**62``, else (NaN, infinities, huge) the axis' lowest coordinate, as onnxruntime does.

        onnxruntime 1.32 samples such a coordinate at ``x_min`` (-0.5, or 0 with align_corners), which
        also keeps every later int64 conversion in range.
        """
        limit = np.nextafter(self.s.dtype(_COORDINATE_LIMIT), self.s.dtype(np.inf))
        inside = self.op("Less", self.op("Abs", x), self.num(float(limit)))
        return self.op("Where", inside, x, self.num(0.0 if self.s.align_corners else -0.5))

    def index(self, at: str, length: int) -> tuple[str, str | None]:
        """The pixel index ``at`` (an int64-like float) reads along an axis of ``length``, and whether it is inside.

        Zeros padding: an outside index reads 0 (the validity is returned, the index made 0 for the gather);
        border padding: it is clamped into [0, length - 1] (validity None).
        """
        zero = self.num(0.0)
        if self.s.padding == "zeros":
            valid = self.op("And", self.op("Greater", at, self.num(-1.0)), self.op("Less", at, self.num(length)))
            return self.op("Cast", self.op("Where", valid, at, zero), to=onnx.TensorProto.INT64), valid
        low = self.op("Where", self.op("Greater", at, zero), at, zero)
        top = self.num(length - 1)
        return self.op("Cast", self.op("Where", self.op("Less", low, top), low, top), to=onnx.TensorProto.INT64), None


def _both(b: _Builder, a: str | None, c: str | None) -> str | None:
    """The And of two validity masks (None: always valid)."""
    if a is None or c is None:
        return a if c is None else c
    return b.op("And", a, c)


def _pixels(b: _Builder, image: str, channels: str, row: str, col: str, valid: str | None) -> str:
    """X's pixels at flat index ``row * W_in + col`` as [N, C, P]; 0 where ``valid`` is false."""
    flat = b.op("Add", b.op("Mul", row, b.em.const(np.array(b.s.width, dtype=np.int64), "width")), col)
    gathered = b.op("GatherElements", image, b.op("Expand", flat, channels), axis=2)
    return gathered if valid is None else b.op("Where", valid, gathered, b.num(0.0))


def _channels(em: Emitter, x: str) -> str:
    """The Expand shape [1, C, 1] that broadcasts an [N, 1, P] index over X's channels."""
    dims = em.dims(x)
    if dims is not None and dims[1] is not None:
        return em.const(np.array([1, dims[1], 1], dtype=np.int64), "channels")
    c = _slice(em, em.op("Shape", [x]), 1, 2)
    one = em.const(np.array([1], dtype=np.int64), "one")
    return em.op("Concat", [one, c, one], axis=0)


def _nearest(b: _Builder, image: str, channels: str, x: str, y: str) -> str:
    """``nearbyint`` (half to even: Round) of each coordinate, then the pixel there."""
    col, vx = b.index(b.op("Round", x), b.s.width)
    row, vy = b.index(b.op("Round", y), b.s.height)
    return _pixels(b, image, channels, row, col, _both(b, vy, vx))


def _bilinear(b: _Builder, image: str, channels: str, x: str, y: str) -> str:
    """The kernel's bilinear sum over the four neighbours, term for term in its order and rounding."""
    corners: dict[str, tuple[str, str | None]] = {}
    weights: dict[str, str] = {}
    for axis, coordinate, length in (("x", x, b.s.width), ("y", y, b.s.height)):
        low = b.op("Floor", coordinate)
        high = b.op("Add", low, b.num(1.0))
        weights[axis + "2"] = b.op("Sub", high, coordinate)  # dx2 = x2 - x
        weights[axis + "1"] = b.op("Sub", coordinate, low)  # dx1 = x - x1
        corners[axis + "1"], corners[axis + "2"] = b.index(low, length), b.index(high, length)
    p: dict[str, str] = {}
    masks: list[str] = []
    for r in "12":
        for c in "12":
            (row, vy), (col, vx) = corners["y" + r], corners["x" + c]
            valid = _both(b, vy, vx)
            masks += [] if valid is None else [valid]
            p[r + c] = _pixels(b, image, channels, row, col, valid)
    dx1, dx2, dy1, dy2 = weights["x1"], weights["x2"], weights["y1"], weights["y2"]
    if b.s.padding == "zeros" and not b.s.align_corners:
        # onnxruntime's precomputed path: w11 * p11 + w12 * p12 + w21 * p21 + w22 * p22, 0 where no
        # neighbour is inside.
        terms = [b.op("Mul", b.op("Mul", wy, wx), p[k])
                 for k, wy, wx in (("11", dy2, dx2), ("12", dy2, dx1), ("21", dy1, dx2), ("22", dy1, dx1))]
        total = b.op("Add", b.op("Add", b.op("Add", terms[0], terms[1]), terms[2]), terms[3])
        inside = b.op("Or", b.op("Or", masks[0], masks[1]), b.op("Or", masks[2], masks[3]))
        return b.op("Where", inside, total, b.num(0.0))
    # dy2 * (dx2 * p11 + dx1 * p12) + dy1 * (dx2 * p21 + dx1 * p22)
    top = b.op("Add", b.op("Mul", dx2, p["11"]), b.op("Mul", dx1, p["12"]))
    bottom = b.op("Add", b.op("Mul", dx2, p["21"]), b.op("Mul", dx1, p["22"]))
    return b.op("Add", b.op("Mul", dy2, top), b.op("Mul", dy1, bottom))


def _slice(em: Emitter, shape: str, start: int, end: int) -> str:
    """``shape[start:end]``."""
    return em.op("Slice", [shape, em.const(np.array([start], dtype=np.int64), "start"),
                           em.const(np.array([end], dtype=np.int64), "end")])


def _reshape_out(em: Emitter, sampled: str, x: str, grid: str) -> None:
    """``sampled`` [N, C, H_out * W_out] reshaped into the node's output [N, C, H_out, W_out].

    With H_out and W_out static and > 0 the shape is the constant [0, 0, H_out, W_out] (N and C
    copied); else it is read from X's and the grid's shapes, with ``allowzero=1`` so that a 0 in it
    means an empty dim (the Reshape 14 → 13 adapter keeps that exact below 14).
    """
    dims = em.dims(grid)
    if dims is not None and isinstance(dims[1], int) and isinstance(dims[2], int) and min(dims[1], dims[2]) > 0:
        shape = em.const(np.array([0, 0, dims[1], dims[2]], dtype=np.int64), "out_shape")
        em.op("Reshape", [sampled, shape], list(em.node.output))
        return
    shape = em.op("Concat", [_slice(em, em.op("Shape", [x]), 0, 2), _slice(em, em.op("Shape", [grid]), 1, 3)], axis=0)
    em.op("Reshape", [sampled, shape], list(em.node.output), allowzero=1)


@lowering("GridSample", 16, budgeted=True)
def grid_sample_16(em: Emitter) -> None:
    """GridSample-16 (4-D X, static H_in and W_in) with Gather/GatherElements and elementwise arithmetic."""
    s = _sampling(em)
    x, grid = em.node.input[0], em.node.input[1]
    b = _Builder(em, s)
    image = em.op("Reshape", [x, em.const(np.array([0, 0, s.height * s.width], dtype=np.int64), "image_shape")])
    channels = _channels(em, x)
    px = b.sanitize(b.denormalize(b.plane(grid, 0), s.width))
    py = b.sanitize(b.denormalize(b.plane(grid, 1), s.height))
    sampled = (_nearest if s.mode == "nearest" else _bilinear)(b, image, channels, px, py)
    _reshape_out(em, sampled, x, grid)
