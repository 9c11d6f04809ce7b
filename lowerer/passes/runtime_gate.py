"""What onnxruntime can load of a converted model: one policy, whatever the model's size.

The output already passed onnx's full check (or its composition, see
:func:`lowerer.passes.checker_gate.validate_output`); onnxruntime adds information only where the output
differs from the input, so it is asked per op-version and per rewrite pattern, never about the
whole model:

* each default-domain op-version of the output is looked up in onnxruntime's CPU kernel table
  (no session); one with no kernel and no function body onnxruntime could expand, or one whose
  expansion onnxruntime refuses, is recorded as unverified (``report.notes`` and a warning): the
  conversion stands. Which ops the output holds is read from the input's bytes (a substring
  search) and the rewrites' emitted ops; a node is looked for in the model only on a hit.
* each distinct rewrite pattern's replacement (the small model
  :class:`lowerer.passes.checker_gate.RewriteChecker` built, inputs typed as in the model) is opened in
  onnxruntime. Refused while the pattern's original opens: the conversion is refused
  (ConversionError, a gap in lowerer: the emitted ops are lowerer's choice), whatever the reason,
  a missing kernel for the emitted types included. Neither opens: recorded as unverified.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Mapping

import onnx

from lowerer.core.errors import ConversionError
from lowerer.core.report import Report, Rewrite
from lowerer.model_io.scopes import walk_nodes
from lowerer.verification.ort_support import CHECKED_MODELS, MIN_ORT_OPSET, check_loads, max_ort_opset, ort_supports

__all__ = ["check_rewrite_opens", "check_runtime", "kernel_type_gaps", "narrowed_kernel_types", "note_kernel_type_gap"]

logger = logging.getLogger(__name__)

#: How onnxruntime says it has no kernel for an op at a version.
_NO_KERNEL = re.compile(r"(?:Could not find an implementation for|Failed to find kernel for) (\w+)\((\d+)\)")
#: Ops onnxruntime handles at load without a kernel.
_NO_KERNEL_NEEDED = frozenset({"Constant"})


def check_runtime(converted: onnx.ModelProto, report: Report, source: bytes | None = None) -> None:
    """Record what onnxruntime cannot load in ``converted``; refuse a rewrite only onnxruntime rejects.

    Args:
        converted: the converted model.
        report: its report (``notes`` receives the unverified op-versions; its rewrites' checked
            patterns are opened).
        source: the input's bytes (which ops it holds is searched there); None walks ``converted``.

    Raises:
        ConversionError: onnxruntime opens a rewrite's original but not its replacement.
    """
    from lowerer.core.opsets import default_opset

    opset = default_opset(converted.opset_import)
    if opset is None:
        return
    # Up to the newest version onnxruntime has a kernel of, it loads the opset (no session to find out).
    if not _cpu_kernels():  # no kernel table could be read: only the rewrites are opened
        if MIN_ORT_OPSET <= opset <= max_ort_opset():
            for rewrite in report.rewrites:
                check_rewrite_opens(rewrite, report)
        return
    newest = max(low for ranges in _cpu_kernels().values() for low, _ in ranges)
    loadable = opset >= MIN_ORT_OPSET and (opset <= newest or opset <= max_ort_opset())
    if opset >= MIN_ORT_OPSET and not loadable:
        _note(report, f"unverified: onnxruntime {_ort_version()} does not load opset {opset}")
    for op, version, node in _kernelless(converted, opset, report, source):
        why = _probe(node, opset) if loadable and node is not None else "no kernel"
        if why is not None:
            _note(report, f"unverified: onnxruntime {_ort_version()} has no kernel for {op}-{version}")
    if loadable:
        for rewrite in report.rewrites:
            check_rewrite_opens(rewrite, report)


def check_rewrite_opens(rewrite: Rewrite, report: Report) -> None:
    """Open the first rewrite of a pattern in onnxruntime (a no-op for the others); refuse a gap of lowerer's.

    Raises:
        ConversionError: onnxruntime opens the rewrite's original but not its replacement.
    """
    pair = rewrite.__dict__.get(CHECKED_MODELS)
    if pair is not None:
        _check_pattern(rewrite, pair, report)


def _check_pattern(rewrite: Rewrite, pair: tuple[onnx.ModelProto, onnx.ModelProto], report: Report) -> None:
    """Open one pattern's replacement in onnxruntime; refuse when only its original opens."""
    original, replacement = pair
    why = check_loads(replacement)
    if why is None:
        return
    missing = _NO_KERNEL.search(why)
    if missing is not None and missing[1] == rewrite.op_type:
        # The node's own op at the target (Pad-13 on bfloat16 ...): onnxruntime's gap, not a choice of lowerer's.
        _note(report, f"unverified: onnxruntime {_ort_version()} has no kernel for {missing[1]}-{missing[2]} "
                      f"(the types of node {rewrite.node!r})")
        return
    if ort_supports(original) and check_loads(original) is None:  # lowerer's choice of ops: a gap
        raise ConversionError(
            f"onnxruntime does not open the replacement of node {rewrite.node!r} ({rewrite.op_type}-"
            f"{rewrite.from_version} -> {' + '.join(rewrite.emitted)} at opset {rewrite.to_opset}: {why}), though "
            "it opens the original; the conversion is refused (a gap in lowerer, please report it)")
    missing = _NO_KERNEL.search(why)
    if missing is not None:
        _note(report, f"unverified: onnxruntime {_ort_version()} has no kernel for {missing[1]}-{missing[2]}")
    else:
        _note(report, f"unverified: onnxruntime {_ort_version()} opens neither {rewrite.op_type}-"
                      f"{rewrite.from_version} nor its replacement ({why})")


