"""The options every entry point takes (API, command line, onnx_ir pass), checked in one place.

Each function returns the option in its canonical form or raises :class:`~lowerer.errors.InputError`
with one line; a wrong type (``decompose=123``, ``providers=[None]``) is an ``InputError`` too.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from lowerer.errors import InputError

__all__ = ["check_flag", "check_progress", "decompose_names", "provider_list", "seed_value"]


def decompose_names(value: Any) -> frozenset[str]:
    """Decomposition names: a comma-separated string or an iterable of names (``all`` means every one)."""
    from lowerer.pipeline import normalize_decompose

    if value is None:
        return frozenset()
    if isinstance(value, str):
        return normalize_decompose(value)
    if isinstance(value, (bytes, bytearray, dict)) or not isinstance(value, Iterable):
        raise InputError(f"decompose must be a name or a list of names (hardmax, globalmaxpool, all), not a "
                         f"{type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise InputError(f"decompose must list names (strings), got {item!r} ({type(item).__name__})")
    return normalize_decompose(items)


def provider_list(value: Any) -> list[str] | None:
    """Execution providers: None (the default choice), a comma-separated string or a sequence of names.

    The names are checked against the installed onnxruntime (imported here when a list is given),
    whether or not verification runs.
    """
    if value is None:
        return None
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",")]
    elif isinstance(value, (bytes, bytearray, dict)) or not isinstance(value, Iterable):
        raise InputError(f"providers must be a list of names (cuda, dml, cpu or full names), not a "
                         f"{type(value).__name__}")
    else:
        items = list(value)
        for item in items:
            if not isinstance(item, str):
                raise InputError(f"providers must list names (strings), got {item!r} ({type(item).__name__})")
    from lowerer.verification.providers import select_providers

    return select_providers(items)


def seed_value(value: Any) -> int:
    """The seed of the generated verification inputs: an integer, 0 or more."""
    if isinstance(value, bool):
        raise InputError(f"seed must be an integer, 0 or more, not {value!r}")
    try:
        seed = operator.index(value)
    except TypeError:
        raise InputError(f"seed must be an integer, 0 or more, not a {type(value).__name__}") from None
    if seed < 0:
        raise InputError(f"seed must be 0 or more, got {seed}")
    return seed


def check_flag(value: Any, name: str) -> bool:
    """A True/False option (numpy's bools too; no other truthy values)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise InputError(f"{name} must be True or False, not {value!r}")


def check_progress(value: Any) -> Any:
    """A progress callback: None or a callable."""
    if value is not None and not callable(value):
        raise InputError(f"progress must be a callable or None, not a {type(value).__name__}")
    return value
