"""Small models that hold one side of a rewrite, ready for onnxruntime."""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from lowerer.core.opsets import MAX_IR_VERSION

__all__ = ["small_model"]

#: (name, element type, dims with None for a dynamic dim, or None for an unknown rank)
InputSpec = tuple[str, int, "Sequence[int | None] | None"]


def small_model(nodes: Sequence[onnx.NodeProto], constants: Sequence[onnx.TensorProto], inputs: Sequence[InputSpec],
                outputs: Sequence[str], opset: int) -> onnx.ModelProto:
    """A model running ``nodes`` at default-domain ``opset``.

    Dynamic dims become distinct symbolic dims; outputs carry no type (onnxruntime infers
    them); ``constants`` become initializers.
    """
    graph_inputs = []
    for k, (name, elem, dims) in enumerate(inputs):
        shape = None if dims is None else [d if d is not None else f"d{k}_{i}" for i, d in enumerate(dims)]
        graph_inputs.append(helper.make_tensor_value_info(name, elem, shape))
    graph_outputs = [onnx.ValueInfoProto(name=o) for o in outputs]
    graph = helper.make_graph(list(nodes), "lowerer_check", graph_inputs, graph_outputs, initializer=list(constants))
    imports = [helper.make_opsetid("", opset)]
    try:
        needed = helper.find_min_ir_version_for(imports, ignore_unknown=True)
    except Exception:  # pragma: no cover - very old onnx
        needed = 7
    return helper.make_model(graph, opset_imports=imports, ir_version=min(max(int(needed), 7), MAX_IR_VERSION),
                             producer_name="lowerer-verify")
