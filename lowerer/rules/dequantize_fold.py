"""A DequantizeLinear of constants, folded into the float constant it computes (``fold_dequantize``).

Per-channel QDQ models (onnxruntime's ``quantize_static(..., per_channel=True)``) dequantize their
weights and biases with per-axis scales, which came at DequantizeLinear-13; int16/uint16/int4/uint4
came at 21, float8 at 19, blocks (``block_size``) at 21. Where the target's DequantizeLinear cannot
express such a node and the caller asks for it (``--fold-dequantize``), a node whose inputs are all
constants is replaced by the tensor it computes: the model keeps float weights there. From opset 10
the tensor is multiplied by a ``DequantizeLinear`` of 1, so that onnxruntime's default optimizations
do not quantize it again (see :data:`KEPT_FROM`).

The value is onnxruntime's, bit for bit. Its CPU kernel (microsoft/onnxruntime,
``onnxruntime/core/providers/cpu/quantization/quantize_linear.cc``, ``DequantizeLinearApply``) computes
each element as ``static_cast<OutT>(static_cast<float>(static_cast<int32_t>(x) - zp) * scale)`` with
``zp = static_cast<int32_t>(zero_point)`` and ``scale`` converted to float: the difference in int32, that
difference rounded to float32, one float32 product, then rounded to the output type (float or float16);
float8 inputs are ``x.ToFloat() * scale`` (their zero point must be 0, as for int32). A 1-element scale
is per-tensor (``IsScalarOr1ElementVector``); a 1-D one runs along ``axis``; with ``block_size`` each scale
covers ``block_size`` consecutive elements along ``axis``. :func:`folded` computes the same in numpy
(float32 arithmetic is IEEE single precision there too), and the engine's verifier checks each fold
against onnxruntime running the original node.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter

__all__ = ["KEPT_FROM", "REQUANTIZE", "fold_or_refuse", "folded"]

T = onnx.TensorProto
#: Integer element types: ``(x - zero_point)`` in int32.
_INTEGERS = frozenset(getattr(T, n) for n in ("INT8", "UINT8", "INT16", "UINT16", "INT32", "INT4", "UINT4",
                                                "INT2", "UINT2") if hasattr(T, n))
#: Float8 element types: ``x`` as float (zero point 0).
_FLOAT8 = frozenset({T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ})
#: Scale (output) types onnxruntime's kernel computes with (it has no bfloat16 output).
_SCALES: dict[int, type[np.floating]] = {T.FLOAT: np.float32, T.FLOAT16: np.float16}

#: From this opset (DequantizeLinear-10) a folded value is multiplied by a ``DequantizeLinear`` of 1 (onnxruntime
#: does not constant-fold a DequantizeLinear in a QDQ model: ``ConstantFolding``'s ``skip_dequantize_linear``,
#: ``onnxruntime/core/optimizer/constant_folding.cc``), so that with its default session options onnxruntime
#: sees no float initializer where a QDQ Conv, ConvTranspose or Gemm takes its weight or bias: its
#: ``WeightBiasQuantization`` (``onnxruntime/core/optimizer/qdq_transformer/weight_bias_quantization.cc``, a
#: level-1 transformer) would quantize such a float weight again (per tensor: other values than the verified
#: ones) and a float bias with a ``Round`` node, which below opset 11 makes the model fail to load ("No Op
#: registered for Round with domain_version of 10").
KEPT_FROM = 10
#: What works without the fold, for a model made by a quantizer.
REQUANTIZE = "re-quantize with 8-bit per-tensor types"
#: The remedy of a DequantizeLinear the target cannot express whose inputs are constants.
FOLD = f"{REQUANTIZE}, or give --fold-dequantize (API: fold_dequantize=True) to keep float weights"


def _name(elem: int | None) -> str:
    return "unknown" if elem is None else str(T.DataType.Name(elem)).lower()


def folded(x: np.ndarray, x_type: int, scale: np.ndarray, scale_type: int, zero_point: np.ndarray | None,
           axis: int, block_size: int) -> np.ndarray | str:
    """What onnxruntime's DequantizeLinear computes from these constants, or why it cannot be folded.

    Args:
        x: the quantized tensor (as onnx's ``numpy_helper`` reads it: ml_dtypes for int4 and float8).
        x_type: its element type (``TensorProto``).
        scale: the scale.
        scale_type: its element type (the output's).
        zero_point: the zero point, or None.
        axis: the ``axis`` attribute (default 1).
        block_size: the ``block_size`` attribute (0: per-tensor or per-axis).

    Returns:
        The float32 or float16 value, or one phrase saying why it is not folded.
    """
    out = _SCALES.get(scale_type)
    if out is None:
        return f"its scale is {_name(scale_type)}, and onnxruntime's kernel computes float and float16 only"
    if x_type not in _INTEGERS and x_type not in _FLOAT8:
        return f"its input is {_name(x_type)}, which it does not fold"
    spread = _spread(x.shape, scale.shape, axis, block_size)
    if isinstance(spread, str):
        return spread
    if zero_point is not None and zero_point.shape != scale.shape and not zero_point.size == scale.size == 1:
        return f"its zero point's shape {list(zero_point.shape)} is not its scale's {list(scale.shape)}"
    if x_type in _FLOAT8 or x_type == T.INT32:
        if zero_point is not None and np.any(zero_point.astype(np.float32) != 0):
            return f"a {_name(x_type)} input takes no zero point but 0 (onnxruntime refuses it)"
        zero_point = None
    if x_type in _FLOAT8:
        values = x.astype(np.float32)
    else:
        diff = x.astype(np.int64) - (0 if zero_point is None else spread(zero_point.astype(np.int64)))
        if diff.size and (diff.min() < np.iinfo(np.int32).min or diff.max() > np.iinfo(np.int32).max):
            return "x - zero_point overflows int32 (onnxruntime's kernel subtracts in int32)"
        values = diff.astype(np.int32).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # inf and nan as the kernel makes them (0 * inf, overflow)
        product = values * spread(scale.astype(np.float32))
        return np.asarray(product.astype(out), dtype=out)


def _spread(shape: tuple[int, ...], scale_shape: tuple[int, ...], axis: int,
            block_size: int) -> Callable[[np.ndarray], np.ndarray] | str:
    """A function broadcasting a scale-shaped array to ``shape``, or why the shapes do not fit."""
    rank = len(shape)
    if int(np.prod(scale_shape)) == 1 and len(scale_shape) <= 1:  # onnxruntime: IsScalarOr1ElementVector
        if block_size:
            return "a per-tensor scale takes block_size 0 (onnxruntime refuses it)"
        return lambda a: a.reshape(())
    if not -rank <= axis < rank:
        return f"axis {axis} is outside the input's rank {rank}"
    axis += rank if axis < 0 else 0
    if not block_size:
        if scale_shape != (shape[axis],):
            return f"its scale's shape {list(scale_shape)} is not [{shape[axis]}] (axis {axis})"
        return lambda a: a.reshape([1] * axis + [shape[axis]] + [1] * (rank - axis - 1))
    blocks = -(-shape[axis] // block_size)
    if scale_shape != (*shape[:axis], blocks, *shape[axis + 1:]):
        return f"its scale's shape {list(scale_shape)} does not fit blocks of {block_size} along axis {axis}"
    return lambda a: np.repeat(a, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def fold_or_refuse(em: Emitter, why: str, fits: str = REQUANTIZE) -> None:
    """Replace ``em.node`` by the constant it computes (``em.fold_dequantize``), or refuse saying ``why``.

    Without the option, the refusal names it where the node's inputs are constants (``fits`` otherwise).
    The constant is an initializer named as the node's output (a Constant node in a function).
    """
    node = em.node
    inputs = list(node.input[:3])
    values = [em.constant(n) if n else None for n in inputs]
    runtime = next((n for n, v in zip(inputs, values, strict=True) if n and v is None), None)
    if not em.fold_dequantize:
        em.refuse(f"{why}; {fits if runtime is not None else FOLD}")
    if runtime is not None:
        em.refuse(f"{why}, and --fold-dequantize folds only a DequantizeLinear of constants, but input "
                  f"{runtime!r} is not one (a graph input or computed at run time); {fits}")
    x, scale = values[0], values[1]
    assert x is not None and scale is not None
    zero_point = values[2] if len(values) > 2 else None
    output_dtype = int_attribute(node, "output_dtype", 0) or 0
    scale_type = em.elem_type(inputs[1])
    if output_dtype and output_dtype != scale_type:
        em.refuse(f"{why}, and --fold-dequantize does not fold output_dtype {_name(output_dtype)} other than the "
                  f"scale's type; {fits}")
    value = folded(x, em.elem_type(inputs[0]) or 0, scale, scale_type or 0, zero_point,
                   int_attribute(node, "axis", 1) or 0, int_attribute(node, "block_size", 0) or 0)
    if isinstance(value, str):
        em.refuse(f"{why}, and --fold-dequantize cannot fold it: {value}; {fits}")
    if em.target >= KEPT_FROM:
        _kept_from_optimizer(em, value)
        return
    tensor = numpy_helper.from_array(value, node.output[0])
    if em.scope.graph is None:
        em.op("Constant", [], [node.output[0]], value=tensor)
    else:
        em.constants.append(tensor)  # the value under the output's name: no node left


def _kept_from_optimizer(em: Emitter, value: np.ndarray) -> None:
    """The folded ``value`` times a one that onnxruntime's optimizer does not fold: ``Mul(value, DQ(1))``.

    See :data:`KEPT_FROM`. ``v * 1`` is ``v`` bit for bit (signed zeros, infinities and NaN included).
    """
    one = em.op("DequantizeLinear", [em.const(np.array(1, np.uint8), "one_q"),
                                     em.const(np.array(1.0, np.float32), "one_scale")])
    if value.dtype != np.float32:
        one = em.op("Cast", [one], to=T.FLOAT16)
    em.op("Mul", [em.const(value, "folded"), one], [em.node.output[0]])
