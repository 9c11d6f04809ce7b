"""Per-rewrite checks on the values the model really feeds a node.

The per-rewrite check invents inputs for the rewritten node alone (:mod:`.check`). Where a node's
inputs are computed upstream, invented ones may not fit: a Reshape whose shape comes from
Shape/Gather/Concat, a Resize whose sizes come from a Concat, a ScatterElements whose indices come
from a TopK. Such a check runs on no generated input and ends ``unverified``.

Those rewrites, in the main graph, are checked again once the conversion walk is over
(:func:`check_pending`): the ORIGINAL model runs once on the whole-model check's input sets (the
same generation as :func:`lowerer.verification.whole.compare_models`: generated from the graph
inputs with the seed, or the user's ``load_inputs`` / ``input_shapes`` / ``value_ranges``), with the
inputs of those nodes (only those) exposed as extra graph outputs. Each set's values become one more
input set of the node's check, ``observed (whole-model input set N, KIND)``, run through the same
:class:`~.trial.Trial` (both sides run on them, judged like the generated sets) with the same second
opinions before a failure is blamed. A check on observed values only adds to a rewrite's record: it
never replaces a failure, and its result is the node's own (never cached for identical rewrites).

Cost: nothing where every check ran on generated inputs; otherwise one session of the original model
and one run per input set, plus one session pair per distinct check (shared by the nodes of that check).
Memory: a value over :data:`~.inputs.MAX_ELEMENTS` elements (the most a generated input has) is not
kept, nor values past :data:`MAX_BYTES` in all (the node stays ``unverified``, saying so). Nodes
inside If/Loop/Scan bodies and functions are not checked this way (their values are not graph
values of the model): they stay as the generated check left them.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from lowerer.core.errors import LowererError, VerificationError
from lowerer.core.report import Rewrite
from lowerer.verification.budget import available_memory, claimed_bytes, gib
from lowerer.verification.canon import Canon, canon_of
from lowerer.verification.check import RewriteVerifier
from lowerer.verification.feeds import model_sets
from lowerer.verification.graph_inputs import model_inputs
from lowerer.verification.inputs import MAX_ELEMENTS
from lowerer.verification.result import CheckResult
from lowerer.verification.runner import Engine, SessionMaker, ort_can_exchange
from lowerer.verification.trial import Trial

#: How a check that ran on no generated input set begins its reason (:meth:`.trial.Trial.result`).
NO_GENERATED_SET = "the original could not run on any generated input"

__all__ = ["MAX_BYTES", "ObservedSource", "ObservedValues", "check_pending", "observe"]

#: The most bytes all kept values may take together.
MAX_BYTES = 1 << 28


@dataclass(frozen=True)
class ObservedSource:
    """The original model and the whole-model check's input options.

    Attributes:
        model: the original model (external data not loaded), or the bytes it was parsed from; None
            when there is none (then ``unavailable`` says why).
        base_dir: the folder its external data is read from.
        input_shapes, value_ranges, load_inputs: as :class:`lowerer.verification.whole.ModelCheckOptions`.
        seed: the whole-model check's seed.
        unavailable: why no values can be observed (None: they can).
    """

    model: onnx.ModelProto | bytes | None
    base_dir: Path | None = None
    input_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    value_ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    load_inputs: Sequence[Path] = ()
    seed: int = 0
    unavailable: str | None = None


@dataclass
class ObservedValues:
    """Values of the main graph, one dict per whole-model input set that ran, and why some are missing.

    Attributes:
        sets: (kind of the whole-model input set, value name -> array) per set, in order (None: it did not run).
        missing: value name -> why it was not kept.
    """

    sets: list[tuple[str, dict[str, np.ndarray] | None]]
    missing: dict[str, str] = field(default_factory=dict)


def check_pending(verifier: RewriteVerifier, source: ObservedSource) -> None:
    """Check each rewrite ``verifier`` left unverified in the main graph again, on the values the model feeds it.

    Raises:
        VerificationError: a rewrite computes different numbers on those values.
    """
    pending, verifier.pending = verifier.pending, []
    if not pending:
        return
    start = time.perf_counter()
    try:
        names = list(dict.fromkeys(n for r in pending for _, n in canon_of(r).inputs))
        observed = observe(source, names, verifier.sessions)
        if isinstance(observed, ObservedValues):
            verifier.stats["observed_runs"] += len(observed.sets)
        engines: dict[tuple[object, ...], tuple[Engine, Engine] | CheckResult] = {}
        for rewrite in pending:
            verifier.stats["observed_rewrites"] += 1
            _check_one(verifier, rewrite, observed, engines)
    finally:
        verifier.seconds += time.perf_counter() - start


def observe(source: ObservedSource, names: Sequence[str], sessions: SessionMaker) -> ObservedValues | str:
    """Run the original on the whole-model input sets and keep the values ``names`` take; or why it cannot."""
    if source.unavailable is not None or source.model is None:
        return source.unavailable or "the original model is not at hand"
    model = onnx.load_from_string(source.model) if isinstance(source.model, bytes) else source.model
    specs = model_inputs(model)
    if isinstance(specs, str):
        return f"no whole-model input can be made: {specs}"
    why = ort_can_exchange([s.dtype for s in specs])
    if why is not None:
        return why
    claimed = claimed_bytes(model, source.base_dir)
    free = available_memory()
    if isinstance(claimed, str) or (free is not None and claimed > free):
        return f"the original was not run: {claimed if isinstance(claimed, str) else gib(claimed) + ' claimed'}"
    try:
        sets = model_sets(model, specs, seed=source.seed, input_shapes=source.input_shapes,
                          value_ranges=source.value_ranges, load_inputs=source.load_inputs)
    except LowererError as e:
        return f"no whole-model input set: {e}"
    graph_values = _main_graph_values(model)
    given = {s.name for s in specs}
    wanted = [n for n in names if n in graph_values and n not in given]
    missing = {n: "not a value of the main graph" for n in names if n not in graph_values}
    engine = sessions.create(_exposing(model, wanted), source.base_dir) if wanted else None
    if isinstance(engine, str):
        return f"onnxruntime cannot run the original with its values exposed: {engine}"
    out = ObservedValues([], missing)
    kept = 0
    for feed_set in sets:
        try:
            fetched = [] if engine is None else engine.session.run(wanted, dict(feed_set.feeds))
        except Exception as e:
            out.sets.append((feed_set.label, None))
            out.missing.setdefault("", f"the original raised on {feed_set.label}: {' '.join(str(e).split())[:200]}")
            continue
        values: dict[str, np.ndarray] = {}
        found = [(n, feed_set.feeds[n]) for n in names if n in given] + list(zip(wanted, fetched, strict=True))
        for n, v in found:
            array = np.asarray(v)
            if array.size > MAX_ELEMENTS or kept + array.nbytes > MAX_BYTES:
                too_many = f"{n!r} holds {array.size} values, over the {MAX_ELEMENTS} kept for a check"
                out.missing.setdefault(n, too_many if array.size > MAX_ELEMENTS else
                                       f"the values kept reached {gib(MAX_BYTES)}, the most kept for these checks")
                continue
            kept += array.nbytes
            values[n] = array
        out.sets.append((feed_set.label.split(" ", 1)[0], values))
    return out


def _main_graph_values(model: onnx.ModelProto) -> set[str]:
    graph = model.graph
    return ({o for n in graph.node for o in n.output if o} | {i.name for i in graph.input}
            | {t.name for t in graph.initializer})


def _exposing(model: onnx.ModelProto, names: Sequence[str]) -> bytes:
    """``model``'s bytes with ``names`` among its outputs (untyped: onnxruntime infers them)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    outputs = exposed.graph.output
    for o in outputs:  # onnxruntime infers an output's type, but refuses type 0
        if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type == 0:
            o.ClearField("type")
    present = {o.name for o in outputs}
    outputs.extend(onnx.ValueInfoProto(name=n) for n in names if n not in present)
    return bytes(exposed.SerializeToString())


