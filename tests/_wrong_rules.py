"""Deliberately wrong rules, shared by the tests that check verification catches them."""

from __future__ import annotations

from lowerer.steps.emitter import Emitter, Rule


class DropsSelectLast(Rule):
    """A deliberately wrong ArgMax rule: drops select_last_index instead of emulating it."""

    name = "wrong-argmax"
    op_types = ("ArgMax", "ArgMin")
    versions = (1, 11, 12, 13)

    def rewrite(self, em: Emitter) -> None:
        em.copy_node(select_last_index=None)
