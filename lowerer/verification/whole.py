"""Whole-model comparison: run two models on the same generated inputs and compare every graph output."""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from lowerer.errors import VerificationError
from lowerer.report import Report
from lowerer.verification.compare import compare
from lowerer.verification.inputs import generate
from lowerer.verification.providers import select_providers
from lowerer.verification.runner import OrtEngine, SessionMaker, ort_can_exchange

__all__ = ["MAX_MODEL_BYTES", "ModelComparison", "compare_models", "verify_models"]

#: Models (with their external data) larger than this are not run whole.
MAX_MODEL_BYTES = 1 << 30
_KINDS = ("normal", "ties", "all-equal")


@dataclass
class ModelComparison:
    """The outcome of a whole-model comparison.

    Attributes:
        status: ``equal``, ``different`` or ``skipped``.
        reason: what differs, or why it was skipped, or what was compared.
    """

    status: str
    reason: str
    provider: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"status": self.status, "reason": self.reason, "provider": self.provider, "details": self.details}


def _with_data(model: onnx.ModelProto, base_dir: Path | None) -> onnx.ModelProto | str:
    from lowerer.model_io import external_data_locations

    if any(o.type.tensor_type.elem_type == 0 for o in model.graph.output if o.type.HasField("tensor_type")):
        typed = onnx.ModelProto()
        typed.CopyFrom(model)
        for o in typed.graph.output:  # onnxruntime infers an output's type, but refuses type 0
            if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type == 0:
                o.ClearField("type")
        model = typed
    locations = external_data_locations(model)
    if not locations:
        return model if model.ByteSize() <= MAX_MODEL_BYTES else f"the model is over {MAX_MODEL_BYTES >> 20} MiB"
    if base_dir is None:
        return "the model keeps its weights in external data and no directory to load them from was given"
    total = model.ByteSize() + sum(os.path.getsize(base_dir / loc) for loc in locations if (base_dir / loc).is_file())
    if total > MAX_MODEL_BYTES:
        return f"the model with its external data is {total >> 20} MiB, over the {MAX_MODEL_BYTES >> 20} MiB limit"
    from onnx.external_data_helper import load_external_data_for_model

    loaded = onnx.ModelProto()
    loaded.CopyFrom(model)
    try:
        load_external_data_for_model(loaded, str(base_dir))
    except (OSError, ValueError) as e:
        return f"cannot load its external data: {e}"
    return loaded


def _inputs(model: onnx.ModelProto) -> list[tuple[str, int, list[int | str]]] | str:
    inits = {t.name for t in model.graph.initializer} | {s.values.name for s in model.graph.sparse_initializer}
    out: list[tuple[str, int, list[int | str]]] = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            return f"graph input {vi.name!r} is not a tensor"
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            return f"graph input {vi.name!r} has no shape"
        dims: list[int | str] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or f"?{i}")
                                 for i, d in enumerate(tt.shape.dim)]
        out.append((vi.name, tt.elem_type, dims))
    return out


def compare_models(a: onnx.ModelProto, b: onnx.ModelProto, *, providers: Sequence[str] | None = None, seed: int = 0,
                   base_dir_a: Path | None = None, base_dir_b: Path | None = None) -> ModelComparison:
    """Run ``a`` and ``b`` on the same generated inputs and compare every graph output exactly.

    Dynamic dims are bound to 1 and to 2 (one value per named dim); each binding gets the
    ``normal``, ``ties`` and ``all-equal`` input sets. Outputs are matched by position and
    compared exactly (NaN equal to NaN).

    Raises:
        InputError: an unknown or unavailable provider.
    """
    chosen = select_providers(providers)
    full_a, full_b = _with_data(a, base_dir_a), _with_data(b, base_dir_b)
    for name, m in (("first", full_a), ("second", full_b)):
        if isinstance(m, str):
            return ModelComparison("skipped", f"the {name} model was not run: {m}")
    assert not isinstance(full_a, str) and not isinstance(full_b, str)
    ins_a, ins_b = _inputs(full_a), _inputs(full_b)
    if isinstance(ins_a, str) or isinstance(ins_b, str):
        return ModelComparison("skipped", f"cannot generate inputs: {ins_a if isinstance(ins_a, str) else ins_b}")
    sig_a = [(n, e, len(d)) for n, e, d in ins_a]
    sig_b = [(n, e, len(d)) for n, e, d in ins_b]
    if sig_a != sig_b:
        return ModelComparison("skipped", f"the models take different inputs: {sig_a} vs {sig_b}")
    if len(a.graph.output) != len(b.graph.output):
        return ModelComparison("different", f"the models have {len(a.graph.output)} and {len(b.graph.output)} outputs")
    from lowerer.reference import np_dtype

    dtypes = [np_dtype(e) for _, e, _ in ins_a]
    why = ort_can_exchange(dtypes)
    if why:
        return ModelComparison("skipped", why)
    maker = SessionMaker(chosen)
    sa = maker.create(full_a)
    if isinstance(sa, str):
        return ModelComparison("skipped", f"onnxruntime cannot run the first model: {sa}")
    sb = maker.create(full_b)
    if isinstance(sb, str):
        return ModelComparison("skipped", f"onnxruntime cannot run the second model: {sb}")
    return _run(a, sa, sb, ins_a, seed)


