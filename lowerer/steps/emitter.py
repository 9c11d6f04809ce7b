"""The rule contract and the emitter rules build their replacement nodes with."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, NoReturn

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lowerer.core.errors import ConversionError
from lowerer.core.opsets import since_version
from lowerer.model_io.naming import node_label

if TYPE_CHECKING:
    from lowerer.facts import Facts
    from lowerer.model_io.naming import NameGenerator
    from lowerer.model_io.scopes import Scope

__all__ = ["Emitter", "Rule", "normalize_axis"]


def _attribute(key: str, value: object) -> onnx.AttributeProto:
    """``helper.make_attribute(key, value)``, with a fast path for plain ints (the common case)."""
    if type(value) is int:
        return onnx.AttributeProto(name=key, i=value, type=onnx.AttributeProto.INT)
    return helper.make_attribute(key, value)


def _make_node(op_type: str, inputs: list[str], outputs: list[str], name: str, attrs: dict[str, object]
               ) -> onnx.NodeProto:
    """``helper.make_node(op_type, inputs, outputs, name=name, **attrs)``, byte for byte, faster."""
    node = onnx.NodeProto(op_type=op_type, input=inputs, output=outputs)
    if name:
        node.name = name
    if attrs:
        node.attribute.extend(_attribute(k, v) for k, v in sorted(attrs.items()) if v is not None)
    return node


def normalize_axis(axis: int, rank: int) -> int:
    """``axis`` as a non-negative index into a tensor of ``rank``."""
    return axis + rank if axis < 0 else axis


class Emitter:
    """Builds replacement nodes for one node, valid at the opset ``opset``.

    Rules and step adapters ask it for facts about the node's inputs (type, rank, static dims,
    constant values), create nodes with fresh, collision-free names (carrying the original
    node's ``metadata_props``), and make constants (initializers in graphs, Constant nodes in
    functions).
    """

    def __init__(
        self,
        node: onnx.NodeProto,
        scope: Scope,
        source_version: int,
        opset: int,
        names: NameGenerator,
        facts: Facts,
        decompose: frozenset[str] = frozenset(),
    ) -> None:
        self.node = node
        self.scope = scope
        self.source_version = source_version
        #: The default-domain opset the replacement must be valid at.
        self.opset = opset
        self.decompose = decompose
        self.facts = facts
        self._names = names
        self.nodes: list[onnx.NodeProto] = []
        self.constants: list[onnx.TensorProto] = []
        #: The opset the whole conversion goes to (``opset`` is only the far side of one step).
        self.target = opset
        #: The version messages name the node by (the user's node's, while it crosses several steps).
        self.shown_version = source_version
        #: Refuse a loop over the node's data (:meth:`loop_form`): the caller's ``no_loops``.
        self.no_loops = False
        #: Who refuses the loop forms, when a runtime without Loop (``--for``) does, not ``--no-loops``.
        self.loops_refused_by = ""
        #: Whether the replacement is a loop over the node's data, and its trip count where static.
        self.looped = False
        self.loop_trips: int | None = None
        #: Fold a DequantizeLinear of constants the target cannot express: the caller's ``fold_dequantize``.
        self.fold_dequantize = False
        #: The opset the emitted nodes are valid at, where a form writes them at another than ``opset`` (a
        #: function body at its own opset): the engine takes them on from there. None: ``opset``.
        self.emitted_at: int | None = None

    # -- facts -------------------------------------------------------------------------------
    def version_of(self, op_type: str) -> int | None:
        """Since-version of ``op_type`` at the target opset (None if the op does not exist yet)."""
        return since_version(op_type, self.opset)

    def elem_type(self, name: str) -> int | None:
        """The element type of value ``name``, or None when unknown."""
        return self.facts.elem_type(name)

    def rank(self, name: str) -> int | None:
        """The rank of value ``name``, or None when unknown."""
        return self.facts.rank(name)

    def dims(self, name: str) -> list[int | None] | None:
        """The dims of value ``name`` (None for a dynamic dim), or None when the rank is unknown."""
        return self.facts.dims(name)

    def constant(self, name: str) -> np.ndarray | None:
        """The constant value of input ``name`` (see :mod:`lowerer.facts.constants`), or None."""
        return self.facts.value(name)

    def require_rank(self, name: str, why: str) -> int:
        """The rank of ``name``, or a refusal saying ``why`` it is needed."""
        r = self.rank(name)
        if r is None:
            self.refuse(f"the rank of input {name!r} is unknown and is needed {why}; "
                        "add shape information (value_info) for it")
        return r

    def require_elem_type(self, name: str, why: str) -> int:
        """The element type of ``name``, or a refusal saying ``why`` it is needed."""
        elem = self.elem_type(name)
        if elem is None:
            self.refuse(f"the element type of {name!r} is unknown, and {why}; add type information for it")
        return elem

    def refuse_bfloat16(self, name: str) -> None:
        """Refuse when ``name`` is (or may be) bfloat16: nothing takes bfloat16 below opset 13."""
        elem = self.elem_type(name)
        if elem is None:
            self.refuse(f"the element type of input {name!r} is unknown, and {self.node.op_type} below "
                        "version 13 does not accept bfloat16; add type information for it")
        if elem == onnx.TensorProto.BFLOAT16:
            self.refuse("bfloat16 input, and no op accepts bfloat16 below opset 13 (not even Cast); "
                        "choose a target opset >= 13")

    def refuse(self, reason: str) -> NoReturn:
        """Raise :class:`ConversionError` naming the node, its op and the versions."""
        n = self.node
        raise ConversionError(
            f"node {node_label(n)} ({n.op_type}-{self.shown_version}, in {self.scope.path}) "
            f"cannot be converted to opset {self.target}: {reason}",
            node=n, scope=self.scope.path,
        )

    def loop_form(self, form: str, trips: int | None, why: str, keep: int) -> None:
        """Say that the replacement is ``form``, a loop over the node's data; refuse it under ``no_loops``.

        Only an entry registered with that ``loop_form`` may call it (the engine checks). Args:
        ``trips``, the loop's trip count where static; ``why``, why no vectorized form exists (the
        refusal's words); ``keep``, the lowest opset the node keeps its op's own form at.
        """
        if self.no_loops and self.loops_refused_by:
            self.refuse(f"below opset {keep} it becomes {form} ({why}), and {self.loops_refused_by} has no Loop "
                        f"(its profile); choose a target opset >= {keep}, where {self.node.op_type} keeps its own "
                        "form")
        if self.no_loops:
            count = f"{trips} iterations" if trips is not None else "one iteration per update"
            self.refuse(f"below opset {keep} it becomes {form} ({count}: {why}), and --no-loops (API: "
                        f"no_loops=True) refuses such forms; choose a target opset >= {keep} (where "
                        f"{self.node.op_type} keeps its own form) or convert without --no-loops (to accept the loop)")
        self.looped = True
        self.loop_trips = trips

    # -- building ----------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new value name."""
        return self._names.fresh(hint)

    def op(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | None = None, **attrs: object) -> str:
        """Append a default-domain node and return its (first) output name."""
        base = self.node.output[0] if self.node.output else op_type
        outs = list(outputs) if outputs is not None else [self.fresh(f"{base}_{op_type}")]
        node_name = self._names.fresh(f"{self.node.name or self.node.op_type}/{op_type}")
        made = _make_node(op_type, list(inputs), outs, node_name, attrs)
        if self.node.metadata_props:
            made.metadata_props.extend(self.node.metadata_props)
        self.nodes.append(made)
        self.facts.add_node(made, self.opset)
        return outs[0]

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        """A constant value: an initializer in a graph, a Constant node in a function."""
        name = self.fresh(f"{self.node.output[0] if self.node.output else 'c'}_{hint}")
        array = np.asarray(value)
        tensor = numpy_helper.from_array(array, name)
        self.facts.add_constant(name, array, tensor.data_type)
        if self.scope.graph is not None:
            self.constants.append(tensor)
            return name
        if tensor.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16) \
                and self.opset < 9:
            self.refuse("a non-float constant is needed, and inside a function that needs Constant-9 "
                        "(opset >= 9)")
        self.op("Constant", [], [name], value=tensor)
        return name

    def may_be_empty(self, name: str) -> bool:
        """Whether value ``name`` can be an empty tensor at run time (some dim not statically > 0)."""
        dims = self.dims(name)
        return dims is None or any(d is None or d == 0 for d in dims)

    def pass_through_if_empty(self, x: str, start: int) -> None:
        """Run the nodes emitted since ``start`` only when ``x`` is not empty; else output ``x`` itself.

        For ops whose output is shaped and typed like ``x`` (an empty ``x`` gives that same empty
        tensor) when some emitted op (ArgMax, Reshape-13 ...) would fail or misread an empty input:
        ``If(Size(x) == 0)`` → ``Identity(x)``, else the nodes, moved into the else branch.
        """
        body = self.nodes[start:]
        del self.nodes[start:]
        (output,) = self.node.output
        elem = self.elem_type(x)
        bf16 = elem == onnx.TensorProto.BFLOAT16
        # onnxruntime has no Size kernel for bfloat16, and If has no bfloat16 before version 16:
        # count a float32 copy's elements, and below If-16 carry the result as float32 (exact).
        counted = self.op("Cast", [x], to=onnx.TensorProto.FLOAT) if bf16 else x
        via_float = bf16 and (self.version_of("If") or 0) < 16
        carried = onnx.TensorProto.FLOAT if via_float else elem

        def branch(nodes: list[onnx.NodeProto], label: str) -> onnx.GraphProto:
            result = self.fresh(f"{output}_{label}")
            for n in nodes:
                for k, o in enumerate(n.output):
                    if o == output:
                        n.output[k] = result
            if via_float and label == "full":
                widened = self.fresh(f"{output}_{label}_f32")
                nodes.append(helper.make_node("Cast", [result], [widened], name=self.fresh(f"{self.node.name}/f32"),
                                              to=onnx.TensorProto.FLOAT))
                result = widened
            info = (helper.make_tensor_value_info(result, carried, None) if carried is not None
                    else helper.make_empty_tensor_value_info(result))
            return helper.make_graph(nodes, self.fresh(label), [], [info])

        identity = helper.make_node("Identity", [counted if via_float else x], [output],
                                    name=self.fresh(f"{self.node.name or 'n'}/empty"))
        then_branch = branch([identity], "empty")
        else_branch = branch(body, "full")
        is_empty = self.op("Equal", [self.op("Size", [counted]), self.const(np.array(0, dtype=np.int64), "zero")])
        if not via_float:
            self.op("If", [is_empty], [output], then_branch=then_branch, else_branch=else_branch)
            return
        narrow = self.op("If", [is_empty], then_branch=then_branch, else_branch=else_branch)
        self.op("Cast", [narrow], [output], to=onnx.TensorProto.BFLOAT16)

    def copy_node(self, **attrs: int | None) -> onnx.NodeProto:
        """A copy of the original node with ``attrs`` set (None removes an attribute); appended."""
        node = onnx.NodeProto()
        node.CopyFrom(self.node)
        attributes = node.attribute
        for key, value in attrs.items():
            # Drop every attribute named ``key`` (the others keep their order), then append the new one.
            for i in range(len(attributes) - 1, -1, -1):
                if attributes[i].name == key:
                    del attributes[i]
            if value is not None:
                attributes.append(_attribute(key, value))
        self.nodes.append(node)
        return node


class Rule(abc.ABC):
    """One op family's conversion: what it matches, what it emits, when it refuses.

    A rule reads the node's meaning at its source version and writes that meaning for the
    target opset through the :class:`Emitter`. It returns None when the node can stay as is.
    """

    #: Short name used in reports.
    name: ClassVar[str]
    #: Default-domain ops the rule owns.
    op_types: ClassVar[tuple[str, ...]]
    #: The since-versions of the schemas the rule understands.
    versions: ClassVar[tuple[int, ...]]
    #: Set for rules that only act when their name is in ``decompose``.
    decomposition: ClassVar[str | None] = None
    #: Whether its float arithmetic may round differently from the op's kernel (then judged by the
    #: expansion's ulp budget, like a function body), else exact by construction.
    budgeted: ClassVar[bool] = False

    #: Pairs (source since-version, target since-version) where the node means the same with the
    #: same attributes: it stays as it is (only the opset import changes), which is no rewrite.
    same_meaning: ClassVar[frozenset[tuple[int, int]]] = frozenset()

    @abc.abstractmethod
    def rewrite(self, em: Emitter) -> None:
        """Emit the replacement of ``em.node`` into ``em`` (or refuse through ``em.refuse``)."""
