"""The Python API: :func:`convert` on a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, overload

import onnx

from lowerer.errors import InputError, LowererError, VerificationError
from lowerer.opsets import default_opset
from lowerer.progress import ProgressCallback, notify
from lowerer.report import Report, Rewrite

if TYPE_CHECKING:
    import onnx_ir as ir

    from lowerer.verification.whole import ModelCheckOptions

__all__ = ["ConvertResult", "HasIrModel", "convert"]

logger = logging.getLogger(__name__)

ModelT = TypeVar("ModelT")


@dataclass
class ConvertResult(Generic[ModelT]):
    """The converted model (same kind as given; a ModelProto for a path) and the report."""

    model: ModelT
    report: Report


class HasIrModel(Protocol):
    """Anything holding an ``onnx_ir.Model`` in ``.model``, e.g. ``torch.onnx.ONNXProgram``."""

    @property
    def model(self) -> ir.Model:
        """The onnx_ir model."""
        ...


@overload
def convert(model: onnx.ModelProto, *, target_opset: int | None = ..., decompose: Iterable[str] | str = ...,
            verify: bool = ..., providers: Sequence[str] | None = ..., seed: int = ...,
            verify_model: bool | ModelCheckOptions = ..., optimize: bool | ModelCheckOptions = ...,
            progress: ProgressCallback | None = ..., max_ulp: int | None = ...,
            exact: bool = ..., for_backend: str | None = ...,
            allow_fallback: bool = ...) -> ConvertResult[onnx.ModelProto]: ...
@overload
def convert(model: str | os.PathLike[str], *, target_opset: int | None = ..., decompose: Iterable[str] | str = ...,
            verify: bool = ..., providers: Sequence[str] | None = ..., seed: int = ...,
            verify_model: bool | ModelCheckOptions = ..., optimize: bool | ModelCheckOptions = ...,
            progress: ProgressCallback | None = ..., max_ulp: int | None = ...,
            exact: bool = ..., for_backend: str | None = ...,
            allow_fallback: bool = ...) -> ConvertResult[onnx.ModelProto]: ...
@overload
def convert(model: ir.Model | HasIrModel, *, target_opset: int | None = ..., decompose: Iterable[str] | str = ...,
            verify: bool = ..., providers: Sequence[str] | None = ..., seed: int = ...,
            verify_model: bool | ModelCheckOptions = ..., optimize: bool | ModelCheckOptions = ...,
            progress: ProgressCallback | None = ..., max_ulp: int | None = ...,
            exact: bool = ..., for_backend: str | None = ...,
            allow_fallback: bool = ...) -> ConvertResult[ir.Model]: ...


def convert(
    model: onnx.ModelProto | ir.Model | HasIrModel | str | os.PathLike[str],
    *,
    target_opset: int | None = None,
    decompose: Iterable[str] | str = (),
    verify: bool = True,
    providers: Sequence[str] | None = None,
    seed: int = 0,
    verify_model: bool | ModelCheckOptions = False,
    optimize: bool | ModelCheckOptions = False,
    progress: ProgressCallback | None = None,
    max_ulp: int | None = None,
    exact: bool = False,
    for_backend: str | None = None,
    allow_fallback: bool = False,
) -> ConvertResult[onnx.ModelProto] | ConvertResult[ir.Model]:
    """Convert a model to ``target_opset`` and/or decompose ops, verifying each rewrite.

    Args:
        model: an ``onnx.ModelProto`` (not modified), an ``onnx_ir.Model`` (not modified), anything
            holding one in ``.model`` (a ``torch.onnx.ONNXProgram``; torch is not imported), the
            path of an .onnx file (external data stays unloaded; paths are checked), or a model
            already read with :func:`lowerer.model_io.load_input` (whose ``model`` is then converted in
            place). Each goes through the same checks
            (:func:`lowerer.structure.check_structure`, :func:`lowerer.model_io.check_external_data`).
        target_opset: the default-domain opset to convert to; None keeps the model's.
        decompose: names of decompositions to apply (``hardmax``, ``globalmaxpool``, ``all``).
        verify: run each rewrite before and after in onnxruntime and compare exactly.
        providers: onnxruntime execution providers to verify on (``cuda``, ``dml``, ``cpu`` or full
            names; a list or a comma-separated string), a strict list: one not installed is an error,
            checked even when ``verify`` is False; None picks CUDA, then DirectML, then CPU, whichever is
            installed.
        seed: seed of the generated verification inputs (an integer, 0 or more).
        verify_model: also run the whole original and converted models and compare their outputs:
            True with the defaults (exact, generated inputs), or a
            :class:`~lowerer.verification.whole.ModelCheckOptions` (tolerance, input shapes, value
            ranges, inputs to load or save). A check that cannot run raises unless
            ``allow_unverified`` is set there.
        optimize: afterwards fold constants and remove dead nodes with ``onnxscript.optimizer``
            (functions are kept), and check that the optimized model computes what the converted one
            does: a whole-model comparison, steered by the ``ModelCheckOptions`` given here (True:
            ``verify_model``'s options, or the defaults). Needs onnxscript (``lowerer[optimize]``).
        progress: receives :class:`~lowerer.progress.Progress` updates of the long phases.
        max_ulp: the error budget of function-body expansions, in ulp (None: the per-type default of
            :data:`lowerer.verification.compare.EXPANSION_ULPS`; see the README's "Verification").
        exact: accept no difference at all (expansions and computing kernels must be bit-identical on
            the verification inputs).
        for_backend: a backend (``cpu``, ``cuda``, ``dml``, ``tensorrt`` (``tensorrt<9.2`` ...), ``openvino``,
            ``coreml``, ``qnn``, ``webgpu``, ``webnn``): after the target opset and ``decompose``, rewrite
            exactly the nodes its profile (``lowerer/backends/<name>.json``) names with exact forms, each
            verified; where its onnxruntime provider is installed, prove the placement (the model opens
            with that provider and CPU fallback disabled). ``report.backend`` says what was done and
            whether placement was proven (see :mod:`lowerer.backends`).
        allow_fallback: with ``for_backend``, keep a node the profile names that no exact form replaces
            (a warning), and accept an unproven placement, instead of refusing.

    Returns:
        A :class:`ConvertResult` whose ``model`` is the same kind as given (an ``onnx_ir.Model``
        for an object holding one).

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
    verify = check_flag(verify, "verify")
    exact = check_flag(exact, "exact")
    if max_ulp is not None and (not isinstance(max_ulp, int) or isinstance(max_ulp, bool) or max_ulp < 0):
        raise InputError(f"max_ulp must be a non-negative integer or None, not {max_ulp!r}")
    if exact and max_ulp:
        raise InputError("exact=True accepts no difference; it cannot go with max_ulp")
    chosen = provider_list(providers)
    seed = seed_value(seed)
    progress = check_progress(progress)
    options = _model_check_options(verify_model)
    plan = None
    if for_backend is not None:  # --for BACKEND (lowerer.backends)
        from lowerer.backends.lowering import make_plan

        plan = make_plan(for_backend, allow_fallback)
    elif allow_fallback is not False:
        raise InputError("allow_fallback goes with for_backend (a backend name)")

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
        else:
            ir_model = _ir_model_of(model)
            if ir_model is None:
                raise InputError(f"cannot convert a {type(model).__name__}: give an onnx.ModelProto, an "
                                 "onnx_ir.Model (or an object holding one in .model, like torch.onnx.ONNXProgram) "
                                 "or a path")
            proto = _from_ir(ir_model)
            kind = "ir"
            try:  # the bytes spare walks over every tensor and name (see run_pipeline)
                serialized = proto.SerializeToString()
            except Exception:  # over 2 GiB
                serialized = None
        if proto.ir_version <= 0 or not proto.HasField("graph"):
            raise InputError("the model is not an ONNX model (no IR version or no graph)")
        check_external_data(proto, None, source="the model", serialized=serialized)
        check_structure(proto, source="the model", serialized=serialized)
    original = None
    if options is not None or serialized is None:
        original = onnx.ModelProto()
        original.CopyFrom(proto)
    verifier = None
    seen: list[Rewrite] = []
    if verify:
        from lowerer.verification import make_verifier

        def on_verified(rewrites: int, checks: int) -> None:
            notify(progress, "verify", rewrites, None, "rewrites", f"{checks} distinct checks")

        verifier = make_verifier(providers=chosen, seed=seed, progress=on_verified if progress else None,
                                 max_ulp=max_ulp, exact=exact)
    source_ir = proto.ir_version
    logger.info("converting: IR version %d, %d graph nodes, %d functions; target opset %s, decompose %s",
                proto.ir_version, len(proto.graph.node), len(proto.functions), target_opset,
                ", ".join(sorted(names)) or "none")
    try:
        report = run_pipeline(proto, target_opset=target_opset, decompose=names,
                              verifier=_recording(verifier, seen) if verifier is not None else None,
                              serialized=serialized)
        if plan is not None:
            from lowerer.backends.lowering import lower

            report = lower(proto, plan, report, _recording(verifier, seen) if verifier is not None else None)
    except VerificationError as e:  # the report so far, the failing rewrite last, for the user to read
        e.report = Report(rewrites=seen, source_opset=default_opset(proto.opset_import), target_opset=target_opset,
                          decompose=tuple(sorted(names)), verification=verifier.summary() if verifier else None,
                          notes=["verification failed: the conversion stopped at the last rewrite listed"])
        raise
    if target_opset is not None or report.decompose or plan is not None:
        from lowerer.validation import validate_output

        validate_output(proto, serialized if serialized is not None else original, report, target_opset,
                        input_checked=kind == "path")  # a file's input passed onnx's checker (load_input)
    del serialized
    report.source_ir_version, report.ir_version = source_ir, proto.ir_version
    if verifier is not None:
        report.verification = verifier.summary()
        v = report.verification
        logger.info("verified %s rewrites with %s distinct checks (%s sessions) in %.2f s on %s", v["rewrites"],
                    v["distinct_checks"], v["sessions"], v["seconds"], ", ".join(v["providers"]))
    else:
        for rewrite in report.rewrites:
            rewrite.reason = "verification was turned off (verify=False / --no-verify)"
    if original is not None:
        from lowerer.verification.whole import ModelSource, verify_models

        try:
            verify_models(ModelSource(original, source_dir, "original"), ModelSource(proto, source_dir, "converted"),
                          options=options, providers=chosen, seed=seed, report=report, progress=progress)
        except VerificationError as e:
            e.report = report
            raise
        del original
    if optimize is not False and optimize is not None:
        from lowerer.optimize import optimize_model

        optimize_options = options if optimize is True else _model_check_options(optimize, "optimize")
        proto = optimize_model(proto, source_dir, report=report, options=optimize_options, providers=chosen,
                               seed=seed, progress=progress)
    if plan is not None:
        from lowerer.backends.lowering import prove

        prove(proto, plan, report, source_dir)
    if kind == "ir":
        return ConvertResult(_to_ir(proto), report)
    return ConvertResult(proto, report)


def _recording(verifier: Callable[[Rewrite], None], seen: list[Rewrite]) -> Callable[[Rewrite], None]:
    """``verifier``, also keeping each rewrite it is given (for the report of a failed verification)."""

    def verify(rewrite: Rewrite) -> None:
        seen.append(rewrite)
        verifier(rewrite)

    return verify


def _model_check_options(value: object, name: str = "verify_model") -> ModelCheckOptions | None:
    from lowerer.verification.whole import ModelCheckOptions

    if value is False or value is None:
        return None
    if value is True:
        return ModelCheckOptions()
    if isinstance(value, ModelCheckOptions):
        return value
    raise InputError(f"{name} must be True, False or a ModelCheckOptions, not {type(value).__name__}")


def _ir_model_of(model: object) -> ir.Model | None:
    """``model`` itself when it is an ``onnx_ir.Model``, or its ``.model`` when that is one; else None.

    onnx_ir is imported only when the object's type comes from it (so torch is never imported).
    """
    for candidate in (model, getattr(model, "model", None)):
        module = type(candidate).__module__ or ""
        if module.startswith("onnx_ir"):
            import onnx_ir as ir

            if isinstance(candidate, ir.Model):
                return candidate
    return None


def _from_ir(model: ir.Model) -> onnx.ModelProto:
    """The ModelProto of an onnx_ir model; onnx_ir's errors become :class:`InputError`."""
    import onnx_ir as ir

    try:
        return ir.serde.serialize_model(model)
    except LowererError:
        raise
    except Exception as e:
        raise InputError(f"cannot read the onnx_ir model: onnx_ir says: {type(e).__name__}: "
                         f"{' '.join(str(e).split())}") from None


def _to_ir(proto: onnx.ModelProto) -> ir.Model:
    """The converted model as an onnx_ir model; onnx_ir's errors become :class:`ConversionError`."""
    import onnx_ir as ir

    from lowerer.errors import ConversionError

    try:
        return ir.serde.deserialize_model(proto)
    except Exception as e:
        raise ConversionError(f"onnx_ir cannot represent the converted model: {type(e).__name__}: "
                              f"{' '.join(str(e).split())}") from None
