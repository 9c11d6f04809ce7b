"""Lowering for a backend: which nodes a profile names, the form each gets, and what is left.

:class:`BackendPlan` is the step engine's picker for ``--for BACKEND``: for each node of an op
the profile names it finds the first matching entry and hands the engine that entry's exact form
(a form of the registry, :mod:`lowerer.rules`) when the node has reached the target, in the same
walk that converts the model; every rewrite is verified as usual. :func:`scan` finds the nodes a
profile names in a whole model (every scope), with the same conditions; it runs once on the
converted model (nothing the profile names may be left).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import onnx

from lowerer.backends.profile import Entry, Profile
from lowerer.core.errors import ConversionError
from lowerer.core.opsets import since_version
from lowerer.model_io.naming import node_key
from lowerer.model_io.scopes import Scope, iter_scopes
from lowerer.steps.conversion import Pick

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
            refusal stands (but for a ``departure`` entry's node, see ``strict``).
        strict: refuse a node of the user's own model that a ``departure`` entry names (else it is
            converted as it is, with a warning).
    """

    profile: Profile
    allow_fallback: bool = False
    strict: bool = False
    #: Nodes whose form refused, kept as they are (with ``allow_fallback``, or a departure entry's), by (scope, node).
    kept: dict[tuple[str, str], Kept] = field(default_factory=dict)
    #: Every node the picker matched to an entry with a form, in the order the walk met them.
    named: list[Finding] = field(default_factory=list)

    @property
    def picked_ops(self) -> frozenset[str]:
        """The ops to ask about: those of entries that have a form."""
        return frozenset(op for e in self.profile.entries if e.rewrite is not None for op in e.ops)

    def pick(self, node: onnx.NodeProto, scope: Scope, version: int, facts: object) -> Pick | None:
        """The form for ``node`` (at since-``version``, at the target); None when the profile does not name it."""
        from lowerer.facts import Facts

        assert isinstance(facts, Facts)
        entry = self.profile.entry_for(node, version, facts)
        if entry is None or entry.rewrite is None:
            return None
        name = node_key(node, _index(scope, node))
        self.named.append(Finding(scope.path, name, node.op_type, version, entry))
        # A departure entry's node whose form cannot be written is kept: finish() says it (the user's own) or
        # refuses it (one a rewrite wrote), as it does every node left
        keep = self._keep(entry, version, name) if self.allow_fallback or (entry.departure and not self.strict) \
            else None
        params: tuple[object, ...] = ()
        if entry.rewrite == "constant-inputs":
            params = (tuple(int(i) for i in entry.when.get("literal_inputs", ())), self.profile.name)
        return Pick(entry.rewrite, params, keep_if_refused=keep, remedy=self.fallback_remedy)

    @property
    def fallback_remedy(self) -> str | None:
        """What a refused form's line ends with: ``--allow-fallback`` where the runtime has a fallback, else None."""
        from lowerer.backends.profile import FALLBACK_RUNTIMES
        from lowerer.core.remedies import FALLBACK

        return FALLBACK if self.profile.runtime in FALLBACK_RUNTIMES else None

    def _keep(self, entry: Entry, version: int, name: str) -> Callable[[onnx.NodeProto, Scope, ConversionError], bool]:
        def keep(node: onnx.NodeProto, scope: Scope, refused: ConversionError) -> bool:
            finding = Finding(scope.path, name, node.op_type, version, entry)
            self.kept[(scope.path, name)] = Kept(finding, str(refused))
            return True

        return keep


def _index(scope: Scope, node: onnx.NodeProto) -> int:
    """The node's index in its scope (reports name an unnamed node by its op and index)."""
    return next((i for i, n in enumerate(scope.holder.node) if n is node or n == node), -1)


def scan(model: onnx.ModelProto, profile: Profile) -> list[Finding]:
    """Every node of ``model`` (all scopes, subgraphs and functions included) that ``profile`` names."""
    from lowerer.facts import Facts
    from lowerer.facts.constants import ConstantIndex
    from lowerer.facts.shapes import ShapeIndex

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
            found.append(Finding(scope.path, node_key(node, index), node.op_type, version, entry))
    return found


def _nodes(model: onnx.ModelProto) -> Iterator[tuple[Scope, int, onnx.NodeProto]]:
    """Every node with its scope and index, subgraphs at any depth included."""
    for scope in iter_scopes(model):
        yield from scope.walk()
