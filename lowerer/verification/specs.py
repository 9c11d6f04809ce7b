"""What one distinct check decides before it runs anything, and how its per-type outcomes combine.

The generated inputs' specs and element types (:func:`input_specs`, :func:`element_sets`), whether
the replacement can be checked by its structure alone (:func:`structure_problem`) and is a valid
ONNX graph (:func:`strict_check`, :func:`invalid_graph`); :func:`combined` makes one result of the
checks run with each element type. Used by :mod:`.check` (the verifier) and :mod:`.trial` (one run).
"""

from __future__ import annotations

import onnx

from lowerer.core.report import Rewrite, RewriteStatus
from lowerer.facts.attribute_values import value_problem
from lowerer.model_io.scopes import has_subgraphs
from lowerer.verification.canon import Canon
from lowerer.verification.result import CheckResult

__all__ = [
    "GENERATED",
    "Spec",
    "combined",
    "element_sets",
    "input_specs",
    "invalid_graph",
    "schema_types",
    "short",
    "strict_check",
    "structure_problem",
]

#: Generated inputs of one distinct check: (canonical name, element type, dims or None).
Spec = tuple[str, int, list[int | None] | None]

#: The element types :func:`lowerer.verification.inputs.generate` makes inputs of.
GENERATED = {onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
             onnx.TensorProto.INT8, onnx.TensorProto.INT16, onnx.TensorProto.INT32, onnx.TensorProto.INT64,
             onnx.TensorProto.UINT8, onnx.TensorProto.UINT16, onnx.TensorProto.UINT32, onnx.TensorProto.UINT64,
             onnx.TensorProto.BOOL}


