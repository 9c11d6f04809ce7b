"""What the installed onnxruntime opens: its opset range, and whether it loads a model.

Shared by the validation gate (:mod:`lowerer.passes.checker_gate`), the onnxruntime policy
(:mod:`lowerer.passes.runtime_gate`) and the placement proof (:mod:`lowerer.backends`).
"""

from __future__ import annotations

import functools

import onnx

__all__ = ["CHECKED_MODELS", "MIN_ORT_OPSET", "check_loads", "max_ort_opset", "ort_supports"]

#: onnxruntime supports default-domain opsets from 7 on (older models may still run, unchecked).
MIN_ORT_OPSET = 7
#: Where the rewrite checker keeps, on the first rewrite of each pattern, its (original, replacement) models.
CHECKED_MODELS = "_checked_models"


@functools.lru_cache(maxsize=1)
def max_ort_opset() -> int:
    """The newest default-domain opset the installed onnxruntime loads (found once by trying)."""
    import onnxruntime

    from lowerer.verification.runner import quiet_session_options

    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "probe",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    best = 1
    for opset in range(onnx.defs.onnx_opset_version(), 0, -1):
        model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)], ir_version=8)
        try:
            onnxruntime.InferenceSession(model.SerializeToString(), quiet_session_options(),
                                         providers=["CPUExecutionProvider"])
        except Exception:
            continue
        best = opset
        break
    return best


def ort_supports(model: onnx.ModelProto) -> bool:
    """Whether onnxruntime supports ``model``'s default-domain opset (7 to the newest it loads)."""
    from lowerer.core.opsets import default_opset

    opset = default_opset(model.opset_import)
    return opset is None or MIN_ORT_OPSET <= opset <= max_ort_opset()


def check_loads(converted: onnx.ModelProto) -> str | None:
    """Why onnxruntime refuses to load ``converted`` (None when it loads, or its opset is beyond onnxruntime)."""
    from lowerer.core.opsets import default_opset

    opset = default_opset(converted.opset_import)
    if opset is not None and not MIN_ORT_OPSET <= opset <= max_ort_opset():
        return None
    import onnxruntime

    from lowerer.verification.runner import quiet_session_options

    try:
        onnxruntime.InferenceSession(converted.SerializeToString(), quiet_session_options(),
                                     providers=["CPUExecutionProvider"])
    except Exception as e:
        return " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")
    return None
