"""Numpy oracles and onnxruntime helpers for the decomposition tests.

The oracles are written from the specification, independently of the rules: Hardmax-1/11
coerce the input to 2-D at ``axis`` (``[prod(d0..d(k-1)), prod(dk..)]``) and mark the first
maximum of each row; Hardmax-13 marks the first maximum along the single dim ``axis``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

NP_TYPES = {
    TensorProto.FLOAT: np.float32,
    TensorProto.FLOAT16: np.float16,
    TensorProto.DOUBLE: np.float64,
    TensorProto.BFLOAT16: ml_dtypes.bfloat16,
}


def hardmax_oracle(x: np.ndarray, axis: int, version: int) -> np.ndarray:
    """Hardmax of ``x`` at ``axis`` with the meaning of ``version`` (1, 11 or 13)."""
    rank = x.ndim
    axis = axis + rank if axis < 0 else axis
    wide = x.astype(np.float64)  # exact for every float type Hardmax takes
    if version < 13:
        rows = math.prod(x.shape[:axis])
        flat = wide.reshape(rows, math.prod(x.shape[axis:]))
        out = np.zeros(flat.shape, dtype=np.float64)
        out[np.arange(rows), np.argmax(flat, axis=1)] = 1  # np.argmax picks the first maximum
        return out.reshape(x.shape).astype(x.dtype)
    index = np.expand_dims(np.argmax(wide, axis=axis), axis)
    out = np.zeros(x.shape, dtype=np.float64)
    np.put_along_axis(out, index, 1.0, axis=axis)
    return out.astype(x.dtype)


def global_max_pool_oracle(x: np.ndarray) -> np.ndarray:
    """GlobalMaxPool: the max over every axis from 2 on, kept."""
    return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


def session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A CPU session with graph optimizations off (opsets below 7 load with a warning)."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def single_op_model(op: str, elem: int, shape: Sequence[int | str | None] | None, opset: int,
                    ir_version: int = 8, out_shape: Sequence[int | str | None] | str | None = "same",
                    rank: int | None = None, **attrs: object) -> onnx.ModelProto:
    """A model ``y = op(x)`` with ``x`` typed ``elem`` and ``shape``.

    ``shape`` None means an unknown rank at the op: onnx's checker wants a shape on every graph
    input, so ``x`` is declared with ``rank`` symbolic dims and reaches the op through
    ``Reshape(x, x_shape)``, ``x_shape`` a graph input of unknown length (feed ``x.shape``;
    :func:`feeds_for` does). ``out_shape`` is the stated shape of ``y``: ``"same"`` as ``x``,
    None for what onnx infers.
    """
    from _convert_helpers import complete_outputs

    nodes = []
    source = "x"
    inputs = [helper.make_tensor_value_info("x", elem, shape)]
    if shape is None:
        assert rank is not None, "an unknown rank needs the actual rank of x"
        inputs = [helper.make_tensor_value_info("x", elem, [f"x{i}" for i in range(rank)]),
                  helper.make_tensor_value_info("x_shape", TensorProto.INT64, ["r"])]
        nodes.append(helper.make_node("Reshape", ["x", "x_shape"], ["x_any_rank"], name="hide_rank"))
        source = "x_any_rank"
    nodes.append(helper.make_node(op, [source], ["y"], name="target", **attrs))
    stated = shape if out_shape == "same" else out_shape
    if shape is None and stated is None:  # a graph output needs a shape: the rank the op keeps
        stated = [f"y{i}" for i in range(rank or 0)]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", elem, stated)])
    return complete_outputs(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                                              ir_version=ir_version))


def feeds_for(model: onnx.ModelProto, x: np.ndarray) -> dict[str, np.ndarray]:
    """The feeds of a :func:`single_op_model`: ``x`` (and its shape when the model hides its rank)."""
    names = {i.name for i in model.graph.input}
    feeds = {"x": x}
    if "x_shape" in names:
        feeds["x_shape"] = np.array(x.shape, dtype=np.int64)
    return feeds


def bf16_as_float(model: onnx.ModelProto) -> onnx.ModelProto:
    """Wrap a model with one bfloat16 input ``x`` and output ``y`` so that it takes and gives float32.

    onnxruntime's Python API cannot feed or fetch bfloat16; the casts are exact for bfloat16 values.
    """
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    x_vi, y_vi = g.input[0], g.output[0]

    def rename_uses(nodes: Sequence[onnx.NodeProto]) -> None:  # subgraphs read x from the outer scope too
        for node in nodes:
            node.input[:] = ["x_bf16" if i == "x" else i for i in node.input]
            for attr in node.attribute:
                for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                    rename_uses(sub.node)

    rename_uses(g.node)
    for node in g.node:
        node.output[:] = ["y_bf16" if o == "y" else o for o in node.output]
    g.node.insert(0, helper.make_node("Cast", ["x"], ["x_bf16"], to=TensorProto.BFLOAT16))
    g.node.append(helper.make_node("Cast", ["y_bf16"], ["y"], to=TensorProto.FLOAT))
    x_vi.type.tensor_type.elem_type = TensorProto.FLOAT
    y_vi.type.tensor_type.elem_type = TensorProto.FLOAT
    g.value_info.append(helper.make_tensor_value_info("x_bf16", TensorProto.BFLOAT16, None))
    return m


def op_types_everywhere(model: onnx.ModelProto) -> list[str]:
    """Every node's op type: main graph, subgraphs (nested) and model-local functions."""
    found: list[str] = []

    def walk(nodes: Sequence[onnx.NodeProto]) -> None:
        for node in nodes:
            found.append(node.op_type)
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g.node)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for g in a.graphs:
                        walk(g.node)

    walk(model.graph.node)
    for f in model.functions:
        walk(f.node)
    return found


def tie_heavy(shape: Sequence[int], dtype: type, seed: int = 0) -> np.ndarray:
    """Small integers as floats (many ties), with +-inf sprinkled in and one all-equal row."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, size=tuple(shape)).astype(np.float64)
    if x.size:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, size=max(1, flat.size // 7))
        flat[picks[: len(picks) // 2]] = np.inf
        flat[picks[len(picks) // 2:]] = -np.inf
        if x.ndim >= 1 and x.shape[-1] > 0:
            x.reshape(-1, x.shape[-1])[0] = 1.0  # an all-equal row
    return x.astype(dtype)
