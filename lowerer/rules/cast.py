"""Version-step adapters for Cast: the ``to`` attribute named its type as a string at version 1.

Cast-1 spells ``to`` as the ``TensorProto.DataType`` name (``"FLOAT"``); from Cast-6 it is the enum
value. Going down the number becomes the name, going up the name becomes the number.
"""

from __future__ import annotations

import onnx

from lowerer.model_io.node_attributes import attribute_value
from lowerer.steps import generic
from lowerer.steps.attributes import copy_of, set_attribute
from lowerer.steps.changes import Semantics, Step
from lowerer.steps.emitter import Emitter
from lowerer.steps.registry import DOWN, UP, adapter

__all__ = ["cast_6_1", "cast_1_6"]


@adapter("Cast", 6, DOWN)
def cast_6_1(em: Emitter, step: Step, direction: str) -> None:
    """``to`` as the type's name."""
    node = copy_of(em.node)
    to = attribute_value(node, "to")
    if to is None:
        em.refuse("Cast without 'to'")
    set_attribute(node, "to", onnx.TensorProto.DataType.Name(int(to)).encode())  # type: ignore[call-overload]
    generic.cross(em, step, direction, node, handled=(Semantics,))


@adapter("Cast", 6, UP)
def cast_1_6(em: Emitter, step: Step, direction: str) -> None:
    """``to`` as the type's number."""
    node = copy_of(em.node)
    to = attribute_value(node, "to")
    if not isinstance(to, str) or to.upper() not in onnx.TensorProto.DataType.keys():  # noqa: SIM118
        em.refuse(f"Cast-1 'to'={to!r} names no ONNX data type")
    set_attribute(node, "to", int(onnx.TensorProto.DataType.Value(to.upper())))
    generic.cross(em, step, direction, node, handled=(Semantics,))
