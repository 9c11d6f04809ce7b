"""What the step engine hands its callers: a node's :class:`Conversion`, and a backend's :class:`Pick`.

Also the checks every entry shares: :func:`first_version` of an op and
:func:`refuse_attribute_references` (a function's node whose attributes are per call site).
Importable from :mod:`lowerer.steps.engine` too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import onnx

from lowerer.core.errors import ConversionError
from lowerer.core.report import Crossing
from lowerer.facts import Facts
from lowerer.model_io.naming import node_label
from lowerer.model_io.scopes import Scope
from lowerer.steps.registry import history

__all__ = ["Conversion", "Pick", "Picker", "first_version", "refuse_attribute_references"]


@dataclass
class Conversion:
    """What replaces one node: nodes valid at the target, new constants, and each entry applied."""

    nodes: list[onnx.NodeProto]
    constants: list[onnx.TensorProto] = field(default_factory=list)
    #: Each registry entry applied, in order (provenance).
    crossings: list[Crossing] = field(default_factory=list)
    #: The version and name of the node being converted (messages name the user's node by them).
    first_version: int | None = None
    first_name: str = ""

    @property
    def expanded(self) -> bool:
        """Whether a function body was expanded (its arithmetic may round differently: judged by a budget)."""
        return any(c.kind == "expansion" or c.budgeted for c in self.crossings)


@dataclass(frozen=True)
class Pick:
    """The form a backend profile picked for one node at the target (``--for BACKEND``).

    Attributes:
        form: the registry form's name (``argmax-flip``, ``hardmax``, ``expand`` ...).
        params: what the form's rule is built with (a profile entry's literal input positions ...).
        keep_if_refused: called with the refusal when the form cannot make the node; True keeps the node
            as it is (a backend fallback the caller allowed), False lets the refusal stand.
        remedy: what the refusal ends with when the form cannot make the node (an option that works
            for the backend; None: nothing is added).
    """

    form: str
    params: tuple[object, ...] = ()
    keep_if_refused: Callable[[onnx.NodeProto, Scope, ConversionError], bool] | None = None
    remedy: str | None = None


#: Given a default-domain node at the target, its scope, its since-version and the facts: a :class:`Pick` or None.
Picker = Callable[[onnx.NodeProto, Scope, int, Facts], "Pick | None"]


def first_version(op: str) -> int | None:
    """The version ``op`` was introduced at (None for an unknown op)."""
    versions = history(op)
    return versions[0] if versions else None


def refuse_attribute_references(node: onnx.NodeProto, scope: Scope, op: str, target: int) -> None:
    """Refuse to rewrite a node (in a function) whose attributes refer to the function's attributes.

    Such an attribute (``ref_attr_name``) has its value per call site, not in the node: a rule
    or step would read it as absent (axis 0 ...) and compute something else.
    """
    refs = [(a.name, a.ref_attr_name) for a in node.attribute if a.ref_attr_name]
    if refs:
        listed = ", ".join(f"{name}=@{ref}" for name, ref in refs)
        raise ConversionError(
            f"node {node_label(node)} ({op}, in {scope.path}) cannot be converted to opset {target}: its "
            f"attribute(s) {listed} refer to the function's attributes, whose values come from each call; "
            "lowerer converts only nodes with literal attribute values (inline the function or give literal "
            "values)", node=node, scope=scope.path)
