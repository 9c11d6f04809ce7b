"""What ``lowerer inspect`` shows: the model at a glance, the plan of a conversion, the reachable opsets.

:func:`inspect_model` describes a model (opsets, inputs and outputs, node count, ops by count) and,
with a target or decompositions, makes the conversion's dry run; :func:`inspect_backend` is the dry
run of ``--for BACKEND``. Both dry runs are ``convert``'s own passes (the conversion walk, the
backend's, the clean-up and the output gate) over the same checked options, only without
verification: what they list and refuse is what ``convert`` would do, the target opset included
(:meth:`lowerer.passes.options.ConvertOptions.target_for`).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TYPE_CHECKING, Any

import onnx

from lowerer.core.errors import ConversionError, InputError
from lowerer.core.opsets import default_opset
from lowerer.core.remedies import for_static_inputs
from lowerer.model_io.scopes import iter_scopes, node_graphs

if TYPE_CHECKING:
    from lowerer.core.report import Report
    from lowerer.model_io.reading import InputModel
    from lowerer.passes.options import ConvertOptions

__all__ = ["group_rewrites", "inspect_backend", "inspect_model", "model_summary", "opset_reach",
           "reachable_opsets"]


def _type_of(value: onnx.ValueInfoProto) -> tuple[str, list[int | str | None] | None]:
    """A value's type in words (``float32``, ``seq(int64)``, ``?``) and its dims (None: rank unknown)."""
    t = value.type
    kind = t.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tt = t.tensor_type if kind == "tensor_type" else t.sparse_tensor_type
        name = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type).name if tt.elem_type else "?"
        if tt.elem_type == onnx.TensorProto.BFLOAT16:
            name = "bfloat16"
        if kind == "sparse_tensor_type":
            name = f"sparse {name}"
        if not tt.HasField("shape"):
            return name, None
        dims: list[int | str | None] = [d.dim_value if d.HasField("dim_value") else
                                        d.dim_param if d.HasField("dim_param") else None for d in tt.shape.dim]
        return name, dims
    if kind == "sequence_type":
        inner, _ = _type_of(onnx.helper.make_value_info("", t.sequence_type.elem_type))
        return f"seq({inner})", None
    if kind == "optional_type":
        inner, _ = _type_of(onnx.helper.make_value_info("", t.optional_type.elem_type))
        return f"optional({inner})", None
    if kind == "map_type":
        return "map", None
    return "?", None


def _safe_type_of(value: onnx.ValueInfoProto) -> tuple[str, list[int | str | None] | None]:
    try:
        return _type_of(value)
    except (KeyError, ValueError, TypeError):  # an element type this onnx does not know
        return "?", None


