"""What a conversion did: one record per rewrite, and a summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import onnx

__all__ = ["Report", "Rewrite"]


@dataclass
class Rewrite:
    """One rewrite of one node.

    Attributes:
        node: the node's name (or ``<op>#<index>`` when it has none).
        op_type: the original op.
        scope: where the node lives (``graph``, ``graph/loop.body``, ``function:pkg.F``).
        from_version: since-version of the original op's schema.
        to_opset: default-domain opset the replacement is written for.
        rule: the rule that made the rewrite.
        emitted: op types of the replacement nodes, in order.
        status: ``verified``, ``unverified`` or ``failed``.
        reason: why it is unverified (or how it was verified).
        provider: the onnxruntime execution provider (or ``numpy-reference``) that checked it.
        details: free-form verification details (input sets used, max difference ...).
        original: a copy of the original node (for verification; not serialized).
        replacement: the replacement nodes (for verification; not serialized).
        constants: initializers the replacement needs (for verification; not serialized).
        from_opset: the default-domain opset of the original node's scope.
        input_types: element type and dims of each input of the original node, where known.
        input_values: the constant inputs of the original node (verification feeds them as they are).
        steps: how each version step was crossed (``ReduceSum 13 → 11: generic``), or the rule applied.
    """

    node: str
    op_type: str
    scope: str
    from_version: int
    to_opset: int
    rule: str
    emitted: list[str]
    status: str = "unverified"
    reason: str = "verification not run"
    provider: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    original: onnx.NodeProto | None = field(default=None, repr=False)
    replacement: list[onnx.NodeProto] = field(default_factory=list, repr=False)
    constants: list[onnx.TensorProto] = field(default_factory=list, repr=False)
    from_opset: int = 0
    input_types: dict[str, Any] = field(default_factory=dict, repr=False)
    input_values: dict[str, Any] = field(default_factory=dict, repr=False)
    steps: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data."""
        return {
            "node": self.node,
            "op_type": self.op_type,
            "scope": self.scope,
            "from_version": self.from_version,
            "from_opset": self.from_opset,
            "to_opset": self.to_opset,
            "rule": self.rule,
            "emitted": list(self.emitted),
            "status": self.status,
            "reason": self.reason,
            "provider": self.provider,
            "details": dict(self.details),
            "steps": list(self.steps),
        }


@dataclass
class Report:
    """All rewrites of one conversion, plus what was done to the model as a whole."""

    rewrites: list[Rewrite] = field(default_factory=list)
    source_opset: int | None = None
    target_opset: int | None = None
    decompose: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    #: How per-rewrite verification ran (providers, distinct checks, cache hits, sessions, seconds).
    verification: dict[str, Any] | None = None
    #: The whole-model check (``--verify-model``): status, reason, provider, details.
    model_check: dict[str, Any] | None = None

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.rewrites)

    def __len__(self) -> int:
        return len(self.rewrites)

    def summary(self) -> dict[str, Any]:
        """Counts of rewrites by rule and by verification status."""
        by_rule: dict[str, Counter[str]] = {}
        for r in self.rewrites:
            by_rule.setdefault(r.rule, Counter())[r.status] += 1
        return {
            "rewrites": len(self.rewrites),
            "by_rule": {rule: dict(c) for rule, c in sorted(by_rule.items())},
            "by_status": dict(Counter(r.status for r in self.rewrites)),
            "source_opset": self.source_opset,
            "target_opset": self.target_opset,
            "decompose": list(self.decompose),
            "notes": list(self.notes),
            "verification": self.verification,
            "model_check": self.model_check,
            "unverified_reasons": dict(Counter(r.reason for r in self.rewrites if r.status == "unverified")),
        }

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {"summary": self.summary(), "rewrites": [r.to_dict() for r in self.rewrites]}
