"""How much the ``lowerer`` commands say: ``-q``/``-v``/``-vv`` counted, lowerer's log records routed to stderr.

``-q/-v/-vv`` are accepted before or after the subcommand (:class:`lowerer.cli.groups.VerbosityArgs`
declares them); their count lives on the root click context.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click

__all__ = ["configure_logging", "count_flag", "verbosity"]

_KEY = "lowerer.verbosity"
_HANDLER_NAME = "lowerer-cli"


def verbosity() -> int:
    """-1 (``-q``), 0 (default), 1 (``-v``) or 2 (``-vv``) for the command running now."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return 0
    state = ctx.find_root().meta.get(_KEY)
    if not state:
        return 0
    return -1 if state["quiet"] else min(int(state["verbose"]), 2)


def configure_logging(level: int) -> None:
    """Route lowerer's log records to stderr: errors only at -1, warnings at 0, info at 1, debug at 2.

    Other libraries' records (onnxscript, onnx_ir) are shown only from errors, or everything at 2.
    """
    lowerer_level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(level, logging.DEBUG)
    log = logging.getLogger("lowerer")
    log.setLevel(lowerer_level)
    log.propagate = False
    handler = next((h for h in log.handlers if isinstance(h, logging.StreamHandler) and h.get_name() == _HANDLER_NAME),
                   None)
    if handler is None:
        handler = logging.StreamHandler()
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(_Formatter())
        log.addHandler(handler)
    handler.setStream(sys.stderr)  # click's test runner swaps sys.stderr per invocation
    logging.getLogger().setLevel(logging.DEBUG if level >= 2 else logging.ERROR)


class _Formatter(logging.Formatter):
    """``lowerer: warning: message`` (one line: newlines and control characters escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.levelno <= logging.DEBUG:
            text += "\n" + self.formatException(record.exc_info)
            return f"lowerer: {record.levelname.lower()}: {text}"
        text = " ".join(text.split())
        return f"lowerer: {record.levelname.lower()}: {text}"


def count_flag(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Click callback of ``-v``/``-q``: add the flag to the run's count and configure logging to match."""
    state = ctx.find_root().meta.setdefault(_KEY, {"verbose": 0, "quiet": False})
    if param.name == "verbose":
        state["verbose"] += int(value or 0)
    elif value:
        state["quiet"] = True
    configure_logging(-1 if state["quiet"] else min(state["verbose"], 2))
    return value
