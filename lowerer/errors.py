"""The exceptions lowerer raises: user-facing errors and internal invariants."""

from __future__ import annotations

__all__ = [
    "ConversionError",
    "InputError",
    "InternalError",
    "LowererError",
    "VerificationError",
]


class LowererError(ValueError):
    """Base class of every error lowerer reports to its user.

    The message is one line that names the problem (and, where a node is involved, the node,
    its op and the versions) and what to do about it. The CLI prints it and exits with
    :attr:`exit_code` without a traceback.
    """

    exit_code: int = 2


class InputError(LowererError):
    """The input is unusable: missing, unreadable, not an ONNX model, bad path or option."""


class ConversionError(LowererError):
    """A conversion cannot be done exactly, so lowerer refuses it instead of guessing.

    Attributes:
        node: the node that cannot be converted, when one is to blame.
        scope: where that node lives.
    """

    def __init__(self, message: str, *, node: object = None, scope: str | None = None) -> None:
        super().__init__(message)
        self.node = node
        self.scope = scope


class VerificationError(LowererError):
    """A rewrite (or a whole-model check) computed different numbers from the original."""

    exit_code = 1


class InternalError(RuntimeError):
    """A bug in lowerer itself (an invariant broke); not a user error."""
