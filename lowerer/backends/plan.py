"""Lowering for a backend: which nodes a profile names, the form each gets, and what is left.

:class:`BackendPlan` is the step engine's picker for ``--for BACKEND``: for each node of an op
the profile names it finds the first matching entry and hands the engine that entry's exact form
(:data:`FORMS`); the engine applies it like a decomposition, and every rewrite is verified as
usual. :func:`scan` finds the nodes a profile names in a whole model (every scope), with the
same conditions; it runs on the input (``inspect --for``, and to refuse early a node no exact
form replaces) and on the converted model (nothing the profile names may be left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import onnx

from lowerer.backends.profile import REWRITES, Entry, Profile
from lowerer.errors import ConversionError
from lowerer.opsets import since_version
from lowerer.scopes import Scope, iter_scopes, subgraphs_of
from lowerer.steps.engine import Pick

__all__ = ["BackendPlan", "Finding", "Kept", "scan"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Finding:
    """A node a profile names: where it is, what it is, and the entry naming it."""

    scope: str
    node: str
    op_type: str
    version: int
    entry: Entry

    def label(self) -> str:
        """``'name' (Op-v, in scope)``."""
        return f"{self.node!r} ({self.op_type}-{self.version}, in {self.scope})"

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: node, op, version, scope, why, source, the form lowerer uses (or None)."""
        return {"scope": self.scope, "node": self.node, "op_type": self.op_type, "version": self.version,
                "matched": self.entry.describe(), "why": self.entry.why, "source": self.entry.source,
                "confirmed": self.entry.confirmed, "rewrite": self.entry.rewrite}


@dataclass
class Kept:
    """A node the profile names that stays as it is (``--allow-fallback``): which, and why."""

    finding: Finding
    reason: str

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the finding and the reason."""
        return {**self.finding.to_dict(), "reason": self.reason}


@dataclass
class BackendPlan:
    """The picker the step engine asks about each node of an op the profile names.

    Args:
        profile: the backend's profile.
        allow_fallback: keep a node as it is when its form refuses (recorded in ``kept``); else the
            refusal stands.
    """

    profile: Profile
    allow_fallback: bool = False
    #: Nodes whose form refused, kept as they are (only with ``allow_fallback``), by (scope, node).
    kept: dict[tuple[str, str], Kept] = field(default_factory=dict)
    _rules: dict[int, object] = field(default_factory=dict)

    @property
    def picked_ops(self) -> frozenset[str]:
        """The ops to ask about: those of entries that have a form."""
        return frozenset(op for e in self.profile.entries if e.rewrite is not None for op in e.ops)

    def pick(self, node: onnx.NodeProto, scope: Scope, version: int, facts: object) -> Pick | None:
        """The form for ``node`` (at since-version ``version``), or None when the profile does not name it."""
        from lowerer.facts import Facts

        assert isinstance(facts, Facts)
        entry = self.profile.entry_for(node, version, facts)
        if entry is None or entry.rewrite is None:
            return None
        keep = self._keep(entry, version) if self.allow_fallback else None
        if entry.rewrite == "expand":
            return Pick(None, keep_if_refused=keep)
        rule, at_source = self._rule(entry)
        return Pick(rule, at_source=at_source, keep_if_refused=keep)

    def _keep(self, entry: Entry, version: int) -> Callable[[onnx.NodeProto, Scope, ConversionError], bool]:
        def keep(node: onnx.NodeProto, scope: Scope, refused: ConversionError) -> bool:
            # Named as the report and scan() name it: an unnamed node by its op and index in its scope.
            index = next((i for i, n in enumerate(scope.holder.node) if n == node), -1)
            name = node.name or f"{node.op_type}#{index}"
            finding = Finding(scope.path, name, node.op_type, version, entry)
            self.kept[(scope.path, name)] = Kept(finding, str(refused))
            return True

        return keep

    def _rule(self, entry: Entry) -> tuple[object, bool]:
        key = id(entry)
        rule = self._rules.get(key)
        if rule is None:
            rule = self._rules[key] = make_rule(entry, self.profile.name)
        return rule, entry.rewrite == "constant-inputs"


def make_rule(entry: Entry, backend: str) -> object:
    """The rule of an entry's form (see :data:`lowerer.backends.profile.REWRITES`)."""
    from lowerer.rules import DECOMPOSITIONS
    from lowerer.rules.backend_forms import ConstantInputsForm, LastAxisForm, SelectLastIndexForm

    name = entry.rewrite
    if name in DECOMPOSITIONS:
        return DECOMPOSITIONS[name]
    if name == "argmax-flip":
        return SelectLastIndexForm()
    if name == "last-axis":
        return LastAxisForm()
    if name == "constant-inputs":
        indices = tuple(int(i) for i in entry.when.get("literal_inputs", ()))
        return ConstantInputsForm(indices, backend)
    raise AssertionError(f"no rule for form {name!r} (known: {', '.join(REWRITES)})")


def scan(model: onnx.ModelProto, profile: Profile) -> list[Finding]:
    """Every node of ``model`` (all scopes, subgraphs and functions included) that ``profile`` names."""
    from lowerer.constants import ConstantIndex
    from lowerer.facts import Facts
    from lowerer.shapes import ShapeIndex

    if not profile.entries:
        return []
    shapes = ShapeIndex(model)
    shapes.snapshot()

    def dims(scope: Scope, name: str) -> list[int | None] | None:
        vt = shapes.lookup(scope, name, lambda vt: vt[1] is not None and None not in vt[1])
        return None if vt is None or vt[1] is None else list(vt[1])

    def rank(scope: Scope, name: str) -> int | None:
        vt = shapes.lookup(scope, name, lambda vt: vt[1] is not None)
        return None if vt is None or vt[1] is None else len(vt[1])

    constants = ConstantIndex(model, dims, rank)
    ops = profile.ops
    found: list[Finding] = []
    for scope, index, node in _nodes(model):
        if node.op_type not in ops or node.domain not in ("", "ai.onnx") or scope.opset is None:
            continue
        version = since_version(node.op_type, scope.opset)
        if version is None:
            continue
        entry = profile.entry_for(node, version, Facts(scope, shapes, constants))
        if entry is not None:
            found.append(Finding(scope.path, node.name or f"{node.op_type}#{index}", node.op_type, version, entry))
    return found


def _nodes(model: onnx.ModelProto) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
    """Every node with its scope and index, subgraphs at any depth included."""

    def walk(scope: Scope) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
        for index, node in enumerate(scope.holder.node):
            yield scope, index, node
            for attr_name, position, graph in subgraphs_of(node):
                yield from walk(scope.child(index, node, attr_name, position, graph))

    for scope in iter_scopes(model):
        yield from walk(scope)