def _run(a: onnx.ModelProto, sa: OrtEngine, sb: OrtEngine, ins: list[tuple[str, int, list[int | str]]],
         seed: int) -> ModelComparison:
    rng = np.random.default_rng([seed, zlib.crc32(a.graph.name.encode())])
    out_names = [o.name for o in a.graph.output]
    used: list[str] = []
    errors: list[str] = []
    for size in (1, 2):
        shapes = [tuple(d if isinstance(d, int) else size for d in dims) for _, _, dims in ins]
        for kind in _KINDS:
            feeds = {n: generate(kind, e, s, rng) for (n, e, _), s in zip(ins, shapes, strict=True)}
            parts = [f"{n}: [{','.join(map(str, s))}]" for (n, _, _), s in zip(ins, shapes, strict=True)]
            desc = f"{kind} ({'; '.join(parts)})"
            try:
                ra = sa.run(feeds)
            except Exception as e:
                errors.append(f"{desc}: {' '.join(str(e).split())[:200]}")
                break
            try:
                rb = sb.run(feeds)
            except Exception as e:
                return ModelComparison("different", f"input set {desc}: the first model runs but the second raises: "
                                                    f"{' '.join(str(e).split())[:200]}", sa.label)
            used.append(desc)
            for name, x, y in zip(out_names, ra, rb, strict=True):
                diff, _ = compare(x, y)
                if diff is not None:
                    text = diff.describe().replace("original", "first").replace("replacement", "second")
                    return ModelComparison("different", f"input set {desc}: output {name!r} {text}", sa.label,
                                           {"input_set": desc, "output": name})
    if not used:
        return ModelComparison("skipped", f"the first model did not run on the generated inputs ({errors[0]})",
                               sa.label)
    details: dict[str, Any] = {"input_sets": used, "outputs": out_names}
    if errors:
        details["skipped"] = errors
    for side, eng in (("first", sa), ("second", sb)):
        if eng.placement:
            details[f"{side}_placement"] = eng.placement
    return ModelComparison("equal", f"{len(out_names)} output(s) equal on {len(used)} input sets on {sa.label}",
                           sa.label, details)


def verify_models(original: onnx.ModelProto, converted: onnx.ModelProto, *, providers: Sequence[str] | None,
                  seed: int, base_dir: Path | None, report: Report) -> None:
    """Compare the whole original and converted models; note the outcome in ``report``.

    Raises:
        VerificationError: an output differs.
    """
    result = compare_models(original, converted, providers=providers, seed=seed, base_dir_a=base_dir,
                            base_dir_b=base_dir)
    text = result.reason.replace("first model", "original model").replace("second model", "converted model")
    text = text.replace("the first runs but the second raises", "the original runs but the converted model raises")
    result.reason = text
    report.model_check = result.to_dict()  # type: ignore[attr-defined]
    report.notes.append(f"whole-model check: {result.status}: {text}")
    if result.status == "different":
        text = text.replace("first", "original").replace("second", "converted")
        raise VerificationError(f"whole-model check failed on {result.provider}: the converted model computes "
                                f"different outputs: {text}")
