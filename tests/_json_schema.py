"""A small JSON Schema (draft 2020-12) validator for the keywords lowerer's report schema uses.

Supported: type, properties, required, additionalProperties, items, enum, const, pattern,
minimum, maximum, minItems, maxItems, anyOf, $ref (local ``#/$defs/...``). An unknown keyword
is an error, so the schema cannot silently use one this validator ignores.
"""

from __future__ import annotations

import re
from typing import Any

_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}


def validate(instance: Any, schema: dict[str, Any], root: dict[str, Any] | None = None, path: str = "$") -> list[str]:
    """Every violation of ``schema`` by ``instance``, as ``path: what`` lines (empty: valid)."""
    root = schema if root is None else root
    errors: list[str] = []
    for key, rule in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key == "$ref":
            assert rule.startswith("#/$defs/"), rule
            errors += validate(instance, root["$defs"][rule[len("#/$defs/"):]], root, path)
        elif key == "type":
            names = rule if isinstance(rule, list) else [rule]
            if not any(_TYPES[n](instance) for n in names):
                errors.append(f"{path}: {instance!r:.60} is not of type {rule}")
        elif key == "properties":
            if isinstance(instance, dict):
                for name, sub in rule.items():
                    if name in instance:
                        errors += validate(instance[name], sub, root, f"{path}.{name}")
        elif key == "required":
            if isinstance(instance, dict):
                errors += [f"{path}: missing {name!r}" for name in rule if name not in instance]
        elif key == "additionalProperties":
            if isinstance(instance, dict):
                known = set(schema.get("properties", {}))
                for name, value in instance.items():
                    if name in known:
                        continue
                    if rule is False:
                        errors.append(f"{path}: unexpected {name!r}")
                    elif isinstance(rule, dict):
                        errors += validate(value, rule, root, f"{path}.{name}")
        elif key == "items":
            if isinstance(instance, list):
                for i, value in enumerate(instance):
                    errors += validate(value, rule, root, f"{path}[{i}]")
        elif key == "enum":
            if instance not in rule:
                errors.append(f"{path}: {instance!r} not in {rule}")
        elif key == "const":
            if instance != rule:
                errors.append(f"{path}: {instance!r} is not {rule!r}")
        elif key == "pattern":
            if isinstance(instance, str) and not re.search(rule, instance):
                errors.append(f"{path}: {instance!r} does not match {rule}")
        elif key == "minimum":
            if _TYPES["number"](instance) and instance < rule:
                errors.append(f"{path}: {instance} < {rule}")
        elif key == "maximum":
            if _TYPES["number"](instance) and instance > rule:
                errors.append(f"{path}: {instance} > {rule}")
        elif key == "minItems":
            if isinstance(instance, list) and len(instance) < rule:
                errors.append(f"{path}: fewer than {rule} items")
        elif key == "maxItems":
            if isinstance(instance, list) and len(instance) > rule:
                errors.append(f"{path}: more than {rule} items")
        elif key == "anyOf":
            if all(validate(instance, sub, root, path) for sub in rule):
                errors.append(f"{path}: matches none of anyOf")
        else:
            raise ValueError(f"the test validator does not know the keyword {key!r} (at {path})")
    return errors
