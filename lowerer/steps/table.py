"""Every version step of every default-domain op, classified: what changed from one schema version to the next.

``TABLE[op][version]`` holds the changes (:mod:`lowerer.steps.changes`) of the step from the op's
since-version before ``version`` to ``version``; :func:`step` and :func:`steps_between` wrap them in
:class:`~lowerer.steps.changes.Step` records. Only ops with more than one version appear.

How the table was made (onnx 1.23.2, default opset 28: 426 steps over 203 ops):

* the schemas of both sides were compared with :func:`lowerer.steps.schemas.diff` (attributes added,
  removed or with a new default or type; inputs and outputs added, removed or made optional; the
  allowed types of each formal parameter by position). ``Types()`` is listed exactly when some
  parameter's allowed types (or which parameters share a type) changed;
* the documentation of both sides was compared line by line (:func:`lowerer.steps.schemas.doc_diff`,
  the same text as onnx's docs/Changelog.md) and read, looking for meaning changes a signature does
  not show: negative axes or indices allowed, broadcasting rules, inputs made optional, new attribute
  values, defaults, behaviour redefined for some inputs. onnx's version-converter adapters
  (onnx/version_converter/convert.h) were a hint, never the answer: several are wrong (Resize 10 -> 11
  keeps the half_pixel default, AveragePool/ArgMax/... 10 <-> 11 ignore negative axes);
* a step whose meaning changed in a way the vocabulary cannot state exactly is ``Semantics`` (the
  engine refuses it without a dedicated adapter), with ``what`` saying what an exact adapter does.
  A step that changed nothing a valid model can observe is ``NoChange`` with what its text changed.
  The comment above an entry paraphrases the changelog when the step is not obvious.

Adding the steps of a newer onnx: ``tests/test_step_table.py`` fails and lists the steps that have no
entry (and entries that are no longer steps). For each, run ``schemas.diff(op, previous, version)``
and ``schemas.doc_diff(op, previous, version)``, read the op's changelog entry and the onnx PR that
bumped it, and add one line here; the same test then checks the line against the schema diff
(``Types`` present iff types changed, attributes and inputs accounted for). When unsure, write
``Semantics`` with what is known and a ``# UNSURE:`` comment: the engine then refuses the step instead
of guessing.

``irrelevant_unless`` predicates are named in :data:`PREDICATES`; the engine evaluates them on a node.
"""

from __future__ import annotations

from lowerer.steps import schemas
from lowerer.steps.changes import (
    ONES,
    AttrAdded,
    AttrRemoved,
    AttrToInput,
    Broadcast,
    Change,
    DefaultChanged,
    InputAdded,
    NegativeValues,
    NewAttrValues,
    NoChange,
    OptionalInput,
    OutputAdded,
    Semantics,
    Step,
    Types,
)

__all__ = ["PREDICATES", "TABLE", "step", "steps_between"]

#: Predicates named by ``AttrAdded.irrelevant_unless``: when one is false for a node, any value of
#: the attribute means what its absence means at the older version.
PREDICATES: dict[str, str] = {
    "output_float8": (
        "output 0 has a float8 element type (float8e4m3fn, float8e4m3fnuz, float8e5m2, float8e5m2fnuz, "
        "float8e8m0): `saturate` acts only on conversions to float8"
    ),
    "output_float8e8m0": "output 0 is float8e8m0: `round_mode` acts only on conversions to float8e8m0",
    "output_1_present": "output 1 is present (a non-empty name): MaxPool's `storage_order` only shapes Indices",
    "input_0_half_float": "input 0 is float16 or bfloat16: Range's `stash_type` only acts on those types",
    "input_1_has_zero": (
        "input 1 (Reshape's `shape`) may hold a 0 (not provably free of zeros): `allowzero` only changes what a 0 means"
    ),
    "input_2_absent": (
        "input 2 is absent: QuantizeLinear's `output_dtype` must equal the type of y_zero_point (input 2) "
        "when that is given, so it only chooses the output type without one"
    ),
    "input_2_present": "input 2 is present: Dropout's `seed` only acts in training mode (input 2, training_mode)",
    "input_3_present": (
        "input 3 is present: Resize's `keep_aspect_ratio_policy` only acts on `sizes` (input 3), not on `scales`"
    ),
}

