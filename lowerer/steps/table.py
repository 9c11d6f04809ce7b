"""PROVISIONAL step table, derived mechanically from schema diffs (replaced by the classified table)."""

from __future__ import annotations

import functools

import onnx.defs

from lowerer.steps.changes import AttrAdded, AttrRemoved, Change, NoChange, Semantics, Step, Types

__all__ = ["PREDICATES", "TABLE", "step", "steps_between"]

PREDICATES: dict[str, str] = {}


def _derive() -> dict[str, dict[int, tuple[Change, ...]]]:
    by_op: dict[str, dict[int, onnx.defs.OpSchema]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in ("", "ai.onnx"):
            by_op.setdefault(s.name, {})[s.since_version] = s
    table: dict[str, dict[int, tuple[Change, ...]]] = {}
    for op, versions in sorted(by_op.items()):
        ks = sorted(versions)
        for a, b in zip(ks, ks[1:], strict=False):
            sa, sb = versions[a], versions[b]
            changes: list[Change] = []
            ta = [(p.name, p.type_str) for p in sa.inputs]
            tb = [(p.name, p.type_str) for p in sb.inputs]
            if [p.name for p in sa.inputs] != [p.name for p in sb.inputs] or \
                    [p.name for p in sa.outputs] != [p.name for p in sb.outputs]:
                changes.append(Semantics("inputs or outputs changed"))
            ca = {c.type_param_str: sorted(c.allowed_type_strs) for c in sa.type_constraints}
            cb = {c.type_param_str: sorted(c.allowed_type_strs) for c in sb.type_constraints}
            if ca != cb or ta != tb:
                changes.append(Types())
            for name in sorted(set(sb.attributes) - set(sa.attributes)):
                d = sb.attributes[name].default_value
                neutral = (onnx.helper.get_attribute_value(d),) if d is not None and d.type else ()
                changes.append(AttrAdded(name, neutral))
            for name in sorted(set(sa.attributes) - set(sb.attributes)):
                changes.append(AttrRemoved(name, any_value=name == "consumed_inputs"))
            table.setdefault(op, {})[b] = tuple(changes) or (NoChange(),)
    return table


TABLE: dict[str, dict[int, tuple[Change, ...]]] = _derive()


@functools.cache
def _versions(op: str) -> tuple[int, ...]:
    steps = TABLE.get(op, {})
    first = [s.since_version for s in onnx.defs.get_all_schemas_with_history()
             if s.name == op and s.domain in ("", "ai.onnx")]
    return tuple(sorted(set(first) | set(steps)))


def step(op: str, version: int) -> Step:
    """The step of ``op`` into ``version`` from the version before it."""
    versions = _versions(op)
    i = versions.index(version)
    if i == 0:
        raise KeyError(f"{op}-{version} is the op's first version: no step into it")
    return Step(op, versions[i - 1], version, TABLE[op][version])


def steps_between(op: str, source_version: int, target_version: int) -> list[Step]:
    """The steps crossed going from ``source_version`` to ``target_version``, in crossing order."""
    versions = _versions(op)
    if target_version >= source_version:
        return [step(op, v) for v in versions if source_version < v <= target_version]
    return [step(op, v) for v in reversed(versions) if target_version < v <= source_version]

# Provisional hand entries (development only).
from lowerer.steps.changes import AttrToInput, NegativeValues  # noqa: E402

TABLE["ReduceSum"][13] = (Types(), AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,)))
TABLE["ReduceSum"][11] = (NegativeValues(attr="axes"),)
for _op in ("ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
            "ReduceLogSumExp", "ReduceSumSquare"):
    TABLE[_op][18] = (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,)))
    TABLE[_op][11] = (NegativeValues(attr="axes"),)
for _op in ("Unsqueeze", "Squeeze"):
    TABLE[_op][13] = (Types(), AttrToInput("axes", 1))
    TABLE[_op][11] = (NegativeValues(attr="axes"),)
TABLE["Reshape"][14] = (AttrAdded("allowzero", (0,)),)
TABLE["Shape"][15] = (AttrAdded("start", (0,)), AttrAdded("end"))
TABLE["Split"][18] = (AttrAdded("num_outputs"),)
