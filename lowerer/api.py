"""The Python API: :func:`convert` on a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

import onnx

from lowerer.core.errors import InputError, LowererError
from lowerer.core.progress import ProgressCallback, notify
from lowerer.core.report import Report

if TYPE_CHECKING:
    import onnx_ir as ir

    from lowerer.model_io.input_check import InputCheck
    from lowerer.model_io.reading import HeldWeights
    from lowerer.passes import State
    from lowerer.passes.options import ConvertOptions
    from lowerer.verification.whole import ModelCheckOptions

__all__ = ["ConvertResult", "HasIrModel", "convert", "run"]

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
            allow_fallback: bool = ..., ir_version: int | None = ...,
            no_loops: bool = ..., fold_dequantize: bool = ...,
            keep_imports: bool = ..., strict_backend: bool = ...) -> ConvertResult[onnx.ModelProto]: ...
@overload
def convert(model: str | os.PathLike[str], *, target_opset: int | None = ..., decompose: Iterable[str] | str = ...,
            verify: bool = ..., providers: Sequence[str] | None = ..., seed: int = ...,
            verify_model: bool | ModelCheckOptions = ..., optimize: bool | ModelCheckOptions = ...,
            progress: ProgressCallback | None = ..., max_ulp: int | None = ...,
            exact: bool = ..., for_backend: str | None = ...,
            allow_fallback: bool = ..., ir_version: int | None = ...,
            no_loops: bool = ..., fold_dequantize: bool = ...,
            keep_imports: bool = ..., strict_backend: bool = ...) -> ConvertResult[onnx.ModelProto]: ...
@overload
def convert(model: ir.Model | HasIrModel, *, target_opset: int | None = ..., decompose: Iterable[str] | str = ...,
            verify: bool = ..., providers: Sequence[str] | None = ..., seed: int = ...,
            verify_model: bool | ModelCheckOptions = ..., optimize: bool | ModelCheckOptions = ...,
            progress: ProgressCallback | None = ..., max_ulp: int | None = ...,
            exact: bool = ..., for_backend: str | None = ...,
            allow_fallback: bool = ..., ir_version: int | None = ...,
            no_loops: bool = ..., fold_dequantize: bool = ...,
            keep_imports: bool = ..., strict_backend: bool = ...) -> ConvertResult[ir.Model]: ...


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
    ir_version: int | None = None,
    no_loops: bool = False,
    fold_dequantize: bool = False,
    keep_imports: bool = False,
    strict_backend: bool = False,
) -> ConvertResult[onnx.ModelProto] | ConvertResult[ir.Model]:
    """Convert a model to ``target_opset`` and/or decompose ops, verifying each rewrite.

    Args:
        model: an ``onnx.ModelProto`` (not modified), an ``onnx_ir.Model`` (not modified), anything
            holding one in ``.model`` (a ``torch.onnx.ONNXProgram``; torch is not imported), the
            path of an .onnx file (external data stays unloaded; paths are checked), or a model
            already read with :func:`lowerer.model_io.reading.load_input` (whose ``model`` is then converted
            in place). Each goes through the same checks (:func:`lowerer.model_io.structure.check_structure`,
            :func:`lowerer.model_io.external_data.check_external_data`).
        target_opset: the default-domain opset to convert to; None keeps the model's.
        decompose: decompositions to apply, a list of names or a comma-separated string,
            case-insensitive: ``hardmax`` and ``globalmaxpool`` (lowerer's exact decompositions), ``all``
            (both of those), or any op with a function body in onnx's schemas, expanded into that body
            (``layernormalization``, ``gelu``, ``hardswish`` ...). Examples: ``["hardmax"]``,
            ``"hardmax,layernormalization"``, ``"all"``.
        verify: run each rewrite before and after in onnxruntime and compare exactly.
        providers: onnxruntime execution providers to verify on (``cuda``, ``dml``, ``cpu`` or full
            names; a list or a comma-separated string), a strict list: one not installed is an error,
            checked even when ``verify`` is False; None picks CUDA, then DirectML, then CPU, whichever is
            installed.
        seed: seed of the generated verification inputs (an integer, 0 or more).
        verify_model: also run the whole original and converted models and compare their outputs:
            True with the defaults (generated inputs; float outputs judged by the rewrites' own budgets,
            exact where every rewrite was exact or with ``exact``), or a
            :class:`~lowerer.verification.whole.ModelCheckOptions` (tolerance, input shapes, value
            ranges, inputs to load or save). A check that cannot run raises unless
            ``allow_unverified`` is set there.
        optimize: afterwards fold constants and remove dead nodes with ``onnxscript.optimizer``
            (functions are kept), and check that the optimized model computes what the converted one
            does: a whole-model comparison, steered by the ``ModelCheckOptions`` given here (True:
            ``verify_model``'s options, or the defaults). Needs onnxscript (``lowerer[optimize]``).
        progress: receives :class:`~lowerer.core.progress.Progress` updates of the long phases.
        max_ulp: the error budget of function-body expansions, in ulp (None: the per-type default of
            :data:`lowerer.verification.compare.EXPANSION_ULPS`; see the README's "Verification").
        exact: accept no difference at all (expansions and computing kernels must be bit-identical on
            the verification inputs).
        for_backend: a runtime target: a backend profile's name (``lowerer/backends/<name>.json``; ``lowerer
            targets`` lists them), optionally with a version bound (``onnxruntime==1.14``, ``tensorrt<9.2``,
            ``qnn==2.7`` ...): without ``target_opset``, the model goes to the highest opset it
            loads when its own is higher, and the IR version must be one it loads; after the target opset and
            ``decompose``, rewrite exactly the nodes its profile (``lowerer/backends/<name>.json``) names
            with exact forms, each verified; where its onnxruntime provider is installed, prove the
            placement (the model opens with that provider and CPU fallback disabled). ``report.backend``
            says what was done and whether placement was proven (see :mod:`lowerer.backends`).
        allow_fallback: with ``for_backend``, keep a node the profile names that no exact form replaces
            (a warning), and accept an unproven placement, instead of refusing.
        ir_version: the IR version to write (None: with a target opset, the lowest its opsets and the
            model's features allow; without one, the model's). A feature the model uses that cannot be
            expressed at it is refused (see :mod:`lowerer.model_io.ir_version`).
        no_loops: refuse the forms that write a node as a loop over its data (ScatterND/ScatterElements
            with a reduction below the version that brought it, indices not a unique constant: a Loop over
            the updates, much slower than the op), in one line naming the node and the lowest opset that
            keeps the op's own form. Without it such a form is made and recorded (``Crossing.loop``,
            ``report.summary()["loops"]``).
        fold_dequantize: fold a DequantizeLinear whose inputs are all constants into a float constant
            where the target's DequantizeLinear cannot express it (per-axis scales below 13, int16/int4/
            float8 or blocks below the version that brought them), bit-exact with onnxruntime's kernel
            and verified like every rewrite: a per-channel QDQ model keeps float weights below 13.
            Without it such a node is refused, naming this option.
        keep_imports: keep the opset imports of domains no node uses (graph, subgraphs, function
            bodies); without it they are dropped from the output, with a note. Either way they do not
            raise the IR version. A domain imported twice at one version is always one import.
        strict_backend: with ``for_backend``, refuse a node of the model that the runtime computes
            differently from onnxruntime and lowerer has no form to fix (a profile entry marked
            ``departure``: OpenVINO's TopK on ties). Without it such a node is kept as it is, with a
            warning line, and recorded in ``report.backend["departures"]``: the original departs there too.

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
    from lowerer.passes.options import ConvertOptions

    # The options first: a bad one is refused before the model is read.
    options = ConvertOptions.create(target_opset=target_opset, decompose=decompose, verify=verify,
                                    providers=providers, seed=seed, verify_model=verify_model, optimize=optimize,
                                    progress=progress, max_ulp=max_ulp, exact=exact, for_backend=for_backend,
                                    allow_fallback=allow_fallback, ir_version=ir_version, no_loops=no_loops,
                                    fold_dequantize=fold_dequantize, keep_imports=keep_imports,
                                    strict_backend=strict_backend)
    return run(model, options)


def run(model: onnx.ModelProto | ir.Model | HasIrModel | str | os.PathLike[str], options: ConvertOptions
        ) -> ConvertResult[onnx.ModelProto] | ConvertResult[ir.Model]:
    """:func:`convert` with options already checked (the command line and :class:`lowerer.LowerPass` use it)."""
    from lowerer.passes import run_passes

    state, kind = _state(model, options)
    source_ir = state.model.ir_version
    logger.info("converting: IR version %d, %d graph nodes, %d functions; target opset %s, decompose %s",
                state.model.ir_version, len(state.model.graph.node), len(state.model.functions),
                options.target_opset, ", ".join(sorted(options.decompose)) or "none")
    checks = state.checks
    try:
        run_passes(state)
        if checks is not None:
            checks.finish()  # joined before anything is returned (the convert pass joins it when it runs)
    except MemoryError:
        if checks is not None:
            checks.cancel()
        raise InputError("not enough memory to convert the model: free memory, or save it with its weights in a "
                         "data file (save_model(..., external_data='weights.bin')) and convert the file") from None
    except Exception:
        found = checks.input_error() if checks is not None else None
        if found is not None:  # the input fails its own checks: that is the error, as it was before the work
            raise found from None
        raise
    except BaseException:
        if checks is not None:
            checks.cancel()
        raise
    _finish_report(state, source_ir)
    state.model = state.held.restore(state.model)
    if kind == "ir":
        return ConvertResult(_to_ir(state.model), state.report)
    return ConvertResult(state.model, state.report)


def _state(model: object, options: ConvertOptions) -> tuple[State, str]:
    """The passes' state for ``model``: a working copy (or the loaded file), its bytes, the verifier."""
    from lowerer.passes import State

    whole = options.verify_model is not None or options.optimize is not None or options.profile is not None
    proto, serialized, source_dir, kind, held, checks = _working_copy(model, whole)
    original = None
    if options.verify_model is not None or serialized is None:
        original = onnx.ModelProto()
        original.CopyFrom(proto)
    state = State(proto, options, serialized=serialized, original=original, source_dir=source_dir, held=held,
                  input_checked=kind == "path", checks=checks)
    if options.profile is not None:
        from lowerer.backends.plan import BackendPlan

        state.plan = BackendPlan(options.profile, allow_fallback=options.allow_fallback,
                                 strict=options.strict_backend)
    if options.verify:
        state.verifier = _verifier(options)
    return state, kind


def _working_copy(model: object, whole: bool
                  ) -> tuple[onnx.ModelProto, bytes | None, Path | None, str, HeldWeights, InputCheck | None]:
    """The copy converted in place, its bytes or None, the source folder, the kind, the weights held back, checks.

    The checks: the input's, running beside the conversion (:mod:`lowerer.model_io.input_check`), or None.

    ``whole``: a pass needs the whole model in memory (a large in-memory model is then refused when
    it cannot be given whole; see :func:`lowerer.model_io.reading.working_copy`).
    """
    from lowerer.model_io.external_data import check_external_data
    from lowerer.model_io.input_check import BESIDE_FROM, InputCheck
    from lowerer.model_io.reading import HeldWeights, InputModel, load_input, working_copy
    from lowerer.model_io.structure import check_structure

    if isinstance(model, (str, os.PathLike, InputModel)):
        loaded = model if isinstance(model, InputModel) else load_input(model, beside=True)
        # converted in place: an InputModel is used up; external data is found in its folder, as onnx.load does
        return loaded.model, loaded.serialized, loaded.directory, "path", HeldWeights(), loaded.checks
    kind = "proto"
    if isinstance(model, onnx.ModelProto):
        proto, serialized, held = working_copy(model, whole=whole)
    else:
        ir_model = _ir_model_of(model)
        if ir_model is None:
            raise InputError(f"cannot convert a {type(model).__name__}: give an onnx.ModelProto, an "
                             "onnx_ir.Model (or an object holding one in .model, like torch.onnx.ONNXProgram) "
                             "or a path")
        proto, serialized, held = working_copy(_from_ir(ir_model), whole=whole)
        kind = "ir"
    if proto.ir_version <= 0 or not proto.HasField("graph"):
        raise InputError("the model is not an ONNX model (no IR version or no graph)")
    check_external_data(proto, None, source="the model", serialized=serialized)
    check_structure(proto, source="the model", serialized=serialized)
    checks = None
    if serialized is not None and len(serialized) >= BESIDE_FROM:  # strict inference beside the conversion
        checks = InputCheck(proto, serialized, "the model", checker=False)
    return proto, serialized, None, kind, held, checks


def _verifier(options: ConvertOptions) -> Any:
    """The per-rewrite verifier the options ask for (progress reported when a callback is given)."""
    from lowerer.verification import make_verifier

    progress = options.progress

    def on_verified(rewrites: int, checks: int) -> None:
        notify(progress, "verify", rewrites, None, "rewrites", f"{checks} distinct checks")

    return make_verifier(providers=None if options.providers is None else list(options.providers), seed=options.seed,
                         progress=on_verified if progress else None, max_ulp=options.max_ulp, exact=options.exact)


def _finish_report(state: State, source_ir: int) -> None:
    """The report's IR versions and verification summary (or why nothing was verified); the loop forms' warning."""
    report = state.report
    report.source_ir_version, report.ir_version = source_ir, state.model.ir_version
    if state.verifier is not None:
        report.verification = v = state.verifier.summary()
        # the verifier also ran the first relabelled node of each pattern at both opsets: not rewrites
        v["relabels_checked"] = max(0, v["rewrites"] - len(report.rewrites))
        v["rewrites"] -= v["relabels_checked"]
        logger.info("verified %s rewrites and %s relabelled nodes with %s distinct checks (%s sessions) in %.2f s "
                    "on %s", v["rewrites"], v["relabels_checked"], v["distinct_checks"], v["sessions"], v["seconds"],
                    ", ".join(v["providers"]))
    else:
        for rewrite in report.rewrites:
            rewrite.reason = "verification was turned off (verify=False / --no-verify)"
    no_keep = None
    if state.plan is not None and report.loops():
        from lowerer.backends.lowering import own_forms_refused

        loops = report.loops()
        no_keep = own_forms_refused(state.plan.profile, {e["op_type"] for e in loops}, max(e["keep"] for e in loops))
    looped = report.loop_warning(no_keep)
    differs = [r for r in report.rewrites if r.nan_differs]
    if differs:  # the NaN note only where a NaN input can get (see lowerer.facts.float_reach)
        from lowerer.facts.float_reach import reached_by_float_inputs

        reached = reached_by_float_inputs(state.model)
        report.nan_unreached = {(r.scope, r.node) for r in differs if r.original is not None
                                and not r.scope.startswith("function:")
                                and not any(name in reached for name in r.original.input if name)}
    if looped is not None:
        logger.warning("%s", looped)


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

    from lowerer.core.errors import ConversionError

    try:
        return ir.serde.deserialize_model(proto)
    except Exception as e:
        raise ConversionError(f"onnx_ir cannot represent the converted model: {type(e).__name__}: "
                              f"{' '.join(str(e).split())}") from None
