"""The one registry: every key a real step, every Semantics step covered, explain() is what the engine does."""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

import onnx
import pytest
from _node_cases import load_cases, source_opset

import lowerer
import lowerer.rules
from lowerer.core.errors import LowererError
from lowerer.core.opsets import since_version
from lowerer.rules import REGISTRY
from lowerer.steps.changes import Semantics
from lowerer.steps.registry import DOWN, UP, history, step_ends
from lowerer.steps.table import TABLE, step


def test_every_rules_module_is_imported_by_the_package() -> None:
    """A module of lowerer.rules not imported by its __init__ would register nothing, silently."""
    for info in pkgutil.iter_modules(lowerer.rules.__path__):
        module = importlib.import_module(f"lowerer.rules.{info.name}")
        assert getattr(lowerer.rules, info.name, None) is module or info.name in {
            "argmax", "hardmax", "hardmax_decomposition", "global_max_pool", "backend_forms"}, info.name
    assert REGISTRY.sealed


def test_every_step_key_is_a_real_step_of_onnx_defs() -> None:
    keys = [e for e in REGISTRY.entries() if e.kind in ("adapter", "refusal")]
    assert len(keys) > 50
    for entry in keys:
        assert isinstance(entry.key, tuple)
        start, end = entry.key
        versions = history(entry.op)
        assert start in versions and end in versions, entry
        assert abs(versions.index(start) - versions.index(end)) == 1, f"{entry} is not one step"
        assert re.fullmatch(rf"{entry.op.lower()}_{start}_{end}", entry.name), entry.name


def test_every_semantics_step_has_an_entry_or_a_documented_refusal() -> None:
    missing = []
    for op, versions in TABLE.items():
        for version, changes in versions.items():
            if not any(isinstance(c, Semantics) for c in changes) or REGISTRY.span_rule(op) is not None:
                continue
            for direction in (DOWN, UP):
                start, end = step_ends(step(op, version), direction)
                entry = REGISTRY.step_entry(op, start, end)
                if entry is None or (entry.kind == "refusal" and len(entry.why) < 40):
                    missing.append(f"{op} {start} -> {end}")
    assert not missing, missing


def test_explain_follows_resolve_for_every_step_of_every_op() -> None:
    """Each explain() line is the resolution the engine applies at that version, for every op and step."""
    for op, versions in TABLE.items():
        for version in versions:
            st = step(op, version)
            for a, b in ((st.version, st.previous), (st.previous, st.version)):
                lines = REGISTRY.explain(op, a, b)
                resolution = REGISTRY.resolve(op, a, b)
                if resolution is None:
                    assert lines == [f"{op}-{a} stays as it is at version {b}"]
                else:
                    assert lines[0] == resolution.describe()


def test_explain_of_owned_ops_says_what_happens() -> None:
    assert REGISTRY.explain("Hardmax", 1, 11) == ["Hardmax [same-meaning hardmax_1_11]"]
    assert "rule 'coerced-axis'" in REGISTRY.explain("Hardmax", 13, 11)[0]
    assert "else expansion" in REGISTRY.explain("GroupNormalization", 21, 18)[0]


def test_every_lowering_is_keyed_by_a_real_version_and_explained() -> None:
    """A lowering entry is keyed (op, since-version) of onnx.defs; explain() and resolve() name it."""
    lowerings = [e for e in REGISTRY.entries() if e.kind == "lowering"]
    assert {e.op for e in lowerings} >= {"Trilu", "Mod", "CumSum", "CumProd", "ConstantOfShape", "GatherElements",
                                         "Einsum", "GridSample", "Resize", "Expand", "Where", "DeformConv"}
    for entry in lowerings:
        assert isinstance(entry.key, tuple) and entry.key[0] in history(entry.op), entry
        assert entry.name == f"{entry.op.lower()}_{entry.key[0]}_lowering"
    assert REGISTRY.explain("Trilu", 14, 11) == ["Trilu [lowering trilu_14_lowering: no Trilu at opset 11]"]
    resize = REGISTRY.explain("Resize", 19, 9)  # stepped down to Resize-10 first, then lowered to Upsample
    assert resize[-1] == "Resize [lowering resize_10_lowering: no Resize at opset 9]" and len(resize) == 5
    assert "else lowering gridsample_16_lowering" not in REGISTRY.explain("GridSample", 22, 17)[0]
    budgeted = {e.op for e in lowerings if e.budgeted}
    assert budgeted == {"DeformConv", "Einsum", "GridSample"}, budgeted


def _cases() -> list[Any]:
    cases = load_cases("^test_(reduce_sum|reduce_max|argmax|hardmax|softmax_axis|split|resize_upsample|"
                       "layer_normalization_2d|group_normalization|gelu|shape|unsqueeze|slice|pad|clip|onehot|"
                       "gather_|reshape_reordered|scatter_elements|attention_3d|cast_FLOAT_to)")
    by_op: dict[str, list[Any]] = {}
    for case in cases:
        ops = {n.op_type for n in case.model.graph.node}
        if len(ops) == 1:
            by_op.setdefault(next(iter(ops)), []).append(case)
    return [c for found in by_op.values() for c in found[:3]]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.name)
def test_engine_records_what_explain_says(case: Any) -> None:
    """Converting onnx's node cases: each rewrite's crossings of its own op are explain()'s lines, in order."""
    model: onnx.ModelProto = case.model
    source = source_opset(model)
    assert source is not None
    for target in sorted({7, 11, 13, 17, source - 1, source + 1} - {source}):
        if not 1 <= target <= onnx.defs.onnx_opset_version():
            continue
        try:
            report = lowerer.convert(model, target_opset=target, verify=False).report
        except LowererError:
            continue
        for rewrite in report.rewrites:
            if rewrite.op_type != "If" and any(c.op == "If" for c in rewrite.crossings):
                continue  # copies of the op in the branches of a made If (axes picked at run time) cross on their own
            own = [c for c in rewrite.crossings if c.op == rewrite.op_type]
            tv = since_version(rewrite.op_type, target)
            lines = REGISTRY.explain(rewrite.op_type, rewrite.from_version, tv or target)
            entries = [c.entry for c in own]
            assert len(entries) <= len(lines), (lines, entries)
            for entry, line in zip(entries, lines, strict=False):
                assert entry in line or (entry == "function-expansion" and "expansion" in line), (line, entry)