def model_summary(model: onnx.ModelProto) -> dict[str, Any]:
    """The model at a glance: its inputs and outputs (name, type, dims), how many nodes, its ops by count.

    ``inputs`` leaves out initializers listed as graph inputs (IR < 4); a dim is an int, a name
    (``dim_param``) or None (unknown); ``dims`` is None where the rank is unknown. ``nodes`` counts
    every node: the main graph's, those in subgraphs (If/Loop/Scan bodies) and in model-local
    functions, each also given apart; ``ops`` counts them per op (``domain.Op`` outside the default
    domain), most frequent first.
    """
    weights = {t.name for t in model.graph.initializer}

    def values(items: Any) -> list[dict[str, Any]]:
        out = []
        for v in items:
            name, dims = _safe_type_of(v)
            out.append({"name": v.name, "type": name, "dims": dims})
        return out

    ops: Counter[str] = Counter()
    in_graph = in_subgraphs = in_functions = 0
    for root in iter_scopes(model):
        for scope, _, node in root.walk():
            ops[node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"] += 1
            if scope.path.startswith("function:"):
                in_functions += 1
            elif scope.path == "graph":
                in_graph += 1
            else:
                in_subgraphs += 1
    return {
        "inputs": values(v for v in model.graph.input if v.name not in weights),
        "outputs": values(model.graph.output),
        "nodes": {"total": in_graph + in_subgraphs + in_functions, "graph": in_graph, "subgraphs": in_subgraphs,
                  "functions": in_functions},
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def _how(rewrite: dict[str, Any]) -> str:
    """How a rewrite record was made, in a few words.

    ``function body: why``, ``as a Loop over updates (30 iterations)``, or the change's own words
    (``coerced axis``, ``as Shape + Slice``: :attr:`lowerer.core.report.Rewrite.change` after its op and versions).
    """
    if rewrite["rule"] == "function-expansion":
        why = next((h.split(" (", 1)[1].rsplit("): rule", 1)[0] for h in rewrite.get("steps", [])
                    if "function body" in h and " (" in h), None)
        return f"function body: {why}" if why else "function body"
    loop = next((c for c in rewrite.get("crossings", []) if c.get("loop")), None)
    if loop is not None:
        trips = loop.get("trips")
        return f"as {loop['loop']} ({trips if trips is not None else 'a run-time count of'} iterations)"
    change = str(rewrite.get("change", ""))
    prefix = f"{rewrite['op_type']} {rewrite['from_version']} -> {rewrite['to_opset']} "
    return change[len(prefix):] if change.startswith(prefix) else f"rule {rewrite['rule']}"


def group_rewrites(rewrites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rewrite records (:meth:`lowerer.core.report.Rewrite.to_dict`) grouped by op, version and rewrite, largest first.

    A group is every node of one op-version rewritten the same way (the same rule, the same emitted
    ops): ``{"op_type", "from_version", "to_opset", "rule", "how", "emitted", "count", "nodes"}``
    (``nodes``: ``scope:name`` of each).
    """
    groups: dict[tuple[object, ...], dict[str, Any]] = {}
    for r in rewrites:
        how = _how(r)
        key = (r["op_type"], r["from_version"], r["to_opset"], r["rule"], how, tuple(r["emitted"]))
        group = groups.get(key)
        if group is None:
            group = groups[key] = {"op_type": r["op_type"], "from_version": r["from_version"],
                                   "to_opset": r["to_opset"], "rule": r["rule"], "how": how,
                                   "emitted": list(r["emitted"]), "count": 0, "nodes": []}
        group["count"] += 1
        group["nodes"].append(r["node"] if r["scope"] == "graph" else f"{r['scope']}:{r['node']}")
    return sorted(groups.values(), key=lambda g: -g["count"])


def _dry_run(source: InputModel, options: ConvertOptions) -> tuple[Report | None, str | None]:
    """``convert``'s passes on ``source`` (changed in place), unverified, without the placement proof.

    ``options`` asks for no verification and no whole-model check, so those passes do not apply.

    Returns (the report, None), or (None, the refusal ``convert`` would give).
    """
    from lowerer.backends.plan import BackendPlan
    from lowerer.passes import INSPECTION, State

    state = State(source.model, options, serialized=source.serialized, source_dir=source.directory,
                  input_checked=True)
    source_ir = source.model.ir_version
    if options.profile is not None:
        state.plan = BackendPlan(options.profile, allow_fallback=options.allow_fallback,
                                 strict=options.strict_backend)
    try:
        for p in INSPECTION:
            p(state)
    except ConversionError as e:
        return None, str(e)
    state.report.source_ir_version, state.report.ir_version = source_ir, state.model.ir_version
    return state.report, None


def _options(target_opset: int | None, decompose: Any, for_backend: str | None, allow_fallback: bool,
             ir_version: int | None, no_loops: bool = False, fold_dequantize: bool = False) -> ConvertOptions:
    from lowerer.passes.options import ConvertOptions

    return ConvertOptions.create(target_opset=target_opset, decompose=() if decompose is None else decompose,
                                 verify=False, for_backend=for_backend, allow_fallback=allow_fallback,
                                 ir_version=ir_version, no_loops=no_loops, fold_dequantize=fold_dequantize)


def _plan(report: Report | None, refused: str | None, options: ConvertOptions, source: int | None,
          picked: bool = False) -> dict[str, Any]:
    """The dry run's record: the target, the rewrites (grouped too) and the refusal, as ``convert`` would have them.

    ``picked``: leave out the rewrites a backend's profile picked (``inspect --for`` lists them apart).
    """
    from lowerer.steps.registry import PICKED

    rewrites = [] if report is None else [r.to_dict() for r in report.rewrites
                                          if not (picked and any(c.why == PICKED for c in r.crossings))]
    target = report.target_opset if report is not None else options.target_for(source)
    return {"source_opset": source, "target_opset": target,
            "ir_version": None if report is None else report.ir_version,
            "notes": [] if report is None else list(report.notes),
            "rewrites": rewrites, "groups": group_rewrites(rewrites), "refused": refused}


def opset_reach(model: onnx.ModelProto, decompose: Any = ()) -> dict[str, Any]:
    """The lowest and highest default-domain opsets ``model`` converts to, and what limits each.

    Both are searched outwards from the model's own opset, one opset at a time, and stop at the
    first refusal: every opset in between is reachable. ``lowest_limit`` / ``highest_limit`` hold
    that refusal (see :func:`lowerer.passes.reach.limit`: the opset refused, the node it names, the message),
    or None where the search ran out of opsets (:data:`lowerer.core.opsets.MIN_OPSET`,
    :data:`lowerer.core.opsets.MAX_OPSET`). Each opset is judged on the model's nodes, one per pattern,
    for about the cost of one conversion (:class:`lowerer.passes.reach.NodeReach`).
    """
    from lowerer.passes.options import normalize_decompose
    from lowerer.passes.reach import NodeReach

    if default_opset(model.opset_import) is None:
        raise InputError("the model does not import the default domain: it has no opset to convert")
    return NodeReach(model, normalize_decompose(decompose)).search()


def reachable_opsets(model: onnx.ModelProto, decompose: Any = ()) -> tuple[int, int]:
    """The lowest and highest default-domain opsets ``model`` converts to, unverified (see :func:`opset_reach`)."""
    found = opset_reach(model, decompose)
    return found["lowest"], found["highest"]


def inspect_model(path: str | os.PathLike[str], *, target_opset: int | None = None,
                  decompose: Any = None, reach: bool = False, ir_version: int | None = None,
                  no_loops: bool = False, fold_dequantize: bool = False) -> dict[str, Any]:
    """Describe the model at ``path``; with a target, decompositions or an IR version, also the plan (a dry run).

    The description: IR version, opset imports, model-local functions, and :func:`model_summary`
    (inputs, outputs, node count, ops by count). The plan is ``convert``'s (see :func:`_plan`).
    With ``reach``, also the lowest and highest opsets the model converts to, and the refusal
    (and node) that limits each (:func:`opset_reach`).
    """
    from lowerer.model_io.reading import load_input
    from lowerer.passes.options import normalize_decompose

    names = normalize_decompose(decompose)
    # every option checked before the read
    options = _options(target_opset, names, None, False, ir_version, no_loops, fold_dequantize)
    source = load_input(path)
    model = source.model
    info: dict[str, Any] = {
        "ir_version": model.ir_version,
        "opset_imports": {e.domain: e.version for e in model.opset_import},
        "default_opset": default_opset(model.opset_import),
        "functions": [f"{f.domain}.{f.name}" for f in model.functions],
        **model_summary(model),
    }
    static = _static_inputs(info["inputs"])
    if reach:
        info["reachable_opsets"] = opset_reach(model, names)  # before the dry run changes the model
        for key in ("lowest_limit", "highest_limit"):
            found = info["reachable_opsets"][key]
            if static and found is not None:
                found["refusal"] = for_static_inputs(found["refusal"])
    if options.converts:
        report, refused = _dry_run(source, options)
        if static and refused is not None:
            refused = for_static_inputs(refused)
        info["plan"] = _plan(report, refused, options, info["default_opset"])
    return info


def _static_inputs(inputs: list[dict[str, Any]]) -> bool:
    """Whether every input (:func:`model_summary`'s records) is a tensor of static dims."""
    return all(v["dims"] is not None and all(isinstance(d, int) and not isinstance(d, bool) for d in v["dims"])
               for v in inputs)


def inspect_backend(path: object, for_backend: str, *, target_opset: int | None = None,
                    decompose: str | list[str] | None = None, allow_fallback: bool = False,
                    ir_version: int | None = None, no_loops: bool = False) -> dict[str, Any]:
    """What ``--for BACKEND`` would do to the model at ``path`` (a dry run, nothing verified or written).

    Returns the backend, its provider, and one record per node the profile names (``nodes``): where
    it is, why the backend cannot run it (with the source), and what lowerer would do (the form and
    the ops it emits, or why the node would stay); ``plan``: the target opset ``convert --for``
    picks and the conversion's other rewrites (expansions, version steps), grouped. ``refused``
    holds the refusal ``convert`` would give with the same options, ``allow_fallback`` included
    (None when it would convert): the conversion's own (no nodes then), or a node the backend
    cannot run and lowerer has no exact form for (the nodes are listed too).
    """
    import dataclasses

    from lowerer.model_io.reading import load_input

    options = _options(target_opset, decompose, for_backend, allow_fallback, ir_version, no_loops)
    profile = options.profile
    assert profile is not None
    source = load_input(path)  # type: ignore[arg-type]
    opset = default_opset(source.model.opset_import)
    info: dict[str, Any] = {"backend": profile.name, "spec": profile.spec, "provider": profile.provider,
                            "description": profile.description, "target_opset": target_opset,
                            "nodes": [], "refused": None}
    spare = None if allow_fallback else onnx.ModelProto.FromString(source.serialized)
    report, info["refused"] = _dry_run(source, options)
    if report is None and spare is not None:
        # Refused: the table still shows what the backend cannot run, when the walk itself went through.
        kept = dataclasses.replace(source, model=spare)
        report, walk_refused = _dry_run(kept, dataclasses.replace(options, allow_fallback=True))
        if walk_refused is not None:
            report = None
    info["plan"] = _plan(report, info["refused"], options, opset, picked=True)
    if report is not None:
        assert report.backend is not None
        info["nodes"] = _backend_rows(report)
    return info


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
