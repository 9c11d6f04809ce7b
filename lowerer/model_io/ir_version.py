"""The IR version a converted model is written with, and why.

With a target opset the output's IR version is the lowest that its opsets (onnx's
``helper.VERSION_TABLE``: opset 9 goes with IR 4, 11 with 6, 13 with 7 ...) and the features the
model uses allow; the user may name one instead (``ir_version=``, ``--ir-version N``), which is
refused in one line when a feature the model uses cannot be expressed at it. Without a target
opset the model's IR version is kept (raised where its opsets or features need more). An import of a
domain no node uses does not count (:func:`lowerer.model_io.imports.counted_imports`).

The features (``onnx/onnx.proto``'s history of IR versions) that hold the IR version up:
initializers that are not graph inputs (4: IR 3 requires every initializer to be a graph input;
lowerer does not make them inputs, which a caller could then feed, so it stops at 4), bfloat16 (4),
quantization annotations (5), sparse tensors (6), training information (7), model-local
functions, optional and sparse tensor types (8), function attribute defaults and float8 (9),
overloads and int4 (10), float4 and device configurations (11), float8e8m0 (12), int2 (13).
``metadata_props`` on nodes, graphs and functions (IR 10) are annotations that change no
computation and that older readers skip: they are kept and do not hold the IR version up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import onnx

from lowerer.core.errors import ConversionError, InputError
from lowerer.core.opsets import MAX_IR_VERSION
from lowerer.model_io.imports import counted_imports

__all__ = ["MIN_IR_VERSION", "IrChoice", "check_ir_version", "choose", "lowest_for_opsets", "needed_features"]

#: The oldest IR version lowerer writes (the first with ``opset_import``).
MIN_IR_VERSION = 3

_T = onnx.TensorProto
#: Element types, by the IR version that introduced them.
_TYPE_IR: dict[int, int] = {_T.BFLOAT16: 4}
_TYPE_IR.update(dict.fromkeys((_T.FLOAT8E4M3FN, _T.FLOAT8E4M3FNUZ, _T.FLOAT8E5M2, _T.FLOAT8E5M2FNUZ), 9))
_TYPE_IR.update(dict.fromkeys((_T.UINT4, _T.INT4), 10))
_TYPE_IR.update({getattr(_T, n): ir for n, ir in (("FLOAT4E2M1", 11), ("FLOAT8E8M0", 12), ("UINT2", 13),
                                                   ("INT2", 13), ("FLOAT6E2M3", 14), ("FLOAT6E3M2", 14))
                 if hasattr(_T, n)})

_A = onnx.AttributeProto
#: Records a feature and the IR version it needs.
_Need = Callable[[int, str], None]


@dataclass(frozen=True)
class IrChoice:
    """The IR version chosen for an output, and the reason in words (for the report)."""

    version: int
    reason: str


def check_ir_version(value: object) -> int | None:
    """An IR version the user names (``ir_version=``): None, or an integer lowerer can write.

    Raises:
        InputError: not an integer, or outside :data:`MIN_IR_VERSION`..:data:`MAX_IR_VERSION`.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"ir_version must be an integer or None, not {value!r}")
    if not MIN_IR_VERSION <= value <= MAX_IR_VERSION:
        raise InputError(f"IR version {value} is out of range: lowerer writes IR versions {MIN_IR_VERSION} to "
                         f"{MAX_IR_VERSION}")
    return value


def lowest_for_opsets(opset_imports: object) -> int:
    """The lowest IR version the opset imports allow (onnx's ``VERSION_TABLE``)."""
    try:
        needed = int(onnx.helper.find_min_ir_version_for(list(opset_imports), ignore_unknown=True))  # type: ignore[call-overload]
    except Exception:  # a domain this onnx does not know: no bound from it
        needed = MIN_IR_VERSION
    return max(needed, MIN_IR_VERSION)


def needed_features(model: onnx.ModelProto, above: int) -> list[tuple[int, str]]:
    """The features ``model`` uses that need an IR version above ``above``: (IR version, feature), highest first.

    The model-level features are always looked at; the graphs, nodes and types only when ``above``
    is below the model's IR version (a model's features do not exceed the IR version it states,
    which onnx's checker holds the input to).
    """
    found: dict[str, int] = {}

    def need(ir: int, what: str) -> None:
        if ir > above and what not in found:
            found[what] = ir

    _model_features(model, need, deep=above < model.ir_version)
    return sorted(((ir, what) for what, ir in found.items()), key=lambda f: -f[0])


def _model_features(model: onnx.ModelProto, need: _Need, deep: bool) -> None:
    if model.functions:
        need(8, f"model-local functions ({len(model.functions)})")
    if model.training_info:
        need(7, "training information (training_info)")
    if model.configuration:
        need(11, "device configurations")
    inputs = {i.name for i in model.graph.input}
    if any(t.name not in inputs for t in model.graph.initializer):
        need(4, "initializers that are not graph inputs (IR 3 requires every initializer to be a graph input)")
    if not deep:
        return
    for graph, main in _graphs(model):
        if not main and graph.initializer:
            need(4, "initializers in subgraphs (IR 3 requires every initializer to be a graph input)")
        _graph_features(graph, need)
    for function in model.functions:
        if function.attribute_proto:
            need(9, "function attribute defaults")
        if function.overload:
            need(10, "function overloads")
        for vi in function.value_info:
            _type_features(vi.type, need)
        for node in function.node:
            _node_features(node, need)


