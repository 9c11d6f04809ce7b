"""Exact forms a backend profile picks per node (``--for BACKEND``), beyond the decompositions.

Each is a :class:`~lowerer.steps.emitter.Rule` the step engine applies to the nodes a profile names
(see :mod:`lowerer.backends`); none is applied by ``--decompose``, so ``--decompose all`` keeps
its meaning. Together with the decompositions (``hardmax``, ``globalmaxpool``) and function-body
expansion they are the forms of :data:`lowerer.backends.profile.REWRITES`:

* :class:`SelectLastIndexForm` (``argmax-flip``): ArgMax/ArgMin with ``select_last_index=1``
  as the reversed axis, the first extremum, and the index mapped back (the version rule's
  emulation, here at any target opset);
* :class:`LastAxisForm` (``last-axis``): Hardmax/Softmax/LogSoftmax run on the last axis: a
  ``Transpose`` around the op for the one-axis meaning (version 13), ``Flatten`` → op on the 2-D
  view → ``Reshape`` back for the coerced-to-2-D meaning (versions 1, 11);
* :class:`ConstantInputsForm` (``constant-inputs``): the inputs a backend wants constant (a
  Reshape's shape, Slice's parameters, ReduceMax's axes, OneHot's depth) written as initializers
  where :mod:`lowerer.facts.constants` proves their value (a shape computed from static dims ...);
* :class:`GeluMulForm` (``gelu-mul``): Gelu-20 (``approximate="none"``) as ``0.5 x (1 + Erf(x * (1/sqrt 2)))``;
* :class:`GeluTanhCubeForm` (``gelu-tanh-cube``): Gelu-20 (``approximate="tanh"``) as its function body with
  ``x * x * x`` for ``Pow(x, 3)``;
* :class:`WhereConstantForm` (``where-constant``): Where whose condition is a constant all true or all false as
  the branch it takes;
* :class:`GatherSlicesForm` (``gather-slices``): Gather with constant indices (rank >= 1) as one Slice per index,
  concatenated along the axis.

IsNaN's forms are in :mod:`lowerer.rules.isnan_forms`, Attention's in :mod:`lowerer.rules.attention_forms`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from lowerer.core.errors import ConversionError
from lowerer.model_io.naming import node_label
from lowerer.model_io.node_attributes import attribute_value, int_attribute
from lowerer.rules.argmax import ArgExtremumRule
from lowerer.rules.hardmax import CoercedAxisRule, read_axis_meaning
from lowerer.steps.emitter import Emitter, Rule, normalize_axis

__all__ = ["ConstantInputsForm", "GatherSlicesForm", "GeluMulForm", "GeluTanhCubeForm",
           "LastAxisForm", "SelectLastIndexForm", "WhereConstantForm"]


class SelectLastIndexForm(ArgExtremumRule):
    """``ArgMax``/``ArgMin`` (12, 13) with ``select_last_index=1`` → the op without it, exactly.

    Cases:

    1. a static size along the axis: ``Gather`` with a reversed index table, the op (first
       extremum), ``Gather`` of the index from the same table;
    2. a dynamic size (opset >= 10): ``Slice`` with step -1, the op, ``(n - 1) - i`` with ``n`` from
       ``Shape``; below opset 10 refused;
    3. bfloat16 below opset 13 refused; a negative axis below opset 11 made non-negative (needs the rank).

    A node without ``select_last_index=1`` is taken to the target as the version rule does.
    """

    name = "argmax-flip"
    decomposition = "argmax-flip"

    def rewrite(self, em: Emitter) -> None:
        """Emit the emulation of ``select_last_index=1`` for ``em.node``."""
        node = em.node
        x = node.input[0]
        select_last = int_attribute(node, "select_last_index", 0) if em.source_version >= 12 else 0
        if not select_last:
            super().rewrite(em)
            return
        axis = int_attribute(node, "axis", 0)
        assert axis is not None
        target = em.version_of(node.op_type)
        assert target is not None
        if target < 13 <= em.source_version:
            em.refuse_bfloat16(x)
        if axis < 0 and em.opset < 11:
            axis = normalize_axis(axis, em.require_rank(x, "to make the negative axis non-negative"))
        self._emulate_select_last(em, x, axis, int_attribute(node, "keepdims", 1))


class LastAxisForm(CoercedAxisRule):
    """``Hardmax``/``Softmax``/``LogSoftmax`` (1, 11, 13) → the same op on the last axis, at the target.

    Cases:

    1. one-axis meaning (13) at a target >= 13, axis not last: ``Transpose`` moving the axis last →
       op(``axis=-1``) → inverse ``Transpose`` (needs the rank, else refused); at a target below 13 the
       version rule's form, which is that same ``Transpose`` form;
    2. coerced-to-2-D meaning (1, 11), axis not last: at a target >= 13 the version rule's form
       (``Flatten`` → op(``axis=-1``) → ``Reshape`` to ``Shape(x)``); below 13, ``Flatten(axis)`` →
       op(``axis=1``, the last axis of the 2-D view) → ``Reshape`` to ``Shape(x)`` (opset >= 5; a
       possibly empty ``x`` through ``If(Size(x) == 0)``, as Reshape below 14 reads a 0 as "copy",
       except where only the first dim may be 0 and ``axis >= 1``: that 0 copies a 0);
    3. an axis already last: the node as the version rule takes it.
    """

    name = "last-axis"
    decomposition = "last-axis"

    def rewrite(self, em: Emitter) -> None:
        """Emit the last-axis form of ``em.node``."""
        node = em.node
        x = node.input[0]
        meaning = read_axis_meaning(node, em.source_version)
        target = em.version_of(node.op_type)
        assert target is not None
        if target < 13 <= em.source_version:
            em.refuse_bfloat16(x)
        if not meaning.flatten:
            if target < 13:
                self._from_single_axis(em, x, meaning.axis, target)
                return
            rank = em.require_rank(x, f"to move axis {meaning.axis} last")
            axis = normalize_axis(meaning.axis, rank)
            if axis == rank - 1:
                em.copy_node(axis=meaning.axis)
                return
            perm = [d for d in range(rank) if d != axis] + [axis]
            moved = em.op("Transpose", [x], perm=perm)
            inner = em.fresh(f"{node.output[0]}_last")
            copy = em.copy_node(axis=-1)
            copy.input[0] = moved
            copy.output[0] = inner
            em.op("Transpose", [inner], list(node.output), perm=[perm.index(d) for d in range(rank)])
            return
        axis = meaning.axis
        known_rank = em.rank(x)
        last = axis == -1 or (known_rank is not None and normalize_axis(axis, known_rank) == known_rank - 1)
        if target >= 13 or last:
            self._from_flatten(em, x, axis, target)
            return
        if axis < 0 and em.opset < 11:
            axis = normalize_axis(axis, em.require_rank(x, "for Flatten below opset 11"))
        if (em.version_of("Reshape") or 0) < 5:
            em.refuse("the 2-D view must be reshaped back to Shape(x), and Reshape below opset 5 takes a static "
                      "shape attribute; target opset >= 5")
        shape = em.op("Shape", [x])
        flat = em.op("Flatten", [x], axis=axis)
        inner = em.fresh(f"{node.output[0]}_2d")
        copy = em.copy_node(axis=1)
        copy.input[0] = flat
        copy.output[0] = inner
        self._reshape_13(em, x, inner, shape, axis)


class ConstantInputsForm(Rule):
    """Any op → the same node with the listed inputs written as literal constants, at the node's own opset.

    An input that is not an initializer or a Constant's output, but whose value
    :mod:`lowerer.facts.constants` proves (a shape built from static dims, a folded Concat of constants
    ...), becomes an initializer (a Constant node in a function) holding that value, in the input's
    element type. An input whose value is not provably constant is refused: it is computed at run
    time and no exact form makes it a constant. The engine then takes the node on to the target.

    Args:
        indices: the input positions the backend wants constant.
        backend: the backend's name, for messages.
    """

    name = "constant-inputs"
    op_types = ()
    versions = ()
    decomposition = "constant-inputs"

    def __init__(self, indices: tuple[int, ...], backend: str) -> None:
        self.indices = indices
        self.backend = backend

    def rewrite(self, em: Emitter) -> None:
        """Emit the node with constant inputs."""
        node = em.node
        copy = em.copy_node()
        for index in self.indices:
            if index >= len(node.input) or not node.input[index]:
                continue
            name = node.input[index]
            if em.facts.is_literal(name):
                continue
            value = em.constant(name)
            if value is None or value.dtype == object:
                raise ConversionError(
                    f"node {node_label(node)} ({node.op_type}-{em.source_version}, in {em.scope.path}): {self.backend} "
                    f"wants its input {index} ({name!r}) constant, and lowerer cannot prove it constant (it is "
                    "computed at run time from values not known before)", node=node, scope=em.scope.path)
            elem = em.elem_type(name)
            if elem is not None:
                value = np.asarray(value).astype(onnx.helper.tensor_dtype_to_np_dtype(elem), copy=False)
            copy.input[index] = em.const(np.asarray(value), f"const{index}")


class GeluMulForm(Rule):
    """``Gelu-20`` with ``approximate="none"`` → ``Mul(Mul(x, 0.5), Add(Erf(Mul(x, 1/sqrt 2)), 1))``.

    The function body divides by ``Sqrt(2)``; OpenVINO 2023.0's CPU plugin fuses that pattern into a kernel
    whose Erf is approximated (off by 1.8e-5 x scale over [-6, 6], measured), and computes this form's plain
    Erf right. ``x * (1/sqrt 2)`` rounds differently from ``x / sqrt 2`` by up to an ulp of the argument:
    budgeted (judged by the expansion's ulp budget). ``approximate="tanh"`` is the function body.
    Erf takes float16, float, double and bfloat16; other types are refused.
    """

    name = "gelu-mul"
    op_types = ("Gelu",)
    versions = (20,)
    decomposition = "gelu-mul"
    budgeted = True

    def rewrite(self, em: Emitter) -> None:
        """Emit the Mul form of ``em.node`` (the tanh approximation as its function body)."""
        node, x = em.node, em.node.input[0]
        erf_types = _ERF_TYPES if em.target >= 13 else _ERF_TYPES - {onnx.TensorProto.BFLOAT16}
        dtype = _gelu_input(em, self.name, "none", erf_types, "Erf", "float16, float, double, and bfloat16 from "
                                                                   "opset 13")
        scaled = em.op("Mul", [x, em.const(np.array(1 / np.sqrt(2), dtype), "rsqrt2")])
        phi = em.op("Add", [em.op("Erf", [scaled]), em.const(np.array(1, dtype), "one")])
        half = em.op("Mul", [x, em.const(np.array(0.5, dtype), "half")])
        em.op("Mul", [half, phi], list(node.output))


class GeluTanhCubeForm(Rule):
    """``Gelu-20`` with ``approximate="tanh"`` → its function body with ``Mul(Mul(x, x), x)`` for ``Pow(x, 3)``.

    ``0.5 x (1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, the body's order of operations, the cube multiplied
    out: ncnn computes ``Pow`` with an exponent other than 2 as ``exp(e log x)``, wrong on every negative
    base (measured). Two roundings of the cube against one of ``Pow``: budgeted (judged by the expansion's
    ulp budget). Types: those of Tanh and Mul at the target (float16, float, double).
    """

    name = "gelu-tanh-cube"
    op_types = ("Gelu",)
    versions = (20,)
    decomposition = "gelu-tanh-cube"
    budgeted = True

    def rewrite(self, em: Emitter) -> None:
        """Emit the body of ``em.node`` with the cube as two products."""
        node, x = em.node, em.node.input[0]
        dtype = _gelu_input(em, self.name, "tanh", _TANH_TYPES, "Tanh", "float16, float, double")
        root = em.op("Sqrt", [em.const(np.array(2 / np.pi, dtype), "two_over_pi")])
        cubed = em.op("Mul", [em.op("Mul", [x, x]), x])
        inner = em.op("Sum", [x, em.op("Mul", [em.const(np.array(0.044715, dtype), "c0"), cubed])])
        phi = em.op("Sum", [em.const(np.array(1, dtype), "one"), em.op("Tanh", [em.op("Mul", [root, inner])])])
        half = em.op("Mul", [em.const(np.array(0.5, dtype), "half"), x])
        em.op("Mul", [half, phi], list(node.output))


class WhereConstantForm(Rule):
    """``Where(c, a, b)`` whose condition ``c`` is provably constant and all true (all false) → ``a`` (``b``), exactly.

    ncnn has no Where layer (pnnx writes ``torch.where``, measured); Attention-23's body guards fully masked rows
    with ``Where(ReduceMax(bias) == -inf, 0, Softmax(...))``, whose condition folds to a constant all false when
    the bias is a constant (a causal mask or none). The branch passes through ``Identity`` where its shape is the
    output's, else ``Expand`` to the output's static shape; a mixed condition, or a broadcast output shape not
    static, is refused.
    """

    name = "where-constant"
    op_types = ("Where",)
    versions = (9, 16)
    decomposition = "where-constant"

    def rewrite(self, em: Emitter) -> None:
        """Emit the branch the constant condition takes."""
        node = em.node
        cond = em.constant(node.input[0])
        if cond is None or np.asarray(cond).dtype == object or np.asarray(cond).size == 0 or \
                len(set(np.asarray(cond).astype(bool).ravel().tolist())) != 1:
            em.refuse("the where-constant form needs a condition that is a constant all true or all false")
        taken = node.input[1] if bool(np.asarray(cond).ravel()[0]) else node.input[2]
        out, branch = em.dims(node.output[0]), em.dims(taken)
        if out is not None and branch is not None and list(out) == list(branch) and None not in out:
            em.op("Identity", [taken], list(node.output))
            return
        if out is None or None in out:
            em.refuse("the where-constant form needs the output's shape static where the taken branch is broadcast")
        em.op("Expand", [taken, em.const(np.array(out, np.int64), "shape")], list(node.output))


class GatherSlicesForm(Rule):
    """``Gather`` with constant indices of rank >= 1 → one ``Slice`` of length 1 per index, concatenated, exactly.

    pnnx writes a Gather whose indices are a constant list as one select of a single index (the axis dropped:
    an output of shape (2, 3) for (2, 3, 3)), whatever their sign, and fails on a 2-D list; a scalar index is
    right there (measured). Each index ``i`` is ``Slice(x, [i], [i + 1], [axis])`` (``-1`` up to the int64
    maximum), the parts concatenated along the axis; indices of rank >= 2 are then reshaped to
    ``x.shape[:axis] + indices.shape + x.shape[axis + 1:]`` (static dims after the axis needed). An index out of
    ``[-dim, dim)`` over a static dim is refused (the original fails on it); Slice needs opset >= 10.
    """

    name = "gather-slices"
    op_types = ("Gather",)
    versions = (1, 11, 13)
    decomposition = "gather-slices"

    def rewrite(self, em: Emitter) -> None:
        """Emit the slices of ``em.node``'s constant indices, concatenated."""
        node = em.node
        x, indices = node.input[0], em.constant(node.input[1])
        if indices is None or np.asarray(indices).dtype == object:
            em.refuse("the gather-slices form needs the indices constant")
        assert indices is not None
        values = np.asarray(indices).astype(np.int64)
        if values.ndim == 0 or values.size == 0:
            em.refuse("the gather-slices form writes a non-empty list of indices (a scalar index is Gather's own)")
        if (em.version_of("Slice") or 0) < 10:
            em.refuse("the gather-slices form writes Slice with inputs (opset >= 10)")
        rank = em.require_rank(x, "to place the axis")
        axis = normalize_axis(int_attribute(node, "axis", 0) or 0, rank)
        dims = em.dims(x)
        size = dims[axis] if dims is not None else None
        if size is not None and ((values < -size) | (values >= size)).any():
            em.refuse(f"an index is outside [-{size}, {size}) along axis {axis} (the original fails on it)")
        axes = em.const(np.array([axis], np.int64), "axes")
        top = np.iinfo(np.int64).max
        parts = [em.op("Slice", [x, em.const(np.array([i], np.int64), "start"),
                                 em.const(np.array([top if i == -1 else i + 1], np.int64), "end"), axes])
                 for i in values.ravel().tolist()]
        if values.ndim == 1:
            if len(parts) == 1:
                em.op("Identity", parts, list(node.output))
            else:
                em.op("Concat", parts, list(node.output), axis=axis)
            return
        after = dims[axis + 1:] if dims is not None else [None]
        if None in after:
            em.refuse("the gather-slices form reshapes indices of rank >= 2 and needs the dims after the axis static")
        joined = parts[0] if len(parts) == 1 else em.op("Concat", parts, axis=axis)
        shape = [0] * axis + list(values.shape) + [int(d) for d in after if d is not None]
        em.op("Reshape", [joined, em.const(np.array(shape, np.int64), "shape")], list(node.output))


def _gelu_input(em: Emitter, form: str, approximate: str, types: frozenset[int], op: str, said: str) -> np.dtype[Any]:
    """The numpy type of a Gelu node's input, refusing another ``approximate`` or a type ``op`` does not take."""
    found = attribute_value(em.node, "approximate")
    if (found.decode() if isinstance(found, bytes) else found or "none") != approximate:
        em.refuse(f"the {form} form writes approximate={approximate!r} only (the node has {found!r})")
    elem = em.elem_type(em.node.input[0])
    if elem not in types:
        shown = "unknown" if elem is None else onnx.TensorProto.DataType.Name(elem)
        em.refuse(f"the {form} form needs {op} on the input's type ({shown}): {said}")
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem))


#: The element types Tanh takes (through opset 23).
_TANH_TYPES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE})

#: The element types Erf takes (bfloat16 from opset 13).
_ERF_TYPES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                        onnx.TensorProto.BFLOAT16})
