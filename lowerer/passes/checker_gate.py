"""The validation gate: nothing leaves lowerer that onnx's full check rejects, paid for what changed.

* :class:`NodeGate` checks every node the first rewrite of each pattern emits against its schema at
  the target (attributes the schema lacks, wrong attribute types, missing required ones, input and
  output counts); answers are cached per node signature.
* :class:`RewriteChecker` runs onnx's strict shape and type inference on each distinct rewrite on
  its own, from its input types in the model: the replacement must infer wherever the original
  does, to outputs of the original's types. It keeps the two small models for onnxruntime.
* :func:`validate_output`, the one call after a conversion: when the input passed onnx's checker
  and strict inference and every rewrite pattern was checked, the output passes
  ``onnx.checker.check_model(full_check=True)`` by composition (the argument is in its docstring)
  and no whole-model check runs; otherwise :func:`check_output` runs it (external weights are
  never read: in the copy that is checked, main-graph initializers held in external data become
  graph inputs of the same type and shape), and when the output fails, the input is checked the
  same way, so the message can say whether the conversion or the input is at fault. Then
  :func:`lowerer.passes.runtime_gate.check_runtime`: onnxruntime per op-version and per rewrite pattern,
  never the whole model, whatever its size.
* :func:`lowerer.verification.ort_support.check_loads` opens a model in onnxruntime (graph optimizations
  off), for models whose default-domain opset onnxruntime supports (7 up to the newest it loads).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import onnx

from lowerer.core.errors import ConversionError, InputError
from lowerer.core.report import Report, Rewrite
from lowerer.model_io.scopes import has_subgraphs
from lowerer.verification.ort_support import CHECKED_MODELS

if TYPE_CHECKING:
    from lowerer.facts.value_types import ValueType

__all__ = ["NodeGate", "RewriteChecker", "as_model", "check_output", "validate_output"]


logger = logging.getLogger(__name__)


class NodeGate:
    """Checks emitted nodes against their schemas at one opset; raises ConversionError naming the node."""

    def __init__(self, opset_imports: dict[str, int], ir_version: int) -> None:
        self._ctx = onnx.checker.C.CheckerContext()
        self._ctx.ir_version = max(ir_version, 3)
        self._ctx.opset_imports = dict(opset_imports)
        self._seen: dict[tuple[object, ...], str | None] = {}

    def check(self, node: onnx.NodeProto, original: onnx.NodeProto, scope: str, opset: int) -> None:
        """Refuse when ``node`` (emitted for ``original``) is not valid at ``opset``."""
        if has_subgraphs(node):
            return  # checked with its subgraphs by the whole-model check
        # Validity depends on the op, which inputs and outputs are given, and the attributes' names,
        # types and (for the few enum-like ints and strings) values; not on value names.
        key = (node.domain, node.op_type, tuple(map(bool, node.input)), len(node.output),
               tuple((a.name, a.type, a.ref_attr_name, a.i, a.s) for a in node.attribute))
        if key not in self._seen:
            try:
                onnx.checker.check_node(node, self._ctx)
                self._seen[key] = None
            except Exception as e:
                self._seen[key] = " ".join(str(e).split())
        why = self._seen[key]
        if why is not None:
            label = repr(original.name) if original.name else f"<unnamed {original.op_type}>"
            raise ConversionError(
                f"node {label} ({original.op_type}, in {scope}) cannot be converted to opset {opset}: its replacement "
                f"{node.op_type} would not be valid there ({why}); this is a gap in lowerer, please report it",
                node=original, scope=scope)


class RewriteChecker:
    """Strict shape and type inference of each distinct rewrite, on its own (its inputs typed as in the model).

    The replacement, at the target opset, must infer without error wherever the original node, at
    its own opset, does; a replacement that does not is a conversion gap (ConversionError).
    :attr:`complete` stays True while every rewrite could be checked (its input types known).
    """

    def __init__(self) -> None:
        self._seen: set[tuple[object, ...]] = set()
        self.complete = True

    def first(self, rewrite: Rewrite) -> bool:
        """Whether ``rewrite`` is the first of its pattern (then it is to be checked); records it."""
        if rewrite.original is None:
            self.complete = False
            return False
        key = _pattern(rewrite)
        if key in self._seen:
            return False
        self._seen.add(key)
        return True

    def __call__(self, rewrite: Rewrite) -> None:
        """Check ``rewrite`` (the first of its pattern: see :meth:`first`)."""
        from lowerer.verification.canon import canon_of  # the verifier's canonical form
        from lowerer.verification.models import small_model

        canon = canon_of(rewrite)
        specs = []
        for c, name in canon.inputs:
            vt = rewrite.input_types.get(name)
            if vt is None or not vt[0]:
                self.complete = False
                return
            specs.append((c, int(vt[0]), None if vt[1] is None else list(vt[1])))
        specs += [(c, onnx.TensorProto.INT64, [len(r)]) for c, _, r in canon.derived]
        outputs = [c for c, _ in canon.outputs]
        fixed = canon.fixed_tensors
        original = small_model([canon.original], fixed, specs, outputs, rewrite.from_opset)
        replacement = small_model(canon.replacement, [*fixed, *canon.constants], specs, outputs, rewrite.to_opset)
        before = _inferred(original)
        if isinstance(before, str) or any(t is None for t in before):
            self.complete = False  # the original does not infer strictly on its own: nothing to hold it to
            return
        inferred = _inferred(replacement)
        if not isinstance(inferred, str) and any(t is None for t in inferred) and _uninferred(replacement):
            self.complete = False  # onnx has no inference for an op of the replacement there: nothing to judge
            return
        names = [rewrite.original.output[i] if rewrite.original is not None and i < len(rewrite.original.output)
                 else c for i, c in enumerate(outputs)]  # the node's own output names, not the check's
        why = inferred if isinstance(inferred, str) else _type_mismatch(before, inferred, names)
        if why is not None:
            raise ConversionError(
                f"node {rewrite.node!r} ({rewrite.op_type}-{rewrite.from_version}, in {rewrite.scope}) cannot be "
                f"converted to opset {rewrite.to_opset}: its replacement ({' + '.join(rewrite.emitted)}) fails "
                f"onnx's strict inference ({why}); this is a gap in lowerer, please report it")
        # Kept for the onnxruntime check of the output (validate_output), one pair per pattern.
        rewrite.__dict__[CHECKED_MODELS] = (original, replacement)


def _uninferred(model: onnx.ModelProto) -> bool:
    """Whether some node of ``model`` has a schema at its opset without a type inference function (Cast-1)."""
    opset = next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), None)
    for node in model.graph.node:
        try:
            schema = onnx.defs.get_schema(node.op_type, opset or 1, node.domain)
        except onnx.defs.SchemaError:
            continue
        if not schema.has_type_and_shape_inference_function:
            return True
    return False


def _pattern(rewrite: Rewrite) -> tuple[object, ...]:
    """What a rewrite's replacement is made from (a cheap key for distinct rewrites).

    The original's op, attributes and input pattern, the facts it read (input types, constant and
    derived inputs), the opsets and how it was crossed. Cheaper than the verifier's canonical form
    (no copy of the replacement); two rewrites with the same pattern get replacements of the same
    structure. Inputs are named by position (``wiring`` says which positions read one value).
    """
    node = rewrite.original
    assert node is not None
    inputs = list(node.input)
    first: dict[str, int] = {}
    wiring = tuple(first.setdefault(n, i) if n else -1 for i, n in enumerate(inputs))
    attrs = tuple(a.SerializeToString() for a in node.attribute)
    get = rewrite.input_types.get
    types = tuple(_type_key(get(n)) for n in inputs if n)
    values: tuple[object, ...] = ()
    if rewrite.input_values:
        values = tuple((first[n], str(v.dtype), v.shape, v.tobytes()) for n, v in rewrite.input_values.items()
                       if n in first)
    derived: tuple[object, ...] = ()
    if rewrite.derived_inputs:
        derived = tuple((first[n], tuple((first.get(e[0], e[0]), e[1]) if isinstance(e, tuple) else e for e in r))
                        for n, r in rewrite.derived_inputs.items() if n in first)
    return (node.op_type, node.domain, wiring, len(node.output), attrs, types, values, derived,
            rewrite.from_opset, rewrite.to_opset, tuple(rewrite.steps), tuple(rewrite.emitted))


def _type_key(vt: tuple[int, list[int | str | None] | None] | None) -> object:
    if vt is None:
        return None
    elem, dims = vt
    return elem, None if dims is None else tuple(dims)


def _inferred(model: onnx.ModelProto) -> list[ValueType | None] | str:
    """The output types strict inference gives ``model`` (after its nodes' schema checks), or why it fails."""
    from lowerer.facts.value_types import value_type
    from lowerer.verification.specs import strict_check

    try:
        inferred = strict_check(model)
    except Exception as e:
        return " ".join(str(e).split())[:300]
    constants = {t.name: (t.data_type, list(t.dims)) for t in model.graph.initializer}
    out: list[ValueType | None] = []
    for o in inferred.graph.output:  # an output that is an initializer keeps its tensor's type
        known = o.type.HasField("tensor_type") and o.type.tensor_type.elem_type
        out.append(value_type(o.type) if known else constants.get(o.name))
    return out


def _type_mismatch(before: list[ValueType | None], after: list[ValueType | None], names: list[str]) -> str | None:
    """How the replacement's output types differ from the original's (None when each is compatible).

    Compatible: the same element type, the same rank when both are known, and no static dim of
    one contradicting a static dim of the other. This is what lets the rest of the model infer
    as it did before (see :func:`validate_output`).
    """
    for name, old, new in zip(names, before, after, strict=True):
        assert old is not None
        if new is None or new[0] != old[0]:
            return f"output {name!r} has type {None if new is None else new[0]}, the original's is {old[0]}"
        if old[1] is None or new[1] is None:
            continue
        if len(old[1]) != len(new[1]) or any(a is not None and b is not None and a != b
                                             for a, b in zip(old[1], new[1], strict=True)):
            return f"output {name!r} has shape {new[1]}, the original's is {old[1]}"
    return None


def _checkable(model: onnx.ModelProto, serialized: bytes | None = None) -> onnx.ModelProto | str:
    """``model`` as the checker may see it without opening files (a copy when it has external data)."""
    from lowerer.model_io.external_data import external_data_locations

    if not external_data_locations(model, serialized):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    inputs = {vi.name for vi in graph.input}
    kept = []
    for t in graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            if t.name not in inputs:
                graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            kept.append(t)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    if external_data_locations(copy):
        return "weights in external data outside the main graph's initializers"
    return copy


def _check(model: onnx.ModelProto | bytes, full: bool) -> str | None:
    try:
        onnx.checker.check_model(model, full_check=full)
    except Exception as e:  # ValidationError, InferenceError and the checker's other C++ errors
        return " ".join(str(e).split())
    return None


def check_output(converted: onnx.ModelProto, source: onnx.ModelProto | bytes | None, target: int | None,
                 input_strict: bool | None = None) -> None:
    """Refuse (ConversionError, or InputError when the input fails too) unless ``converted`` passes the full check.

    ``input_strict`` True says the input passed onnx's strict shape and type inference (run while
    converting, for the facts rules needed): every node the conversion emitted was checked against
    its schema and, for distinct rewrites, by strict inference of its own, so the whole-model
    strict inference would only repeat that; the plain checker then runs on the whole model. Else
    ``onnx.checker.check_model(full_check=True)``.

    Raises:
        ConversionError: the converted model fails and the input passes (a conversion gap).
        InputError: the input itself fails onnx's full check.
    """
    try:
        payload = converted.SerializeToString()
    except ValueError:  # over 2 GiB inline: the checker cannot take it either
        logger.info("full model check skipped: the model is over protobuf's 2 GiB limit")
        return
    checkable = _checkable(converted, payload)
    if isinstance(checkable, str):
        logger.info("full model check skipped: %s", checkable)
        return
    if checkable is not converted:
        payload = checkable.SerializeToString()
    why = _check(payload, full=not input_strict)
    if why is None:
        return
    input_why = None
    if source is not None:
        checkable_source = _checkable(as_model(source))
        input_why = None if isinstance(checkable_source, str) else _check(checkable_source, full=True)
    at = f" at opset {target}" if target is not None else ""
    if input_why is not None:
        raise InputError(f"the input model fails onnx's full check (onnx.checker.check_model(full_check=True)): "
                         f"{input_why}; lowerer writes only models that pass it")
    raise ConversionError(f"the converted model{at} fails onnx's full check: {why}; the input passes it, so this "
                          "conversion is refused (a gap in lowerer, please report it)")


def as_model(source: onnx.ModelProto | bytes) -> onnx.ModelProto:
    """``source`` as a ModelProto (parsed when it is the model's bytes)."""
    if isinstance(source, bytes):
        model = onnx.ModelProto()
        model.ParseFromString(source)
        return model
    return source


def validate_output(converted: onnx.ModelProto, source: onnx.ModelProto | bytes | None, report: Report,
                    target: int | None, *, input_checked: bool = False) -> None:
    """The output gate: refuse what onnx's full check would reject; note what onnxruntime cannot run.

    The whole-model check is paid only where the composition argument below does not hold.

    **The composition argument.** When ``report.strictly_checked`` is True, the input passed
    onnx's strict shape and type inference as a whole (with ``check_type``: every value_info and
    graph output it states agrees with the graph) and its structure passed onnx's checker on the way
    in (``input_checked``: onnx's checker passed it; lowerer's own walk may accept a model in memory
    that the checker refuses, so without it the plain checker runs on the output). The output
    differs from it only by (1) untouched nodes whose opset moved, each proven by the
    schema table to mean the same and to take the same attributes and types at the target, (2) the
    replacement of each rewritten node, every distinct pattern of which (op, versions, input types,
    attribute signature, constant and derived inputs) passed the node gate (each emitted node
    against its target schema: attributes the target lacks, attribute types, arities) and strict
    inference on its own, from the input types it has in the model, giving outputs of the types the
    original's have (:class:`RewriteChecker`), and (3) fresh names and initializers for what
    replacements make. Strict inference of the output therefore meets, at each node, the types it
    met in the input, and each node is valid at the target: the output passes
    ``check_model(full_check=True)`` without running it. Otherwise (inference was not run on the
    input, or failed, or a rewrite could not be checked on its own) :func:`check_output` runs the
    full check on the whole output, and an input that fails it is named (InputError).

    What the argument does not cover is checked here, at no cost per node: the model-level fields
    (the IR version must allow the opsets imported). The cases it relies on are tested in
    ``tests/test_validation_gate.py``. Then :func:`lowerer.passes.runtime_gate.check_runtime` (onnxruntime,
    per op-version and per rewrite pattern, never the whole model).

    Args:
        converted: the converted model.
        source: the input (its bytes, or the model), to name it when it fails too.
        report: the conversion's report (``strictly_checked``: the composition holds; ``notes``
            receives what onnxruntime cannot verify).
        target: the target opset (for messages).
        input_checked: the input passed ``onnx.checker.check_model`` on the way in.

    Raises:
        ConversionError: the converted model fails (a gap in lowerer), or onnxruntime opens a
            rewrite's original but not its replacement.
        InputError: the input fails onnx's full check.
    """
    from lowerer.passes.runtime_gate import check_runtime

    if not report.strictly_checked or not input_checked:
        check_output(converted, source, target, input_strict=report.strictly_checked)
    else:
        _check_model_fields(converted)
    check_runtime(converted, report, source if isinstance(source, bytes) else None)


def _check_model_fields(converted: onnx.ModelProto) -> None:
    """Refuse an IR version older than the opsets imported need (what the composition does not cover).

    An import no node uses (kept with ``keep_imports``) does not count: onnx's checker and onnxruntime
    accept it below its IR version.
    """
    from lowerer.model_io.imports import counted_imports

    try:
        needed = onnx.helper.find_min_ir_version_for(counted_imports(converted), ignore_unknown=True)
    except Exception:  # an opset this onnx does not know: left to the structure check on the way in
        return
    if converted.ir_version < needed:
        raise ConversionError(f"the converted model has IR version {converted.ir_version}, but its opsets need "
                              f"{needed}; this is a gap in lowerer, please report it")