def _graph_features(graph: onnx.GraphProto, need: _Need) -> None:
    for t in graph.initializer:
        _elem(t.data_type, need)
    if graph.sparse_initializer:
        need(6, "sparse initializers")
    if graph.quantization_annotation:
        need(5, "quantization annotations")
    for vi in (*graph.input, *graph.output, *graph.value_info):
        _type_features(vi.type, need)
    for node in graph.node:
        _node_features(node, need)


def _node_features(node: onnx.NodeProto, need: _Need) -> None:
    if node.overload:
        need(10, f"function overloads (node {node.name or node.op_type!r})")
    if node.device_configurations:
        need(11, "device configurations")
    for a in node.attribute:
        if a.type == _A.TENSOR:
            _elem(a.t.data_type, need)
        elif a.type == _A.TENSORS:
            for t in a.tensors:
                _elem(t.data_type, need)
        elif a.type in (_A.SPARSE_TENSOR, _A.SPARSE_TENSORS):
            need(6, "sparse tensor attributes")
        elif a.type == _A.TYPE_PROTO:
            _type_features(a.tp, need)
        elif a.type == _A.TYPE_PROTOS:
            for tp in a.type_protos:
                _type_features(tp, need)


def _type_features(tp: onnx.TypeProto, need: _Need) -> None:
    kind = tp.WhichOneof("value")
    if kind == "tensor_type":
        _elem(tp.tensor_type.elem_type, need)
    elif kind == "sparse_tensor_type":
        need(8, "sparse tensor types")
        _elem(tp.sparse_tensor_type.elem_type, need)
    elif kind == "optional_type":
        need(8, "optional types")
        _type_features(tp.optional_type.elem_type, need)
    elif kind == "sequence_type":
        _type_features(tp.sequence_type.elem_type, need)
    elif kind == "map_type":
        _type_features(tp.map_type.value_type, need)


def _elem(elem_type: int, need: _Need) -> None:
    ir = _TYPE_IR.get(elem_type)
    if ir is not None:
        need(ir, f"{onnx.TensorProto.DataType.Name(elem_type).lower()} tensors")


def _graphs(model: onnx.ModelProto) -> Iterator[tuple[onnx.GraphProto, bool]]:
    """Every graph of the model: (graph, is the main graph), subgraphs of nodes and functions included."""
    stack: list[tuple[onnx.GraphProto, bool]] = [(model.graph, True)]
    stack.extend((t.algorithm, False) for t in model.training_info)
    stack.extend((t.initialization, False) for t in model.training_info)
    nodes = [n for f in model.functions for n in f.node]
    while stack or nodes:
        if stack:
            graph, main = stack.pop()
            yield graph, main
            nodes.extend(graph.node)
            continue
        node = nodes.pop()
        for a in node.attribute:
            if a.type == _A.GRAPH:
                stack.append((a.g, False))
            elif a.type == _A.GRAPHS:
                stack.extend((g, False) for g in a.graphs)


def choose(model: onnx.ModelProto, *, source_ir: int, target_opset: int | None, asked: int | None) -> IrChoice:
    """The IR version to write ``model`` (converted, its opset imports final) with, and why.

    ``asked``: the IR version the user named (checked by :func:`check_ir_version`), or None. With a
    target opset and none asked: the lowest the opsets and features allow. With neither: the
    model's own, raised where its opsets or features need more.

    Raises:
        ConversionError: ``asked`` cannot express an opset or a feature the model uses (the message
            names it and the lowest IR version that works).
    """
    counted = counted_imports(model)
    floor = lowest_for_opsets(counted)
    imports = ", ".join(f"{e.domain or 'ai.onnx'} {e.version}" for e in counted)
    if asked is not None:
        if asked < floor:
            raise ConversionError(f"cannot write IR version {asked}: the opsets ({imports}) need IR {floor} or "
                                  f"more{_held_by(counted, asked)}; ask for IR {floor} or more (--ir-version "
                                  f"{floor}), or leave it out")
        features = needed_features(model, asked)
        if features:
            ir, what = features[0]
            raise ConversionError(f"cannot write IR version {asked}: the model uses {what}, which needs IR {ir} "
                                  f"or more; ask for IR {ir} or more (--ir-version {ir}), or leave it out")
        return IrChoice(asked, "as asked (ir_version / --ir-version)")
    start = floor if target_opset is not None else max(floor, model.ir_version)
    features = needed_features(model, start)
    chosen = features[0][0] if features else start
    if chosen > MAX_IR_VERSION and floor <= MAX_IR_VERSION:
        chosen = MAX_IR_VERSION
    return IrChoice(chosen, _reason(chosen, floor, imports, features, source_ir, target_opset))


def _held_by(counted: list[onnx.OperatorSetIdProto], asked: int) -> str:
    """Which non-default imports need more than IR ``asked`` (imports no node uses are not counted)."""
    held = [f"{e.domain} {e.version} needs IR {lowest_for_opsets([e])}" for e in counted
            if e.domain not in ("", "ai.onnx") and lowest_for_opsets([e]) > asked]
    if not held:
        return ""
    return (f" ({'; '.join(held)}, and nodes of it are in the model; imports no node uses do not count, and "
            "are dropped unless --keep-imports)")


def _reason(chosen: int, floor: int, imports: str, features: list[tuple[int, str]], source_ir: int,
            target_opset: int | None) -> str:
    if features and features[0][0] == chosen:
        return f"the lowest the model's {features[0][1]} allow (its opsets alone allow IR {floor})"
    if chosen == floor and (target_opset is not None or floor > source_ir):
        return f"the lowest the opsets ({imports}) allow (onnx's VERSION_TABLE)"
    return "the model's own (no target opset)"

