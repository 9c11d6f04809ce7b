"""DeformConv lowered below opset 19 (``lowerer/rules/deform_conv.py``).

One-node DeformConv-19 and -22 models with several attribute sets (strides, asymmetric pads, dilations,
group, offset_group, kernel_shape given or not), with and without mask and bias, are converted by
``lowerer.convert`` (its per-rewrite verification on) to 17, 13 and 11; the original and the result run
in onnxruntime and compare within the float32 expansion budget (:data:`EXPANSION_ULPS`; it measures 0 ulp
against onnxruntime 1.32's CPU kernel, which :func:`test_measured_ulp` records). Offsets are random
(up to 3 pixels, many samples outside the image), on exact quarter pixels (corners, the borders -1 and H,
half-way ties), and infinite or huge; images are random and tie-heavy (small integers, ±inf, all-equal).
Refusals name the node, op, versions and the condition that blocks the lowering. A torchvision
``deform_conv2d`` export (``tests/fixtures/deform_conv/``, made by its ``make_fixture.py``) is converted too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from _compare import compare
from _convert_helpers import make_model, ort_run, tie_inputs
from onnx import TensorProto, helper

import lowerer
from lowerer.core.errors import ConversionError
from lowerer.core.opsets import default_opset
from lowerer.rules import REGISTRY
from lowerer.verification.compare import EXPANSION_ULPS

F32_BUDGET = EXPANSION_ULPS[np.dtype(np.float32)]
TARGETS = (17, 13, 11)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "deform_conv"


@dataclass(frozen=True)
class Case:
    """One DeformConv node: shapes and attributes (``attrs=False``: every attribute left at its default)."""

    n: int | str = 2
    c: int = 4
    h: int = 6
    w: int = 5
    m: int = 6
    kernel: tuple[int, int] = (3, 3)
    pads: tuple[int, int, int, int] = (1, 1, 1, 1)
    strides: tuple[int, int] = (1, 1)
    dilations: tuple[int, int] = (1, 1)
    group: int = 1
    offset_group: int = 1
    mask: bool = True
    bias: bool = True
    kernel_shape: bool = True
    attrs: bool = True
    elem: int = TensorProto.FLOAT
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def out(self) -> tuple[int, int]:
        sizes = []
        for axis, length in enumerate((self.h, self.w)):
            span = self.dilations[axis] * (self.kernel[axis] - 1) + 1
            sizes.append((length + self.pads[axis] + self.pads[axis + 2] - span) // self.strides[axis] + 1)
        return sizes[0], sizes[1]

    def shapes(self, n: int | str | None = None) -> dict[str, list[int | str]]:
        n = self.n if n is None else n
        kh, kw = self.kernel
        taps = kh * kw
        shapes: dict[str, list[int | str]] = {
            "x": [n, self.c, self.h, self.w], "w": [self.m, self.c // self.group, kh, kw],
            "o": [n, self.offset_group * 2 * taps, *self.out]}
        if self.bias:
            shapes["b"] = [self.m]
        if self.mask:
            shapes["k"] = [n, self.offset_group * taps, *self.out]
        return shapes


CASES = {
    "defaults-3x3": Case(attrs=False, pads=(0, 0, 0, 0), mask=False, bias=False),
    "torchvision-like": Case(),
    "stride-dilation": Case(h=9, w=8, pads=(2, 1, 2, 1), strides=(2, 1), dilations=(2, 2), kernel_shape=False),
    "groups": Case(c=6, m=4, group=2, offset_group=3, kernel=(2, 3), pads=(1, 0, 0, 2), bias=False),
    "offset-groups-1x1": Case(c=4, m=8, group=4, offset_group=2, kernel=(1, 1), pads=(0, 0, 0, 0), mask=False),
    "asymmetric-stride": Case(h=7, w=9, kernel=(3, 2), pads=(0, 2, 1, 0), strides=(1, 3), dilations=(1, 3)),
}


def _model(case: Case, opset: int = 19) -> onnx.ModelProto:
    attrs: dict[str, object] = {}
    if case.attrs:
        attrs = {"pads": list(case.pads), "strides": list(case.strides), "dilations": list(case.dilations),
                 "group": case.group, "offset_group": case.offset_group}
        if case.kernel_shape:
            attrs["kernel_shape"] = list(case.kernel)
    attrs.update(case.extra)
    names = ["x", "w", "o", "b" if case.bias else "", "k" if case.mask else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("DeformConv", names, ["y"], name="dc", **attrs)
    inputs = [helper.make_tensor_value_info(name, case.elem, shape) for name, shape in case.shapes().items()]
    return make_model([node], inputs, [helper.make_tensor_value_info("y", case.elem, None)], opset)


def _offsets(rng: np.random.Generator, shape: list[int]) -> list[np.ndarray]:
    """Random offsets (up to 3 pixels: many samples outside), quarter pixels (ties, borders), inf and huge."""
    random = rng.uniform(-3.0, 3.0, shape)
    quarters = rng.integers(-12, 13, shape) / 4
    special = rng.choice(np.array([np.inf, -np.inf, 1e30, -1e30, 0.0, -1.0, 1.0, 0.5, -0.5]), shape)
    return [random, quarters, special]


def _feeds(case: Case, seed: int, n: int = 2, dtype: type = np.float32) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shapes = {k: [n if d == case.n else int(d) for d in v] for k, v in case.shapes(n).items()}
    base = {k: rng.standard_normal(s) for k, s in shapes.items() if k not in ("x", "o")}
    if "k" in base:
        base["k"] = rng.uniform(0.0, 1.0, shapes["k"])
    images = [rng.standard_normal(shapes["x"]), *tie_inputs(shapes["x"], np.dtype(dtype), rng)]
    feeds = []
    for i, offset in enumerate(_offsets(rng, shapes["o"])):
        for image in images if i == 0 else images[:2]:
            feed = {**base, "x": image, "o": offset}
            feeds.append({k: np.asarray(v).astype(dtype) for k, v in feed.items()})
    return feeds


def _lowered(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
    result = lowerer.convert(model, target_opset=target)
    ops = {n.op_type for n in result.model.graph.node}
    assert "DeformConv" not in ops and {"GatherElements", "MatMul"} <= ops
    assert default_opset(result.model.opset_import) == target
    rewrites = [r for r in result.report.rewrites if r.rule == "deformconv_19_lowering"]
    assert rewrites and all(r.status == "verified" for r in rewrites)
    return result.model


def _check(original: onnx.ModelProto, converted: onnx.ModelProto, feeds: list[dict[str, np.ndarray]],
           max_ulp: float) -> float:
    """Compare the two models on ``feeds``; the largest ulp distance seen."""
    worst = 0.0
    for feed in feeds:
        (want,) = ort_run(original, [feed])
        (got,) = ort_run(converted, [feed])
        result = compare(got, want, max_ulp=max_ulp)
        assert result.same, result.detail
        worst = max(worst, result.max_ulp)
    return worst


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_attribute_sets(name: str, target: int) -> None:
    case = CASES[name]
    model = _model(case)
    _check(model, _lowered(model, target), _feeds(case, target + len(name)), F32_BUDGET)


@pytest.mark.parametrize(("mask", "bias"), [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("target", [17, 11])
def test_deform_conv_22_with_and_without_mask_and_bias(mask: bool, bias: bool, target: int) -> None:
    case = replace(CASES["groups"], mask=mask, bias=bias)
    model = _model(case, opset=22)
    _check(model, _lowered(model, target), _feeds(case, 22 + target + 2 * mask + bias), F32_BUDGET)


def test_dynamic_batch() -> None:
    case = replace(CASES["stride-dilation"], n="n")
    model = _model(case)
    converted = _lowered(model, 13)
    for n in (1, 3):
        _check(model, converted, _feeds(case, n, n=n), F32_BUDGET)


def test_double() -> None:
    case = replace(CASES["groups"], elem=TensorProto.DOUBLE)
    model = _model(case)
    _check(model, _lowered(model, 11), _feeds(case, 5, dtype=np.float64), EXPANSION_ULPS[np.dtype(np.float64)])


def test_infinite_pixel_read_by_an_outside_corner() -> None:
    """The kernel reads pixel (0, 0) with weight 0 for an outside corner: ``0 * inf`` is NaN, reproduced."""
    case = replace(CASES["torchvision-like"], mask=False)
    model = _model(case)
    feed = _feeds(case, 3)[0]
    feed["x"][:, :, 0, 0] = np.inf
    ((want,),) = ort_run(model, [feed])
    assert np.isnan(want).any()
    _check(model, _lowered(model, 11), [feed], 0.0)


def test_measured_ulp() -> None:
    """Random float32 inputs at several scales: within the budget; onnxruntime's CPU kernel is matched exactly."""
    rng = np.random.default_rng(19)
    worst = 0.0
    for case in (CASES["torchvision-like"], replace(CASES["torchvision-like"], c=32, m=16),
                 CASES["asymmetric-stride"], CASES["groups"]):
        model = _model(case)
        converted = _lowered(model, 11)
        feeds = []
        for _ in range(5):
            feed = _feeds(case, int(rng.integers(1 << 30)))[0]
            feed["x"] = feed["x"] * np.float32(10.0 ** rng.integers(-3, 4))
            feeds.append(feed)
        worst = max(worst, _check(model, converted, feeds, F32_BUDGET))
    assert worst == 0.0  # term for term onnxruntime 1.32's kernel and GEMM; a new kernel may move this within budget


