"""Build the example model shipped with lowerer: opset 11 with Hardmax-11, ArgMax-11, GlobalMaxPool.

Run ``python examples/make_example.py`` to regenerate ``examples/example_opset11.onnx``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def build() -> onnx.ModelProto:
    """A small image-classifier-like head that exercises every op lowerer owns."""
    w = numpy_helper.from_array(np.linspace(-1, 1, 8 * 3 * 3 * 3, dtype=np.float32).reshape(8, 3, 3, 3), "conv_w")
    nodes = [
        helper.make_node("Conv", ["image", "conv_w"], ["features"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["features"], ["relu"], name="relu"),
        helper.make_node("GlobalMaxPool", ["relu"], ["pooled"], name="pool"),
        helper.make_node("Hardmax", ["relu"], ["hard"], name="hardmax_axis1", axis=1),
        helper.make_node("Softmax", ["relu"], ["soft"], name="softmax_axis2", axis=2),
        helper.make_node("ArgMax", ["relu"], ["best_channel"], name="argmax_channel", axis=1, keepdims=0),
        helper.make_node("ArgMax", ["relu"], ["best_col"], name="argmax_last", axis=-1, keepdims=1),
    ]
    graph = helper.make_graph(
        nodes,
        "example",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [
            helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", 8, 1, 1]),
            helper.make_tensor_value_info("hard", TensorProto.FLOAT, ["batch", 8, 8, 8]),
            helper.make_tensor_value_info("soft", TensorProto.FLOAT, ["batch", 8, 8, 8]),
            helper.make_tensor_value_info("best_channel", TensorProto.INT64, ["batch", 8, 8]),
            helper.make_tensor_value_info("best_col", TensorProto.INT64, ["batch", 8, 8, 1]),
        ],
        initializer=[w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], ir_version=7,
                              producer_name="lowerer-example")
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    out = Path(__file__).with_name("example_opset11.onnx")
    onnx.save(build(), out)
    print(f"wrote {out}")
