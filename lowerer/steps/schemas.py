"""Schema facts for version steps: every default-domain op's history and what changed between versions.

Everything here reads ``onnx.defs`` (the installed onnx) and nothing else; results are cached, the
registry does not change while the process runs. Only the default domain (``""`` / ``"ai.onnx"``)
is covered.

* :func:`versions`: the since-versions of an op, oldest first;
* :func:`all_steps`: every ``(op, previous, version)`` boundary of every op;
* :func:`schema`: the schema in force at a version;
* :func:`diff`: a :class:`SchemaDiff` of two versions (attributes, inputs, outputs, allowed types);
* :func:`doc_diff`: what the documentation of two versions says differently (for reviewing a step).
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
from dataclasses import dataclass

import onnx
import onnx.defs
from onnx import numpy_helper

__all__ = [
    "AttrChange",
    "ParamChange",
    "SchemaDiff",
    "TypesChange",
    "all_steps",
    "default_value",
    "doc_diff",
    "diff",
    "doc_lines",
    "ops",
    "schema",
    "versions",
]

_DEFAULT_DOMAINS = ("", "ai.onnx")


@functools.cache
def _histories() -> dict[str, dict[int, onnx.defs.OpSchema]]:
    """Every default-domain op's schemas, keyed by name, then since-version."""
    out: dict[str, dict[int, onnx.defs.OpSchema]] = {}
    for s in onnx.defs.get_all_schemas_with_history():
        if s.domain in _DEFAULT_DOMAINS:
            out.setdefault(s.name, {})[s.since_version] = s
    return {op: dict(sorted(h.items())) for op, h in sorted(out.items())}


def ops() -> tuple[str, ...]:
    """Every default-domain op, in alphabetical order."""
    return tuple(_histories())


@functools.cache
def versions(op: str) -> tuple[int, ...]:
    """The since-versions of a default-domain op, oldest first.

    Args:
        op: the op type (``"ReduceSum"``).

    Returns:
        The versions at which the op's schema changed, e.g. ``(1, 11, 13, 18)``.

    Raises:
        KeyError: the op is not in the default domain of the installed onnx.
    """
    return tuple(_histories()[op])


@functools.cache
def all_steps() -> list[tuple[str, int, int]]:
    """Every version step of every default-domain op: ``(op, previous, version)``, ops alphabetical."""
    return [(op, a, b) for op in ops() for a, b in itertools.pairwise(versions(op))]


def schema(op: str, version: int) -> onnx.defs.OpSchema:
    """The schema of ``op`` whose since-version is exactly ``version``.

    Raises:
        KeyError: ``version`` is not a since-version of ``op``.
    """
    return _histories()[op][version]


@dataclass(frozen=True)
class AttrChange:
    """An attribute present on both sides whose type, default or requiredness changed.

    ``old_default``/``new_default`` are decoded Python values (str for strings, tuples for lists,
    nested lists for tensors), ``None`` when the attribute has no default.
    """

    name: str
    old_type: str
    new_type: str
    old_default: object
    new_default: object
    old_required: bool
    new_required: bool


@dataclass(frozen=True)
class ParamChange:
    """A formal input or output present on both sides whose option changed.

    ``old``/``new`` are ``"single"``, ``"optional"`` or ``"variadic"`` (``"variadic>=2"`` when
    the minimal arity is above 1, ``"variadic(heterogeneous)"`` when types may differ).
    """

    index: int
    old: str
    new: str