def _note(report: Report, note: str) -> None:
    if note not in report.notes:
        report.notes.append(note)
        logger.warning("%s", note)


def _ort_version() -> str:
    import onnxruntime

    return ".".join(onnxruntime.__version__.split(".")[:2])


@functools.lru_cache(maxsize=1)
def _cpu_kernel_defs() -> dict[str, list[tuple[int, int, Mapping[str, frozenset[str]]]]]:
    """The default-domain CPU kernels of onnxruntime: op -> (low, high, type constraints) per kernel (read once).

    From :func:`lowerer.backends.installed_kernels.installed_kernels`: never
    ``get_all_opkernel_def()`` in this process (it kills it where onnxruntime-gpu cannot load CUDA).
    Empty when no table could be had (nothing is then looked up).
    """
    from lowerer.backends.installed_kernels import installed_kernels

    found = installed_kernels("CPUExecutionProvider")
    if found is None:
        return {}
    return {op: [(low, _UNBOUNDED if high is None else high, types) for low, high, types in rows]
            for op, rows in found.rows.items()}


#: The upper end of an open kernel version range.
_UNBOUNDED = 1 << 30


def _serves(low: int, high: int, version: int) -> bool:
    """Whether a kernel serves ``version`` (:func:`lowerer.backends.kernel_tables.holds`; open at ``_UNBOUNDED``)."""
    from lowerer.backends.kernel_tables import holds

    return holds(low, None if high >= _UNBOUNDED else high, version)


@functools.lru_cache(maxsize=1)
def _cpu_kernels() -> dict[str, list[tuple[int, int]]]:
    """The default-domain CPU kernels of onnxruntime: op -> the version ranges it has one for."""
    return {op: [(low, high) for low, high, _ in found] for op, found in _cpu_kernel_defs().items()}


@functools.lru_cache(maxsize=64)
def _kernelless_at(opset: int) -> dict[str, int]:
    """The default-domain ops at ``opset`` (op -> since version) onnxruntime has no CPU kernel for."""
    kernels = _cpu_kernels()
    out: dict[str, int] = {}
    for name in sorted({s.name for s in onnx.defs.get_all_schemas() if s.domain == ""}):
        try:
            schema = onnx.defs.get_schema(name, opset, "")
        except onnx.defs.SchemaError:
            continue
        if schema.deprecated:  # not valid at ``opset``: the full check refuses such a node
            continue
        version = int(schema.since_version)
        if name not in _NO_KERNEL_NEEDED and not any(_serves(lo, hi, version) for lo, hi in kernels.get(name, ())):
            out[name] = version
    return out


