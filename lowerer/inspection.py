"""What ``lowerer inspect`` shows: opsets, owned nodes, the plan of a conversion and the reachable opsets."""

from __future__ import annotations

import os
from typing import Any

import onnx

from lowerer.errors import ConversionError, InputError
from lowerer.opsets import default_opset, is_default_domain, since_version
from lowerer.scopes import iter_scopes, node_graphs

__all__ = ["OWNED_OPS", "inspect_backend", "inspect_model", "opset_reach", "opset_reach_by_conversions", "owned_nodes",
           "reachable_opsets"]

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


def opset_reach(model: onnx.ModelProto, decompose: Any = ()) -> dict[str, Any]:
    """The lowest and highest default-domain opsets ``model`` converts to, and what limits each.

    Both are searched outwards from the model's own opset, one opset at a time, and stop at the
    first refusal: every opset in between is reachable. ``lowest_limit`` / ``highest_limit`` hold
    that refusal (see :func:`lowerer.reach.limit`: the opset refused, the node it names, the message),
    or None where the search ran out of opsets (:data:`lowerer.opsets.MIN_OPSET`,
    :data:`lowerer.opsets.MAX_OPSET`). Each opset is judged on the model's nodes, one per pattern,
    for about the cost of one conversion (:class:`lowerer.reach.NodeReach`);
    :func:`opset_reach_by_conversions` converts the whole model to each opset instead.
    """
    from lowerer.options import normalize_decompose
    from lowerer.reach import NodeReach

    if default_opset(model.opset_import) is None:
        raise InputError("the model does not import the default domain: it has no opset to convert")
    return NodeReach(model, normalize_decompose(decompose)).search()


def opset_reach_by_conversions(model: onnx.ModelProto, decompose: Any = ()) -> dict[str, Any]:
    """:func:`opset_reach` by converting the whole model (unverified) to each opset in turn (slow; the reference)."""
    from lowerer.reach import search_outwards

    source = default_opset(model.opset_import)
    if source is None:
        raise InputError("the model does not import the default domain: it has no opset to convert")
    return search_outwards(source, lambda opset: _attempt(model, opset, decompose)[1])


def reachable_opsets(model: onnx.ModelProto, decompose: Any = ()) -> tuple[int, int]:
    """The lowest and highest default-domain opsets ``model`` converts to, unverified (see :func:`opset_reach`)."""
    found = opset_reach(model, decompose)
    return found["lowest"], found["highest"]


def inspect_model(path: str | os.PathLike[str], *, target_opset: int | None = None,
                  decompose: Any = None, reach: bool = False) -> dict[str, Any]:
    """Describe the model at ``path``; with a target or decompositions, also the plan (a dry run).

    With ``reach``, also the lowest and highest opsets the model converts to, and the refusal
    (and node) that limits each (:func:`opset_reach`).
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
        info["reachable_opsets"] = opset_reach(model, names)
    return info


def inspect_backend(path: object, for_backend: str, *, target_opset: int | None = None,
                    decompose: str | list[str] | None = None, allow_fallback: bool = False) -> dict[str, Any]:
    """What ``--for BACKEND`` would do to the model at ``path`` (a dry run, nothing verified or written).

    Returns the backend, its provider, and one record per node the profile names: where it is, why
    the backend cannot run it (with the source), and what lowerer would do (the form and the ops it
    emits, or why the node would stay). ``refused`` holds the refusal ``convert`` would give with
    the same options, ``allow_fallback`` included (None when it would convert): the conversion's own
    (target opset, decompositions: no nodes then), or a node the backend cannot run and lowerer has
    no exact form for (the nodes are listed too).
    """
    from lowerer.backends.lowering import make_plan
    from lowerer.model_io import load_model

    plan = make_plan(for_backend, True)
    profile = plan.profile
    model = load_model(path)  # type: ignore[arg-type]
    info: dict[str, Any] = {"backend": profile.name, "spec": profile.spec, "provider": profile.provider,
                            "description": profile.description, "target_opset": target_opset,
                            "nodes": [], "refused": None}
    source = None if allow_fallback else onnx.ModelProto.FromString(model.SerializeToString())
    report, info["refused"] = _backend_dry_run(model, plan, target_opset, decompose)
    if report is None:
        return info
    assert report.backend is not None
    info["nodes"] = _backend_rows(report)
    if source is not None and report.backend["left"]:  # convert would refuse: its own words
        info["refused"] = _backend_dry_run(source, make_plan(for_backend, False), target_opset, decompose)[1]
    return info


def _backend_dry_run(model: onnx.ModelProto, plan: Any, target_opset: int | None,
                     decompose: str | list[str] | None) -> tuple[Any, str | None]:
    """(report, None) when the walk and the backend's finish pass on ``model`` (changed), else (None, refusal)."""
    from lowerer.backends.lowering import finish
    from lowerer.options import normalize_decompose, request_for
    from lowerer.pipeline import run_pipeline

    try:
        report = run_pipeline(model, target_opset=target_opset, request=request_for(normalize_decompose(decompose)),
                              picker=plan.pick, picked_ops=plan.picked_ops)
        finish(model, plan, report, warn=False)
    except ConversionError as e:
        return None, str(e)
    return report, None


def _backend_rows(report: Any) -> list[dict[str, Any]]:
    """One record per node the profile named: where, why, and what lowerer does with it."""
    from lowerer.steps.registry import PICKED

    made = {(r.scope, r.node): r for r in report.rewrites if any(c.why == PICKED for c in r.crossings)}
    left = {(k["scope"], k["node"]): k for k in report.backend["left"]}
    rows = list(report.backend["named"])
    rows += [k for key, k in left.items() if not any((n["scope"], n["node"]) == key for n in rows)]
    out = []
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
        out.append(record)
    return out


def _ops(nodes: list[onnx.NodeProto]) -> str:
    """The ops of ``nodes`` in order, an If's branches in brackets: ``Size + Equal + If[Identity | ArgMax + ...]``."""
    parts = []
    for n in nodes:
        branches = list(node_graphs(n))
        parts.append(f"{n.op_type}[{' | '.join(_ops(list(g.node)) for g in branches)}]" if branches else n.op_type)
    return " + ".join(parts)
