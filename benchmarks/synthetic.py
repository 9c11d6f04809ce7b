"""Synthetic opset-11 models for the speed benchmarks: long elementwise chains with owned ops mixed in.

Per 100 nodes: 10 ArgMax-11 (each followed by a Cast and an Add that feed it back into the chain),
4 Hardmax-11 with various axes, one Unsqueeze-11 + ReduceSum-11 pair (whose axes move from an
attribute to an input at opset 13, so onnx's converter changes their structure) and 64 elementwise
ops (Relu, Add, Mul, Sub, Tanh, Sigmoid, Abs, Neg). The nodes form parallel chains of about 1,000
nodes, each ending in a graph output.
"""

from __future__ import annotations

import random

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["SHAPE", "build_model", "parse_size"]

#: The shape of every float value in the model (rank 4, small: the benchmarks time conversion, not compute).
SHAPE = (2, 3, 4, 5)
_CHAIN = 1000
_UNARY = ("Relu", "Tanh", "Sigmoid", "Abs", "Neg")
_BINARY = ("Add", "Mul", "Sub")


def parse_size(text: str) -> int:
    """``5k`` → 5000, ``1.5m`` → 1500000, ``300`` → 300."""
    text = text.strip().lower()
    scale = {"k": 1_000, "m": 1_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("km")) * scale)


def _block_plan(rng: random.Random) -> list[str]:
    """The kinds of one 100-node block, shuffled."""
    plan = ["argmax"] * 10 + ["hardmax"] * 4 + ["reduce"] + ["unary"] * 32 + ["binary"] * 32
    rng.shuffle(plan)
    return plan


def build_model(n_nodes: int, *, seed: int = 0, value_info: bool = False, opset: int = 11) -> onnx.ModelProto:
    """An opset-``opset`` model with about ``n_nodes`` nodes (see the module docstring).

    With ``value_info`` every intermediate float value gets a typed, shaped ``value_info`` entry;
    without it only the graph inputs and outputs are typed (as in many exported models).
    """
    rng = random.Random(seed)
    consts = [numpy_helper.from_array(np.linspace(-0.9, 0.9, SHAPE[-1], dtype=np.float32) * (k + 1) / 4,
                                      f"c{k}") for k in range(4)]
    nodes: list[onnx.NodeProto] = []
    outputs: list[onnx.ValueInfoProto] = []
    infos: list[onnx.ValueInfoProto] = []
    counter = 0

    def fresh() -> str:
        nonlocal counter
        counter += 1
        return f"v{counter}"

    def add(op: str, inputs: list[str], **attrs: object) -> str:
        out = fresh()
        nodes.append(helper.make_node(op, inputs, [out], name=f"n{len(nodes)}", **attrs))
        return out

    def typed(name: str, elem: int = TensorProto.FLOAT, shape: tuple[int, ...] = SHAPE) -> None:
        if value_info:
            infos.append(helper.make_tensor_value_info(name, elem, list(shape)))

    chain = 0
    while len(nodes) < n_nodes:
        start = len(nodes)
        h = add("Relu", ["x"])
        typed(h)
        while len(nodes) - start < _CHAIN and len(nodes) < n_nodes:
            for kind in _block_plan(rng):
                if kind == "argmax":
                    axis = rng.choice((0, 1, 2, 3, -1, -2))
                    a = add("ArgMax", [h], axis=axis, keepdims=1)
                    shape = tuple(1 if d == axis % 4 else s for d, s in enumerate(SHAPE))
                    typed(a, TensorProto.INT64, shape)
                    f = add("Cast", [a], to=TensorProto.FLOAT)
                    typed(f, TensorProto.FLOAT, shape)
                    h = add("Add", [h, f])
                elif kind == "hardmax":
                    h = add("Hardmax", [h], axis=rng.choice((0, 1, 2, 3, -1, -2, -3)))
                elif kind == "reduce":
                    u = add("Unsqueeze", [h], axes=[0])
                    typed(u, TensorProto.FLOAT, (1, *SHAPE))
                    h = add("ReduceSum", [u], axes=[0], keepdims=0)
                elif kind == "unary":
                    h = add(rng.choice(_UNARY), [h])
                else:
                    h = add(rng.choice(_BINARY), [h, f"c{rng.randrange(4)}"])
                typed(h)
        outputs.append(helper.make_tensor_value_info(h, TensorProto.FLOAT, list(SHAPE)))
        chain += 1
    if value_info:
        seen = {o.name for o in outputs}
        infos = [vi for vi in infos if vi.name not in seen]
        infos = list({vi.name: vi for vi in infos}.values())
    graph = helper.make_graph(nodes, f"synthetic_{n_nodes}", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                            list(SHAPE))],
                              outputs, initializer=consts, value_info=infos)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=7,
                             producer_name="lowerer-benchmark")
