"""Every version step of every default-domain op, classified: what changed from one schema version to the next.

``TABLE[op][version]`` holds the changes (:mod:`lowerer.steps.changes`) of the step from the op's
since-version before ``version`` to ``version``; :func:`step` and :func:`steps_between` wrap them in
:class:`~lowerer.steps.changes.Step` records. Only ops with more than one version appear.

The table is data: ``lowerer/steps/table.json`` (package data), read once at import by :func:`parse`.
It maps each op to its versions (as strings), each to ``{"note": ..., "changes": [...]}``: ``note``
(optional) paraphrases the changelog when the step is not obvious; each change is an object naming
its record in ``"change"`` (``"AttrAdded"``, ``"Types"`` ...) with the record's fields by name,
those left at their default omitted; JSON lists stand for tuples, and ``"<all ones>"`` is
:data:`~lowerer.steps.changes.ONES`. Ops are in alphabetical order, versions ascending.

How the table was made (onnx 1.23.2, default opset 28: 426 steps over 203 ops):

* the schemas of both sides were compared with :func:`lowerer.steps.schemas.diff` (attributes added,
  removed or with a new default or type; inputs and outputs added, removed or made optional; the
  allowed types of each formal parameter by position). ``Types`` is listed exactly when some
  parameter's allowed types (or which parameters share a type) changed;
* the documentation of both sides was compared line by line (:func:`lowerer.steps.schemas.doc_diff`,
  the same text as onnx's docs/Changelog.md) and read, looking for meaning changes a signature does
  not show: negative axes or indices allowed, broadcasting rules, inputs made optional, new attribute
  values, defaults, behaviour redefined for some inputs. onnx's version-converter adapters
  (onnx/version_converter/convert.h) were a hint, never the answer: several are wrong (Resize 10 -> 11
  keeps the half_pixel default, AveragePool/ArgMax/... 10 <-> 11 ignore negative axes);
* a step whose meaning changed in a way the vocabulary cannot state exactly is ``Semantics`` (the
  engine refuses it without a dedicated adapter), with ``what`` saying what an exact adapter does.
  A step that changed nothing a valid model can observe is ``NoChange`` with what its text changed.

Adding the steps of a newer onnx: ``tests/test_step_table.py`` fails and lists the steps that have no
entry (and entries that are no longer steps). For each, run ``schemas.diff(op, previous, version)``
and ``schemas.doc_diff(op, previous, version)``, read the op's changelog entry and the onnx PR that
bumped it, and add one entry to ``table.json`` (in order: the op's versions ascending, a new op in
alphabetical place), e.g. ``"13": {"note": "...", "changes": [{"change": "Types"}, {"change":
"AttrToInput", "attr": "axes", "input": 1}]}``; the same test then checks the entry against the
schema diff (``Types`` present iff types changed, attributes and inputs accounted for), and
:func:`parse` refuses an unknown change, field or field type. When unsure, write ``Semantics`` with
what is known and a note starting ``UNSURE:``: the engine then refuses the step instead of guessing.

``irrelevant_unless`` predicates are named in :data:`PREDICATES`; the engine evaluates them on a node.
"""
from __future__ import annotations

import dataclasses
import json
from importlib import resources

from lowerer.steps import schemas
from lowerer.steps.changes import (
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

__all__ = ["PREDICATES", "TABLE", "parse", "step", "steps_between"]

#: Predicates named by ``AttrAdded.irrelevant_unless``: when one is false for a node, any value of
#: the attribute means what its absence means at the older version.
PREDICATES: dict[str, str] = {
    "output_float8": (
        "output 0 has a float8 element type (float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, "
        "float8e8m0): `saturate` acts only on conversions to float8"
    ),
    "output_float8e8m0": "output 0 is float8e8m0: `round_mode` acts only on conversions to float8e8m0",
    "output_1_present": "output 1 is present (a non-empty name): MaxPool's `storage_order` only shapes Indices",
    "input_0_half_float": "input 0 is float16 or bfloat16: Range's `stash_type` only acts on those types",
    "input_1_has_zero": (
        "input 1 (Reshape's `shape`) may hold a 0 (not provably free of zeros): `allowzero` only changes what a 0 means"
    ),
    "input_2_absent": (
        "input 2 is absent: QuantizeLinear's `output_dtype` must equal the type of y_zero_point (input 2) "
        "when that is given, so it only chooses the output type without one"
    ),
    "input_2_present": "input 2 is present: Dropout's `seed` only acts in training mode (input 2, training_mode)",
    "input_3_present": (
        "input 3 is present: Resize's `keep_aspect_ratio_policy` only acts on `sizes` (input 3), not on `scales`"
    ),
}

#: The change records the data file may name, by class name.
_RECORDS: dict[str, type[Change]] = {
    cls.__name__: cls
    for cls in (
        AttrAdded, AttrRemoved, AttrToInput, Broadcast, DefaultChanged, InputAdded, NegativeValues,
        NewAttrValues, NoChange, OptionalInput, OutputAdded, Semantics, Types,
    )
}

#: What a field's annotation (as written in lowerer.steps.changes) lets the data file hold.
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "str | None": (str, type(None)),
    "int | None": (int, type(None)),
    "tuple[object, ...]": (tuple,),
    "object": (object,),
}


