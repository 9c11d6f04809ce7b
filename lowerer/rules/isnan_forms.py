"""IsNaN's exact forms, for runtimes that fail on IsNaN or compute it wrongly (``--for BACKEND``).

* :class:`IsNaNEqualForm` (``isnan-equal``): ``Not(Equal(x, x))``: NaN is the one value unequal to itself;
* :class:`IsNaNOrderedForm` (``isnan-ordered``): ``Not(LessOrEqual(x, +inf))``: NaN is the one value not
  ordered below or at +inf, for a runtime whose Equal says a NaN equals itself (MNN 3.6.1).

Both are exact under IEEE 754 (every comparison with a NaN is false; -inf, +inf and ±0 compare as numbers).
"""

from __future__ import annotations

import numpy as np
import onnx

from lowerer.steps.emitter import Emitter, Rule

__all__ = ["IsNaNEqualForm", "IsNaNOrderedForm"]

T = onnx.TensorProto
#: Float types cast exactly to float32 (a NaN stays a NaN) before the comparison: float16 and bfloat16, and from
#: Cast-19 the float8 types.
_FLOAT8 = frozenset({T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ})


class IsNaNEqualForm(Rule):
    """``IsNaN(x)`` → ``Not(Equal(x, x))``, exactly: NaN is the one value unequal to itself (IEEE 754).

    OpenVINO 2023.0's CPU plugin turns a transformer's ``IsNaN`` over a Softmax into an Eltwise on bool
    and fails to compile it; Equal + Not compile there. Equal takes floats from opset 11 (bfloat16 from
    13); a float8 input (IsNaN-20) has no Equal: refused.
    """

    name = "isnan-equal"
    op_types = ("IsNaN",)
    versions = (9, 13, 20)
    decomposition = "isnan-equal"

    def rewrite(self, em: Emitter) -> None:
        """Emit ``Not(Equal(x, x))`` for ``em.node``."""
        node = em.node
        elem = em.elem_type(node.input[0])
        floats = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16}
        if em.target >= 13:
            floats.add(onnx.TensorProto.BFLOAT16)
        if elem not in floats or em.target < 11:
            shown = "unknown" if elem is None else onnx.TensorProto.DataType.Name(elem)
            em.refuse(f"the isnan-equal form needs Equal on the input's type ({shown}): float16, float and double "
                      "from opset 11, bfloat16 from 13")
        same = em.op("Equal", [node.input[0], node.input[0]])
        em.op("Not", [same], list(node.output))


class IsNaNOrderedForm(Rule):
    """``IsNaN(x)`` → ``Not(LessOrEqual(x, +inf))``, exactly: every value but NaN is at most +inf (IEEE 754).

    MNN 3.6.1's converter fails on IsNaN, and its ``Equal(x, x)`` is true on a NaN (the ``isnan-equal`` form is
    wrong there); its LessOrEqual against +inf is right on NaN, ±inf, ±0 and finite values (measured). float32
    and double are compared as they are; float16, bfloat16 and (from opset 19) the float8 types are cast to
    float32 first, exactly. Below opset 12 (no LessOrEqual) ``x <= +inf`` is ``Or(Less(x, +inf),
    Greater(x, max))``, ``max`` the largest finite value of the type (only +inf is above it). Other types are
    refused.
    """

    name = "isnan-ordered"
    op_types = ("IsNaN",)
    versions = (9, 13, 20)
    decomposition = "isnan-ordered"

    def rewrite(self, em: Emitter) -> None:
        """Emit ``Not(LessOrEqual(x, +inf))`` for ``em.node`` (widened first where the type needs it)."""
        node = em.node
        x, elem = node.input[0], em.elem_type(node.input[0])
        widen = {T.FLOAT16} | ({T.BFLOAT16} if em.target >= 13 else set()) | (_FLOAT8 if em.target >= 19 else set())
        if elem not in {T.FLOAT, T.DOUBLE} | widen or em.target < 9:
            shown = "unknown" if elem is None else T.DataType.Name(elem)
            em.refuse(f"the isnan-ordered form compares the input ({shown}) with +inf: float and double from opset 9, "
                      "float16 cast to float, bfloat16 from 13, the float8 types from 19")
        if elem in widen:
            x, elem = em.op("Cast", [x], to=T.FLOAT), T.FLOAT
        dtype = np.float64 if elem == T.DOUBLE else np.float32
        inf = em.const(np.array(np.inf, dtype), "inf")
        if em.target >= 12:
            ordered = em.op("LessOrEqual", [x, inf])
        else:
            top = em.const(np.array(np.finfo(dtype).max, dtype), "max")
            ordered = em.op("Or", [em.op("Less", [x, inf]), em.op("Greater", [x, top])])
        em.op("Not", [ordered], list(node.output))
