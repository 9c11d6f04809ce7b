"""The rule catalogue: one module per op family, each registering its entries in :data:`REGISTRY`.

Importing this package registers everything, by the plain imports below (a module not imported
here registers nothing: ``tests/test_registry.py`` checks every module of the package is):

* owned rules: :mod:`.argmax` (ArgMax/ArgMin 1, 11, 12, 13), :mod:`.hardmax` (Hardmax/Softmax/LogSoftmax
  1, 11, 13);
* decompositions: :mod:`.hardmax_decomposition` (Hardmax → ArgMax + one-hot), :mod:`.global_max_pool`
  (GlobalMaxPool → ReduceMax);
* backend forms: :mod:`.backend_forms` (``argmax-flip``, ``last-axis``, ``constant-inputs``), :mod:`.topk_forms`
  (``argmax-topk``, ``hardmax-topk``, ``shape-slice``), :mod:`.reduce_forms` (``argmax-reduce``, ``hardmax-reduce``),
  :mod:`.einsum` (``einsum-diagonal``, ``einsum-pairwise``), :mod:`.backend_forms` (``gelu-mul``, ``gelu-tanh-cube``,
  ``where-constant``, ``gather-slices``), :mod:`.attention_forms` (``attention-scale-after``, ``attention-float-mask``,
  ``attention-trilu-isinf``), :mod:`.isnan_forms` (``isnan-equal``,
  ``isnan-ordered``), :mod:`.constant_of_shape` (``constant-fill``,
  ``explicit-fill``);
* lowerings (ops with no function body written with older ops, for targets that lack them): :mod:`.trilu`,
  :mod:`.mod`, :mod:`.cumsum`, :mod:`.constant_of_shape`, :mod:`.gather_elements`, :mod:`.einsum`,
  :mod:`.expand_where`, :mod:`.deform_conv`, GridSample-16's in :mod:`.grid_sample` (beside its 16 ↔ 20
  adapter), and Resize's in :mod:`.resize`;
* version-step adapters and documented refusals: :mod:`.attention`, :mod:`.cast`, :mod:`.control_flow`,
  :mod:`.elementwise`, :mod:`.grid_sample`, :mod:`.group_norm`, :mod:`.normalization`, :mod:`.quantization`,
  :mod:`.reduction`, :mod:`.resize`, :mod:`.scan`, :mod:`.scatter`, :mod:`.shape_ops`, :mod:`.tensor_ops`,
  :mod:`.upsample`, :mod:`.refusals`.

The generic crossing and the function-body expansion are schema-derived and live with the engine
(:mod:`lowerer.steps`).
"""

from __future__ import annotations

from lowerer.rules import (  # noqa: F401  (imported to register their adapters)
    attention,
    cast,
    constant_of_shape,
    control_flow,
    cumsum,
    deform_conv,
    dft,
    einsum,
    elementwise,
    expand_where,
    gather_elements,
    grid_sample,
    group_norm,
    mod,
    normalization,
    quantization,
    reduction,
    refusals,
    resize,
    scan,
    scatter,
    shape_ops,
    tensor_ops,
    trilu,
    upsample,
    widening,
)
from lowerer.rules.argmax import ArgExtremumRule
from lowerer.rules.attention_forms import AttentionFloatMaskForm, AttentionScaleAfterForm, AttentionTriluIsInfForm
from lowerer.rules.backend_forms import (
    ConstantInputsForm,
    GatherSlicesForm,
    GeluMulForm,
    GeluTanhCubeForm,
    LastAxisForm,
    SelectLastIndexForm,
    WhereConstantForm,
)
from lowerer.rules.constant_of_shape import ConstantFillForm, ExplicitFillForm
from lowerer.rules.einsum import EinsumDiagonalForm, EinsumPairwiseForm
from lowerer.rules.global_max_pool import GlobalMaxPoolDecomposition
from lowerer.rules.hardmax import CoercedAxisRule
from lowerer.rules.hardmax_decomposition import HardmaxDecomposition
from lowerer.rules.isnan_forms import IsNaNEqualForm, IsNaNOrderedForm
from lowerer.rules.reduce_forms import ArgReduceForm, HardmaxReduceForm
from lowerer.rules.topk_forms import ArgTopKForm, HardmaxTopKForm, ShapeSliceForm
from lowerer.steps.registry import REGISTRY

__all__ = ["REGISTRY"]

REGISTRY.rule(ArgExtremumRule())
REGISTRY.rule(CoercedAxisRule())
REGISTRY.decomposition(HardmaxDecomposition())
REGISTRY.decomposition(GlobalMaxPoolDecomposition())
REGISTRY.form("argmax-flip", ("ArgMax", "ArgMin"), SelectLastIndexForm)
REGISTRY.form("last-axis", ("Hardmax", "Softmax", "LogSoftmax"), LastAxisForm)
REGISTRY.form("constant-inputs", ("*",), ConstantInputsForm)
REGISTRY.form("argmax-topk", ("ArgMax", "ArgMin"), ArgTopKForm)
REGISTRY.form("hardmax-topk", ("Hardmax",), HardmaxTopKForm)
REGISTRY.form("shape-slice", ("Shape",), ShapeSliceForm)
REGISTRY.form("argmax-reduce", ("ArgMax", "ArgMin"), ArgReduceForm)
REGISTRY.form("hardmax-reduce", ("Hardmax",), HardmaxReduceForm)
REGISTRY.form("isnan-equal", ("IsNaN",), IsNaNEqualForm)
REGISTRY.form("isnan-ordered", ("IsNaN",), IsNaNOrderedForm)
REGISTRY.form("constant-fill", ("ConstantOfShape",), ConstantFillForm)
REGISTRY.form("explicit-fill", ("ConstantOfShape",), ExplicitFillForm)
REGISTRY.form("einsum-diagonal", ("Einsum",), EinsumDiagonalForm)
REGISTRY.form("einsum-pairwise", ("Einsum",), EinsumPairwiseForm)
REGISTRY.form("gelu-mul", ("Gelu",), GeluMulForm)
REGISTRY.form("gelu-tanh-cube", ("Gelu",), GeluTanhCubeForm)
REGISTRY.form("attention-scale-after", ("Attention",), AttentionScaleAfterForm)
REGISTRY.form("attention-float-mask", ("Attention",), AttentionFloatMaskForm)
REGISTRY.form("attention-trilu-isinf", ("Attention",), AttentionTriluIsInfForm)
REGISTRY.form("where-constant", ("Where",), WhereConstantForm)
REGISTRY.form("gather-slices", ("Gather",), GatherSlicesForm)
REGISTRY.seal()