def _check_one(verifier: RewriteVerifier, rewrite: Rewrite, observed: ObservedValues | str,
               engines: dict[tuple[object, ...], tuple[Engine, Engine] | CheckResult]) -> None:
    """Check ``rewrite`` on the observed values of its inputs; its record updated, or VerificationError raised."""
    canon = canon_of(rewrite)
    generated = rewrite.reason
    sets = observed if isinstance(observed, str) else _node_sets(canon, observed)
    result = _judged(verifier, rewrite, canon, sets, engines) if not isinstance(sets, str) else None
    if result is None or result.status == "unverified":
        why = sets if result is None else result.reason
        rewrite.reason = (f"not run on generated inputs nor on the values the model feeds it: {why}; on generated "
                          f"inputs: {generated}" if generated.startswith(NO_GENERATED_SET) else
                          f"{generated}; on the values the model feeds it: {why}")
        return
    rewrite.status, rewrite.reason, rewrite.provider = result.status, result.reason, result.provider
    rewrite.details = {**result.details, "reused": False,
                       "observed": f"checked on the values the model feeds the node ({len(sets)} whole-model input "
                                   f"set(s)): on generated inputs, {generated}"}
    if result.status == "failed":
        raise VerificationError(verifier._message(rewrite, canon, result))
    verifier.stats["observed_verified"] += 1


