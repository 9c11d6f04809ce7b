"""Lowering of DeformConv-19 (and -22, through its 22 → 19 step) below opset 19.

Written as onnxruntime's CPU kernel computes (``onnxruntime/core/providers/cpu/nn/deform_conv.cc`` and
``deform_conv_attributes.h``, read at microsoft/onnxruntime commit 01fa418c; the 1.32.0 release measured
equal, bit for bit): a deformable im2col, then one GEMM per group, then the bias.
For output position ``(y, x)``, kernel tap ``(i, j)`` and offset group ``g``:

* the sampling position is ``h = (y * stride_h - pad_top + i * dilation_h) + offset[g, i, j, 0, y, x]``
  (the integer base grid is exact in the float type; the one rounding is the offset's addition), ``w``
  likewise with component 1;
* a position with ``h <= -1``, ``h >= H``, ``w <= -1`` or ``w >= W`` samples 0; otherwise ``h_low =
  floor(h)``, ``lh = h - h_low``, ``hh = 1 - lh`` (the same for ``w``), weights ``hh * hw``, ``hh * lw``,
  ``lh * hw``, ``lh * lw`` of the corners ``(h_low, w_low)``, ``(h_low, w_low + 1)``, ``(h_low + 1, w_low)``,
  ``(h_low + 1, w_low + 1)``; a corner outside the image gets weight 0 and reads pixel 0 (as the kernel,
  which then adds ``0 * X[c, 0, 0]``: NaN where that pixel is infinite, reproduced);
* the sample is ``w00 * p00 + w01 * p01 + w10 * p10 + w11 * p11``, summed left to right, times the
  mask when given;
* the columns ``[N, C * kH * kW, H_out * W_out]`` (row ``c * kH * kW + i * kW + j``) meet the weights
  reshaped to ``[group, M / group, C / group * kH * kW]`` in one ``MatMul`` (onnxruntime's MatMul and
  the kernel's ``math::Gemm`` both call MLAS' GEMM with these operands), reshaped to
  ``[N, M, H_out, W_out]``; the bias is added last.

Graph: Reshape/Gather split the offsets, elementwise ops the coordinates and weights, ``GatherElements``
reads the four corners of X reshaped to ``[N, offset_group, C / offset_group, H * W]``, Where zeroes the
outside corners, MatMul convolves. Needs X 4-D with C, H and W static (N may be dynamic) and W's shape
static; float and double (onnxruntime has no float16 DeformConv kernel to measure it against); every
attribute (strides, pads, dilations, group, offset_group, kernel_shape), mask and bias optional. From
opset 11 (GatherElements). NaN offsets are not judged: the kernel indexes with ``(int)floor(NaN)``
(undefined); here such a position samples 0.

Budget. Registered ``budgeted`` (the float32 expansion budget of 8 ulp of the output's scale); measured 0
ulp against onnxruntime 1.32's CPU kernel (float32 and double, random offsets of up to 3 pixels sampling
outside the image, every attribute set of tests/test_lowerings_deform_conv.py): the sampling is the
kernel's arithmetic term for term, and the GEMM the same MLAS call; another runtime's MatMul may sum
in another order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from lowerer.core.remedies import ADD_SHAPES
from lowerer.model_io.node_attributes import attribute_value, int_attribute
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import lowering

__all__ = ["deform_conv_19"]

#: X's element types the lowering takes (onnxruntime's DeformConv kernels: float and double).
_LOWERED_TYPES: dict[int, type[np.floating[Any]]] = {onnx.TensorProto.FLOAT: np.float32,
                                                      onnx.TensorProto.DOUBLE: np.float64}
#: GatherElements, which reads the corners, first exists at 11.
_LOWEST_OPSET = 11
#: Corner offsets (rows, cols) in the kernel's order: 00, 01, 10, 11.
_CORNERS = ((0, 0), (0, 1), (1, 0), (1, 1))


@dataclass(frozen=True)
class _Geometry:
    """One DeformConv node's static sizes and attributes."""

    channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple[int, int]
    pads: tuple[int, int, int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    group: int
    offset_group: int
    dtype: type[np.floating[Any]]

    @property
    def out(self) -> tuple[int, int]:
        """H_out and W_out, as onnxruntime computes them."""
        sizes = []
        for axis, length in enumerate((self.height, self.width)):
            span = self.dilations[axis] * (self.kernel[axis] - 1) + 1
            sizes.append((length + self.pads[axis] + self.pads[axis + 2] - span) // self.strides[axis] + 1)
        return sizes[0], sizes[1]

    @property
    def taps(self) -> int:
        """The number of kernel taps, kH * kW."""
        return self.kernel[0] * self.kernel[1]

    @property
    def positions(self) -> int:
        """The number of output positions, H_out * W_out."""
        return self.out[0] * self.out[1]


def _pair(em: Emitter, name: str, length: int, default: int) -> tuple[int, ...]:
    """Attribute ``name`` as ``length`` ints (absent: ``default`` each), or a refusal naming it."""
    value = attribute_value(em.node, name)
    if value is None:
        return (default,) * length
    assert isinstance(value, list)
    if len(value) != length:
        em.refuse(f"{name}={value} has {len(value)} values, and the lowering covers 2-D DeformConv only "
                  f"({length} values, as onnxruntime's kernel); choose a target opset >= 19")
    return tuple(int(v) for v in value)


def _count(em: Emitter, name: str) -> int:
    """Int attribute ``name`` (absent: 1)."""
    value = int_attribute(em.node, name)
    return 1 if value is None else value


def _static(em: Emitter, name: str, what: str, dims: list[int | None] | None, axes: range) -> list[int]:
    """The dims of ``name`` (4-D), those of ``axes`` static and > 0, or a refusal naming ``what``."""
    if dims is None or len(dims) != 4 or any((dims[a] or 0) < 1 for a in axes):
        shown = "unknown" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        em.refuse(f"{what} {name!r} has shape {shown}, and the lowering needs it 4-D with dims "
                  f"{axes.start}..{axes.stop - 1} static and > 0; {ADD_SHAPES}")
    return [0 if d is None else int(d) for d in dims]


def _element_type(em: Emitter) -> type[np.floating[Any]]:
    """The float type the node computes in, or a refusal naming the input that blocks it."""
    inputs = [name for name in em.node.input if name]
    elem = em.elem_type(inputs[0])
    for name in inputs:
        found = em.elem_type(name)
        if found not in _LOWERED_TYPES or found != elem:
            shown = "unknown" if found is None else onnx.TensorProto.DataType.Name(found).lower()
            em.refuse(f"the element type of input {name!r} is {shown}, and the lowering takes float and double "
                      "(onnxruntime's DeformConv kernels, which it is measured against); choose a target "
                      "opset >= 19")
    assert elem is not None
    return _LOWERED_TYPES[elem]


def _geometry(em: Emitter) -> _Geometry:
    """The node's static sizes and attributes, or a refusal naming the condition that failed."""
    dtype = _element_type(em)
    x, w = em.node.input[0], em.node.input[1]
    _, c, h, wd = _static(em, x, "X", em.dims(x), range(1, 4))
    m, c_group, kh, kw = _static(em, w, "W", em.dims(w), range(0, 4))
    kernel = _pair(em, "kernel_shape", 2, 0)
    if kernel != (0, 0) and kernel != (kh, kw):
        em.refuse(f"kernel_shape={list(kernel)} differs from W's spatial dims [{kh}, {kw}] (onnxruntime refuses "
                  "such a node)")
    group, offset_group = _count(em, "group"), _count(em, "offset_group")
    pads = _pair(em, "pads", 4, 0)
    strides, dilations = _pair(em, "strides", 2, 1), _pair(em, "dilations", 2, 1)
    if min(group, offset_group, *strides, *dilations) < 1 or min(pads) < 0 or c % offset_group \
            or c != c_group * group or m % group:
        em.refuse(f"the node is inconsistent (C={c}, W {[m, c_group, kh, kw]}, group={group}, "
                  f"offset_group={offset_group}, strides={list(strides)}, pads={list(pads)}, "
                  f"dilations={list(dilations)}), and onnxruntime's kernel refuses it too")
    g = _Geometry(c, h, wd, m, (kh, kw), (pads[0], pads[1], pads[2], pads[3]), (strides[0], strides[1]),
                  (dilations[0], dilations[1]), group, offset_group, dtype)
    if min(g.out) < 1:
        em.refuse(f"the output's spatial dims {list(g.out)} are empty, and the lowering needs them > 0")
    if em.target < _LOWEST_OPSET:
        em.refuse(f"the lowering needs GatherElements (opset >= {_LOWEST_OPSET}); the lowest opset this node "
                  f"can be taken to is {_LOWEST_OPSET}")
    return g


class _Builder:
    """Emits the lowering's arithmetic in the node's float type."""

    def __init__(self, em: Emitter, g: _Geometry) -> None:
        self.em = em
        self.g = g

    def num(self, value: float) -> str:
        """A scalar constant of the float type."""
        return self.em.const(np.array(value, dtype=self.g.dtype), "c")

    def ints(self, values: list[int], hint: str) -> str:
        """An int64 constant (a shape, an index)."""
        return self.em.const(np.array(values, dtype=np.int64), hint)

    def op(self, op: str, *inputs: str, **attrs: object) -> str:
        """One node of ``op`` on ``inputs``; its output."""
        return self.em.op(op, list(inputs), None, **attrs)

    def reshape(self, value: str, shape: list[int]) -> str:
        """``value`` reshaped to ``shape`` (a leading 0 copies N)."""
        return self.op("Reshape", value, self.ints(shape, "shape"))


def _base_grid(g: _Geometry, axis: int) -> np.ndarray:
    """``position * stride - pad + tap * dilation`` along ``axis`` (0: rows, 1: cols) as [1, 1, kH*kW, P]."""
    (kh, kw), (out_h, out_w) = g.kernel, g.out
    i, j = np.arange(kh).reshape(kh, 1, 1, 1), np.arange(kw).reshape(1, kw, 1, 1)
    y, x = np.arange(out_h).reshape(1, 1, out_h, 1), np.arange(out_w).reshape(1, 1, 1, out_w)
    tap, position = (i, y) if axis == 0 else (j, x)
    base = np.broadcast_to(position * g.strides[axis] - g.pads[axis] + tap * g.dilations[axis], (kh, kw, out_h, out_w))
    return base.reshape(1, 1, g.taps, g.positions).astype(g.dtype)


def _coordinates(b: _Builder, offset: str) -> tuple[str, str, str]:
    """The sampling rows and cols [N, G_off, kH*kW, P] (0 where outside) and where they are inside."""
    g = b.g
    split = b.reshape(offset, [0, g.offset_group, g.taps, 2, g.positions])
    coordinates = []
    for axis in (0, 1):
        moved = b.op("Gather", split, b.em.const(np.array(axis, dtype=np.int64), "component"), axis=3)
        coordinates.append(b.op("Add", b.em.const(_base_grid(g, axis), "base"), moved))
    h, w = coordinates
    inside = b.op("And",
                  b.op("And", b.op("Greater", h, b.num(-1.0)), b.op("Less", h, b.num(g.height))),
                  b.op("And", b.op("Greater", w, b.num(-1.0)), b.op("Less", w, b.num(g.width))))
    zero = b.num(0.0)
    return b.op("Where", inside, h, zero), b.op("Where", inside, w, zero), inside


def _corners(b: _Builder, h: str, w: str, inside: str) -> list[tuple[str, str]]:
    """Each corner's (weight, flat index) [N, G_off, kH*kW, P], in the kernel's order; 0 and 0 outside."""
    g = b.g
    one = b.num(1.0)
    h_low, w_low = b.op("Floor", h), b.op("Floor", w)
    lh, lw = b.op("Sub", h, h_low), b.op("Sub", w, w_low)
    fractions = ((b.op("Sub", one, lh), lh), (b.op("Sub", one, lw), lw))  # (hh, lh), (hw, lw)
    # a corner's row (col) is inside when h_low >= 0 (low corner) or h_low + 1 < H (high corner)
    rows_ok = (b.op("Greater", h_low, b.num(-1.0)), b.op("Less", h_low, b.num(g.height - 1)))
    cols_ok = (b.op("Greater", w_low, b.num(-1.0)), b.op("Less", w_low, b.num(g.width - 1)))
    flat = b.op("Add", b.op("Mul", b.op("Cast", h_low, to=onnx.TensorProto.INT64),
                            b.em.const(np.array(g.width, dtype=np.int64), "width")),
                b.op("Cast", w_low, to=onnx.TensorProto.INT64))
    zero, zero_index = b.num(0.0), b.em.const(np.array(0, dtype=np.int64), "zero")
    corners = []
    for dr, dc in _CORNERS:
        valid = b.op("And", inside, b.op("And", rows_ok[dr], cols_ok[dc]))
        weight = b.op("Mul", fractions[0][dr], fractions[1][dc])
        step = dr * g.width + dc
        index = flat if step == 0 else b.op("Add", flat, b.em.const(np.array(step, dtype=np.int64), "step"))
        corners.append((b.op("Where", valid, weight, zero), b.op("Where", valid, index, zero_index)))
    return corners


def _columns(b: _Builder, x: str, corners: list[tuple[str, str]], mask: str | None) -> str:
    """The deformable im2col [N, group, C/group * kH*kW, P]: the weighted corners summed, times the mask."""
    g = b.g
    per_group = g.channels // g.offset_group
    image = b.reshape(x, [0, g.offset_group, per_group, g.height * g.width])
    spread = b.ints([1, 1, per_group, 1], "channels")
    total = None
    for weight, index in corners:
        at = b.op("Expand", b.reshape(index, [0, g.offset_group, 1, g.taps * g.positions]), spread)
        pixels = b.reshape(b.op("GatherElements", image, at, axis=3),
                           [0, g.offset_group, per_group, g.taps, g.positions])
        term = b.op("Mul", b.reshape(weight, [0, g.offset_group, 1, g.taps, g.positions]), pixels)
        total = term if total is None else b.op("Add", total, term)
    assert total is not None
    if mask is not None:
        total = b.op("Mul", total, b.reshape(mask, [0, g.offset_group, 1, g.taps, g.positions]))
    return b.reshape(total, [0, g.group, g.channels // g.group * g.taps, g.positions])


def _optional(em: Emitter, index: int) -> str | None:
    """Input ``index`` when the node has it, else None."""
    return em.node.input[index] if len(em.node.input) > index and em.node.input[index] else None


@lowering("DeformConv", 19, budgeted=True)
def deform_conv_19(em: Emitter) -> None:
    """DeformConv-19 (2-D, static C/H/W and W's shape) as bilinear gathers, a MatMul per group and a bias Add."""
    g = _geometry(em)
    b = _Builder(em, g)
    x, weights, offset = em.node.input[0], em.node.input[1], em.node.input[2]
    bias, mask = _optional(em, 3), _optional(em, 4)
    h, w, inside = _coordinates(b, offset)
    columns = _columns(b, x, _corners(b, h, w, inside), mask)
    kernel = b.reshape(weights, [g.group, g.out_channels // g.group, g.channels // g.group * g.taps])
    product = b.op("MatMul", kernel, columns)
    shape = b.ints([0, g.out_channels, *g.out], "out_shape")
    if bias is None:
        em.op("Reshape", [product, shape], list(em.node.output))
        return
    biased = b.reshape(bias, [g.out_channels, 1, 1])
    em.op("Add", [b.op("Reshape", product, shape), biased], list(em.node.output))