def test_registry_steps_22_down_to_the_lowering() -> None:
    entry = REGISTRY.lowering_entry("DeformConv", 19)
    assert entry is not None and entry.budgeted
    assert "lowering" in " ".join(REGISTRY.explain("DeformConv", 22, 11)).lower()


@pytest.mark.parametrize(("case", "target", "needle"), [
    (Case(), 10, "the lowering needs GatherElements (opset >= 11); the lowest opset this node can be taken to is 11"),
    (Case(elem=TensorProto.FLOAT16), 13, "input 'x' is float16, and the lowering takes float and double"),
    (Case(extra={"strides": [1, 1, 1]}), 17, "strides=[1, 1, 1] has 3 values, and the lowering covers 2-D"),
    (Case(extra={"kernel_shape": [2, 2]}), 17, "kernel_shape=[2, 2] differs from W's spatial dims [3, 3]"),
    (Case(c=6, offset_group=4), 13, "the node is inconsistent (C=6, W [6, 6, 3, 3], group=1, offset_group=4"),
])
def test_refusals(case: Case, target: int, needle: str) -> None:
    with pytest.raises(ConversionError) as info:
        lowerer.convert(_model(case), target_opset=target)
    message = str(info.value)
    assert f"node 'dc' (DeformConv-19, in graph) cannot be converted to opset {target}: " in message
    assert needle in message
    assert "\n" not in message