def _node_sets(canon: Canon, observed: ObservedValues) -> list[tuple[str, list[np.ndarray]]] | str:
    """The observed input sets of one node (kind, values in the order of ``canon.inputs``), or why there are none."""
    names = [n for _, n in canon.inputs]
    out: list[tuple[str, list[np.ndarray]]] = []
    for i, (kind, values) in enumerate(observed.sets):
        if values is None or any(n not in values for n in names):
            continue
        out.append((f"observed (whole-model input set {i + 1}, {kind})", [values[n] for n in names]))
    if out:
        return out
    why = next((observed.missing[n] for n in names if n in observed.missing), None)
    return why or observed.missing.get("") or "the original ran on no whole-model input set"


def _judged(verifier: RewriteVerifier, rewrite: Rewrite, canon: Canon, sets: list[tuple[str, list[np.ndarray]]],
            engines: dict[tuple[object, ...], tuple[Engine, Engine] | CheckResult]) -> CheckResult:
    """The observed sets run as :meth:`RewriteVerifier._judged` runs generated ones, with its second opinions."""
    result = _run(verifier, rewrite, canon, sets, verifier.sessions, engines)
    if result.status != "failed" or result.provider == "onnx.checker":
        return result
    return verifier.second_opinions(rewrite, canon, result, lambda sessions, by_spec, replay: (
        _run(verifier, rewrite, canon, sets, sessions, engines, by_spec=by_spec)))[1]


def _run(verifier: RewriteVerifier, rewrite: Rewrite, canon: Canon, sets: list[tuple[str, list[np.ndarray]]],
         sessions: SessionMaker, engines: dict[tuple[object, ...], tuple[Engine, Engine] | CheckResult],
         by_spec: bool = False) -> CheckResult:
    """Both sides on every observed set: the first failure, or the outcome (one session pair per distinct check)."""
    first = sets[0][1]
    elems = [int(onnx.helper.np_dtype_to_tensor_dtype(v.dtype)) for v in first]
    dtypes: list[np.dtype[Any]] = [v.dtype for v in first]
    dims = [_dims(rewrite, orig, v) for (_, orig), v in zip(canon.inputs, first, strict=True)]
    key = (canon.key, tuple(elems), tuple(map(tuple, dims)), id(sessions), by_spec)
    made = engines.get(key)
    if made is None:
        in_specs: list[tuple[str, int, list[int | None] | None]] = [
            (c, e, d) for (c, _), e, d in zip(canon.inputs, elems, dims, strict=True)]
        made = engines[key] = verifier._engines(rewrite, canon, in_specs, dtypes, sessions, by_spec)
    if isinstance(made, CheckResult):
        return made
    trial = Trial(rewrite, canon, *made, elems, dtypes, verifier.exact, verifier.max_ulp)
    trial.judged = trial.judged | {kind for kind, _ in sets}  # real values: judged like the generated kinds
    rng = np.random.default_rng([verifier.seed, zlib.crc32(repr(canon.key).encode())])
    for kind, values in sets:
        if [v.dtype for v in values] != dtypes or any(not _fits(v, d) for v, d in zip(values, dims, strict=True)):
            continue  # another set's types or lengths (a session per distinct check and lengths)
        outcome = trial.run_set(kind, tuple(v.shape for v in values), rng, dict(enumerate(values)))
        if isinstance(outcome, CheckResult):
            return outcome
    if not trial.used_sets:
        return CheckResult("unverified", f"the original does not run on them ({trial.first_error})")
    return trial.result()


def _dims(rewrite: Rewrite, name: str, value: np.ndarray) -> list[int | None]:
    """The dims the check model declares for an input: the node's static ones, and a 1-D input's length.

    A 1-D input (a shape, sizes, axes) is declared with the length observed: onnxruntime's shape inference
    of some ops (Resize's ``sizes``) refuses one of unknown length.
    """
    vt = rewrite.input_types.get(name)
    declared = None if vt is None or vt[1] is None or len(vt[1]) != value.ndim else list(vt[1])
    if value.ndim == 1:
        return [int(value.shape[0])]
    return [None] * value.ndim if declared is None else [d if isinstance(d, int) else None for d in declared]


def _fits(value: np.ndarray, dims: list[int | None]) -> bool:
    return value.ndim == len(dims) and all(d is None or d == n for d, n in zip(dims, value.shape, strict=True))
