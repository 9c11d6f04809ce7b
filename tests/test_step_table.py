"""The step table covers every version step in onnx.defs and agrees with the schemas it classifies."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from importlib import resources

import pytest

from lowerer.steps import schemas, table
from lowerer.steps.changes import (
    ONES,
    AttrAdded,
    AttrRemoved,
    AttrToInput,
    Broadcast,
    Change,
    DefaultChanged,
    InputAdded,
    NegativeValues,
    NewAttrValues,
    NoChange,
    OptionalInput,
    OutputAdded,
    Semantics,
    Step,
    Types,
)

STEPS = schemas.all_steps()


def _of(changes: tuple[Change, ...], kind: type) -> list:
    return [c for c in changes if type(c) is kind]


def _mentioned(changes: tuple[Change, ...], *names: str) -> bool:
    """Whether a Semantics change of the step names one of ``names`` (the step explains it in words)."""
    texts = [c.what for c in changes if isinstance(c, Semantics)]
    return any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", t) for t in texts for n in names if n)


def _param_names(op: str, previous: int, version: int, kind: str, index: int) -> tuple[str, ...]:
    names = [f"{kind} {index}"]
    for v in (previous, version):
        params = getattr(schemas.schema(op, v), f"{kind}s")
        if index < len(params):
            names.append(params[index].name)
    return tuple(names)


def _check(op: str, previous: int, version: int, changes: tuple[Change, ...]) -> list[str]:
    """What is wrong with the entry of one step, in words (empty when it agrees with the schema diff)."""
    d = schemas.diff(op, previous, version)
    old, new = schemas.schema(op, previous), schemas.schema(op, version)
    problems: list[str] = []
    if not changes:
        return ["empty entry"]
    if any(type(c) is Change or not isinstance(c, Change) for c in changes):
        problems.append("an entry is not a concrete Change")
    if len(set(changes)) != len(changes):
        problems.append("a change is listed twice")

    # Types iff some formal parameter's allowed types (or their sharing) changed.
    if bool(_of(changes, Types)) != d.types_changed:
        problems.append(f"Types {'listed' if _of(changes, Types) else 'missing'} but types_changed={d.types_changed}")

    # NoChange stands alone, on a step whose schemas agree.
    if _of(changes, NoChange):
        if len(changes) != 1:
            problems.append("NoChange with other changes")
        if d.types_changed or not d.signature_unchanged_but_types:
            problems.append("NoChange on a step whose schemas differ")
    for c in _of(changes, NoChange) + _of(changes, Semantics):
        if not c.what.strip():
            problems.append(f"{type(c).__name__} without `what`")

    # Attributes added.
    added = {c.name for c in _of(changes, AttrAdded)}
    defaults_changed = {c.name for c in _of(changes, DefaultChanged)}
    if added - set(d.attrs_added):
        problems.append(f"AttrAdded names {sorted(added - set(d.attrs_added))} were not added")
    for name in set(d.attrs_added) - added:
        if not _mentioned(changes, name):
            problems.append(f"attribute {name!r} added but not classified")
    for c in _of(changes, AttrAdded):
        if c.name not in new.attributes:
            continue
        default = schemas.default_value(new.attributes[c.name])
        all_ones = ONES in c.neutral and isinstance(default, tuple) and set(default) <= {1}
        if default is not None and default not in c.neutral and c.name not in defaults_changed and not all_ones:
            problems.append(f"AttrAdded {c.name!r}: its default {default!r} is not neutral")
        if c.irrelevant_unless is not None and c.irrelevant_unless not in table.PREDICATES:
            problems.append(f"unknown predicate {c.irrelevant_unless!r}")

    # Attributes removed (or moved to an input).
    moved = {c.attr for c in _of(changes, AttrToInput)}
    removed = {c.name for c in _of(changes, AttrRemoved)}
    if (removed | moved) - set(d.attrs_removed):
        problems.append(
            f"AttrRemoved/AttrToInput names {sorted((removed | moved) - set(d.attrs_removed))} were not removed"
        )
    if removed & moved:
        problems.append(f"{sorted(removed & moved)} both removed and moved to an input")
    for name in set(d.attrs_removed) - removed - moved:
        if not _mentioned(changes, name):
            problems.append(f"attribute {name!r} removed but not classified")
    for c in _of(changes, AttrRemoved):
        if c.name in old.attributes and old.attributes[c.name].required and c.down_value is None:
            problems.append(f"AttrRemoved {c.name!r} was required at {previous} but has no down_value")

    # Attributes whose default, requiredness or type changed.
    changed = {c.name: c for c in d.attrs_changed}
    for c in _of(changes, DefaultChanged):
        if c.name in changed:
            ac = changed[c.name]
            expected_new = None if ac.new_required else ac.new_default
            if c.new != expected_new:
                problems.append(f"DefaultChanged {c.name!r}: new {c.new!r}, schema says {expected_new!r}")
            if ac.old_default is not None and c.old != ac.old_default:
                problems.append(f"DefaultChanged {c.name!r}: old {c.old!r}, schema says {ac.old_default!r}")
        elif c.name in d.attrs_added:
            expected_new = schemas.default_value(new.attributes[c.name])
            if c.new != expected_new:
                problems.append(f"DefaultChanged {c.name!r}: new {c.new!r}, schema says {expected_new!r}")
        elif c.name not in moved:
            problems.append(f"DefaultChanged {c.name!r}: no such attribute change")
    for name, ac in changed.items():
        relaxed_only = (
            ac.old_required and not ac.new_required and ac.old_type == ac.new_type and ac.old_default == ac.new_default
        )
        if name not in defaults_changed and not relaxed_only and not _mentioned(changes, name):
            problems.append(f"attribute {name!r} changed ({ac}) but not classified")

    # Inputs.
    to_input = {c.input: c for c in _of(changes, AttrToInput)}
    optional_added = {c.index for c in _of(changes, InputAdded)}
    made_optional = {c.index for c in _of(changes, OptionalInput)}
    for i, c in to_input.items():
        if i not in d.inputs_added:
            problems.append(f"AttrToInput {c.attr!r}: input {i} was not added")
            continue
        allowed = new.inputs[i].types
        if c.dtype == "int64" and "tensor(int64)" not in allowed:
            problems.append(f"AttrToInput {c.attr!r}: input {i} does not take int64")
        elif c.dtype == "float32" and "tensor(float)" not in allowed:
            problems.append(f"AttrToInput {c.attr!r}: input {i} does not take float")
        elif c.dtype == "T" and new.inputs[i].type_str != new.inputs[0].type_str:
            problems.append(f"AttrToInput {c.attr!r}: input {i} is not typed like input 0")
        elif c.dtype not in ("int64", "float32", "T"):
            problems.append(f"AttrToInput {c.attr!r}: unknown dtype {c.dtype!r}")
    for i in optional_added:
        if i not in d.inputs_added or d.new_inputs[i] != "optional":
            problems.append(f"InputAdded({i}): no optional input {i} was added")
    if set(to_input) & optional_added:
        problems.append("an input is both InputAdded and the target of AttrToInput")
    for i in d.inputs_added:
        if (
            i not in to_input
            and i not in optional_added
            and not _mentioned(changes, *_param_names(op, previous, version, "input", i))
        ):
            problems.append(f"input {i} added but not classified")
    for i in d.inputs_removed:
        if not _mentioned(changes, *_param_names(op, previous, version, "input", i)):
            problems.append(f"input {i} removed but not classified")
    single_to_optional = {p.index for p in d.inputs_changed if (p.old, p.new) == ("single", "optional")}
    if made_optional - single_to_optional:
        problems.append(f"OptionalInput {sorted(made_optional - single_to_optional)}: not made optional")
    for p in d.inputs_changed:
        if p.index not in made_optional and not _mentioned(
            changes, *_param_names(op, previous, version, "input", p.index)
        ):
            problems.append(f"input {p.index} changed {p.old} -> {p.new} but not classified")

    # Outputs.
    outputs_added = {c.index for c in _of(changes, OutputAdded)}
    for i in outputs_added:
        if i not in d.outputs_added or d.new_outputs[i] != "optional":
            problems.append(f"OutputAdded({i}): no optional output {i} was added")
    for i in d.outputs_added:
        if i not in outputs_added and not _mentioned(changes, *_param_names(op, previous, version, "output", i)):
            problems.append(f"output {i} added but not classified")
    for i in list(d.outputs_removed) + [p.index for p in d.outputs_changed]:
        if not _mentioned(changes, *_param_names(op, previous, version, "output", i)):
            problems.append(f"output {i} removed or changed but not classified")

    # Value-level changes name real attributes and inputs.
    for c in _of(changes, NegativeValues):
        if (c.attr is None) == (c.input is None):
            problems.append("NegativeValues needs exactly one of attr and input")
        if c.attr is not None and c.attr not in new.attributes:
            problems.append(f"NegativeValues: no attribute {c.attr!r} at {version}")
        if c.input is not None and c.input >= len(new.inputs):
            problems.append(f"NegativeValues: no input {c.input} at {version}")
        if c.kind not in ("axis", "index") or c.of >= len(new.inputs):
            problems.append(f"NegativeValues: bad kind {c.kind!r} or input {c.of}")
    for c in _of(changes, NewAttrValues):
        if c.name not in old.attributes or c.name not in new.attributes or not c.values:
            problems.append(f"NewAttrValues: {c.name!r} is not an attribute of both versions")
    for c in _of(changes, Broadcast):
        if c.legacy not in ("attribute", "none"):
            problems.append(f"Broadcast: unknown legacy rule {c.legacy!r}")
        elif (c.legacy == "attribute") != ("broadcast" in d.attrs_removed):
            problems.append(f"Broadcast(legacy={c.legacy!r}) but `broadcast` removed: {'broadcast' in d.attrs_removed}")
    return problems


def test_every_step_has_an_entry_and_every_entry_is_a_step():
    steps = {(op, version) for op, _, version in STEPS}
    entries = {(op, version) for op, by_version in table.TABLE.items() for version in by_version}
    unclassified = sorted(steps - entries)
    stale = sorted(entries - steps)
    assert not unclassified, f"steps of onnx.defs with no entry in lowerer.steps.table: {unclassified}"
    assert not stale, f"entries of lowerer.steps.table that are not steps of onnx.defs: {stale}"
    assert all(table.TABLE[op] for op in table.TABLE), "an op with no steps listed"


def test_table_is_in_order():
    assert list(table.TABLE) == sorted(table.TABLE)
    for op, by_version in table.TABLE.items():
        assert list(by_version) == sorted(by_version), op


def test_entries_agree_with_the_schema_diffs():
    problems = [
        f"{op} {previous} -> {version}: {p}"
        for op, previous, version in STEPS
        if version in table.TABLE.get(op, {})
        for p in _check(op, previous, version, table.TABLE[op][version])
    ]
    assert not problems, "\n".join(problems)


def test_check_catches_misclassifications():
    # The consistency check itself must fail on wrong entries, not only pass on the table.
    assert _check("Gather", 11, 13, (NoChange("x"),))  # types changed
    assert _check("ReduceSum", 11, 13, (Types(), AttrAdded("noop_with_empty_axes", (0,))))  # axes unaccounted
    assert _check("ReduceSum", 11, 13, (Types(), AttrToInput("axes", 2), AttrAdded("noop_with_empty_axes", (0,))))
    assert _check("Reshape", 13, 14, (AttrAdded("allowzero", (1,)),))  # default 0 not neutral
    assert _check("Gemm", 9, 11, (InputAdded(2),))  # C was made optional, not added
    assert _check("Hardmax", 11, 13, (Types(), DefaultChanged("axis", 1, 0), Semantics("x")))  # wrong new default
    assert _check("Add", 6, 7, (AttrRemoved("broadcast"), Broadcast()))  # `axis` unaccounted
    assert _check("Add", 7, 13, (Types(), Broadcast(legacy="none"), Broadcast()))
    assert _check("MaxPool", 1, 8, (AttrAdded("storage_order", (0,)),))  # Indices output unaccounted
    assert _check("BatchNormalization", 1, 6, (AttrRemoved("consumed_inputs", any_value=True),))  # required at 1
    assert _check("Scan", 8, 9, (Types(), Semantics("something vague")))  # names nothing that changed
    assert not _check("Reshape", 13, 14, (AttrAdded("allowzero", (0,)),))


def test_predicates_are_named_and_used():
    used = {
        c.irrelevant_unless
        for by_version in table.TABLE.values()
        for changes in by_version.values()
        for c in changes
        if isinstance(c, AttrAdded) and c.irrelevant_unless is not None
    }
    assert used <= set(table.PREDICATES), sorted(used - set(table.PREDICATES))
    assert set(table.PREDICATES) <= used, f"unused predicates: {sorted(set(table.PREDICATES) - used)}"
    assert all(description.strip() for description in table.PREDICATES.values())


def test_step_records():
    s = table.step("ReduceSum", 13)
    assert s == Step("ReduceSum", 11, 13, table.TABLE["ReduceSum"][13])
    assert "ReduceSum 11 → 13" in s.describe()
    for op, version in [("ReduceSum", 1), ("ReduceSum", 12), ("Gelu", 20)]:
        with pytest.raises(KeyError):
            table.step(op, version)


@pytest.mark.parametrize(
    ("op", "source", "target", "crossed"),
    [
        ("ReduceSum", 12, 18, [13]),
        ("ReduceSum", 10, 18, [11, 13]),
        ("ReduceSum", 18, 10, [13, 11]),
        ("ReduceSum", 13, 13, []),
        ("ReduceSum", 13, 12, [13]),
        ("ReduceSum", 14, 17, []),
        ("Softmax", 1, 28, [11, 13]),
        ("Softmax", 28, 1, [13, 11]),
        ("Upsample", 7, 10, [9, 10]),
    ],
)
def test_steps_between(op, source, target, crossed):
    steps = table.steps_between(op, source, target)
    assert [s.version for s in steps] == crossed
    assert all(s.op == op and s.previous < s.version for s in steps)


def test_steps_between_every_op_both_ways():
    for op in table.TABLE:
        versions = schemas.versions(op)
        up = table.steps_between(op, versions[0], versions[-1])
        assert [(s.previous, s.version) for s in up] == list(itertools.pairwise(versions))
        assert table.steps_between(op, versions[-1], versions[0]) == up[::-1]


def _encode(value: object) -> object:
    """A change (or field value) as table.json writes it: the record's name and its non-default fields."""
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    if isinstance(value, Change):
        out: dict[str, object] = {"change": type(value).__name__}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if not (type(v) is type(f.default) and v == f.default):
                out[f.name] = _encode(v)
        return out
    return value