@dataclass(frozen=True)
class TypesChange:
    """A formal parameter whose allowed types changed.

    Attributes:
        kind: ``"input"`` or ``"output"``.
        index: its position.
        added: the types allowed only at the newer version (``"tensor(bfloat16)"`` ...).
        removed: the types allowed only at the older version.
    """

    kind: str
    index: int
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True)
class SchemaDiff:
    """What differs between two versions of an op's schema, by name (attributes) or position (inputs, outputs).

    Attributes:
        op: the op.
        previous: the older since-version.
        version: the newer since-version.
        attrs_added: attributes only at the newer version.
        attrs_removed: attributes only at the older version.
        attrs_changed: attributes on both sides whose type, default or requiredness changed.
        inputs_added: input positions only at the newer version (their options in ``new_inputs``).
        inputs_removed: input positions only at the older version.
        inputs_changed: positions on both sides whose option changed.
        outputs_added: output positions only at the newer version.
        outputs_removed: output positions only at the older version.
        outputs_changed: positions on both sides whose option changed.
        types: formal parameters (on both sides) whose allowed types changed.
        binding_changed: which formal parameters share a type parameter changed (e.g. Pow-12's
            exponent got its own type ``T1``): a type-level change even when no set changed.
        new_inputs: the options of the newer version's inputs, by position.
        new_outputs: the options of the newer version's outputs, by position.
    """

    op: str
    previous: int
    version: int
    attrs_added: tuple[str, ...]
    attrs_removed: tuple[str, ...]
    attrs_changed: tuple[AttrChange, ...]
    inputs_added: tuple[int, ...]
    inputs_removed: tuple[int, ...]
    inputs_changed: tuple[ParamChange, ...]
    outputs_added: tuple[int, ...]
    outputs_removed: tuple[int, ...]
    outputs_changed: tuple[ParamChange, ...]
    types: tuple[TypesChange, ...]
    binding_changed: bool
    new_inputs: tuple[str, ...]
    new_outputs: tuple[str, ...]

    @property
    def types_changed(self) -> bool:
        """Whether any formal parameter's allowed types (or their sharing) changed."""
        return bool(self.types) or self.binding_changed

    @property
    def signature_unchanged_but_types(self) -> bool:
        """Whether only the allowed types differ (no attribute, input or output change)."""
        return not (
            self.attrs_added
            or self.attrs_removed
            or self.attrs_changed
            or self.inputs_added
            or self.inputs_removed
            or self.inputs_changed
            or self.outputs_added
            or self.outputs_removed
            or self.outputs_changed
        )


def default_value(attr: onnx.defs.OpSchema.Attribute) -> object:
    """An attribute's default decoded to a Python value (None when it has none).

    Strings are ``str``, lists tuples, tensors nested lists (``tolist()``).
    """
    proto = attr.default_value
    if proto.type == onnx.AttributeProto.UNDEFINED:
        return None
    if proto.type == onnx.AttributeProto.TENSOR:
        return numpy_helper.to_array(proto.t).tolist()
    value = onnx.helper.get_attribute_value(proto)
    return _freeze(value)


