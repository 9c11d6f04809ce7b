"""Real torch exports (``tests/fixtures/real/``) taken down to 17, 13, 11 and 9, with outputs compared.

The fixtures are small models with random weights exported by torch (ResNet-18, MobileNetV3,
ViT, BERT, GPT-2: dynamo at opset 18 and 20, the legacy exporter at 17; a decoder block with SDPA,
RMSNorm and rotary embeddings, a U-Net, a detector head with TopK and NMS, tril/einsum/cumsum, a
spatial transformer, linear attention with a three-operand einsum and mixture-of-experts routing with
TopK indices into scatter_reduce sum/amax and index_add: dynamo at 20 and 23).
``tests/fixtures/make_real_models.py`` made them, ``MANIFEST.json`` says how. For every fixture and
every target in :data:`TARGETS` below its opset, lowerer converts it with verification on, and then:

(a) ``onnx.checker.check_model(converted, full_check=True)`` must pass, and the model's
    default-domain opset must be the target;
(b) onnxruntime must load it (default session options, as a user runs it);
(c) on the stored sample inputs its outputs must equal the original's ORT outputs (both run with
    graph optimizations off, so ORT's own rewrites, which differ by opset, stay out): integer and
    bool outputs exactly; float outputs exactly, unless the report says a node was expanded into its
    function body (:func:`expanded`). Then floats may differ by :data:`MAX_ULP_EXPANSION` ulp
    *relative to the output's magnitude*: ``max |got - want| / ulp(max |want|)`` over the tensor
    (``_compare.ulp_error``). Relative to each element's own magnitude would be the wrong measure
    for a whole network: an expansion that reassociates a reduction (LayerNormalization's mean and
    variance, Gelu's erf form) changes an intermediate by an ulp or so, and that absolute error,
    carried through the following layers, lands on outputs near zero (cancelling sums) as many of
    their own ulps, but stays within a few ulp of the tensor's scale. 8 ulp of float32 is about
    1e-6 relative to the largest output.

A refusal (``LowererError``) is accepted only where :data:`EXPECTED_REFUSALS` lists it, and then
it must still be refused, naming the node's ``Op-version`` the table gives. The table records what
the engine does today: as conversions start to work, its entries fail and must be removed, which
is the point (progress shows). :data:`KNOWN_INVALID` lists the conversions that today exit 0 with a
model the checker or ORT rejects; they are strict xfails: when one converts correctly (or is
refused instead), the test fails until its entry goes.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from _compare import compare, ort_session

import lowerer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real"
MANIFEST: dict[str, Any] = json.loads((FIXTURES / "MANIFEST.json").read_text())
TARGETS = (17, 13, 11, 9)
MAX_FIXTURE_BYTES = 2 * 1024 * 1024

#: Float32 budget for outputs of a conversion that expanded a function body, in ulp of the output
#: tensor's largest magnitude (see the module docstring).
MAX_ULP_EXPANSION = 8.0

#: (fixture, target) -> the ``Op-version`` that the refusal must name. Every one is a target below what
#: the model's ops allow: Slice with run-time ends has no form below Slice-10 (BERT's position ids),
#: GatherND exists from 11 (GPT-2's causal mask). Remove an entry when its conversion starts to work.
EXPECTED_REFUSALS: dict[tuple[str, int], str] = {
    ("bert.dynamo.opset18.onnx", 9): "Slice-13",
    ("bert.dynamo.opset20.onnx", 9): "Slice-13",
    ("bert.legacy.opset17.onnx", 9): "Slice-13",
    ("gpt2.dynamo.opset18.onnx", 9): "GatherND-13",
    ("gpt2.dynamo.opset20.onnx", 9): "GatherND-13",
    # -- issue 17's models (torch 2.13 dynamo at 20 and 23), each refusal in a README-listed class.
    # Run-time shapes below opset 10/11: Slice-1 needs constant ends (as BERT's); Trilu's mask for dynamic
    # dims needs Range (11); GatherElements on data with a dynamic dim needs Range for its flat indices.
    ("decoder.dynamo.opset20.onnx", 9): "Slice-13",
    ("tril_einsum.dynamo.opset20.onnx", 9): "Trilu-14",
    ("tril_einsum.dynamo.opset23.onnx", 9): "Trilu-14",
    ("detector.dynamo.opset20.onnx", 9): "GatherElements-13",
    ("detector.dynamo.opset23.onnx", 9): "GatherElements-13",
    # Bilinear Resize with half-pixel coordinates: Resize-10/Upsample map x to x / scale only.
    ("unet.dynamo.opset20.onnx", 9): "Resize-19",
    ("unet.dynamo.opset23.onnx", 9): "Resize-19",
    # GridSample below 11: its lowering needs GatherElements and Round (opset 11).
    ("spatial_transformer.dynamo.opset20.onnx", 9): "GridSample-20",
    ("spatial_transformer.dynamo.opset23.onnx", 9): "GridSample-22",
    # -- issue 26's models (torch 2.14 dynamo at 20 and 23). CumSum over a dynamic sequence below 11 (its
    # unrolled form needs a static length); ScatterElements and ScatterND exist from 11 only.
    ("linear_attention.dynamo.opset20.onnx", 9): "CumSum-14",
    ("linear_attention.dynamo.opset23.onnx", 9): "CumSum-14",
    ("moe_routing.dynamo.opset20.onnx", 9): "ScatterElements-18",
    ("moe_routing.dynamo.opset23.onnx", 9): "ScatterElements-18",
}

#: (fixture, target) -> what is wrong with the model lowerer returns (exit 0): strict xfails. Empty:
#: nothing leaves lowerer that onnx's checker or onnxruntime rejects.
KNOWN_INVALID: dict[tuple[str, int], str] = {}

CASES = [(name, target) for name, entry in MANIFEST["fixtures"].items() for target in TARGETS
         if target < entry["opset"]]


class InvalidModelError(AssertionError):
    """lowerer exited 0 with a model the checker or onnxruntime rejects."""


class WrongOutputsError(AssertionError):
    """lowerer exited 0 with a model whose outputs differ from the original's."""


