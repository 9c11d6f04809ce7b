"""The outcome of one check: what :mod:`.check` returns and :mod:`.blame` reads and rewrites.

It lives below both so that the verifier and its second opinions share one type and import one
way (``check`` → ``blame`` → ``result``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lowerer.core.report import RewriteStatus

__all__ = ["CheckResult"]


@dataclass
class CheckResult:
    """The outcome of one distinct check, shared by every identical rewrite."""

    status: RewriteStatus
    reason: str
    provider: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    #: For a failure: the feeds and both sides' outputs (``feeds``, ``original``, ``replacement``); for a
    #: second opinion, both sides' outputs on those feeds. Kept in memory only, for :mod:`.blame`.
    evidence: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    #: For failures: what differs (the node is named by the caller).
    failure: str | None = None