@pytest.mark.parametrize(("index", "axis", "needle"), [
    (0, 2, "X 'x' has shape [2, 4, ?, 5], and the lowering needs it 4-D with dims 1..3 static and > 0"),
    (1, 0, "W 'w' has shape [?, 4, 3, 3], and the lowering needs it 4-D with dims 0..3 static and > 0"),
])
def test_refusal_of_a_dynamic_dim_names_it(index: int, axis: int, needle: str) -> None:
    model = _model(Case())
    model.graph.input[index].type.tensor_type.shape.dim[axis].dim_param = "d"
    with pytest.raises(ConversionError) as info:
        lowerer.convert(model, target_opset=13)
    assert needle in str(info.value)


def _fixture() -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, object]]:
    manifest = json.loads((FIXTURES / "MANIFEST.json").read_text())
    model = onnx.load(str(FIXTURES / manifest["model"]))
    inputs = dict(np.load(FIXTURES / manifest["inputs"]))
    return model, inputs, manifest


@pytest.mark.parametrize("target", TARGETS)
def test_torchvision_export(target: int) -> None:
    model, inputs, manifest = _fixture()
    assert default_opset(model.opset_import) == 19
    assert any(n.op_type == "DeformConv" for n in model.graph.node)
    converted = _lowered(model, target)
    rng = np.random.default_rng(target)
    feeds = [inputs, *({k: (rng.standard_normal((n, *v.shape[1:])) * 2).astype(v.dtype) for k, v in inputs.items()}
                       for n in (1, 2, 3))]  # the export's batch is dynamic
    _check(model, converted, feeds, F32_BUDGET)
    ((got,),) = ort_run(converted, [inputs])
    expected = np.load(FIXTURES / str(manifest["torch_outputs"]))["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)  # torch's own kernel, another summation order
