"""What ``lowerer inspect`` shows: opsets, owned nodes and the plan of a conversion."""

from __future__ import annotations

import os
from typing import Any

import onnx

from lowerer.errors import ConversionError
from lowerer.opsets import default_opset, is_default_domain, since_version
from lowerer.scopes import Scope, iter_scopes, subgraphs_of

__all__ = ["OWNED_OPS", "inspect_model", "owned_nodes"]

#: Ops lowerer converts or decomposes itself.
OWNED_OPS = frozenset({"Hardmax", "Softmax", "LogSoftmax", "ArgMax", "ArgMin", "GlobalMaxPool"})


def owned_nodes(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """Every owned node in every scope: scope, name, op, since-version and attributes."""
    found: list[dict[str, Any]] = []

    def walk(scope: Scope) -> None:
        for node in scope.holder.node:
            if is_default_domain(node.domain) and node.op_type in OWNED_OPS and scope.opset is not None:
                found.append({
                    "scope": scope.path,
                    "name": node.name,
                    "op_type": node.op_type,
                    "version": since_version(node.op_type, scope.opset),
                    "attributes": {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
                                   if a.type == onnx.AttributeProto.INT},
                })
            for attr_name, graph in subgraphs_of(node):
                walk(Scope(f"{scope.path}/{node.name or node.op_type}.{attr_name}", graph, scope.opset,
                           scope.function))

    for scope in iter_scopes(model):
        walk(scope)
    return found


def inspect_model(path: str | os.PathLike[str], *, target_opset: int | None = None,
                  decompose: Any = None) -> dict[str, Any]:
    """Describe the model at ``path``; with a target or decompositions, also the plan (dry run)."""
    from lowerer.model_io import load_model
    from lowerer.pipeline import normalize_decompose, run_pipeline

    model = load_model(path)
    names = normalize_decompose(decompose)
    info: dict[str, Any] = {
        "ir_version": model.ir_version,
        "opset_imports": {e.domain: e.version for e in model.opset_import},
        "default_opset": default_opset(model.opset_import),
        "functions": [f"{f.domain}.{f.name}" for f in model.functions],
        "nodes": owned_nodes(model),
    }
    if target_opset is not None or names:
        try:
            report = run_pipeline(model, target_opset=target_opset, decompose=names)
            info["plan"] = {"rewrites": [r.to_dict() for r in report.rewrites], "refused": None}
        except ConversionError as e:
            info["plan"] = {"rewrites": [], "refused": str(e)}
    return info