def _kernelless(model: onnx.ModelProto, opset: int, report: Report,
                source: bytes | None) -> list[tuple[str, int, onnx.NodeProto | None]]:
    """The kernel-less op-versions ``model`` holds, each with its first node (see the module docstring)."""
    candidates = _kernelless_at(opset)
    if not candidates:
        return []
    emitted = {op for r in report.rewrites for op in r.emitted}
    if source is not None:
        hits = [op for op in candidates if op in emitted or op.encode() in source]
    else:
        hits = list(candidates)
    if not hits:
        return []
    first: dict[str, onnx.NodeProto] = {}
    for node in walk_nodes(model):
        if node.op_type in candidates and node.domain in ("", "ai.onnx"):
            first.setdefault(node.op_type, node)
    return [(op, candidates[op], first[op]) for op in sorted(hits) if op in first]


def _probe(node: onnx.NodeProto, opset: int) -> str | None:
    """Why onnxruntime will not open ``node`` alone at ``opset`` (None when it does: it expands its body).

    Inputs are typed with the first type each schema constraint allows; a kernel-less op without
    a function body is not opened (it cannot be).
    """
    from lowerer.verification.models import small_model

    schema = onnx.defs.get_schema(node.op_type, opset, "")
    if not (getattr(schema, "has_function", False) or getattr(schema, "has_context_dependent_function", False)):
        return "no kernel and no function body"
    allowed = {c.type_param_str: list(c.allowed_type_strs) for c in schema.type_constraints}
    specs = []
    for i, name in enumerate(node.input):
        if not name:
            continue
        param = schema.inputs[min(i, len(schema.inputs) - 1)].type_str
        spelled = (allowed.get(param) or [param])[0]
        elem = _ELEM.get(spelled)
        if elem is None:
            return f"input type {spelled} not probed"
        specs.append((name, elem, None))
    probe = onnx.NodeProto()
    probe.CopyFrom(node)
    return check_loads(small_model([probe], [], specs, [o for o in node.output if o], opset))


_ELEM = {f"tensor({onnx.TensorProto.DataType.Name(v).lower()})": v for v in onnx.TensorProto.DataType.values()}


@functools.lru_cache(maxsize=4096)
def _kernel_types(op: str, version: int) -> dict[str, frozenset[str]] | None:
    """Per type constraint, every type onnxruntime's CPU kernels of ``op``-``version`` take (None: no kernel)."""
    found: dict[str, set[str]] = {}
    hit = False
    for low, high, constraints in _cpu_kernel_defs().get(op, ()):
        if _serves(low, high, version):
            hit = True
            for name, types in constraints.items():
                found.setdefault(name, set()).update(types)
    return {name: frozenset(types) for name, types in found.items()} if hit else None


@functools.lru_cache(maxsize=4096)
def narrowed_kernel_types(op: str, source: int, target: int) -> dict[str, frozenset[str]] | None:
    """The target kernel's types per constraint where they miss a type the source kernel took, else None.

    A node that onnxruntime runs at since-``source`` keeps running at since-``target`` unless the
    target's kernel takes fewer types (Max-6 takes float only, Max-13 double too): only then are a
    relabeled node's input types worth looking at (:func:`kernel_type_gaps`).
    """
    if source == target:
        return None
    before, after = _kernel_types(op, source), _kernel_types(op, target)
    if before is None or after is None:
        return None  # no kernel at all: the op-version check of check_runtime records it
    if all(types <= after.get(name, frozenset()) for name, types in before.items()):
        return None
    return after


def kernel_type_gaps(node: onnx.NodeProto, version: int, opset: int, kernel: dict[str, frozenset[str]],
                     elem_type: Callable[[str], int | None]) -> str | None:
    """The first input type of ``node`` (at since-``version``) the target kernel does not take, spelled, or None."""
    schema = onnx.defs.get_schema(node.op_type, opset, "")
    formal = schema.inputs
    for i, name in enumerate(node.input):
        if not name or not formal:
            continue
        param = formal[min(i, len(formal) - 1)].type_str
        allowed = kernel.get(param)
        elem = elem_type(name)
        if allowed is None or elem is None:
            continue
        spelled = f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})"
        if spelled not in allowed:
            return spelled
    return None


def note_kernel_type_gap(report: Report, op: str, version: int, spelled: str) -> None:
    """Record that onnxruntime has no kernel of ``op``-``version`` for ``spelled`` (the conversion stands)."""
    _note(report, f"unverified: onnxruntime {_ort_version()} has no kernel for {op}-{version} on {spelled}")