def _freeze(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _type_name(attr_type: onnx.defs.OpSchema.AttrType) -> str:
    return str(attr_type).rsplit(".", 1)[-1]


def _option(param: onnx.defs.OpSchema.FormalParameter) -> str:
    option = param.option
    if option == onnx.defs.OpSchema.FormalParameterOption.Single:
        return "single"
    if option == onnx.defs.OpSchema.FormalParameterOption.Optional:
        return "optional"
    label = "variadic" if param.min_arity <= 1 else f"variadic>={param.min_arity}"
    return label if param.is_homogeneous else label + "(heterogeneous)"


def _params_diff(
    old: list[onnx.defs.OpSchema.FormalParameter], new: list[onnx.defs.OpSchema.FormalParameter]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[ParamChange, ...]]:
    common = min(len(old), len(new))
    changed = tuple(
        ParamChange(i, _option(old[i]), _option(new[i])) for i in range(common) if _option(old[i]) != _option(new[i])
    )
    return tuple(range(common, len(new))), tuple(range(common, len(old))), changed


def _types_diff(
    kind: str, old: list[onnx.defs.OpSchema.FormalParameter], new: list[onnx.defs.OpSchema.FormalParameter]
) -> list[TypesChange]:
    out = []
    for i in range(min(len(old), len(new))):
        a, b = set(old[i].types), set(new[i].types)
        if a != b:
            out.append(TypesChange(kind, i, tuple(sorted(b - a)), tuple(sorted(a - b))))
    return out


def _binding(s: onnx.defs.OpSchema, n_inputs: int, n_outputs: int) -> frozenset[frozenset[tuple[str, int]]]:
    """Groups of formal parameters (among the first inputs/outputs) that share one type parameter."""
    constrained = {c.type_param_str for c in s.type_constraints}
    groups: dict[str, set[tuple[str, int]]] = {}
    for kind, params, count in (("input", s.inputs, n_inputs), ("output", s.outputs, n_outputs)):
        for i, p in enumerate(params[:count]):
            if p.type_str in constrained:
                groups.setdefault(p.type_str, set()).add((kind, i))
    return frozenset(frozenset(g) for g in groups.values() if len(g) > 1)


@functools.cache
def diff(op: str, previous: int, version: int) -> SchemaDiff:
    """What differs between ``op``'s schemas at since-versions ``previous`` and ``version``.

    Inputs and outputs are compared by position, and their allowed types per position, so a
    type parameter renamed (``T`` → ``T1``) is no change while a type added to one is.

    Raises:
        KeyError: a version is not a since-version of ``op``.
    """
    a, b = schema(op, previous), schema(op, version)
    changed = []
    for name in sorted(set(a.attributes) & set(b.attributes)):
        x, y = a.attributes[name], b.attributes[name]
        old_default, new_default = default_value(x), default_value(y)
        if x.type != y.type or old_default != new_default or x.required != y.required:
            changed.append(
                AttrChange(
                    name,
                    _type_name(x.type),
                    _type_name(y.type),
                    old_default,
                    new_default,
                    bool(x.required),
                    bool(y.required),
                )
            )
    inputs_added, inputs_removed, inputs_changed = _params_diff(list(a.inputs), list(b.inputs))
    outputs_added, outputs_removed, outputs_changed = _params_diff(list(a.outputs), list(b.outputs))
    types = _types_diff("input", list(a.inputs), list(b.inputs)) + _types_diff(
        "output", list(a.outputs), list(b.outputs)
    )
    n_in, n_out = min(len(a.inputs), len(b.inputs)), min(len(a.outputs), len(b.outputs))
    return SchemaDiff(
        op=op,
        previous=previous,
        version=version,
        attrs_added=tuple(sorted(set(b.attributes) - set(a.attributes))),
        attrs_removed=tuple(sorted(set(a.attributes) - set(b.attributes))),
        attrs_changed=tuple(changed),
        inputs_added=inputs_added,
        inputs_removed=inputs_removed,
        inputs_changed=inputs_changed,
        outputs_added=outputs_added,
        outputs_removed=outputs_removed,
        outputs_changed=outputs_changed,
        types=tuple(types),
        binding_changed=_binding(a, n_in, n_out) != _binding(b, n_in, n_out),
        new_inputs=tuple(_option(p) for p in b.inputs),
        new_outputs=tuple(_option(p) for p in b.outputs),
    )


def _squash(text: str | None) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def doc_lines(op: str, version: int) -> list[str]:
    """A schema's documentation as comparable lines.

    The description split into sentences, then one line per attribute (with its type and default),
    input and output (with its option), each with its description.

    Raises:
        KeyError: ``version`` is not a since-version of ``op``.
    """
    s = schema(op, version)
    lines = [x for x in re.split(r"(?<=[.:;])\s+", _squash(s.doc)) if x]
    for name, attr in sorted(s.attributes.items()):
        default = "required" if attr.required else f"default={default_value(attr)!r}"
        lines.append(f"attribute {name} ({_type_name(attr.type)}, {default}): {_squash(attr.description)}")
    for kind, params in (("input", s.inputs), ("output", s.outputs)):
        for i, p in enumerate(params):
            lines.append(f"{kind} {i} {p.name}: {p.type_str} [{_option(p)}]: {_squash(p.description)}")
    return lines


def doc_diff(op: str, previous: int, version: int) -> list[str]:
    """The documentation lines removed (``-``) or added (``+``) from ``previous`` to ``version``.

    Used to classify a step by reading what its changelog says (type constraints are left out:
    :func:`diff` compares them exactly).

    Raises:
        KeyError: a version is not a since-version of ``op``.
    """
    old, new = doc_lines(op, previous), doc_lines(op, version)
    return [
        line
        for line in difflib.unified_diff(old, new, lineterm="", n=0)
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++"))
    ]
