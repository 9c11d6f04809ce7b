"""What ``for_backend=`` (``--for BACKEND``) does to a converted model, and what ``inspect --for`` shows.

The model is first taken to the target opset (and through ``decompose``) as usual; then the
backend's profile is applied to the model at that opset, in a second scan of the step engine whose
picker is the profile (:class:`~lowerer.backends.plan.BackendPlan`): exactly the nodes the profile
names are rewritten, with lowerer's exact forms, each rewrite verified like any other. A node the
profile names that no exact form replaces is refused with one line (before the second scan, for
nodes whose entry has no form), or kept as it is with a warning line when the caller allows the
backend's fallback. A node of the user's own model that a ``departure`` entry names (the runtime
computes that op differently, and the original departs there too) is kept with a warning line and
recorded in ``report.backend["departures"]``, unless the plan is strict (``--strict-backend``). The
converted model is then scanned again: nothing the profile names may be left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import onnx

from lowerer.backends.plan import BackendPlan, Finding, Kept, scan
from lowerer.backends.profile import FALLBACK_RUNTIMES, Profile
from lowerer.backends.proof import FAILED, NOT_PROVEN, PROVEN, Placement, prove_placement
from lowerer.core.errors import ConversionError
from lowerer.core.opsets import default_opset, since_version
from lowerer.core.remedies import FALLBACK
from lowerer.core.report import Report
from lowerer.model_io.naming import node_key
from lowerer.model_io.scopes import iter_scopes
from lowerer.steps.registry import PICKED

__all__ = ["backend_record", "backend_remedy", "check_domains", "check_loads", "finish",
           "own_forms_refused", "prove", "refusal"]

logger = logging.getLogger(__name__)


def refusal(finding: Finding, profile: Profile, reason: str, more: list[Finding], remedy: str) -> str:
    """The one-line refusal for a node the profile names that stays (and how many more do), ending with ``remedy``."""
    others = ""
    if more:
        shown = ", ".join(f.label() for f in more[:3])
        others = f"; also {len(more)} more node(s): {shown}{' ...' if len(more) > 3 else ''}"
    return (f"node {finding.label()}: {profile.spec} cannot run it: {finding.entry.why} (source: "
            f"{finding.entry.source}), and {reason}{others}; {remedy}")


def backend_remedy(finding: Finding, profile: Profile, opset: int | None,
                   converts_at: Callable[[int], bool] | None = None) -> str:
    """What would make ``profile``'s runtime run the model, for a node it cannot run: options that work there.

    The opset just below the op-versions the node's entry names, else the one just above them (TopK-1,
    whose k tract reads only as an input, is TopK-10 at opset 10), where ``converts_at`` (the whole
    model converted there for this backend, nothing it names left: see
    :class:`lowerer.passes.BackendPass`) says the model converts; ``--allow-fallback`` where the
    runtime hands refused nodes to another provider (:data:`FALLBACK_RUNTIMES`); otherwise none
    (``--allow-fallback`` only through onnxruntime's provider for that runtime).
    """
    low, high = finding.entry.versions
    lower = None if low is None or opset is None or not 1 < low <= opset else low - 1
    if lower is not None and converts_at is not None and converts_at(lower):
        return (f"--target-opset {lower} takes it below {finding.op_type}-{low} (API: target_opset={lower}: "
                f"the model converts there for {profile.spec})")
    upper = None if high is None or opset is None or opset > high else high + 1
    if upper is not None and converts_at is not None and converts_at(upper):
        return (f"--target-opset {upper} takes it to {finding.op_type}-{since_version(finding.op_type, upper)} "
                f"(API: target_opset={upper}: the model converts there for {profile.spec})")
    if profile.runtime in FALLBACK_RUNTIMES:
        return FALLBACK
    return (f"no option makes {profile.spec} run it (through onnxruntime's {profile.provider}, "
            f"{FALLBACK.split(' keeps', 1)[0]} keeps it for onnxruntime's fallback)")


def finish(model: onnx.ModelProto, plan: BackendPlan, report: Report, warn: bool = True,
           converts_at: Callable[[int], bool] | None = None) -> None:
    """After the conversion walk (whose picker was ``plan``): refuse or keep what the profile still names.

    The walk applied each form where the node reached the target; here one scan of the result finds
    what the profile still names, each with its reason, and ``report.backend`` is recorded.
    ``warn``: log one warning line per node kept as it is (``allow_fallback``); a dry run does not.
    ``converts_at``: whether the model converts, for this backend, to an opset (the refusal's remedy,
    see :func:`backend_remedy`).

    Raises:
        ConversionError: the output's opset or IR version is above what the runtime version named loads,
            or a node the profile names is left (no exact form, its form refused, or a rewrite made it),
            unless the plan allows fallback.
    """
    profile = plan.profile
    check_loads(model, profile)
    foreign = check_domains(model, plan, warn)
    left = scan(model, profile)
    picked = {(f.scope, f.node) for f in plan.named}
    named = [*plan.named, *(f for f in left if (f.scope, f.node) not in picked)]
    kept = [Kept(f, _reason_left(f, plan, picked)) for f in left]
    said = [k for k in kept if k.finding.entry.departure and not plan.strict and _users_own(k.finding, report)]
    kept = [k for k in kept if k not in said]
    if kept and not plan.allow_fallback:
        first = kept[0]
        remedy = backend_remedy(first.finding, profile, default_opset(model.opset_import), converts_at)
        raise ConversionError(refusal(first.finding, profile, first.reason, [k.finding for k in kept[1:]], remedy))
    for k in kept if warn else ():
        logger.warning("node %s stays as it is: %s cannot run it (%s), and %s; onnxruntime falls back for it",
                       k.finding.label(), profile.spec, k.finding.entry.why, k.reason)
    for k in said if warn else ():
        form = _own_form(k.finding, report)
        logger.warning("node %s: %s computes it differently (%s); %s (--strict-backend refuses it)",
                       k.finding.label(), profile.spec, k.finding.entry.why,
                       f"written in the {form} form, which it computes so too" if form else
                       f"the original model departs there too and {_no_fix(k.finding, plan)}: kept as it is")
    rewritten = sum(1 for r in report.rewrites if any(c.why == PICKED for c in r.crossings))
    report.backend = backend_record(profile, named, rewritten, kept)
    if foreign:
        report.backend["domains_left"] = foreign
    if said:
        report.backend["departures"] = [Kept(k.finding, f"{DEPARTS}; {_no_fix(k.finding, plan)}").to_dict()
                                        for k in said]


def check_domains(model: onnx.ModelProto, plan: BackendPlan, warn: bool = True) -> list[dict[str, Any]]:
    """Nodes of a non-default domain whose ops the runtime lacks (``profile.domains``): refused, or kept.

    Model-local functions' domains are not looked at (runtimes inline them), nor domains the profile does
    not name (not known either way). A confirmed lack is refused unless the plan allows fallback; else the
    nodes are kept with one warning line.

    Returns:
        One record per op the runtime lacks: domain, op, how many nodes, the first node's name, source.

    Raises:
        ConversionError: one line naming the ops, the runtime, the source and the remedies.
    """
    profile = plan.profile
    support = {d.domain: d for d in profile.domains}
    if not support:
        return []
    local = {f.domain for f in model.functions}
    found: dict[tuple[str, str], list[str]] = {}
    for scope in iter_scopes(model):
        for _, index, node in scope.walk():
            entry = support.get(node.domain)
            if entry is not None and node.domain not in local and entry.lacks(node.op_type):
                found.setdefault((node.domain, node.op_type), []).append(node_key(node, index))
    if not found:
        return []
    records = [{"domain": d, "op_type": op, "nodes": len(names), "first": names[0], "source": support[d].source,
                "confirmed": support[d].confirmed} for (d, op), names in found.items()]
    shown = ", ".join(f"{r['domain']}.{r['op_type']} ({r['nodes']} node{'s' if r['nodes'] != 1 else ''}, e.g. "
                      f"{r['first']!r})" for r in records[:4]) + (" ..." if len(records) > 4 else "")
    sources = "; ".join(support[d].source for d in sorted({d for d, _ in found}))
    line = f"{profile.spec} does not import {shown} (per {sources})"
    if all(support[d].confirmed for d, _ in found) and not plan.allow_fallback:
        raise ConversionError(f"{line}; run those nodes on onnxruntime (split the model, or target cpu/cuda), or "
                              "--allow-fallback (API: allow_fallback=True) keeps them for onnxruntime's fallback")
    if warn:
        logger.warning("%s; they stay as they are, for onnxruntime's fallback", line)
    return records


#: Why a node a ``departure`` entry names stays (see :mod:`lowerer.backends.profile`).
DEPARTS = "the original model departs there too (the runtime computes this op so)"


def _no_fix(finding: Finding, plan: BackendPlan) -> str:
    """Why no form fixes a departure's node: none exists, or its form cannot be written there (and why)."""
    earlier = plan.kept.get((finding.scope, finding.node))
    if earlier is None:
        return "lowerer has no form that fixes it"
    return f"its form ({finding.entry.rewrite}) cannot be written here: {earlier.reason}"


def _own_form(finding: Finding, report: Report) -> str | None:
    """The form a rewrite wrote the user's node in, where it wrote it as a node of its own op (else None)."""
    for r in report.rewrites:
        if r.scope == finding.scope and r.node == finding.node and r.op_type == finding.op_type and \
                any(n.name == finding.node and n.op_type == finding.op_type for n in r.replacement):
            return r.rule
    return None


def _users_own(finding: Finding, report: Report) -> bool:
    """Whether the node is the user's own (not one a rewrite of another op wrote): a departure they already have."""
    for r in report.rewrites:
        if r.scope == finding.scope and any(n.name == finding.node for n in r.replacement):
            return r.node == finding.node and r.op_type == finding.op_type
    return True


def own_forms_refused(profile: Profile, op_types: Iterable[str], opset: int) -> str | None:
    """Why ``profile``'s runtime cannot take ``op_types`` in their own form at ``opset`` (and above), or None.

    A loop form's warning names the opset that keeps a node's own form (:meth:`Report.loop_warning`);
    this says when that is not so on the runtime named: it loads no such opset, or its profile names
    the op there (under some condition: not claimed to run).
    """
    from lowerer.core.opsets import since_version

    loads = profile.loads
    if loads is not None and loads.max_opset is not None and loads.max_opset < opset:
        return f"{profile.spec} loads opsets up to {loads.max_opset}: no opset it loads keeps the op's own form"
    named = sorted(op for op in set(op_types) if any(e.covers(op, since_version(op, opset) or 0)
                                                     for e in profile.entries))
    if named:
        return f"{profile.spec} cannot run every {'/'.join(named)} in its own form at opset {opset} and above"
    return None


def check_loads(model: onnx.ModelProto, profile: Profile) -> None:
    """Refuse an output whose opset or IR version the runtime version named does not load (``profile.loads``).

    Every default-domain op-version of the output exists at its opset, so an opset the runtime loads
    means op-versions it has (per its table); a higher one (``--target-opset`` above it) is refused.

    Raises:
        ConversionError: naming the limit, its source, and what would work.
    """
    loads = profile.loads
    if loads is None:
        return
    unsure = "" if loads.confirmed else ", not confirmed"
    where = f"{profile.spec} loads {{}} (per {loads.source}{unsure})"
    opset = default_opset(model.opset_import)
    if loads.max_opset is not None and opset is not None and opset > loads.max_opset:
        nodes = [n for n in model.graph.node if _newer(n, opset, loads.max_opset)]
        first = f"; e.g. node {nodes[0].name or nodes[0].op_type!r} ({nodes[0].op_type})" if nodes else ""
        raise ConversionError(where.format(f"default-domain opsets up to {loads.max_opset}") +
                              f", and the output is at opset {opset}{first}; give --target-opset "
                              f"{loads.max_opset} or lower (API: target_opset), or leave it out")
    if loads.max_ir is not None and model.ir_version > loads.max_ir:
        raise ConversionError(where.format(f"IR versions up to {loads.max_ir}") +
                              f", and the output is at IR {model.ir_version}" + _ir_remedy(model, profile))


def _ir_remedy(model: onnx.ModelProto, profile: Profile) -> str:
    """Why the output needs its IR version, and what would work."""
    from lowerer.backends.profile import load_rows
    from lowerer.model_io.imports import counted_imports
    from lowerer.model_io.ir_version import lowest_for_opsets, needed_features

    assert profile.loads is not None
    limit = profile.loads.max_ir or 0
    features = needed_features(model, limit)
    needed = max([lowest_for_opsets(counted_imports(model)), *(ir for ir, _ in features)])
    if needed <= limit:
        return f"; leave out --ir-version (API: ir_version) or give {limit} or lower"
    if not (features and features[0][0] == needed):
        return ", the lowest its opsets allow; give a lower --target-opset (API: target_opset)"
    newer = [r for r in load_rows(profile.name) if r.max_ir is None or r.max_ir >= needed]
    release = f" (such as {profile.name}=={newer[0].version})" if newer else ""
    return (f", the lowest the model's {features[0][1]} allow; no form at IR {limit} is known: name a release "
            f"that loads IR {needed}{release}")


def _newer(node: onnx.NodeProto, opset: int, limit: int) -> bool:
    """Whether ``node``'s op-version at ``opset`` is newer than opset ``limit`` has."""
    from lowerer.core.opsets import is_default_domain, since_version

    if not is_default_domain(node.domain):
        return False
    version = since_version(node.op_type, opset)
    return version is not None and version > limit


def _reason_left(finding: Finding, plan: BackendPlan, picked: set[tuple[str, str]]) -> str:
    earlier = plan.kept.get((finding.scope, finding.node))
    if earlier is not None:
        return f"its form ({finding.entry.rewrite}) refused: {earlier.reason}"
    if finding.entry.rewrite is None:
        return "lowerer has no exact form for it"
    if (finding.scope, finding.node) not in picked:
        return "a rewrite for this backend made it (its exact form needs this op)"
    return f"it is still there after its form ({finding.entry.rewrite})"


def backend_record(profile: Profile, named: list[Finding], rewritten: int, kept: list[Kept]) -> dict[str, Any]:
    """The report's ``backend`` record (the placement fields are added by the proof)."""
    return {
        "backend": profile.name,
        "spec": profile.spec,
        "provider": profile.provider,
        "named": [f.to_dict() for f in named],
        "rewritten": rewritten,
        "left": [k.to_dict() for k in kept],
        "placement": None,
        "placement_detail": None,
        "loads": None if profile.loads is None else profile.loads.to_dict(),
        "chosen": profile.chosen or None,
        "deployment": None,
    }


def prove(model: onnx.ModelProto, plan: BackendPlan, report: Report, data_dir: object = None) -> None:
    """Prove the placement of ``model`` where the backend's provider is installed; record it in ``report.backend``.

    Raises:
        VerificationError: the provider is installed and refuses the model with CPU fallback disabled
            (unless the plan allows fallback: then a warning).
    """
    import os

    from lowerer.core.errors import VerificationError
    from lowerer.model_io.external_data import external_data_locations
    from lowerer.verification.ort_support import MIN_ORT_OPSET, max_ort_opset

    provider = plan.profile.provider
    opset = default_opset(model.opset_import)
    release = plan.profile.release
    if release is not None and not _runs_here(release):
        placement = _per_table(model, plan, release)
    elif opset is not None and not MIN_ORT_OPSET <= opset <= max_ort_opset():
        placement = Placement(NOT_PROVEN, provider, f"onnxruntime loads default-domain opsets {MIN_ORT_OPSET} to "
                                                    f"{max_ort_opset()}, not {opset}")
    elif data_dir is None and external_data_locations(model):
        placement = Placement(NOT_PROVEN, provider, "the model's weights are in external data and no folder is "
                                                    "known to read them from (give a path)")
    else:
        try:
            placement = prove_placement(model, provider,
                                        data_dir if isinstance(data_dir, (str, os.PathLike)) else None,
                                        rejected=_refused_by_kernel(model, plan))
        except ValueError as e:  # protobuf cannot serialize a model over 2 GiB
            placement = Placement(NOT_PROVEN, provider, f"the model cannot be given to onnxruntime from memory ({e})")
    if report.backend is None:
        report.backend = backend_record(plan.profile, [], 0, [])
    report.backend["placement"] = placement.status
    report.backend["placement_detail"] = placement.detail
    if placement.classes is not None:
        report.backend["placement_classes"] = placement.classes.to_dict()
        added = _compute_added(placement.classes.compute_ops(), report)
        if added:  # the conversion itself sent compute to the CPU: a gap of lowerer's choice of ops
            report.backend["cpu_compute_added"] = added
            placement = Placement(FAILED if placement.status == PROVEN else placement.status, provider,
                                  f"{placement.detail}; the conversion adds compute ops {provider} has no kernel "
                                  f"for: {', '.join(added)}", placement.classes)
            report.backend["placement"] = placement.status
            report.backend["placement_detail"] = placement.detail
    if placement.status == FAILED:
        message = (f"{plan.profile.spec}: {placement.status}: {placement.detail}; --allow-fallback (API: "
                   "allow_fallback=True) accepts a model part of which onnxruntime places elsewhere")
        if not plan.allow_fallback:
            error = VerificationError(message)
            error.report = report
            raise error
        logger.warning("%s", message)


def _compute_added(on_cpu: set[str], report: Report) -> list[str]:
    """The CPU-placed compute op types only rewrites brought in (ops the rewritten nodes were not)."""
    emitted = {op for r in report.rewrites for op in r.emitted}
    rewritten = {r.op_type for r in report.rewrites}
    return sorted((on_cpu & emitted) - rewritten)


def _runs_here(release: str) -> bool:
    from lowerer.backends.release import runs_here

    return runs_here(release)


def _per_table(model: onnx.ModelProto, plan: BackendPlan, release: str) -> Placement:
    """The placement a named release's kernel table predicts, stated as the table's: it is not run here."""
    from lowerer.backends.installed_kernels import installed_release
    from lowerer.backends.kernel_tables import provider_table
    from lowerer.backends.placement import classify

    provider = plan.profile.provider
    here = f"the installed onnxruntime is {installed_release()}, not {release}"
    found = provider_table(release, provider)
    if found is None:
        return Placement(NOT_PROVEN, provider, f"{here}; lowerer ships no {provider} kernel table of onnxruntime "
                                               f"{release}: nothing is stated about placement")
    table, exact = found
    rows = {op: list(table.ranges(provider, op)) for op in table.ops(provider)}
    classes = classify(model, None, provider, rows, _refused_by_kernel(model, plan))
    older = "" if exact else f" (the newest shipped table not newer than {release})"
    return Placement(NOT_PROVEN, provider, f"per onnxruntime {table.version}'s kernel table{older} ({table.source}), "
                                           f"not run here ({here}): {classes.describe()}", classes)


def _refused_by_kernel(model: onnx.ModelProto, plan: BackendPlan) -> dict[str, str]:
    """The top-level nodes the backend's profile still names (their kernel refuses them): name -> why."""
    from lowerer.backends.plan import scan

    return {f.node: f.entry.why for f in scan(model, plan.profile) if f.scope == "graph"}


def placement_line(record: dict[str, Any]) -> str:
    """One line on the backend lowering of a report: what was rewritten and left, and the placement."""
    left = len(record.get("left") or [])
    placement = record.get("placement") or "placement not checked"
    detail = record.get("placement_detail")
    runtime = (record.get("loads") or {}).get("runtime") or "onnxruntime"
    hosted = runtime in FALLBACK_RUNTIMES
    line = f"backend {record['spec']} ({record['provider'] if hosted else runtime}): " + (
        f"{record['rewritten']} node(s) rewritten for it")
    if hosted:
        line += f", {left} left to its fallback"
    elif left:  # a runtime on its own has no fallback: the nodes kept (--allow-fallback) are named in the report
        line += f", {left} kept as they are (--allow-fallback)"
    if hosted or record.get("placement_classes") or placement != NOT_PROVEN:
        line += f"; {placement}" + (f" ({detail})" if detail else "")
    # else: the placement concerns onnxruntime's provider of a runtime the user named on its own (the report keeps it)
    if record.get("chosen"):
        line += f"; version: {record['chosen']}"
    deployment = record.get("deployment")
    if deployment:
        line += f"; deployment: {deployment['reason']}"
    return line


def backend_table(info: dict[str, Any]) -> list[str]:
    """``inspect --for``'s text: a line on the backend, a table (node, op, what lowerer does, why), the sources."""
    head = f"backend: {info['spec']} ({info['provider']})"
    if info.get("target_opset") is not None:
        head += f", at opset {info['target_opset']}"
    lines = [head]
    if info.get("refused"):
        return [*lines, f"would refuse: {info['refused']}"]
    nodes = info["nodes"]
    if not nodes:
        return [*lines, "nodes it cannot run: none (per its profile)"]
    lines.append(f"nodes it cannot run: {len(nodes)}")
    sources: list[str] = []
    rows = [("node", "op", "lowerer", "why [source]")]
    for n in nodes:
        if n["source"] not in sources:
            sources.append(n["source"])
        where = "" if n["scope"] == "graph" else f" ({n['scope']})"
        why = n["why"] + ("" if n.get("confirmed", True) else " (not confirmed)")
        rows.append((f"{n['node']}{where}", f"{n['op_type']}-{n['version']}", n["lowerer"],
                     f"{why} [{sources.index(n['source']) + 1}]"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append("  ".join([*(r[i].ljust(widths[i]) for i in range(3)), r[3]]).rstrip())
    lines.extend(f"[{i}] {s}" for i, s in enumerate(sources, 1))
    return lines
