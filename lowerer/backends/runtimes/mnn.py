"""MNN (Alibaba): the model converted by MNN's converter, run with the session API at high precision on the CPU.

The converter is the C entry ``_tools.mnnconvert`` (what ``MNN.tools.mnnconvert`` wraps), never the
``mnnconvert`` script or ``MNN.tools``: importing ``MNN.tools.utils.log`` runs ``pip install -U
aliyun-log-python-sdk`` and the script posts a usage record (``MNN/tools/mnnconvert.py``,
``MNN/tools/utils/log.py`` of MNN 3.6.1). Inputs go in as float32 (float types), int32 (integer
types, as MNN holds them) or uint8 (bool); outputs are read back in the NCHW (Caffe) layout, int32 ones as
int64 (MNN's converter holds ONNX's int64 as int32: a model's own int32 output then reads as int64), and a bool
output as int32 0 and 1 (``BOOL_AS_INT``: the witness reads it back as bool). Loaded by
path in the witness worker: imports only the standard library, numpy and MNN.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import tempfile
from typing import Any

NAME = "MNN"
#: Kernels that compute ±inf and NaN otherwise than onnxruntime (the deployment check records such a set, not judges).
NONFINITE = (
    ("MatMul", "MNN's MatMul clamps ±inf to ±3.4e38 (the largest float32) and makes no NaN of inf * 0, where "
               "onnxruntime gives ±inf and NaN",
     "measured on MNN 3.6.1 CPU, precision high (2026-12-02): MatMul-13 of [[inf, 1, 0], [-inf, 0, 1], [1, 2, 3]] "
     "and [[0, 1], [1, 0], [2, -1]] gives [[-3.4e38, 3.4e38], [-3.4e38, -3.4e38], [8, -2]], onnxruntime 1.32.0 CPU "
     "[[nan, inf], [nan, -inf], [8, -2]]; tests/fixtures/real/linear_attention.dynamo.opset20.onnx's inf set "
     "departs first at its node_MatMul_3"),
)
#: MNN holds bool tensors as int32 (measured 2026-12-02, MNN 3.6.1: Not(LessOrEqual(x, +inf)) comes back int32 0/1).
BOOL_AS_INT = True
LABEL = "MNN"
DEVICE = "CPU (session API, precision high)"
DISTRIBUTION = "MNN"
INSTALL = "pip install MNN (convert with _tools.mnnconvert, not the mnnconvert script)"
BACKENDS = ("mnn",)
BUDGET = 1e-5
BUDGET_SOURCE = "the probe budget (precision high: float32 kernels)"


def version(param: str) -> dict[str, str]:
    """MNN's version (ImportError: not installed)."""
    from importlib import metadata

    importlib.import_module("MNN")
    return {"version": metadata.version(DISTRIBUTION)}


@contextlib.contextmanager
def _quiet() -> Any:
    """The converter's and engine's prints on stdout sent to stderr (the worker's stdout is its answer)."""
    saved = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def load(model: str, param: str) -> Any:
    """The model converted to MNN's format, in a file next to it; an interpreter on that file."""
    mnn = importlib.import_module("MNN")
    tools = importlib.import_module("_tools")  # registered by MNN's engine module
    target = os.path.join(tempfile.mkdtemp(prefix="lowerer-mnn-", dir=os.path.dirname(model)), "model.mnn")
    with _quiet():
        done = tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", model, "--MNNModel", target,
                                 "--bizCode", "lowerer"])
    if not done or not os.path.exists(target):
        raise RuntimeError("MNN's converter failed (see its log)")
    return mnn.Interpreter(target)


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """A CPU session at high precision."""
    with _quiet():
        return loaded, loaded.createSession({"precision": "high", "backend": "CPU"})


def _tensor(mnn: Any, value: Any) -> Any:
    import numpy as np

    kind = value.dtype.kind
    if kind == "f":
        return mnn.Tensor(value.shape, mnn.Halide_Type_Float, np.ascontiguousarray(value, np.float32),
                          mnn.Tensor_DimensionType_Caffe)
    if kind == "b":
        return mnn.Tensor(value.shape, mnn.Halide_Type_Uint8, np.ascontiguousarray(value, np.uint8),
                          mnn.Tensor_DimensionType_Caffe)
    return mnn.Tensor(value.shape, mnn.Halide_Type_Int, np.ascontiguousarray(value, np.int32),
                      mnn.Tensor_DimensionType_Caffe)


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run; the outputs wanted by name (the model's when None)."""
    import numpy as np

    mnn = importlib.import_module("MNN")
    interpreter, session = prepared
    with _quiet():
        for name, value in feeds.items():
            interpreter.resizeTensor(interpreter.getSessionInput(session, name), tuple(value.shape))
        interpreter.resizeSession(session)
        for name, value in feeds.items():
            interpreter.getSessionInput(session, name).copyFrom(_tensor(mnn, np.asarray(value)))
        interpreter.runSession(session)
        found = interpreter.getSessionOutputAll(session)
        values = []
        for name in names or list(found):
            if name not in found:
                raise RuntimeError(f"MNN has no output {name!r}")
            host = mnn.Tensor(found[name], mnn.Tensor_DimensionType_Caffe)
            found[name].copyToHostTensor(host)
            value = np.array(host.getNumpyData(), copy=True)
            values.append(value.astype(np.int64) if value.dtype == np.int32 else value)
    return values
