"""The exceptions lowerer raises (user-facing errors and internal invariants), and :func:`one_line`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lowerer.core.report import Report

__all__ = [
    "ConversionError",
    "InputError",
    "InternalError",
    "LowererError",
    "ModelRefusedError",
    "VerificationError",
    "one_line",
]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def one_line(text: str) -> str:
    r"""``text`` as one line that is safe to print on a terminal.

    Every character that is not printable (line breaks, tabs, escape sequences such as ``\x1b[2J``,
    Unicode line separators, bidirectional overrides ...) is written as its Python escape
    (``\n``, ``\x1b``, ``\u2028``); everything else is kept. This is the one place where
    lowerer's messages are made safe: :class:`LowererError` applies it to its message, and the
    command line to every line it prints about an error.
    """
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        elif c in _NAMED:
            out.append(_NAMED[c])
        else:
            code = ord(c)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)


class LowererError(ValueError):
    """Base class of every error lowerer reports to its user.

    The message is one line that names the problem (and, where a node is involved, the node,
    its op and the versions) and what to do about it; control characters in it (from node
    names, paths ...) are escaped (see :func:`one_line`). The CLI prints it and exits with
    :attr:`exit_code` without a traceback.
    """

    exit_code: int = 2

    def __init__(self, *args: Any) -> None:
        if args and isinstance(args[0], str):
            args = (one_line(args[0]), *args[1:])
        super().__init__(*args)


class InputError(LowererError):
    """The input is unusable: missing, unreadable, not an ONNX model, bad path or option."""


class ModelRefusedError(InputError):
    """The model was read (it parses), but what it holds is refused: its structure, imports or external data.

    The command line writes ``--report`` for it, as for every refusal after the model was read.
    """


class ConversionError(LowererError):
    """A conversion cannot be done exactly, so lowerer refuses it instead of guessing.

    Attributes:
        node: the node that cannot be converted, when one is to blame.
        scope: where that node lives.
        refused: every node of the model the conversion walk could not convert (node, op_type,
            version, scope, refusal), the first being this error's; empty when the refusal is not a
            node's (or came from elsewhere).
        in_full: where the full text is when a command prints the refusal shortened (the report's path),
            or None (see :func:`lowerer.core.remedies.refusal_line`).
    """

    def __init__(self, message: str, *, node: object = None, scope: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.scope = scope
        self.refused: list[dict[str, Any]] = []
        self.in_full: str | None = None


class VerificationError(LowererError):
    """A rewrite (or a whole-model check) computed different numbers from the original.

    Attributes:
        report: the report of the conversion up to the failure (the failing rewrite last, or the
            whole-model check), when the conversion got that far; None otherwise.
    """

    exit_code = 1
    report: Report | None = None


class InternalError(RuntimeError):
    """A bug in lowerer itself (an invariant broke); not a user error."""