# fmt: off
TABLE: dict[str, dict[int, tuple[Change, ...]]] = {
    "Abs": {
        # consumed_inputs: a legacy in-place hint
        6: (Types(), AttrRemoved("consumed_inputs", any_value=True)),
        13: (Types(),),
    },
    "Acos": {
        22: (Types(),),
    },
    "Acosh": {
        22: (Types(),),
    },
    "Add": {
        # consumed_inputs: a legacy in-place hint
        6: (Types(), AttrRemoved("consumed_inputs", any_value=True)),
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        13: (Types(),),
        14: (Types(),),
    },
    "And": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
    },
    "ArgMax": {
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        12: (AttrAdded("select_last_index", (0,)),),
        13: (Types(),),
    },
    "ArgMin": {
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        12: (AttrAdded("select_last_index", (0,)),),
        13: (Types(),),
    },
    "Asin": {
        22: (Types(),),
    },
    "Asinh": {
        22: (Types(),),
    },
    "Atan": {
        22: (Types(),),
    },
    "Atanh": {
        22: (Types(),),
    },
    "Attention": {
        # UNSURE: the 23 and 24 docs differ at length (23's text was corrected in place by an errata); besides the
        # new nonpad_kv_seqlen input (absent: offset = past_sequence_length, as at 23) the shorter mask is the one
        # change found; hence Semantics
        24: (
            InputAdded(6),
            Semantics(
                "the last dimension of attn_mask (input 3) may be shorter than total_sequence_length at 24 (the "
                "rest counts as -inf); at 23 it must broadcast to it: down needs that dimension to be "
                "total_sequence_length or 1, or the mask padded"
            ),
        ),
        # sliding-window bounds (-1: unbounded)
        25: (AttrAdded("left_window_size", (-1,)), AttrAdded("right_window_size", (-1,))),
    },
    "AveragePool": {
        7: (AttrAdded("count_include_pad", (0,)),),
        10: (AttrAdded("ceil_mode", (0,)),),
        11: (
            NoChange(
                "docs only: absent strides default to 1 (onnx#2291; implementations already did so), and the "
                "SAME_* text later edited in place (onnx#3188); onnxruntime runs both versions with one kernel"
            ),
        ),
        19: (AttrAdded("dilations", (ONES,)),),
        # also: 'windows starting in the right padding are ignored' (ceil_mode), a clarification of what
        # implementations did before (onnx#5741)
        22: (Types(),),
    },
    "BatchNormalization": {
        # consumed_inputs (an in-place hint) was required at 1: down writes 'nothing consumed' (onnx's own 6->5
        # adapter writes [0, 0]); BN-1 documented only 4-D NCHW inputs
        6: (AttrRemoved("consumed_inputs", any_value=True, down_value=(0, 0, 0, 0, 0)),),
        # is_test removed; the default 0 meant training
        7: (
            AttrRemoved("is_test", neutral=(1,), down_value=1),
            Semantics(
                "BatchNormalization-7 runs in training mode when any of outputs 1-4 (mean, var, saved_mean, "
                "saved_var) is present, BatchNormalization-6 when is_test=0: down, write is_test=0 if any of "
                "outputs 1-4 is present, else is_test=1; up, is_test=1 with only Y, or is_test=0 with outputs "
                "1-4, keeps its meaning (is_test=0 with only Y has no BatchNormalization-7 form)"
            ),
        ),
        # spatial=0 (per-activation statistics) was dropped; 9 also accepts a 1-D X (C = 1)
        9: (AttrRemoved("spatial", neutral=(None, 1)),),
        14: (
            Types(),
            Semantics(
                "`training_mode` added (default 0: inference); BatchNormalization-9 chose training mode by the "
                "presence of outputs 1-4; outputs 3-4 (saved_mean, saved_var) removed; input_mean, input_var and "
                "outputs 1-2 may have their own type. A node with only Y means the same on both sides; a training "
                "node maps to training_mode=1 with outputs 3-4 absent, and back"
            ),
        ),
        15: (Types(),),
    },
    "Bernoulli": {
        22: (Types(),),
    },
    "BitShift": {
        # signed types added (arithmetic right shift); shifts by >= the bit width, undefined before, are now
        # defined
        28: (Types(),),
    },
    "Cast": {
        6: (
            Semantics(
                "`to` changed from a string (the type's name, e.g. 'FLOAT') to an int (TensorProto.DataType): "
                "exact both ways by mapping names to enum values"
            ),
        ),
        # string casts added
        9: (Types(),),
        # also: the conversion rules (out of range, bool) written out
        13: (Types(),),
        # saturate acts only on float8 outputs
        19: (Types(), AttrAdded("saturate", (1,), irrelevant_unless="output_float8")),
        21: (Types(),),
        23: (Types(),),
        # round_mode acts only on float8e8m0 outputs; the float8 saturation table for +-Inf -> FNUZ types was
        # corrected (onnx#7085, an errata aligning the spec with implementations)
        24: (Types(), AttrAdded("round_mode", ("up",), irrelevant_unless="output_float8e8m0")),
        25: (Types(),),
        28: (Types(),),
    },
    "CastLike": {
        # saturate acts only on float8 outputs
        19: (Types(), AttrAdded("saturate", (1,), irrelevant_unless="output_float8")),
        21: (Types(),),
        23: (Types(),),
        # round_mode acts only on float8e8m0 outputs
        24: (Types(), AttrAdded("round_mode", ("up",), irrelevant_unless="output_float8e8m0")),
        25: (Types(),),
    },
    "Ceil": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # also: 'integral, +-0, NaN, inf return x' written out
        13: (Types(),),
    },
    "Celu": {
        28: (Types(),),
    },
    "Clip": {
        # min/max got explicit schema defaults (+-FLT_MAX); both versions' docs say numeric_limits lowest()/max()
        6: (
            AttrRemoved("consumed_inputs", any_value=True),
            DefaultChanged("min", None, -3.4028234663852886e+38),
            DefaultChanged("max", None, 3.4028234663852886e+38),
        ),
        11: (AttrToInput("min", 1, dtype="T", scalar=True), AttrToInput("max", 2, dtype="T", scalar=True)),
        12: (Types(),),
        # also: min > max gives max everywhere, written out
        13: (Types(),),
    },
    "Compress": {
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        28: (Types(),),
    },
    "Concat": {
        # axis became required; Concat-1 documented default 1
        4: (Types(), DefaultChanged("axis", 1, None)),
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        13: (Types(),),
    },
    "Constant": {
        9: (Types(),),
        # value no longer required: exactly one of value/sparse_value
        11: (AttrAdded("sparse_value"),),
        # scalar/list shorthands of value
        12: (
            AttrAdded("value_float"),
            AttrAdded("value_floats"),
            AttrAdded("value_int"),
            AttrAdded("value_ints"),
            AttrAdded("value_string"),
            AttrAdded("value_strings"),
        ),
        13: (Types(),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "ConstantOfShape": {
        20: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Conv": {
        11: (
            NoChange(
                "docs only: absent strides and dilations default to 1 (onnx#2291; implementations already did "
                "so), and the SAME_* text later edited in place (onnx#3188); onnxruntime runs both versions with "
                "one kernel"
            ),
        ),
        22: (Types(),),
    },
    "ConvTranspose": {
        11: (
            NoChange(
                "docs only: absent strides and dilations default to 1 (onnx#2291; implementations already did "
                "so), output_padding and the SAME_* pad split restated with the same result"
            ),
        ),
        22: (Types(),),
    },
    "Cos": {
        22: (Types(),),
    },
    "Cosh": {
        22: (Types(),),
    },
    "CumSum": {
        14: (Types(),),
    },
    "DFT": {
        # axis attribute (default 1) became input 2 (absent: -2)
        20: (AttrToInput("axis", 2, scalar=True), DefaultChanged("axis", 1, -2)),
    },
    "DeformConv": {
        22: (Types(),),
    },
    "DepthToSpace": {
        # DCR is DepthToSpace-1's order
        11: (AttrAdded("mode", ("DCR",)),),
        13: (Types(),),
        28: (
            NoChange(
                "a context-dependent function body (Reshape, Transpose, Reshape) was added; spec text and schema "
                "unchanged"
            ),
        ),
    },
    "DequantizeLinear": {
        13: (
            Semantics(
                "per-axis dequantization added: x_scale and x_zero_point may be 1-D along the new `axis` "
                "attribute (default 1); DequantizeLinear-10 takes scalars only. Up: nothing to rewrite; down: "
                "scale and zero point must be scalars, then axis is ignored and dropped"
            ),
        ),
        19: (Types(),),
        # blocked quantization (block_size > 0)
        21: (Types(), AttrAdded("block_size", (0,))),
        # 0: output type is x_scale's, as before
        23: (Types(), AttrAdded("output_dtype", (0,))),
        24: (Types(),),
        25: (Types(),),
        28: (Types(),),
    },
    "Det": {
        22: (Types(),),
    },
    "Div": {
        # consumed_inputs: a legacy in-place hint
        6: (Types(), AttrRemoved("consumed_inputs", any_value=True)),
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        13: (Types(),),
        14: (Types(),),
    },
    "Dropout": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # is_test removed: Dropout-7 is a copy at inference; the default 0 meant a random (training) dropout
        7: (AttrRemoved("is_test", neutral=(1,), down_value=1),),
        # mask output became bool (was T)
        10: (Types(),),
        # ratio -> input 1; training_mode input 2 (absent: inference, a copy); seed only acts when training
        12: (
            AttrToInput("ratio", 1, dtype="float32", scalar=True),
            InputAdded(2),
            AttrAdded("seed", irrelevant_unless="input_2_present"),
        ),
        13: (Types(),),
        # also: an absent ratio means 0.5 (the 12/13 text also said 'not set: a copy', contradicting itself)
        22: (Types(),),
    },
    "Einsum": {
        28: (Types(),),
    },
    "Elu": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        22: (Types(),),
    },
    "Equal": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        11: (Types(),),
        13: (Types(),),
        19: (Types(),),
    },
    "Erf": {
        13: (Types(),),
    },
    "Exp": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
    },
    "Expand": {
        13: (Types(),),
    },
    "EyeLike": {
        22: (Types(),),
    },
    "Flatten": {
        9: (Types(),),
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        13: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Floor": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # also: 'integral, +-0, NaN, inf return x' written out
        13: (Types(),),
    },
    "GRU": {
        3: (
            AttrAdded("linear_before_reset", (0,)),
            Semantics(
                "output 1 (Y_h) became optional: down, a node without Y_h needs an unused output name for it; the "
                "default of `direction` was misspelled 'foward' at 1 (it meant forward)"
            ),
        ),
        # output_sequence only said whether Y may be omitted; Y is optional at 7
        7: (AttrRemoved("output_sequence", any_value=True),),
        14: (AttrAdded("layout", (0,)),),
        22: (Types(),),
    },
    "Gather": {
        # negative indices allowed (negative axis was already allowed at 1)
        11: (NegativeValues(input=1, kind="index"),),
        13: (Types(),),
    },
    "GatherElements": {
        13: (Types(),),
    },
    "GatherND": {
        12: (AttrAdded("batch_dims", (0,)),),
        13: (Types(),),
    },
    "Gemm": {
        6: (NoChange("docs: C's 'can be inplace' remark dropped"),),
        # C: broadcast attribute -> unidirectional broadcasting to (M, N)
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), Broadcast()),
        9: (Types(),),
        # C optional (absent: 0)
        11: (OptionalInput(2),),
        13: (Types(),),
    },
    "GlobalAveragePool": {
        22: (Types(),),
    },
    "GlobalLpPool": {
        2: (
            Semantics(
                "`p` changed from float to int: up, p must be integral; down, it is written as a float"
            ),
        ),
        22: (Types(),),
    },
    "GlobalMaxPool": {
        22: (Types(),),
    },
    "Greater": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        9: (Types(),),
        13: (Types(),),
    },
    "GreaterOrEqual": {
        16: (Types(),),
    },
    "GridSample": {
        20: (
            Semantics(
                "`mode` values renamed: bilinear -> linear (the default), bicubic -> cubic (nearest kept); X may "
                "have any rank >= 3 where GridSample-16 took 4-D only. Up: rename; down: rename back, X must be "
                "4-D"
            ),
        ),
        22: (Types(),),
    },
    "GroupNormalization": {
        21: (
            Semantics(
                "scale and bias are per channel (C) at 21, per group (num_groups) at 18; `stash_type` added (1: "
                "first stage in float32). Up: repeat each group's scale/bias C/num_groups times. Down: none "
                "exact, GroupNormalization-18 is deprecated (onnx.checker rejects it at opsets 18-20): expand "
                "into primitive ops instead"
            ),
        ),
    },
    "HardSigmoid": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        22: (Types(),),
    },
    "HardSwish": {
        22: (Types(),),
    },
    "Hardmax": {
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        # axis default 1 -> -1, and 'coerced into 2D' became 'along axis'
        13: (
            Types(),
            DefaultChanged("axis", 1, -1),
            Semantics(
                "Hardmax-11 coerces the input to 2-D ([d0*..*d(axis-1), d(axis)*..*d(r-1)]) and computes Hardmax "
                "over each row; Hardmax-13 works along the one dimension `axis`. Same meaning when axis is the "
                "last dimension; otherwise up: Reshape to 2-D, Hardmax axis=1, Reshape back; down: Transpose axis "
                "last, Hardmax, Transpose back"
            ),
        ),
    },
    "Identity": {
        13: (Types(),),
        14: (Types(),),
        16: (Types(),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "If": {
        11: (
            NoChange(
                "then/else outputs may differ in shape (If-1 asked for equal shapes, which no checker or runtime "
                "enforced)"
            ),
        ),
        13: (Types(),),
        16: (Types(),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "InstanceNormalization": {
        # consumed_inputs: legacy hint; InstanceNormalization-1 documented only 4-D NCHW inputs
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        22: (Types(),),
    },
    "IsInf": {
        20: (Types(),),
    },
    "IsNaN": {
        13: (Types(),),
        20: (Types(),),
    },
    "LRN": {
        13: (Types(),),
    },
    "LSTM": {
        # output_sequence only said whether Y may be omitted; Y is optional at 7
        7: (AttrRemoved("output_sequence", any_value=True),),
        14: (AttrAdded("layout", (0,)),),
        22: (Types(),),
    },
    "LeakyRelu": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        16: (Types(),),
    },
    "Less": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        9: (Types(),),
        13: (Types(),),
    },
    "LessOrEqual": {
        16: (Types(),),
    },
    "Log": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
    },
    "LogSoftmax": {
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        # axis default 1 -> -1, and 'coerced into 2D' became 'along axis'
        13: (
            Types(),
            DefaultChanged("axis", 1, -1),
            Semantics(
                "LogSoftmax-11 coerces the input to 2-D ([d0*..*d(axis-1), d(axis)*..*d(r-1)]) and computes "
                "LogSoftmax over each row; LogSoftmax-13 works along the one dimension `axis`. Same meaning when "
                "axis is the last dimension; otherwise up: Reshape to 2-D, LogSoftmax axis=1, Reshape back; down: "
                "Transpose axis last, LogSoftmax, Transpose back"
            ),
        ),
    },
    "Loop": {
        11: (
            NoChange(
                "documentation of loop-carried values and scan outputs rewritten; onnx bumped If and Loop "
                "together"
            ),
        ),
        # also: 'scan outputs must be tensors' stated
        13: (Types(),),
        16: (Types(),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "LpNormalization": {
        22: (Types(),),
    },
    "LpPool": {
        2: (
            Semantics(
                "`p` changed from float to int (up: p must be integral; down: written as a float); kernel_shape "
                "became required (LpPool-1 without it had no defined window)"
            ),
        ),
        11: (
            NoChange(
                "docs only: absent strides default to 1 (onnx#2291; implementations already did so), and the "
                "SAME_* text later edited in place (onnx#3188); onnxruntime runs both versions with one kernel"
            ),
        ),
        18: (AttrAdded("ceil_mode", (0,)), AttrAdded("dilations", (ONES,))),
        22: (Types(),),
    },
    "MatMul": {
        9: (Types(),),
        13: (Types(),),
    },
    "Max": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # inputs had to have equal shapes at 6
        8: (Broadcast(legacy="none"),),
        12: (Types(),),
        13: (Types(),),
    },
    "MaxPool": {
        # Indices output added; storage_order only shapes it
        8: (AttrAdded("storage_order", (0,), irrelevant_unless="output_1_present"), OutputAdded(1)),
        10: (AttrAdded("ceil_mode", (0,)), AttrAdded("dilations", (ONES,))),
        11: (
            NoChange(
                "docs only: absent strides and dilations default to 1 (onnx#2291; implementations already did "
                "so), and the SAME_* text later edited in place (onnx#3188); onnxruntime runs both versions with "
                "one kernel"
            ),
        ),
        12: (Types(),),
        # also: 'windows starting in the right padding are ignored' (ceil_mode), a clarification (onnx#5741)
        22: (Types(),),
    },
    "MaxRoiPool": {
        22: (Types(),),
    },
    "MaxUnpool": {
        11: (NoChange("docs: absent strides default to 1"),),
        22: (Types(),),
    },
    "Mean": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # inputs had to have equal shapes at 6
        8: (Broadcast(legacy="none"),),
        13: (Types(),),
    },
    "MeanVarianceNormalization": {
        13: (Types(),),
    },
    "Min": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # inputs had to have equal shapes at 6
        8: (Broadcast(legacy="none"),),
        12: (Types(),),
        13: (Types(),),
    },
    "Mish": {
        22: (Types(),),
    },
    "Mod": {
        # also: fmod semantics and float special cases written out (same rules)
        13: (Types(),),
        28: (
            Semantics(
                "fmod=0 on floating-point types (floor modulo, Python %) and fmod=1 on integer types (truncated, "
                "C %) became valid; Mod-13 allowed fmod=0 for integers and fmod=1 for floats only. Down: those "
                "two combinations are unchanged, the new ones have no Mod-13 form; up: nothing to rewrite"
            ),
        ),
    },
    "Mul": {
        # consumed_inputs: a legacy in-place hint
        6: (Types(), AttrRemoved("consumed_inputs", any_value=True)),
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        13: (Types(),),
        14: (Types(),),
    },
    "Multinomial": {
        22: (Types(),),
    },
    "Neg": {
        # consumed_inputs: a legacy in-place hint
        6: (Types(), AttrRemoved("consumed_inputs", any_value=True)),
        13: (Types(),),
    },
    "NegativeLogLikelihoodLoss": {
        13: (
            NoChange(
                "bumped so its function body can use opset-13 ops; the spec text was only reformatted"
            ),
        ),
        22: (Types(),),
    },
    "NonMaxSuppression": {
        11: (NoChange("docs: boxes with IoU strictly above iou_threshold are suppressed"),),
    },
    "NonZero": {
        13: (Types(),),
    },
    "OneHot": {
        # onnxruntime's OneHot-9 kernel already counts negative indices from the back; the spec did not
        11: (
            Semantics(
                "indices in [-depth, -1] now count from the back (at 9 they were out of range and gave an "
                "all-off_value row); `axis` may be any value in [-r-1, r] (r = rank(indices)) where 9 documented "
                "only -1. Up: indices must be provably non-negative (or negatives mapped out of range); down: "
                "negative indices get depth added, a negative axis gets r+1 added"
            ),
        ),
        28: (Types(),),
    },
    "Optional": {
        28: (Types(),),
    },
    "OptionalGetElement": {
        # tensors and sequences accepted too (passed through)
        18: (Types(),),
        28: (Types(),),
    },
    "OptionalHasElement": {
        # tensors and sequences accepted too (types)
        18: (Types(), OptionalInput(0)),
        28: (Types(),),
    },
    "Or": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
    },
    "PRelu": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # slope: unidirectional broadcasting; at 6 same shape as X (or one element)
        7: (Broadcast(legacy="none"),),
        9: (Types(),),
        16: (Types(),),
    },
    "Pad": {
        # UNSURE: Pad-1's pads layout (its attribute text and its example disagree); hence Semantics
        2: (
            Semantics(
                "attribute `paddings` renamed `pads`, negative pads (cropping) allowed; Pad-1's example reads "
                "paddings as [x1_begin, x1_end, x2_begin, ...] against its own attribute text [x1_begin, "
                "x2_begin, ..., x1_end, ...], so an exact adapter needs both readings to agree"
            ),
        ),
        11: (Types(), AttrToInput("pads", 1), AttrToInput("value", 2, dtype="T", scalar=True)),
        13: (Types(),),
        # axes input
        18: (InputAdded(3),),
        19: (NewAttrValues("mode", ("wrap",)),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Pow": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        12: (Types(),),
        13: (Types(),),
        15: (Types(),),
    },
    "QLinearMatMul": {
        21: (Types(),),
    },
    "QuantizeLinear": {
        13: (
            Semantics(
                "per-axis quantization added: y_scale and y_zero_point may be 1-D along the new `axis` attribute "
                "(default 1); QuantizeLinear-10 takes scalars only. Up: nothing to rewrite; down: scale and zero "
                "point must be scalars, then axis is ignored and dropped"
            ),
        ),
        # saturate acts only on float8 outputs
        19: (Types(), AttrAdded("saturate", (1,), irrelevant_unless="output_float8")),
        # output_dtype must equal the zero point's type when one is given; without one, 0 and 2 (UINT8) keep uint8
        21: (
            Types(),
            AttrAdded("block_size", (0,)),
            AttrAdded("output_dtype", (0, 2), irrelevant_unless="input_2_absent"),
        ),
        # 0: divide in y_scale's type, as before
        23: (Types(), AttrAdded("precision", (0,))),
        24: (Types(),),
        25: (Types(),),
        28: (Types(),),
    },
    "RNN": {
        # output_sequence only said whether Y may be omitted; Y is optional at 7
        7: (AttrRemoved("output_sequence", any_value=True),),
        14: (AttrAdded("layout", (0,)),),
        22: (Types(),),
    },
    "RandomNormal": {
        22: (Types(),),
    },
    "RandomNormalLike": {
        22: (Types(),),
    },
    "RandomUniform": {
        22: (Types(),),
    },
    "RandomUniformLike": {
        22: (Types(),),
    },
    "Range": {
        # stash_type only acts on the float16/bfloat16 inputs new at 27
        27: (Types(), AttrAdded("stash_type", (1,), irrelevant_unless="input_0_half_float")),
    },
    "Reciprocal": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
    },
    "ReduceL1": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
    },
    "ReduceL2": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
    },
    "ReduceLogSum": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
        28: (Types(),),
    },
    "ReduceLogSumExp": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
        28: (Types(),),
    },
    "ReduceMax": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        12: (Types(),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
        20: (Types(),),
    },
    "ReduceMean": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
    },
    "ReduceMin": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        12: (Types(),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
        20: (Types(),),
    },
    "ReduceProd": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
    },
    "ReduceSum": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(), AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
    },
    "ReduceSumSquare": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(),),
        18: (AttrToInput("axes", 1), AttrAdded("noop_with_empty_axes", (0,))),
    },
    "Relu": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
        14: (Types(),),
    },
    "Reshape": {
        5: (Types(), AttrRemoved("consumed_inputs", any_value=True), AttrToInput("shape", 1)),
        13: (Types(),),
        14: (AttrAdded("allowzero", (0,), irrelevant_unless="input_1_has_zero"),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Resize": {
        # UNSURE: Resize-10's coordinate mapping and nearest rounding are taken from onnxruntime's kernel
        # (measured), the spec says nothing; hence Semantics. onnx's own Resize_10_11 adapter only moves scales
        # and keeps the half_pixel default: wrong
        11: (
            Types(),
            Semantics(
                "scales moved from input 1 to input 2 behind a new roi input, sizes (input 3) added; new "
                "coordinate_transformation_mode (default half_pixel), cubic_coeff_a, exclude_outside, "
                "extrapolation_value, nearest_mode (default round_prefer_floor) and mode cubic. Resize-10 maps x "
                "to x / scale (asymmetric) and, for nearest, takes floor on upsampled axes and ceil on "
                "downsampled ones (onnxruntime's kernel; the spec is silent). Up: insert an empty roi, write "
                "coordinate_transformation_mode=asymmetric and, for nearest, nearest_mode=floor (or ceil when "
                "every resized axis is downsampled; mixed axes have no single form). Down: only those settings, "
                "with scales given"
            ),
        ),
        13: (
            Types(),
            OptionalInput(1),
            OptionalInput(2),
            Semantics(
                "coordinate_transformation_mode 'tf_half_pixel_for_nn' was removed: up, a node using it has no "
                "Resize-13 form; with sizes, Resize-11 passes an empty scales tensor where Resize-13 omits scales"
            ),
        ),
        # keep_aspect_ratio_policy only acts on sizes
        18: (
            AttrAdded("antialias", (0,)),
            AttrAdded("axes"),
            AttrAdded("keep_aspect_ratio_policy", ("stretch",), irrelevant_unless="input_3_present"),
        ),
        19: (NewAttrValues("coordinate_transformation_mode", ("half_pixel_symmetric",)),),
    },
    "ReverseSequence": {
        28: (Types(),),
    },
    "RoiAlign": {
        # RoiAlign-10 had no half-pixel shift ('output_half_pixel'); the new default 'half_pixel' shifts: up
        # writes output_half_pixel, down refuses half_pixel
        16: (
            AttrAdded("coordinate_transformation_mode", ("output_half_pixel",)),
            DefaultChanged("coordinate_transformation_mode", "output_half_pixel", "half_pixel"),
        ),
        22: (Types(),),
    },
    "Round": {
        22: (Types(),),
    },
    "Scan": {
        9: (
            Types(),
            Semantics(
                "Scan-8 loops over a batch axis 0 and scans axis 1, with an optional sequence_lens (input 0) and "
                "`directions`, states and scan inputs following as input 1 on (initial_state_and_scan_inputs, "
                "input 0 on at 9); Scan-9 has no batch axis or sequence_lens and adds scan_input_axes, "
                "scan_input_directions, scan_output_axes, scan_output_directions. Exact when the batch is 1 and "
                "sequence_lens is absent (squeeze/unsqueeze the batch axis, directions -> scan_input_directions); "
                "other batches need a Loop"
            ),
        ),
        11: (
            Semantics(
                "negative scan_input_axes and scan_output_axes allowed, each counted from the back of its own "
                "scan input or scan output (different ranks), which NegativeValues cannot express: down, "
                "normalize each with the rank of its tensor"
            ),
        ),
        16: (Types(),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Scatter": {
        11: (
            Semantics(
                "Scatter is deprecated at 11 (onnx.checker rejects it there); Scatter-11 also allows negative "
                "indices. Up: rewrite as ScatterElements-11 (same semantics); down: a Scatter-11 node is already "
                "invalid, a ScatterElements-11 one with non-negative indices maps to Scatter-9"
            ),
        ),
    },
    "ScatterElements": {
        13: (Types(),),
        16: (AttrAdded("reduction", ("none",)),),
        18: (NewAttrValues("reduction", ("max", "min")),),
    },
    "ScatterND": {
        13: (Types(),),
        16: (AttrAdded("reduction", ("none",)),),
        18: (NewAttrValues("reduction", ("max", "min")),),
    },
    "Selu": {
        # defaults refined from 1.6732/1.0507 to the float32 of the exact constants
        6: (
            AttrRemoved("consumed_inputs", any_value=True),
            DefaultChanged("alpha", 1.673200011253357, 1.6732631921768188),
            DefaultChanged("gamma", 1.0506999492645264, 1.0507010221481323),
        ),
        22: (Types(),),
    },
    "Shape": {
        13: (Types(),),
        # start/end slice the shape
        15: (AttrAdded("start", (0,)), AttrAdded("end")),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Sigmoid": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
    },
    "Sign": {
        13: (Types(),),
    },
    "Sin": {
        22: (Types(),),
    },
    "Sinh": {
        22: (Types(),),
    },
    "Size": {
        13: (Types(),),
        19: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Slice": {
        # steps input
        10: (AttrToInput("starts", 1), AttrToInput("ends", 2), AttrToInput("axes", 3), InputAdded(4)),
        # negative axes allowed (negative starts/ends already were)
        11: (NegativeValues(input=3),),
        13: (Types(),),
    },
    "Softmax": {
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        # axis default 1 -> -1, and 'coerced into 2D' became 'along axis'
        13: (
            Types(),
            DefaultChanged("axis", 1, -1),
            Semantics(
                "Softmax-11 coerces the input to 2-D ([d0*..*d(axis-1), d(axis)*..*d(r-1)]) and computes Softmax "
                "over each row; Softmax-13 works along the one dimension `axis`. Same meaning when axis is the "
                "last dimension; otherwise up: Reshape to 2-D, Softmax axis=1, Reshape back; down: Transpose axis "
                "last, Softmax, Transpose back"
            ),
        ),
    },
    "SoftmaxCrossEntropyLoss": {
        13: (Types(),),
    },
    "Softplus": {
        22: (Types(),),
    },
    "Softsign": {
        22: (Types(),),
    },
    "SpaceToDepth": {
        13: (Types(),),
        # DCR is SpaceToDepth-13's order (inverse of DepthToSpace DCR)
        28: (AttrAdded("mode", ("DCR",)),),
    },
    "Split": {
        2: (
            Types(),
            Semantics(
                "the optional split input (input 1) was removed, lengths only via the `split` attribute; `axis` "
                "got default 0 (Split-1 gave none). Up: a constant split input becomes the attribute, and a node "
                "without axis has no defined meaning (refuse); down: write axis=0 when absent"
            ),
        ),
        # negative axis allowed
        11: (NegativeValues(attr="axis"),),
        13: (Types(), AttrToInput("split", 1)),
        18: (
            Semantics(
                "either input split or the new attribute `num_outputs` must be given at 18 (13 split into equal "
                "parts when neither was); num_outputs allows a smaller last chunk. Up: a node without split gets "
                "num_outputs = its number of outputs; down: num_outputs is dropped when the axis dimension is a "
                "multiple of it, else split is written from the static dimension"
            ),
        ),
    },
    "SplitToSequence": {
        24: (Types(),),
    },
    "Sqrt": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
    },
    "Squeeze": {
        # negative axes allowed
        11: (NegativeValues(attr="axes"),),
        13: (Types(), AttrToInput("axes", 1)),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Sub": {
        # consumed_inputs: a legacy in-place hint
        6: (Types(), AttrRemoved("consumed_inputs", any_value=True)),
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
        13: (Types(),),
        14: (Types(),),
    },
    "Sum": {
        # consumed_inputs: a legacy in-place hint
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        # inputs had to have equal shapes at 6
        8: (Broadcast(legacy="none"),),
        13: (Types(),),
    },
    "Tan": {
        22: (Types(),),
    },
    "Tanh": {
        # consumed_inputs: legacy hint; Tanh-1 said '1-D input' (a doc slip)
        6: (AttrRemoved("consumed_inputs", any_value=True),),
        13: (Types(),),
    },
    "ThresholdedRelu": {
        22: (Types(),),
    },
    "Tile": {
        6: (
            Types(),
            Semantics(
                "Tile-1 repeated the input `tiles` times along one axis given by input 2 (`axis`, removed) with "
                "tiles/axis typed T; Tile-6 takes per-dimension int64 `repeats`. Up: repeats = 1 everywhere but "
                "tiles at axis (constant tiles and axis); down: repeats with one entry != 1 become tiles and axis"
            ),
        ),
        13: (Types(),),
    },
    "TopK": {
        # K: 1-D int64 of one element
        10: (AttrToInput("k", 1),),
        # also documents negative axis; not a change: TopK-1's default axis was already -1
        11: (Types(), AttrAdded("largest", (1,)), AttrAdded("sorted", (1,))),
        24: (Types(),),
    },
    "Transpose": {
        13: (Types(),),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Unique": {
        28: (Types(),),
    },
    "Unsqueeze": {
        11: (
            Semantics(
                "negative axes allowed, counted from the back of the output (rank(data) + len(axes)), which "
                "NegativeValues (rank of an input) cannot express: down, normalize with the output rank"
            ),
        ),
        13: (Types(), AttrToInput("axes", 1)),
        21: (Types(),),
        23: (Types(),),
        24: (Types(),),
        25: (Types(),),
    },
    "Upsample": {
        7: (
            Types(),
            Semantics(
                "height_scale and width_scale (4-D NCHW) replaced by `scales` per dimension; mode 'bilinear' "
                "became 'linear'. Up: scales = [1, 1, height_scale, width_scale]; down: 4-D with scales[0] = "
                "scales[1] = 1"
            ),
        ),
        9: (AttrToInput("scales", 1, dtype="float32"),),
        10: (
            Semantics(
                "Upsample is deprecated at 10 (onnx.checker rejects it there), replaced by Resize-10 (same inputs "
                "and modes): up, rewrite as Resize; down, an Upsample-10 node is already invalid"
            ),
        ),
    },
    "Where": {
        16: (Types(),),
    },
    "Xor": {
        # broadcast=1 was suffix matching (same as numpy); an `axis` aligning B elsewhere needs an Unsqueeze
        7: (AttrRemoved("broadcast", neutral=(None, 0, 1)), AttrRemoved("axis"), Broadcast()),
    },
}
# fmt: on


