"""Editing a node's attributes: the helpers every adapter and rule uses on a copy of a node.

:func:`copy_of` makes the copy to adjust; :func:`set_attribute` and :func:`remove_attribute` edit it;
:func:`is_neutral` says whether a value means what the attribute's absence does. Reading one is
:mod:`lowerer.model_io.node_attributes`.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import helper

from lowerer.steps.changes import ONES

__all__ = ["copy_of", "is_neutral", "remove_attribute", "set_attribute"]


def copy_of(node: onnx.NodeProto) -> onnx.NodeProto:
    """A copy of ``node`` to adjust (the original stays as it is)."""
    made = onnx.NodeProto()
    made.CopyFrom(node)
    return made


def remove_attribute(node: onnx.NodeProto, name: str) -> None:
    """Drop every attribute named ``name``."""
    for i in range(len(node.attribute) - 1, -1, -1):
        if node.attribute[i].name == name:
            del node.attribute[i]


def set_attribute(node: onnx.NodeProto, name: str, value: object) -> None:
    """Set attribute ``name`` (replacing any), with the type ``helper.make_attribute`` infers."""
    remove_attribute(node, name)
    node.attribute.append(helper.make_attribute(name, value))


def is_neutral(value: object, neutral: Sequence[object]) -> bool:
    """Whether an attribute value is one of the ``neutral`` ones (``ONES``: a list of ones)."""
    for n in neutral:
        if n == ONES:
            if isinstance(value, list) and all(v == 1 for v in value):
                return True
        elif isinstance(n, bytes) and isinstance(value, str):
            if n.decode() == value:
                return True
        elif isinstance(value, list) and isinstance(n, (list, tuple)):
            if list(value) == list(n):
                return True
        elif value == n:
            return True
    return False