def schema_types(node: onnx.NodeProto, opset: int) -> list[int]:
    """Element types the schema of ``node`` allows for its first input."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return []
    type_str = schema.inputs[0].type_str if schema.inputs else ""
    allowed = [tc.allowed_type_strs for tc in schema.type_constraints if tc.type_param_str == type_str]
    strs = allowed[0] if allowed else [type_str]
    out = []
    for s in strs:
        if s.startswith("tensor(") and s.endswith(")"):
            name = s[len("tensor("):-1].upper()
            name = {"FLOAT": "FLOAT", "BFLOAT16": "BFLOAT16"}.get(name, name)
            if name in onnx.TensorProto.DataType.keys():  # noqa: SIM118 - a protobuf enum
                out.append(onnx.TensorProto.DataType.Value(name))
    return out


def structure_problem(canon: Canon) -> CheckResult | None:
    """Why the replacement cannot be checked (or is wrong) by its structure alone, or None."""
    produced = {o for n in canon.replacement for o in n.output if o} | {t.name for t in canon.constants}
    missing = [orig for c, orig in canon.outputs if c not in produced]
    if missing:
        return CheckResult("failed", "replacement does not produce every output", "structure",
                           failure=f"the replacement does not produce output(s) {missing}")
    known = {c for c, _ in canon.inputs} | {t.name for t in canon.constants} | {c for c, _, _ in canon.fixed} \
        | {c for c, _, _ in canon.derived}
    free: list[str] = []
    for n in canon.replacement:
        free += [i for i in n.input if i and i not in known]
        known.update(o for o in n.output if o)
    if free:
        return CheckResult("unverified", "the replacement reads values the original node does not take")
    if any(n.domain not in ("", "ai.onnx") for n in (canon.original, *canon.replacement)):
        return CheckResult("unverified", "nodes outside the default domain are not verified")
    return None


def input_specs(rewrite: Rewrite, canon: Canon) -> list[Spec] | CheckResult:
    """The generated inputs' specs, or why the check cannot run (an input's type is unknown)."""
    specs: list[Spec] = []
    for c, orig in canon.inputs:
        vt = rewrite.input_types.get(orig)
        if vt is None:
            return CheckResult("unverified", f"the type of input {orig!r} is unknown")
        specs.append((c, int(vt[0]), None if vt[1] is None else list(vt[1])))
    return specs


def element_sets(rewrite: Rewrite, specs: list[Spec]) -> list[list[int]] | CheckResult:
    """The element types to check the inputs with (each type the schema allows when the one input's is unknown)."""
    unknown = [s for s in specs if s[1] == 0]
    if unknown and len(specs) > 1:
        return CheckResult("unverified", f"the element type of input {unknown[0][0]!r} is unknown")
    if unknown:
        candidates = [t for t in schema_types(rewrite.original, rewrite.from_opset) if t in GENERATED]  # type: ignore[arg-type]
        if not candidates:
            return CheckResult("unverified", "the input's element type is unknown and the op's schema lists none "
                                             "lowerer can generate")
        return [[t] for t in candidates]
    bad = [s for s in specs if s[1] not in GENERATED]
    if bad:
        name = onnx.TensorProto.DataType.Name(bad[0][1])
        return CheckResult("unverified", f"inputs of element type {name} are not generated")
    return [[s[1] for s in specs]]


def combined(elem_sets: list[list[int]], outcomes: list[CheckResult]) -> CheckResult:
    """One result from the checks with each element type: the first failure, else all verified or not."""
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        return failed[0]
    if len(outcomes) == 1:
        return outcomes[0]
    names = [onnx.TensorProto.DataType.Name(e[0]).lower() for e in elem_sets]
    not_done = [f"{n}: {o.reason}" for n, o in zip(names, outcomes, strict=True)
                if o.status not in ("verified", "reference-only")]
    details = {"element_type": "unknown; checked each type the schema allows",
               "by_type": {n: {"status": o.status, "provider": o.provider, **o.details}
                           for n, o in zip(names, outcomes, strict=True)}}
    providers = sorted({o.provider for o in outcomes if o.provider})
    if not_done:
        return CheckResult("unverified", "element type unknown; not verified for " + "; ".join(not_done),
                           ", ".join(providers) or None, details)
    status: RewriteStatus = "reference-only" if any(o.status == "reference-only" for o in outcomes) else "verified"
    return CheckResult(status, f"element type unknown; {status} for each of {', '.join(names)}",
                       ", ".join(providers), details)


def strict_check(model: onnx.ModelProto) -> onnx.ModelProto:
    """Check every node against its schema, then run strict shape and type inference; the inferred model.

    Nodes with subgraphs (If, Loop, Scan) are left to inference: onnx's node checker sees a
    subgraph without its outer scope and would refuse the outer values it reads. A string attribute
    value the node's version does not define (:mod:`lowerer.facts.attribute_values`, which onnx does
    not check) is refused too.

    Raises:
        Exception: onnx's checker or inference error (ValidationError, InferenceError ...).
    """
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = model.ir_version
    ctx.opset_imports = {o.domain: o.version for o in model.opset_import}
    opset = ctx.opset_imports.get("", ctx.opset_imports.get("ai.onnx"))
    for node in model.graph.node:
        if not has_subgraphs(node):
            onnx.checker.check_node(node, ctx)
            problem = None if opset is None else value_problem(node, opset)
            if problem is not None:
                raise onnx.checker.ValidationError(problem)
    return onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def invalid_graph(model: onnx.ModelProto, reference_model: onnx.ModelProto) -> str | None:
    """Why ``model`` is not a valid ONNX model, when ``reference_model`` (the original) is; else None."""
    try:
        strict_check(reference_model)
    except Exception:
        return None
    try:
        strict_check(model)
    except Exception as e:
        return short(e)
    return None


def short(e: BaseException) -> str:
    """An exception's message on one line, at most 300 characters (onnxruntime's prefix dropped)."""
    text = " ".join(str(e).split()).replace("[ONNXRuntimeError] : ", "")
    return text if len(text) <= 300 else text[:297] + "..."