def step(op: str, version: int) -> Step:
    """The step of ``op`` into since-version ``version`` (from the since-version before it).

    Raises:
        KeyError: ``version`` is not a since-version of ``op`` after its first, or the step is
            not classified (a newer onnx than the table knows).
    """
    versions = schemas.versions(op)
    index = versions.index(version) if version in versions else 0
    if index == 0:
        raise KeyError(f"{op}-{version} is not a version step of {op} (versions {list(versions)})")
    changes = TABLE.get(op, {}).get(version)
    if changes is None:
        raise KeyError(f"{op} {versions[index - 1]} -> {version} is not classified in lowerer.steps.table")
    return Step(op, versions[index - 1], version, changes)


def steps_between(op: str, source_version: int, target_version: int) -> list[Step]:
    """The steps a node of ``op`` crosses from opset ``source_version`` to ``target_version``, in crossing order.

    Versions are opset versions (any int): going up, the steps into since-versions ``v`` with
    ``source < v <= target``, oldest first; going down, those with ``target < v <= source``, newest
    first. Whether ``op`` exists at the target (its first since-version <= target) is the caller's
    question.

    Raises:
        KeyError: ``op`` is not a default-domain op, or a step crossed is not classified.
    """
    low, high = sorted((source_version, target_version))
    crossed = [step(op, v) for v in schemas.versions(op)[1:] if low < v <= high]
    return crossed if source_version <= target_version else crossed[::-1]
