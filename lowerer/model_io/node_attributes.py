"""Reading a node's attributes: the one reader every layer uses (editing a copy is :mod:`lowerer.steps.attributes`).

:func:`attribute` finds the attribute proto; :func:`attribute_value` reads it as a Python value (strings
decoded); :func:`int_attribute` and :func:`ints_attribute` read an int and a list of ints, with a default
when the attribute is absent.
"""

from __future__ import annotations

from typing import overload

import onnx
from onnx import helper

__all__ = ["attribute", "attribute_value", "int_attribute", "ints_attribute"]


def attribute(node: onnx.NodeProto, name: str) -> onnx.AttributeProto | None:
    """The attribute ``name`` of ``node``, or None."""
    for a in node.attribute:
        if a.name == name:
            found: onnx.AttributeProto = a
            return found
    return None


def attribute_value(node: onnx.NodeProto, name: str) -> object:
    """The Python value of attribute ``name`` (strings decoded), or None when absent."""
    a = attribute(node, name)
    if a is None:
        return None
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


@overload
def int_attribute(node: onnx.NodeProto, name: str, default: int) -> int: ...
@overload
def int_attribute(node: onnx.NodeProto, name: str, default: None = None) -> int | None: ...
def int_attribute(node: onnx.NodeProto, name: str, default: int | None = None) -> int | None:
    """The value of the int attribute ``name``, or ``default`` when absent."""
    a = attribute(node, name)
    return default if a is None else int(a.i)


@overload
def ints_attribute(node: onnx.NodeProto, name: str, default: list[int]) -> list[int]: ...
@overload
def ints_attribute(node: onnx.NodeProto, name: str, default: None = None) -> list[int] | None: ...
def ints_attribute(node: onnx.NodeProto, name: str, default: list[int] | None = None) -> list[int] | None:
    """The value of the ints attribute ``name`` (a new list), or ``default`` when absent."""
    a = attribute(node, name)
    return default if a is None else [int(v) for v in a.ints]