def expanded(report: lowerer.Report) -> bool:
    """Whether a rewrite replaced a node by its function body (float results may then move).

    Recognized by the rule lowerer reports expansions under (``function-expansion``).
    """
    from lowerer.steps.expansion import EXPANSION_RULE

    return any(r.rule == EXPANSION_RULE for r in report.rewrites)


@functools.cache
def load(name: str) -> onnx.ModelProto:
    return onnx.load(str(FIXTURES / name))


@functools.cache
def feeds(name: str) -> dict[str, np.ndarray]:
    entry = MANIFEST["fixtures"][name]
    with np.load(FIXTURES / entry["inputs"]) as data:
        return {k: data[k] for k in data.files}


@functools.cache
def original_outputs(name: str) -> list[np.ndarray]:
    return list(ort_session(load(name)).run(None, feeds(name)))


def _param(name: str, target: int) -> Any:
    key = (name, target)
    marks = [pytest.mark.xfail(strict=True, raises=InvalidModelError, reason=KNOWN_INVALID[key])] \
        if key in KNOWN_INVALID else []
    return pytest.param(name, target, marks=marks, id=f"{name}-to-{target}")


def test_manifest_lists_every_fixture_as_it_is() -> None:
    onnx_files = sorted(p.name for p in FIXTURES.glob("*.onnx"))
    assert onnx_files == sorted(MANIFEST["fixtures"]), "MANIFEST.json and the .onnx files disagree"
    assert {e["model"] for e in MANIFEST["fixtures"].values()} >= {
        "resnet18", "mobilenet_v3_small", "vit", "bert", "gpt2",
        "decoder", "unet", "detector", "tril_einsum", "spatial_transformer", "linear_attention", "moe_routing"}
    for name, entry in MANIFEST["fixtures"].items():
        data = (FIXTURES / name).read_bytes()
        assert len(data) <= MAX_FIXTURE_BYTES, name
        assert hashlib.sha256(data).hexdigest() == entry["sha256"], name
        model = load(name)
        assert next(o.version for o in model.opset_import if o.domain == "") == entry["opset"], name
        assert not any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer), name
        assert sorted(feeds(name)) == sorted(i.name for i in model.graph.input), name


def test_tables_name_only_real_cases() -> None:
    assert not (set(EXPECTED_REFUSALS) | set(KNOWN_INVALID)) - set(CASES)
    assert not set(EXPECTED_REFUSALS) & set(KNOWN_INVALID)


@pytest.mark.parametrize("name", sorted(MANIFEST["fixtures"]))
def test_fixture_is_valid_and_runs(name: str) -> None:
    model = load(name)
    onnx.checker.check_model(model, full_check=True)
    outputs = original_outputs(name)
    assert [o.shape for o in outputs] and all(np.isfinite(o).all() for o in outputs if o.dtype.kind == "f")


@pytest.mark.parametrize(("name", "target"), [_param(n, t) for n, t in CASES])
def test_real_model_converts_exactly(name: str, target: int) -> None:
    model = load(name)
    key = (name, target)
    if key in EXPECTED_REFUSALS:
        try:
            result = lowerer.convert(model, target_opset=target, verify=True)
        except lowerer.LowererError as e:
            assert EXPECTED_REFUSALS[key] in str(e), f"refused for another reason now: {e}"
            return
        pytest.fail(f"{name} -> {target} converts now ({result.report.summary()['by_rule']}): remove its "
                    "EXPECTED_REFUSALS entry, and the conversion is checked in full")
    result = lowerer.convert(model, target_opset=target, verify=True)
    converted = result.model
    try:
        onnx.checker.check_model(converted, full_check=True)
    except Exception as e:
        raise InvalidModelError(f"{name} -> {target}: exit 0 with a model the checker rejects: {e}") from e
    opset = next(o.version for o in converted.opset_import if o.domain in ("", "ai.onnx"))
    if opset != target:
        raise InvalidModelError(f"{name} -> {target}: the model's opset is {opset}")
    try:
        ort_session(converted, optimize=True)
        session = ort_session(converted)
    except Exception as e:
        raise InvalidModelError(f"{name} -> {target}: exit 0 with a model onnxruntime will not load: {e}") from e
    got = session.run(None, feeds(name))
    budget = MAX_ULP_EXPANSION if expanded(result.report) else 0.0
    outcome = compare(got, original_outputs(name), max_ulp=budget, names=[o.name for o in converted.graph.output])
    if not outcome.same:
        raise WrongOutputsError(f"{name} -> {target}: {outcome.detail}")
