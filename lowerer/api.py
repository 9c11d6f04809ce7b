"""The Python API: :func:`convert` on a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import onnx

from lowerer.errors import InputError, VerificationError
from lowerer.opsets import default_opset
from lowerer.report import Report, Rewrite

__all__ = ["ConvertResult", "convert"]

ModelT = TypeVar("ModelT")


@dataclass
class ConvertResult(Generic[ModelT]):
    """The converted model (same kind as given; a ModelProto for a path) and the report."""

    model: ModelT
    report: Report


def convert(
    model: onnx.ModelProto | Any | str | os.PathLike[str],
    *,
    target_opset: int | None = None,
    decompose: Iterable[str] | str = (),
    verify: bool = True,
    providers: Sequence[str] | None = None,
    seed: int = 0,
    verify_model: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ConvertResult[Any]:
    """Convert a model to ``target_opset`` and/or decompose ops, verifying each rewrite.

    Args:
        model: an ``onnx.ModelProto`` (not modified), an ``onnx_ir.Model`` (not modified), the
            path of an .onnx file (external data stays unloaded; paths are checked), or a model
            already read with :func:`lowerer.model_io.load_input` (whose ``model`` is then converted in
            place). Each goes through the same checks
            (:func:`lowerer.structure.check_structure`, :func:`lowerer.model_io.check_external_data`).
        target_opset: the default-domain opset to convert to; None keeps the model's.
        decompose: names of decompositions to apply (``hardmax``, ``globalmaxpool``, ``all``).
        verify: run each rewrite before and after in onnxruntime and compare exactly.
        providers: onnxruntime execution providers to verify on (``cuda``, ``dml``, ``cpu`` or full
            names; a list or a comma-separated string), checked even when ``verify`` is False; None
            picks CUDA, then DirectML, then CPU, whichever is installed.
        seed: seed of the generated verification inputs (an integer, 0 or more).
        verify_model: also run the whole original and converted models and compare their outputs.
        progress: called with (rewrites verified so far, distinct checks run) after each rewrite.

    Returns:
        A :class:`ConvertResult` whose ``model`` is the same kind as given.

    Raises:
        LowererError: bad input or a bad option, of any type (``InputError``), a conversion that
            cannot be done exactly (``ConversionError``), or a failed check (``VerificationError``,
            whose ``report`` holds the report up to the failure).

    Example::

        import lowerer
        result = lowerer.convert("model.onnx", target_opset=11, decompose=["hardmax"])
        onnx.save(result.model, "model-11.onnx")
        for rewrite in result.report:
            print(rewrite.node, rewrite.op_type, rewrite.from_version, rewrite.to_opset)
    """
    from lowerer.model_io import InputModel, check_external_data, load_input
    from lowerer.options import check_flag, check_progress, decompose_names, provider_list, seed_value
    from lowerer.pipeline import run_pipeline
    from lowerer.structure import check_structure

    # The options first: a bad one is refused before the model is read.
    if target_opset is not None:
        from lowerer.opsets import check_target_opset

        check_target_opset(target_opset)
    names = decompose_names(decompose)
    verify, verify_model = check_flag(verify, "verify"), check_flag(verify_model, "verify_model")
    chosen = provider_list(providers)
    seed = seed_value(seed)
    progress = check_progress(progress)

    kind = "proto"
    source_dir: Path | None = None
    # The bytes the working copy was parsed from: they spare the pipeline a name scan and let shape
    # inference start early without serializing (see run_pipeline).
    serialized: bytes | None = None
    if isinstance(model, (str, os.PathLike, InputModel)):
        loaded = model if isinstance(model, InputModel) else load_input(model)
        source_dir = loaded.directory  # where external data is found, as onnx.load does
        proto, serialized = loaded.model, loaded.serialized  # converted in place: an InputModel is used up
        kind = "path"
    else:
        if isinstance(model, onnx.ModelProto):
            proto = onnx.ModelProto()
            try:  # the copy, by way of the bytes (as fast as CopyFrom)
                serialized = model.SerializeToString()
                proto.ParseFromString(serialized)
            except Exception:  # e.g. over 2 GiB: protobuf cannot serialize it
                serialized = None
                proto.CopyFrom(model)
        elif _is_ir_model(model):
            proto = _from_ir(model)
            kind = "ir"
            try:  # the bytes spare walks over every tensor and name (see run_pipeline)
                serialized = proto.SerializeToString()
            except Exception:  # over 2 GiB
                serialized = None
        else:
            raise InputError(f"cannot convert a {type(model).__name__}: give an onnx.ModelProto, an "
                             "onnx_ir.Model or a path")
        if proto.ir_version <= 0 or not proto.HasField("graph"):
            raise InputError("the model is not an ONNX model (no IR version or no graph)")
        check_external_data(proto, None, source="the model", serialized=serialized)
        check_structure(proto, source="the model", serialized=serialized)
    original = None
    if verify_model:
        original = onnx.ModelProto()
        original.CopyFrom(proto)
    verifier = None
    seen: list[Rewrite] = []
    if verify:
        from lowerer.verification import make_verifier

        verifier = make_verifier(providers=chosen, seed=seed, progress=progress)
    try:
        report = run_pipeline(proto, target_opset=target_opset, decompose=names,
                              verifier=_recording(verifier, seen) if verifier is not None else None,
                              serialized=serialized)
    except VerificationError as e:  # the report so far, the failing rewrite last, for the user to read
        e.report = Report(rewrites=seen, source_opset=default_opset(proto.opset_import), target_opset=target_opset,
                          decompose=tuple(sorted(names)), verification=verifier.summary() if verifier else None,
                          notes=["verification failed: the conversion stopped at the last rewrite listed"])
        raise
    del serialized
    if verifier is not None:
        report.verification = verifier.summary()
    else:
        for rewrite in report.rewrites:
            rewrite.reason = "verification was turned off (verify=False / --no-verify)"
    if original is not None:
        from lowerer.verification import verify_models

        try:
            verify_models(original, proto, providers=chosen, seed=seed, base_dir=source_dir, report=report)
        except VerificationError as e:
            e.report = report
            raise
    if kind == "ir":
        import onnx_ir as ir

        return ConvertResult(ir.serde.deserialize_model(proto), report)
    return ConvertResult(proto, report)


def _recording(verifier: Callable[[Rewrite], None], seen: list[Rewrite]) -> Callable[[Rewrite], None]:
    """``verifier``, also keeping each rewrite it is given (for the report of a failed verification)."""

    def verify(rewrite: Rewrite) -> None:
        seen.append(rewrite)
        verifier(rewrite)

    return verify


def _from_ir(model: Any) -> onnx.ModelProto:
    """Serialize an ``onnx_ir.Model``; what onnx_ir cannot serialize is an InputError, not its SerdeError."""
    import onnx_ir as ir

    try:
        return ir.serde.serialize_model(model)
    except Exception as e:
        text = " ".join(str(e).split())
        raise InputError(f"the onnx_ir model cannot be serialized ({type(e).__name__}: {text[:300]}); is it "
                         "a valid model?") from None


def _is_ir_model(model: object) -> bool:
    module = type(model).__module__ or ""
    if not module.startswith("onnx_ir"):
        return False
    import onnx_ir as ir

    return isinstance(model, ir.Model)