def test_data_file_reads_back_as_written():
    # Every field written in table.json reaches its record, as written (no field dropped or coerced, no default
    # written out), and every note is a sentence, not an empty string.
    raw = json.loads(resources.files("lowerer.steps").joinpath("table.json").read_text(encoding="utf-8"))
    assert list(raw) == list(table.TABLE)
    for op, by_version in raw.items():
        assert [int(v) for v in by_version] == list(table.TABLE[op]), op
        for version, entry in by_version.items():
            assert _encode(table.TABLE[op][int(version)]) == entry["changes"], f"{op} {version}"
            assert entry.get("note", "a note").strip(), f"{op} {version}: empty note"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "object of ops"),
        ('{"Abs": []}', "Abs: must be an object of versions"),
        ('{"Abs": {"six": {"changes": [{"change": "Types"}]}}}', "Abs six: an entry is"),
        ('{"Abs": {"6": {"changes": []}}}', "non-empty list"),
        ('{"Abs": {"6": {"changes": [{"change": "Types"}], "comment": "x"}}}', "an entry is"),
        ('{"Abs": {"6": {"note": 1, "changes": [{"change": "Types"}]}}}', "'note' a string"),
        ('{"Abs": {"6": {"changes": [{"change": "Type"}]}}}', "unknown change 'Type'"),
        ('{"Abs": {"6": {"changes": ["Types"]}}}', "must be an object"),
        ('{"Abs": {"6": {"changes": [{"change": "AttrRemoved", "nam": "x"}]}}}', "AttrRemoved has no field 'nam'"),
        ('{"Abs": {"6": {"changes": [{"change": "AttrRemoved", "name": 1}]}}}', "AttrRemoved.name must be str"),
        ('{"Abs": {"6": {"changes": [{"change": "InputAdded", "index": true}]}}}', "InputAdded.index must be int"),
        ('{"Abs": {"6": {"changes": [{"change": "AttrAdded", "name": "x", "neutral": 0}]}}}', "neutral must be tuple"),
        ('{"Abs": {"6": {"changes": [{"change": "DefaultChanged", "name": "x"}]}}}', "Abs 6: .*missing"),
    ],
)
def test_parse_refuses_malformed_entries(text, message):
    with pytest.raises(ValueError, match=message):
        table.parse(text, "t.json")


def test_parse_builds_records():
    parsed = table.parse(
        '{"Pad": {"11": {"note": "n", "changes": [{"change": "AttrToInput", "attr": "pads", "input": 1},'
        ' {"change": "AttrAdded", "name": "d", "neutral": [[1, 1], null, "<all ones>"]}]}}}'
    )
    assert parsed == {"Pad": {11: (AttrToInput("pads", 1), AttrAdded("d", ((1, 1), None, ONES)))}}
