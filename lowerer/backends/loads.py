"""What a runtime version loads: the highest default-domain opset and IR version, per release, as data.

A profile's ``loads`` is a list of rows, oldest first: ``{"version": "1.14", "max_opset": 18,
"max_ir": 8, "source": "...", "confirmed": false, "note": "..."}``; a row holds from its version
up to the next row's (``null`` limits: no bound known beyond lowerer's own). A profile whose backend
is an onnxruntime execution provider says ``"loads": "onnxruntime"`` and shares onnxruntime's rows
(its versions are onnxruntime's). The rows that apply to what the user named:

* ``NAME==V``: the row holding ``V`` (the newest row whose version is ``V`` or older);
* ``NAME<V``, ``NAME<=V``: the row holding the newest version the bound admits;
* ``NAME`` alone, ``NAME>=V``, ``NAME>V``: the newest row.

A version older than every row is refused (its limits are not known).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lowerer.core.errors import InputError

__all__ = ["Loads", "loads_for", "parse_loads"]

_ROW_KEYS = frozenset({"version", "max_opset", "max_ir", "source", "confirmed", "note"})


@dataclass(frozen=True)
class Loads:
    """The limits of the runtime version(s) named: what a model must keep to to load there.

    Attributes:
        runtime: the runtime whose table it is (``onnxruntime``, ``tensorrt``).
        version: the release the row holds from (``1.14``).
        max_opset: the highest default-domain opset it loads (None: no bound known).
        max_ir: the highest IR version it loads (None: no bound known).
        source: where the limits are documented.
        confirmed: False when the limits could not be confirmed in the source.
        note: what was or was not confirmed.
    """

    runtime: str
    version: str
    max_opset: int | None
    max_ir: int | None
    source: str
    confirmed: bool = True
    note: str = ""

    def describe(self) -> str:
        """``tensorrt 8.6: opset <= 17, IR <= 8 (not confirmed)``."""
        opset = "any opset" if self.max_opset is None else f"opset <= {self.max_opset}"
        ir = "any IR version" if self.max_ir is None else f"IR <= {self.max_ir}"
        return f"{self.runtime} {self.version}+: {opset}, {ir}" + ("" if self.confirmed else " (not confirmed)")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"runtime": self.runtime, "version": self.version, "max_opset": self.max_opset,
                "max_ir": self.max_ir, "source": self.source, "confirmed": self.confirmed, "note": self.note}


def _key(text: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in text.split("."))
    return parts + (0,) * (8 - len(parts))


def parse_loads(raw: object, runtime: str, where: str) -> tuple[Loads, ...]:
    """Check a profile's ``loads`` rows (oldest first) and turn them into :class:`Loads`.

    Raises:
        InputError: naming the file and the row at fault.
    """
    if not isinstance(raw, list) or not raw:
        raise InputError(f"profile {where}: 'loads' must be a non-empty list of rows or the name of a runtime")
    rows = []
    for i, item in enumerate(raw):
        at = f"{where} loads row {i}"
        if not isinstance(item, dict) or set(item) - _ROW_KEYS:
            raise InputError(f"profile {at}: a row is an object with only {', '.join(sorted(_ROW_KEYS))}")
        version = item.get("version")
        if not isinstance(version, str) or not re.fullmatch(r"\d+(\.\d+)*", version):
            raise InputError(f"profile {at}: 'version' must be like '1.14'")
        limits = [item.get("max_opset"), item.get("max_ir")]
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in limits):
            raise InputError(f"profile {at}: 'max_opset' and 'max_ir' must be positive integers or null")
        if not isinstance(item.get("source"), str) or not item["source"].strip():
            raise InputError(f"profile {at}: 'source' must be a non-empty string")
        rows.append(Loads(runtime, version, limits[0], limits[1], item["source"].strip(),
                          bool(item.get("confirmed", True)), str(item.get("note", ""))))
    if [_key(r.version) for r in rows] != sorted({_key(r.version) for r in rows}):
        raise InputError(f"profile {where}: 'loads' rows must be in increasing version order")
    return tuple(rows)


def loads_for(rows: tuple[Loads, ...], op: str | None, version: str | None) -> Loads:
    """The row that applies to ``NAME op version`` (see the module docstring).

    Raises:
        InputError: a version older than every row.
    """
    if op is None or version is None or op in (">", ">="):
        return rows[-1]
    wanted = _key(version)
    held = [r for r in rows if (_key(r.version) < wanted if op == "<" else _key(r.version) <= wanted)]
    if not held:
        raise InputError(f"no load limits known for {rows[0].runtime} {op}{version}: lowerer's table starts at "
                         f"{rows[0].runtime} {rows[0].version}; name {rows[0].version} or newer")
    return held[-1]
