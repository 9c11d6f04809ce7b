"""Second opinions: when a check fails, which party departs — the rewrite, or a runtime's kernel.

A runtime is a witness, not the truth. onnxruntime's CUDA Upsample-7/9 kernel rounds each scale
up to an integer (``ceil(scales[i])``, ``onnxruntime/core/providers/cuda/tensor/upsample.cc``) and
so differs from its own CPU kernel and from Resize; onnxruntime 1.31's CPU ArgMax-12 with
``select_last_index=1`` returns a wrong shape on an empty input. A failed check is therefore
checked again before the rewrite is blamed (:meth:`lowerer.verification.check.RewriteVerifier._judged`):

* on the CPU provider, when it ran on another: both sides agreeing there means the other
  provider's kernel departs. The rewrite stands, verified on the CPU; the result names the kernel
  that departs (the side whose outputs differ between the two providers on the failing inputs)
  and one warning line says so;
* with the original judged by lowerer's numpy reference (the op's spec), when the CPU disagrees
  too: the replacement agreeing with the spec, on inputs that meet a departure listed with its
  source in ``departures.json`` (op, since-versions, provider, condition), means onnxruntime's CPU
  kernel of the original departs from the spec. The rewrite stands, verified against the spec; one
  warning line says so. A departure not on the list is not assumed: the failure stands, and the
  record says the reference agreed (``spec_agrees``).

Otherwise the failure stands and the rewrite is refused, as before.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.core.opsets import since_version
from lowerer.model_io.naming import node_key
from lowerer.verification.result import CheckResult

if TYPE_CHECKING:
    from lowerer.core.report import Rewrite

__all__ = ["BY_SPEC", "CONDITIONS", "Departure", "departure_met", "departures", "kernel_departs_from_spec",
           "listed_departure", "nan_made_inside", "provider_departs", "replacement_departure", "unlisted", "worst_gap"]

logger = logging.getLogger(__name__)

#: Why a second opinion ran the original with the numpy reference.
BY_SPEC = "second opinion: the original judged by its spec (lowerer's numpy reference)"

_WARNED: set[str] = set()


@dataclass(frozen=True)
class Departure:
    """One known departure of an onnxruntime kernel from the ONNX spec (an entry of ``departures.json``).

    Attributes:
        op: the op whose kernel departs.
        versions: the since-versions it departs at.
        provider: the execution provider of the kernel.
        condition: the name of the inputs it departs on (a key of :data:`CONDITIONS`).
        statement: what the kernel does instead of the spec.
        source: where that is known from (onnxruntime's source, a measurement, an issue).
    """

    op: str
    versions: tuple[int, ...]
    provider: str
    condition: str
    statement: str
    source: str


def _all_minus_inf_plane(inputs: Sequence[np.ndarray], node: onnx.NodeProto | None = None) -> bool:
    """Input 0 (N, C, spatial...) has a non-empty plane whose values are all -inf."""
    x = np.asarray(inputs[0]) if inputs else None
    if x is None or x.ndim < 3 or not (x.dtype.kind == "f" or x.dtype == np.dtype(ml_dtypes.bfloat16)):
        return False
    planes = x.astype(np.float64).reshape(x.shape[0] * x.shape[1], -1)
    return planes.shape[1] > 0 and bool(np.any(np.all(np.isneginf(planes), axis=1)))


def _x_chosen_negative_zero(inputs: Sequence[np.ndarray], node: onnx.NodeProto | None = None) -> bool:
    """Where's inputs (condition, X, Y): the condition selects an X that is -0.0 somewhere."""
    if len(inputs) != 3:
        return False
    cond, x = np.asarray(inputs[0]), np.asarray(inputs[1])
    if cond.dtype != np.bool_ or not (x.dtype.kind == "f" or x.dtype == np.dtype(ml_dtypes.bfloat16)):
        return False
    try:
        cond, x = np.broadcast_arrays(cond, x.astype(np.float64))
    except ValueError:
        return False
    return bool(np.any(cond & (x == 0) & np.signbit(x)))


def _negative_indices(inputs: Sequence[np.ndarray], node: onnx.NodeProto | None = None) -> bool:
    """Input 0 (OneHot's indices) holds a negative value."""
    x = np.asarray(inputs[0]) if inputs else None
    return x is not None and x.dtype.kind in "iuf" and bool(np.any(x < 0))


def _hidden_key_beside_nonfinite(inputs: Sequence[np.ndarray], node: onnx.NodeProto | None = None) -> bool:
    """Attention's inputs (Q, K, V, attn_mask, past_key, ...): a key hidden beside a NaN or ±inf in Q, K or past_key.

    A key is hidden by a bool mask holding False or by ``is_causal=1`` (where ``node`` is given). The NaN or
    ±inf can make the scores non-finite (a row whose visible scores are all -inf, say): a superset of the
    inputs the departure shows on, so a set it names is not judged.
    """
    causal = node is not None and any(a.name == "is_causal" and a.i == 1 for a in node.attribute)
    mask = np.asarray(inputs[3]) if len(inputs) > 3 else None
    hidden = causal or (mask is not None and mask.dtype == np.bool_ and not mask.all())
    scored = [np.asarray(inputs[i]) for i in (0, 1, 4) if i < len(inputs)]
    return hidden and any(x.dtype.kind == "f" and not np.isfinite(x).all() for x in scored)


#: The conditions ``departures.json`` may name: each says whether a check's failing inputs (in the
#: original node's input order) are ones the departure is known on.
CONDITIONS: dict[str, Callable[[Sequence[np.ndarray], onnx.NodeProto | None], bool]] = {
    "all_minus_inf_plane": _all_minus_inf_plane,
    "x_chosen_negative_zero": _x_chosen_negative_zero,
    "negative_indices": _negative_indices,
    "hidden_key_beside_nonfinite": _hidden_key_beside_nonfinite,
}


@cache
def departures() -> tuple[Departure, ...]:
    """The departures listed in ``lowerer/verification/departures.json`` (each with its source)."""
    data = json.loads((Path(__file__).with_name("departures.json")).read_text(encoding="utf-8"))
    out = []
    for d in data["departures"]:
        if d["condition"] not in CONDITIONS or not d.get("source"):
            raise ValueError(f"departures.json: entry for {d['op']} names an unknown condition or no source")
        out.append(Departure(d["op"], tuple(d["versions"]), d["provider"], d["condition"], d["statement"],
                             d["source"]))
    return tuple(out)


def listed_departure(op: str, version: int, provider: str, inputs: Sequence[np.ndarray],
                     node: onnx.NodeProto | None = None) -> Departure | None:
    """The listed departure of ``op``-``version`` on ``provider`` that the failing ``inputs`` (of ``node``) meet."""
    for d in departures():
        if d.op == op and version in d.versions and d.provider == provider and CONDITIONS[d.condition](inputs, node):
            return d
    return None


def replacement_departure(nodes: Sequence[Any], opset: int, provider: str,
                          feeds: Mapping[str, np.ndarray]) -> Departure | None:
    """The listed departure of a kernel of ``nodes`` (a replacement at ``opset``) that the failing ``feeds`` meet.

    Only a node that reads the check's inputs themselves (``feeds`` by name) is judged: its condition is
    evaluated on the very values it read.
    """
    for n in nodes:
        for d in departures_of([n], opset, provider):
            if all(i in feeds for i in n.input if i) and CONDITIONS[d.condition]([feeds[i] for i in n.input if i], n):
                return d
    return None


def departures_of(nodes: Sequence[Any], opset: int, provider: str) -> list[Departure]:
    """The listed departures of ``provider``'s kernels for the ops of ``nodes`` at ``opset`` (any condition)."""
    return [d for n in nodes for d in departures()
            if d.op == n.op_type and d.provider == provider and since_version(n.op_type, opset) in d.versions]


def unlisted(rewrite: Rewrite, failed: CheckResult) -> str:
    """What a failure's record says when the spec agreed with the replacement but no listed departure applies."""
    return (f"lowerer's numpy reference of {rewrite.op_type}-{rewrite.from_version} agrees with the replacement, "
            f"but no departure of {failed.provider or 'CPUExecutionProvider'}'s kernel is listed for these inputs "
            "(lowerer/verification/departures.json): the failure stands")


def worst_gap(a: Sequence[np.ndarray] | None, b: Sequence[np.ndarray] | None) -> str | None:
    """How two runs' outputs differ, in a few words (None: identical, NaNs equal)."""
    if a is None or b is None:
        return None if a is None and b is None else "one of them raises"
    for x, y in zip(a, b, strict=False):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return f"shapes {list(x.shape)} and {list(y.shape)}"
        if x.dtype.kind in "fc":
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
            if not same.all():
                with np.errstate(invalid="ignore"):
                    gap = np.abs(xf - yf)[~same]
                finite = gap[np.isfinite(gap)]
                worst = f"{float(finite.max()):.3g}" if finite.size else "inf"
                return f"max |diff| {worst} ({int((~same).sum())} of {same.size} values)"
        elif not np.array_equal(x, y):
            return f"{int((x != y).sum())} of {x.size} values differ"
    return None


def _warn_once(key: str, text: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logger.warning("%s", text)


def provider_departs(rewrite: Rewrite, failed: CheckResult, on_cpu: CheckResult, provider: str) -> CheckResult:
    """The CPU verified what failed on ``provider``: the rewrite stands; name the kernel that departs."""
    short = provider.replace("ExecutionProvider", "")
    original = f"{rewrite.op_type}-{rewrite.from_version}"
    replacement = " + ".join(rewrite.emitted) + f" (opset {rewrite.to_opset})"
    here, there = failed.evidence or {}, on_cpu.evidence or {}
    parties = []
    for side, name in (("original", original), ("replacement", replacement)):
        if side in here and side in there:
            gap = worst_gap(here[side], there[side])
            if gap is not None:
                parties.append(f"{provider}'s {name} kernel differs from its CPU kernel here ({gap})")
    said = "; ".join(parties) or (f"{provider}'s kernels of {original} or of {replacement} differ from its CPU "
                                  "kernels on these inputs")
    details: dict[str, Any] = {**on_cpu.details, "provider_departure": {
        "provider": provider, "statement": said, "failure_on_provider": failed.failure or failed.reason}}
    _warn_once(f"{provider}:{original}:{rewrite.rule}",
               f"{said}; node {rewrite.node!r}'s rewrite ({original} -> {replacement}) is verified on "
               f"CPUExecutionProvider instead (it failed on {short}: {failed.failure or failed.reason})")
    return CheckResult("verified", f"{on_cpu.reason}; {said}", on_cpu.provider, details)


def kernel_departs_from_spec(rewrite: Rewrite, failed: CheckResult, by_spec: CheckResult,
                             listed: Departure, side: str = "original") -> CheckResult:
    """The spec (numpy reference) agrees with the other side where onnxruntime disagreed (a listed departure).

    ``side``: whose kernel departs, the ``original``'s (judged by its spec, the replacement agrees) or the
    ``replacement``'s (both sides judged by their specs agree).
    """
    original = f"{rewrite.op_type}-{rewrite.from_version}"
    on = listed.provider if side == "replacement" else failed.provider or "CPUExecutionProvider"
    if side == "replacement":
        kernel = f"{listed.op} (the replacement's, opset {rewrite.to_opset})"
        agrees = f"judged by lowerer's numpy reference, the replacement agrees with {original}"
    else:
        kernel, agrees = original, f"lowerer's numpy reference of {original} agrees with the replacement"
    said = f"onnxruntime's {on} kernel of {kernel} departs from the ONNX spec here: {listed.statement} ({agrees})"
    details: dict[str, Any] = {**by_spec.details, "kernel_departure": {
        "kernel": f"{on} {kernel}", "statement": said, "condition": listed.condition, "source": listed.source,
        "failure_on_provider": failed.failure or failed.reason}}
    _warn_once(f"spec:{on}:{original}:{rewrite.rule}",
               f"{said}; node {rewrite.node!r}'s rewrite is verified against the spec "
               f"(onnxruntime: {failed.failure or failed.reason})")
    return CheckResult("verified", f"{by_spec.reason}; {said}", by_spec.provider, details)


def departure_met(model: onnx.ModelProto, base_dir: str | os.PathLike[str] | None, feeds: Mapping[str, np.ndarray],
                  provider: str) -> str | None:
    """Whether ``feeds`` make a node of ``model`` (main graph) meet a listed departure of ``provider``'s kernel.

    The values the nodes of listed ops read are computed (the model run once with them as outputs, on the
    CPU provider) and each departure's condition judged on them. Returns what the departure says, or None
    (none met, none listed for the model's ops, or the values cannot be had).
    """
    from lowerer.core.opsets import default_opset
    from lowerer.verification.runner import SessionMaker

    opset = default_opset(model.opset_import)
    if opset is None:
        return None
    nodes = [(i, n, d) for i, n in enumerate(model.graph.node) for d in departures_of([n], opset, provider)]
    if not nodes:
        return None
    wanted = list(dict.fromkeys(i for _, n, _ in nodes for i in n.input if i and i not in feeds))
    inits = {t.name: t for t in model.graph.initializer}
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    computed = [w for w in wanted if w not in inits]
    probe.graph.output.extend(onnx.ValueInfoProto(name=w) for w in computed)
    engine = SessionMaker([provider]).create(probe, base_dir)
    if isinstance(engine, str):
        return None
    try:
        values = dict(zip([o.name for o in probe.graph.output], engine.run(feeds), strict=True))
        values.update({w: numpy_helper.to_array(inits[w]) for w in wanted if w in inits})
    except Exception:  # external data, a run that fails: no finding
        return None
    values.update(feeds)
    for index, node, d in nodes:
        if CONDITIONS[d.condition]([np.asarray(values[i]) for i in node.input if i], node):
            return f"node {node_key(node, index)!r} ({node.op_type}) meets a listed departure: {d.statement} " \
                   f"(source: {d.source})"
    return None


#: Above this many main-graph nodes a failing ±inf set is not searched for a NaN made inside (then recorded).
NAN_SEARCH_LIMIT = 3000


def nan_made_inside(model: onnx.ModelProto, base_dir: str | os.PathLike[str] | None,
                    feeds: Mapping[str, np.ndarray], name: str) -> str | None:
    """Where ``model`` (called ``name``) first makes a NaN of ±inf on ``feeds`` (``inf - inf``, ``0 * inf``), or None.

    NaN's handling is left open by the spec for most ops and recorded, not judged, by the per-rewrite
    checks; a ±inf set that makes NaN inside a whole model is recorded likewise (:mod:`.whole`).
    """
    from lowerer.verification.providers import CPU
    from lowerer.verification.runner import SessionMaker

    graph = model.graph
    if len(graph.node) > NAN_SEARCH_LIMIT:
        return f"the model has over {NAN_SEARCH_LIMIT} nodes; not searched for a NaN made inside"
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=o) for n in graph.node for o in n.output
                              if o and o not in known)
    engine = SessionMaker([CPU]).create(probe, base_dir)
    if isinstance(engine, str):
        return None
    try:
        values = dict(zip([o.name for o in probe.graph.output], engine.run(feeds), strict=True))
    except Exception:  # the probe cannot run: the set stays judged
        return None
    for node in graph.node:
        out = next((o for o in node.output if o in values and np.asarray(values[o]).dtype.kind == "f"
                    and bool(np.isnan(values[o]).any())), None)
        if out is not None:
            return f"{name} makes NaN of ±inf at node {node.name or node.op_type!r} ({node.op_type})"
    return None
