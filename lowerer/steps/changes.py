"""What changed at one version step of an op: the vocabulary of the step table.

A *step* is one boundary in an op's history: from the schema version before ``version`` to
``version`` itself (``Gather`` 1 → 11, ``ReduceSum`` 11 → 13 ...). Each step is described by the
changes it made, as a tuple of the records below (:mod:`lowerer.steps.table` holds them all).
The engine reads a step's changes to move a node across it in either direction:

* going **down** (``version`` → the one before), each change says what the node must not use
  (or what must be rewritten) to mean the same at the older version;
* going **up**, what must be rewritten so that the newer version reads the node the same way.

A step with a :class:`Semantics` change, or one a direction has no generic answer for, moves only
through an adapter registered for it (:mod:`lowerer.steps.registry`); without one it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AttrAdded",
    "AttrRemoved",
    "AttrToInput",
    "Broadcast",
    "Change",
    "DefaultChanged",
    "InputAdded",
    "NegativeValues",
    "NewAttrValues",
    "NoChange",
    "OptionalInput",
    "OutputAdded",
    "ONES",
    "Semantics",
    "Step",
    "Types",
]

#: In ``neutral``: a list attribute whose every entry is 1 (``dilations``, ``strides``), of any length.
ONES = "<all ones>"


@dataclass(frozen=True)
class Change:
    """One thing that changed at a step (base class)."""

    def describe(self) -> str:
        """A short phrase for messages and the step listing."""
        return type(self).__name__


@dataclass(frozen=True)
class Types(Change):
    """The type constraints changed (types added, e.g. bfloat16 at 13; rarely types removed).

    Down (and up, where types were removed): the node's actual element types must be allowed by
    the schema on the other side of the step; an unknown type is refused.
    """

    def describe(self) -> str:  # noqa: D102
        return "types changed"


@dataclass(frozen=True)
class AttrAdded(Change):
    """An optional attribute appeared; its absence keeps the old meaning.

    Attributes:
        name: the attribute.
        neutral: values that also mean the old behaviour (usually just the default). Down: the
            attribute is dropped when absent or one of these, else the step needs an adapter.
        irrelevant_unless: the attribute matters only in some cases, described by a predicate
            name the engine knows (e.g. ``"cast_to_float8"`` for Cast's ``saturate``); outside
            them any value is neutral.
    """

    name: str
    neutral: tuple[object, ...] = ()
    irrelevant_unless: str | None = None

    def describe(self) -> str:  # noqa: D102
        return f"attribute {self.name!r} added"


@dataclass(frozen=True)
class AttrRemoved(Change):
    """An attribute of the older version is gone in the newer one.

    Attributes:
        name: the attribute.
        neutral: values (at the older version) that mean what the newer version does without it;
            ``None`` in the tuple means "absent". Up: the attribute is dropped when absent or
            neutral, else the step needs an adapter. ``any_value`` makes every value neutral
            (e.g. ``consumed_inputs``, an optimization hint).
        down_value: the value to write going down, when the older version's default does not
            mean what the newer version does (Dropout-6 ``is_test=1``); None leaves it absent.
    """

    name: str
    neutral: tuple[object, ...] = (None,)
    any_value: bool = False
    down_value: object = None

    def describe(self) -> str:  # noqa: D102
        return f"attribute {self.name!r} removed"


@dataclass(frozen=True)
class AttrToInput(Change):
    """An attribute became an input (``axes``, ``split``, ``pads``, ``min``/``max``, ``k``, ``scales``).

    Attributes:
        attr: the attribute's name at the older version.
        input: the input's index at the newer version.
        dtype: the input's element type: ``"int64"``, ``"float32"``, or ``"T"`` (the type of input 0).
        scalar: the input is a scalar (Clip's min/max, Dropout's ratio), else 1-D (TopK's K: 1-D of one).

    Up: the attribute becomes a constant input (absent attribute → absent input, or the older
    default written out when the newer version has none). Down: the input must be a constant
    (an initializer that is not a graph input, a Constant node, or foldable); absent → absent.
    """

    attr: str
    input: int
    dtype: str = "int64"
    scalar: bool = False

    def describe(self) -> str:  # noqa: D102
        return f"attribute {self.attr!r} became input {self.input}"


@dataclass(frozen=True)
class DefaultChanged(Change):
    """An attribute's default changed (or it became required: ``new`` None, or optional: ``old`` None).

    Going either way an absent attribute is written out with the default of the side it came from.
    """

    name: str
    old: object
    new: object

    def describe(self) -> str:  # noqa: D102
        return f"default of {self.name!r} changed from {self.old!r} to {self.new!r}"


@dataclass(frozen=True)
class NegativeValues(Change):
    """Negative axes or indices became allowed (counted from the back).

    Attributes:
        attr: the attribute holding them, or None.
        input: the input holding them, or None.
        kind: ``"axis"`` (normalized with the rank of input ``of``) or ``"index"`` (normalized
            with the size along the node's axis of input ``of``).
        of: the input whose rank (axes) or dim (indices) they count from.

    Down: the values must be provably non-negative, or made so (literal or constant values,
    known ranks and dims), else refused.
    """

    attr: str | None = None
    input: int | None = None
    kind: str = "axis"
    of: int = 0

    def describe(self) -> str:  # noqa: D102
        where = repr(self.attr) if self.attr is not None else f"input {self.input}"
        return f"negative {self.kind} values allowed in {where}"


@dataclass(frozen=True)
class Broadcast(Change):
    """Multidirectional (numpy-style) broadcasting replaced the older rule.

    Attributes:
        legacy: ``"attribute"`` when the older version broadcast only with ``broadcast=1`` (and
            ``axis``), ``"none"`` when it required equal shapes.

    Down: the node must provably broadcast in a way the older version can express (equal
    shapes, or a right-aligned suffix with ``broadcast=1``), else refused.
    """

    legacy: str = "attribute"

    def describe(self) -> str:  # noqa: D102
        return "multidirectional broadcasting"


@dataclass(frozen=True)
class OptionalInput(Change):
    """Input ``index`` became optional. Down: it must be given (or an adapter supplies a neutral value)."""

    index: int

    def describe(self) -> str:  # noqa: D102
        return f"input {self.index} became optional"


@dataclass(frozen=True)
class InputAdded(Change):
    """Optional input ``index`` appeared (Pad's ``axes``, Slice's ``steps``); its absence keeps the old meaning.

    Down: it must be absent, or an adapter folds it into the older form (constant all-ones steps...).
    """

    index: int

    def describe(self) -> str:  # noqa: D102
        return f"optional input {self.index} added"


@dataclass(frozen=True)
class OutputAdded(Change):
    """Optional output ``index`` appeared. Down: it must be absent or unused."""

    index: int

    def describe(self) -> str:  # noqa: D102
        return f"output {self.index} added"


@dataclass(frozen=True)
class NewAttrValues(Change):
    """Attribute ``name`` accepts new values (``mode='wrap'``). Down: the node must not use them."""

    name: str
    values: tuple[object, ...]

    def describe(self) -> str:  # noqa: D102
        return f"attribute {self.name!r} accepts {', '.join(map(repr, self.values))}"


@dataclass(frozen=True)
class Semantics(Change):
    """The meaning changed in a way only a dedicated adapter can bridge; ``what`` says how."""

    what: str

    def describe(self) -> str:  # noqa: D102
        return self.what


@dataclass(frozen=True)
class NoChange(Change):
    """Nothing a valid model can observe changed (a documentation fix); ``what`` says what did."""

    what: str = ""

    def describe(self) -> str:  # noqa: D102
        return f"no change in meaning ({self.what})" if self.what else "no change in meaning"


@dataclass(frozen=True)
class Step:
    """One boundary of an op's history: from schema version ``previous`` to ``version``.

    Attributes:
        op: the default-domain op.
        previous: the older since-version.
        version: the newer since-version.
        changes: what changed, in the vocabulary above (never empty).
    """

    op: str
    previous: int
    version: int
    changes: tuple[Change, ...]

    def describe(self) -> str:
        """``ReduceSum 11 → 13: types changed; attribute 'axes' became input 1``."""
        return f"{self.op} {self.previous} → {self.version}: " + "; ".join(c.describe() for c in self.changes)
