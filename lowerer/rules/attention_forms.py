"""Forms of Attention (23, 24) a backend profile picks (``--for BACKEND``), each for a runtime's build.

The function body written so that a runtime builds it, or the node given inputs it reads:

* :class:`AttentionScaleAfterForm` (``attention-scale-after``): the function body with the scale applied to ``Q Kᵀ``
  (one Mul after the MatMul), not ``sqrt(scale)`` to ``Q`` and to ``Kᵀ`` (rknn-toolkit2's build);
* :class:`AttentionFloatMaskForm` (``attention-float-mask``): the node with a bool ``attn_mask`` given the additive
  float mask its function body makes of it, ``Where(mask, 0, -inf)`` in Q's type (tract's build);
* :class:`AttentionTriluIsInfForm` (``attention-trilu-isinf``): the function body with its causal mask written as
  ``Trilu`` of a -inf fill of the bias's shape, not compared ``Range`` rows and columns, and the guard for a row
  whose every key is masked computed from ``IsInf`` of the bias, not from its ``ReduceMax`` (TVM's Relax
  frontend: its VM codegen fails on the first, its ReduceMax of a row of -inf gives the lowest float).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from lowerer.model_io.node_attributes import int_attribute
from lowerer.steps.emitter import Emitter, Rule

__all__ = ["AttentionFloatMaskForm", "AttentionScaleAfterForm", "AttentionTriluIsInfForm"]


class _BodyForm(Rule):
    """Attention (23, 24) as its function body (at the body's own opset), then reworked by :meth:`rework`."""

    op_types = ("Attention",)
    versions = (23, 24)
    budgeted = True

    def rewrite(self, em: Emitter) -> None:
        """Emit the body of ``em.node``, then rework it."""
        from lowerer.steps.expansion import expand
        from lowerer.steps.registry import REGISTRY

        em.emitted_at = expand(em, REGISTRY.made_rewrites)
        self.rework(em, em.emitted_at)

    def rework(self, em: Emitter, opset: int) -> None:
        """Change the body in ``em.nodes`` (valid at ``opset``)."""
        raise NotImplementedError


class AttentionScaleAfterForm(_BodyForm):
    """``Attention`` (23, 24) → its function body with ``MatMul(Q, Kᵀ) * scale`` for ``MatMul(Q √s, Kᵀ √s)``.

    onnx's body scales ``Q`` and ``Kᵀ`` each by ``sqrt(scale)`` before their product (against overflow in
    low precision); this form writes the product first and one ``Mul`` by the body's own ``scale`` value after
    it (cast as the body casts its square root), then the rest of the body as it is (softcap, bias, mask,
    Softmax, grouped-query repeat). rknn-toolkit2 2.5.0's build fails on a body whose product reaches the
    Softmax with no Mul after it (its fusion rule ``fuse_exmatmul_add_mul_exsoftmax13_exmatmul_to_sdpa``:
    ``IndexError``; measured on non-causal Attention at batch 1, where the body's bias Add of zeros is dropped)
    and builds this one. The same value in real arithmetic, rounded otherwise: budgeted (judged by the
    expansion's ulp budget). The body is emitted at its own opset (:attr:`Emitter.emitted_at`); a body
    without the two scaling Muls of one ``Sqrt`` (another onnx) is refused.
    """

    name = "attention-scale-after"
    decomposition = "attention-scale-after"

    def rework(self, em: Emitter, opset: int) -> None:
        """Move the scale after ``Q Kᵀ``."""
        _scale_after_product(em, opset)



#: Q's element types Attention (23, 24) takes, each holding 0 and -inf exactly.
_ATTENTION_TYPES = frozenset({onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE,
                              onnx.TensorProto.BFLOAT16})


class AttentionFloatMaskForm(Rule):
    """``Attention`` (23, 24) with a bool ``attn_mask`` → the same node given ``Where(mask, 0, -inf)``, exactly.

    onnx's function body turns a bool mask into that additive mask first (``Where(attn_mask, ScalarZero,
    FloatNegInf)``, float32, cast to Q's type with the rest of the bias; Attention-24 pads a shorter mask with -inf
    after it) and reads a float mask as it is: the same bias either way, 0 and -inf being exact in every type Q
    takes (its fully-masked-row guard, ``ReduceMax(bias) == -inf``, reads the same bias too). tract 0.23.9 fails
    to build an Attention whose mask is bool ("Mask must be floating point", its FlashSDPA codegen) and runs the
    float one (a row with every key masked comes out NaN there, as for a float mask of the user's: tract's own,
    which its profile says as a departure). Refused where the mask's or Q's type is not known to fit.
    """

    name = "attention-float-mask"
    op_types = ("Attention",)
    versions = (23, 24)
    decomposition = "attention-float-mask"

    def rewrite(self, em: Emitter) -> None:
        """Emit ``Where`` of the mask and the node reading it."""
        node = em.node
        mask = node.input[3] if len(node.input) > 3 else ""
        if not mask or em.elem_type(mask) != onnx.TensorProto.BOOL:
            em.refuse("the attention-float-mask form needs an attn_mask (input 3) known to be bool")
        elem = em.elem_type(node.input[0])
        if elem not in _ATTENTION_TYPES:
            shown = "unknown" if elem is None else onnx.TensorProto.DataType.Name(elem)
            em.refuse(f"the attention-float-mask form writes the mask in Q's type, which is {shown} (float16, "
                      "float, double or bfloat16 needed)")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
        additive = em.op("Where", [mask, em.const(np.zeros((), dtype), "zero"),
                                   em.const(np.full((), -np.inf, dtype), "neg_inf")])
        em.copy_node().input[3] = additive

def _scale_after_product(em: Emitter, opset: int) -> None:
    """In ``em.nodes`` (a body at ``opset``): ``MatMul(Mul(q, c), Mul(k, c))`` as ``Mul(MatMul(q, k), [Cast] s)``.

    ``c`` is ``[Cast] Sqrt(s)``; the scaling nodes nothing else reads are dropped (and so what only they read).
    """
    nodes = em.nodes
    producer = {o: n for n in nodes for o in n.output if o}
    for at, product in enumerate(nodes):
        if product.op_type != "MatMul":
            continue
        left, right = producer.get(product.input[0]), producer.get(product.input[1])
        if left is None or right is None or left.op_type != "Mul" or right.op_type != "Mul" \
                or left.input[1] != right.input[1]:
            continue
        root = producer.get(left.input[1])
        cast = root if root is not None and root.op_type == "Cast" else None
        if cast is not None:
            root = producer.get(cast.input[0])
        if root is None or root.op_type != "Sqrt":
            continue
        base = product.output[0]
        raw = em.fresh(f"{base}_unscaled")
        label = em.node.name or em.node.op_type
        made = [onnx.helper.make_node("MatMul", [left.input[0], right.input[0]], [raw],
                                      name=em.fresh(f"{label}/MatMul"))]
        scale = root.input[0]
        if cast is not None:
            scale = em.fresh(f"{base}_scale")
            made.append(onnx.helper.make_node("Cast", [root.input[0]], [scale], name=em.fresh(f"{label}/Cast"),
                                              to=int_attribute(cast, "to", onnx.TensorProto.FLOAT)))
        made.append(onnx.helper.make_node("Mul", [raw, scale], [base], name=em.fresh(f"{label}/Mul")))
        _splice(em, at, made, opset, [left, right])
        return
    em.refuse("the attention-scale-after form found no MatMul of Q and Kᵀ each scaled by one Sqrt in the "
              "function body (another onnx's body)")


class AttentionTriluIsInfForm(_BodyForm):
    """``Attention`` (23, 24) → its function body, the causal mask as ``Trilu``, the masked-row guard by ``IsInf``.

    onnx's body builds the causal bias as ``Where(Less(Range(q)[:, None] + past, Range(kv)[None, :]), -inf, 0)``,
    the ranges' lengths gathered from the bias's shape ``[q, kv]`` at run time; TVM 0.27's Relax frontend gives
    such a tensor a shape it cannot name, and its VM codegen fails on the Add of it to the bias ("CodeGenVM cannot
    emit this Relax operator directly ... R.add", measured on decoder.dynamo.opset23). This form writes that Where
    as ``Trilu(ConstantOfShape(shape, -inf), k=past + 1, upper=1)``: -inf exactly where column > row + past, +0
    elsewhere, the same values (a body without the causal pattern, ``is_causal=0``, has none to write; one whose
    ``past`` length is not a constant keeps its Where). And it writes the body's guard for a row whose every key is
    masked, ``Equal(ReduceMax(bias, -1), -inf)``, as ``Cast(ReduceMin(Cast(IsInf(bias, positive 0)), -1), bool)``:
    true exactly where every element of the row is -inf (an empty row: ReduceMax gives -inf, ReduceMin +inf, both
    true). TVM 0.27's ReduceMax of a row of -inf gives the lowest float (-3.4e38, measured), so the guard missed
    and a wholly masked row came out NaN where onnx's body gives 0; its ReduceMin of 0 and 1 is right. The values
    are the body's; judged by the expansion's ulp budget as the body is.
    """

    name = "attention-trilu-isinf"
    decomposition = "attention-trilu-isinf"

    def rework(self, em: Emitter, opset: int) -> None:
        """Write the causal Where as Trilu and the masked-row guard by IsInf."""
        _causal_as_trilu(em, opset)
        _rows_by_isinf(em, opset)


def _rows_by_isinf(em: Emitter, opset: int) -> None:
    """In ``em.nodes``: ``Equal(ReduceMax(b, axes), -inf)`` (the max read by nothing else) by ReduceMin of IsInf."""
    nodes = em.nodes
    producer = {o: n for n in nodes for o in n.output if o}
    readers: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    for at, equal in enumerate(nodes):
        top = producer.get(equal.input[0]) if equal.op_type == "Equal" else None
        ninf = em.constant(equal.input[1]) if top is not None else None
        if top is None or top.op_type != "ReduceMax" or ninf is None or np.asarray(ninf).size != 1 or \
                not np.isneginf(ninf).all() or readers.get(top.output[0], 0) != 1 or \
                any(a.name == "noop_with_empty_axes" and a.i for a in top.attribute):
            continue
        label = em.node.name or em.node.op_type
        inf, ones, least = (em.fresh(f"{equal.output[0]}_{s}") for s in ("isinf", "ones", "least"))
        keep = [a for a in top.attribute if a.name == "keepdims"]
        made = [onnx.helper.make_node("IsInf", [top.input[0]], [inf], name=em.fresh(f"{label}/IsInf"),
                                      detect_positive=0),
                onnx.helper.make_node("Cast", [inf], [ones], name=em.fresh(f"{label}/Cast"),
                                      to=onnx.TensorProto.FLOAT),
                onnx.helper.make_node("ReduceMin", [ones, *top.input[1:]], [least],
                                      name=em.fresh(f"{label}/ReduceMin")),
                onnx.helper.make_node("Cast", [least], list(equal.output), name=em.fresh(f"{label}/Cast"),
                                      to=onnx.TensorProto.BOOL)]
        made[2].attribute.extend(keep)
        _splice(em, at, made, opset, [top])
        return


def _range_length(em: Emitter, producer: dict[str, onnx.NodeProto], name: str, axis: int) -> tuple[str, str] | None:
    """``(shape, past)`` of ``[Add(] Unsqueeze(Range(0, Gather(shape, 1 - axis), 1), axis) [, past)]``.

    ``axis`` 1: the rows ``Range(q)[:, None]`` plus ``past`` (an Add); 0: the columns ``Range(kv)[None, :]`` (past
    ``""``). None where the nodes are not so, their constants included.
    """
    node = producer.get(name)
    past = ""
    if axis == 1:
        if node is None or node.op_type != "Add":
            return None
        past, node = node.input[1], producer.get(node.input[0])
    if node is None or node.op_type != "Unsqueeze" or not _is(em, node.input[1], axis):
        return None
    ranged = producer.get(node.input[0])
    if ranged is None or ranged.op_type != "Range" or not _is(em, ranged.input[0], 0) or \
            not _is(em, ranged.input[2], 1):
        return None
    gather = producer.get(ranged.input[1])
    if gather is None or gather.op_type != "Gather" or not _is(em, gather.input[1], 1 - axis):
        return None
    return gather.input[0], past


def _is(em: Emitter, name: str, value: int) -> bool:
    """``name`` is a constant of one element equal to ``value``."""
    got = em.constant(name) if name else None
    return got is not None and np.asarray(got).size == 1 and int(np.asarray(got).reshape(())) == value


def _causal_as_trilu(em: Emitter, opset: int) -> None:
    """In ``em.nodes`` (a body at ``opset``): the causal ``Where(Less(rows + past, cols), -inf, 0)`` as Trilu."""
    nodes = em.nodes
    producer = {o: n for n in nodes for o in n.output if o}
    for at, where in enumerate(nodes):
        less = producer.get(where.input[0]) if where.op_type == "Where" else None
        if less is None or less.op_type != "Less":
            continue
        rows, cols = _range_length(em, producer, less.input[0], 1), _range_length(em, producer, less.input[1], 0)
        fill, zero = em.constant(where.input[1]), em.constant(where.input[2])
        past = em.constant(rows[1]) if rows is not None else None
        if rows is None or cols is None or rows[0] != cols[0] or fill is None or zero is None or past is None or \
                np.asarray(fill).size != 1 or not np.isneginf(fill).all() or np.asarray(zero).size != 1 or \
                np.asarray(zero).reshape(()) != 0 or np.signbit(zero).any() or np.asarray(past).size != 1:
            continue
        label = em.node.name or em.node.op_type
        full, k = em.fresh(f"{where.output[0]}_fill"), em.fresh(f"{where.output[0]}_k")
        value = numpy_helper.from_array(np.asarray(fill).reshape(1), "value")
        made = [onnx.helper.make_node("Constant", [], [k], name=em.fresh(f"{label}/Constant"),
                                      value=numpy_helper.from_array(np.array(int(np.asarray(past).reshape(())) + 1,
                                                                             np.int64), k)),
                onnx.helper.make_node("ConstantOfShape", [rows[0]], [full], name=em.fresh(f"{label}/ConstantOfShape"),
                                      value=value),
                onnx.helper.make_node("Trilu", [full, k], list(where.output), name=em.fresh(f"{label}/Trilu"), upper=1)]
        _splice(em, at, made, opset, [less])
        return


def _splice(em: Emitter, at: int, made: list[onnx.NodeProto], opset: int, seeds: list[onnx.NodeProto]) -> None:
    """``made`` for ``em.nodes[at]`` (given the node's metadata, known to the facts at ``opset``), seeds swept.

    ``seeds``, and what only they read, are dropped where nothing reads them (:func:`_drop_dead`).
    """
    for n in made:
        if em.node.metadata_props:
            n.metadata_props.extend(em.node.metadata_props)
        em.facts.add_node(n, opset)
    em.nodes[at:at + 1] = made
    _drop_dead(em, seeds)


def _drop_dead(em: Emitter, seeds: list[onnx.NodeProto]) -> None:
    """``seeds`` dropped from ``em.nodes`` where nothing reads what they make, then so their producers, transitively."""
    outputs = set(em.node.output)
    work = list(seeds)
    while work:
        node = work.pop()
        if not any(n is node for n in em.nodes):
            continue
        read = {i for n in em.nodes if n is not node for i in n.input}
        if any(o in read or o in outputs for o in node.output if o):
            continue
        em.nodes[:] = [n for n in em.nodes if n is not node]
        producer = {o: n for n in em.nodes for o in n.output if o}
        work.extend(producer[i] for i in node.input if i in producer)
