"""What ``lowerer inspect`` shows: opsets, owned nodes, the plan of a conversion and the reachable opsets."""

from __future__ import annotations

import os
from typing import Any

import onnx

from lowerer.errors import ConversionError, InputError
from lowerer.opsets import MAX_OPSET, MIN_OPSET, default_opset, is_default_domain, since_version
from lowerer.scopes import iter_scopes, node_graphs

__all__ = ["OWNED_OPS", "inspect_backend", "inspect_model", "owned_nodes", "reachable_opsets"]

#: Ops lowerer converts or decomposes itself.
OWNED_OPS = frozenset({"Hardmax", "Softmax", "LogSoftmax", "ArgMax", "ArgMin", "GlobalMaxPool"})


def owned_nodes(model: onnx.ModelProto) -> list[dict[str, Any]]:
    """Every owned node in every scope: scope, name, op, since-version and attributes."""
    found: list[dict[str, Any]] = []
    for root in iter_scopes(model):
        for scope, _, node in root.walk():
            if is_default_domain(node.domain) and node.op_type in OWNED_OPS and scope.opset is not None:
                found.append({
                    "scope": scope.path,
                    "name": node.name,
                    "op_type": node.op_type,
                    "version": since_version(node.op_type, scope.opset),
                    "attributes": {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute
                                   if a.type == onnx.AttributeProto.INT},
                })
    return found


def _attempt(model: onnx.ModelProto, target: int | None, decompose: Any) -> tuple[Any, str | None]:
    """(report, None) when converting a copy of ``model`` succeeds without verification, else (None, refusal)."""
    from lowerer.api import convert

    try:
        result = convert(model, target_opset=target, decompose=decompose, verify=False)
    except ConversionError as e:
        return None, str(e)
    return result.report, None


def reachable_opsets(model: onnx.ModelProto, decompose: Any = ()) -> tuple[int, int]:
    """The lowest and highest default-domain opsets ``model`` converts to (without verification).

    Both are searched outwards from the model's own opset, one opset at a time, and stop at the
    first refusal: every opset in between is reachable.
    """
    source = default_opset(model.opset_import)
    if source is None:
        raise InputError("the model does not import the default domain: it has no opset to convert")
    low = source
    while low > MIN_OPSET and _attempt(model, low - 1, decompose)[1] is None:
        low -= 1
    high = source
    while high < MAX_OPSET and _attempt(model, high + 1, decompose)[1] is None:
        high += 1
    return low, high


def inspect_model(path: str | os.PathLike[str], *, target_opset: int | None = None,
                  decompose: Any = None, reach: bool = False) -> dict[str, Any]:
    """Describe the model at ``path``; with a target or decompositions, also the plan (a dry run).

    With ``reach``, also the lowest and highest opsets the model converts to.
    """
    from lowerer.model_io import load_model
    from lowerer.options import normalize_decompose

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
        report, refused = _attempt(model, target_opset, names)
        rewrites = [] if report is None else [r.to_dict() for r in report.rewrites]
        info["plan"] = {"rewrites": rewrites, "refused": refused}
    if reach:
        low, high = reachable_opsets(model, names)
        info["reachable_opsets"] = {"lowest": low, "highest": high}
    return info


def inspect_backend(path: object, for_backend: str, *, target_opset: int | None = None,
                    decompose: str | list[str] | None = None) -> dict[str, Any]:
    """What ``--for BACKEND`` would do to the model at ``path`` (a dry run, nothing verified or written).

    Returns the backend, its provider, and one record per node the profile names: where it is, why
    the backend cannot run it (with the source), and what lowerer would do (the form and the ops it
    emits, or why the node would stay). ``refused`` holds the refusal when the conversion itself
    (target opset, decompositions) would be refused.
    """
    from lowerer.backends.lowering import finish, make_plan
    from lowerer.model_io import load_model
    from lowerer.options import normalize_decompose, request_for
    from lowerer.pipeline import run_pipeline
    from lowerer.steps.registry import PICKED

    plan = make_plan(for_backend, True)
    profile = plan.profile
    model = load_model(path)  # type: ignore[arg-type]
    info: dict[str, Any] = {"backend": profile.name, "spec": profile.spec, "provider": profile.provider,
                            "description": profile.description, "target_opset": target_opset,
                            "nodes": [], "refused": None}
    try:
        report = run_pipeline(model, target_opset=target_opset, request=request_for(normalize_decompose(decompose)),
                              picker=plan.pick, picked_ops=plan.picked_ops)
        finish(model, plan, report, warn=False)
    except ConversionError as e:
        info["refused"] = str(e)
        return info
    assert report.backend is not None
    made = {(r.scope, r.node): r for r in report.rewrites if any(c.why == PICKED for c in r.crossings)}
    left = {(k["scope"], k["node"]): k for k in report.backend["left"]}
    rows = list(report.backend["named"])
    rows += [k for key, k in left.items() if not any((n["scope"], n["node"]) == key for n in rows)]
    for node in rows:
        key = (node["scope"], node["node"])
        record = dict(node)
        if key in left:
            record["lowerer"] = f"keeps it ({left[key]['reason']})"
            record["emitted"] = None
        elif key in made:
            rewrite = made[key]
            record["lowerer"] = f"{node['rewrite']}: {_ops(rewrite.replacement)}"
            record["emitted"] = list(rewrite.emitted)
        else:
            record["lowerer"] = "no change needed at this opset"
            record["emitted"] = None
        info["nodes"].append(record)
    return info


def _ops(nodes: list[onnx.NodeProto]) -> str:
    """The ops of ``nodes`` in order, an If's branches in brackets: ``Size + Equal + If[Identity | ArgMax + ...]``."""
    parts = []
    for n in nodes:
        branches = list(node_graphs(n))
        parts.append(f"{n.op_type}[{' | '.join(_ops(list(g.node)) for g in branches)}]" if branches else n.op_type)
    return " + ".join(parts)