def _value(raw: object) -> object:
    """A JSON value as a change field holds it: lists become tuples, at every depth."""
    return tuple(_value(v) for v in raw) if isinstance(raw, list) else raw


def _change(raw: object, where: str) -> Change:
    """One change record from its JSON object; ValueError naming ``where`` when malformed."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: a change must be an object, not {raw!r}")
    record = _RECORDS.get(raw.get("change", ""))
    if record is None:
        raise ValueError(f"{where}: unknown change {raw.get('change')!r} (known: {', '.join(sorted(_RECORDS))})")
    fields = {f.name: str(f.type) for f in dataclasses.fields(record)}
    values = {name: _value(v) for name, v in raw.items() if name != "change"}
    for name, value in values.items():
        allowed = _FIELD_TYPES[fields[name]] if name in fields else None
        if allowed is None:
            raise ValueError(f"{where}: {record.__name__} has no field {name!r} (fields: {', '.join(fields)})")
        if not isinstance(value, allowed) or (isinstance(value, bool) and int in allowed):
            raise ValueError(f"{where}: {record.__name__}.{name} must be {fields[name]}, not {value!r}")
    try:
        return record(**values)
    except TypeError as e:  # a required field missing
        raise ValueError(f"{where}: {e}") from None


def parse(text: str, source: str = "table.json") -> dict[str, dict[int, tuple[Change, ...]]]:
    """The step table from its JSON text (the format in this module's docstring).

    Args:
        text: the JSON text.
        source: its name, for messages.

    Returns:
        ``{op: {version: changes}}`` in the file's order.

    Raises:
        ValueError: the text is not the table's format (a message names the op and version).
    """
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{source}: the table must be an object of ops")
    table: dict[str, dict[int, tuple[Change, ...]]] = {}
    for op, by_version in data.items():
        if not isinstance(by_version, dict):
            raise ValueError(f"{source}: {op}: must be an object of versions")
        table[op] = {}
        for version, entry in by_version.items():
            where = f"{source}: {op} {version}"
            if not version.isdigit() or not isinstance(entry, dict) or not set(entry) <= {"note", "changes"}:
                raise ValueError(f"{where}: an entry is a version number to {{'note': ..., 'changes': [...]}}")
            changes = entry.get("changes")
            if not isinstance(changes, list) or not changes or not isinstance(entry.get("note", ""), str):
                raise ValueError(f"{where}: 'changes' must be a non-empty list and 'note' a string")
            table[op][int(version)] = tuple(_change(c, where) for c in changes)
    return table


#: ``TABLE[op][version]``: the changes of the step of ``op`` into since-version ``version``.
TABLE: dict[str, dict[int, tuple[Change, ...]]] = parse(
    resources.files("lowerer.steps").joinpath("table.json").read_text(encoding="utf-8")
)



def step(op: str, version: int) -> Step:
    """The step of ``op`` into since-version ``version`` (from the since-version before it).

    Raises:
        KeyError: ``version`` is not a since-version of ``op`` after its first, or the step is
            not classified (a newer onnx than the table knows).
    """
    versions = schemas.versions(op)
    index = versions.index(version) if version in versions else 0
    if index == 0:
        raise KeyError(f"{op}-{version} is not a version step of {op} (versions {list(versions)})")
    changes = TABLE.get(op, {}).get(version)
    if changes is None:
        raise KeyError(f"{op} {versions[index - 1]} -> {version} is not classified in lowerer.steps.table")
    return Step(op, versions[index - 1], version, changes)


def steps_between(op: str, source_version: int, target_version: int) -> list[Step]:
    """The steps a node of ``op`` crosses from opset ``source_version`` to ``target_version``, in crossing order.

    Versions are opset versions (any int): going up, the steps into since-versions ``v`` with
    ``source < v <= target``, oldest first; going down, those with ``target < v <= source``, newest
    first. Whether ``op`` exists at the target (its first since-version <= target) is the caller's
    question.

    Raises:
        KeyError: ``op`` is not a default-domain op, or a step crossed is not classified.
    """
    low, high = sorted((source_version, target_version))
    crossed = [step(op, v) for v in schemas.versions(op)[1:] if low < v <= high]
    return crossed if source_version <= target_version else crossed[::-1]
