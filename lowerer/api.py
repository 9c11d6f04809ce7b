"""The Python API: :func:`convert` on a path, an ``onnx.ModelProto`` or an ``onnx_ir.Model``."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import onnx

from lowerer.errors import InputError
from lowerer.report import Report

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
        model: an ``onnx.ModelProto`` (not modified), an ``onnx_ir.Model`` (not modified), or the
            path of an .onnx file (external data stays unloaded; paths are checked).
        target_opset: the default-domain opset to convert to; None keeps the model's.
        decompose: names of decompositions to apply (``hardmax``, ``globalmaxpool``, ``all``).
        verify: run each rewrite before and after in onnxruntime and compare exactly.
        providers: onnxruntime execution providers to verify on (``cuda``, ``dml``, ``cpu`` or full
            names); None picks CUDA, then DirectML, then CPU, whichever is installed.
        seed: seed of the generated verification inputs.
        verify_model: also run the whole original and converted models and compare their outputs.
        progress: called with (rewrites verified so far, distinct checks run) after each rewrite.

    Returns:
        A :class:`ConvertResult` whose ``model`` is the same kind as given.

    Raises:
        LowererError: bad input (``InputError``), a conversion that cannot be done exactly
            (``ConversionError``), or a failed check (``VerificationError``).

    Example::

        import lowerer
        result = lowerer.convert("model.onnx", target_opset=11, decompose=["hardmax"])
        onnx.save(result.model, "model-11.onnx")
        for rewrite in result.report:
            print(rewrite.node, rewrite.op_type, rewrite.from_version, rewrite.to_opset)
    """
    from lowerer.model_io import read_model
    from lowerer.pipeline import run_pipeline

    kind = "proto"
    source_dir: Path | None = None
    # The bytes the working copy was parsed from: they spare the pipeline a name scan and let shape
    # inference start early without serializing (see run_pipeline).
    serialized: bytes | None = None
    if isinstance(model, (str, os.PathLike)):
        source_dir = Path(model).parent.resolve()  # where external data is found, as onnx.load does
        proto, serialized = read_model(model)  # freshly parsed: no copy needed
        kind = "path"
    elif isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        try:  # the copy, by way of the bytes (as fast as CopyFrom)
            serialized = model.SerializeToString()
            proto.ParseFromString(serialized)
        except Exception:  # e.g. over 2 GiB: protobuf cannot serialize it
            serialized = None
            proto.CopyFrom(model)
    elif _is_ir_model(model):
        import onnx_ir as ir

        proto = ir.serde.serialize_model(model)
        kind = "ir"
    else:
        raise InputError(f"cannot convert a {type(model).__name__}: give an onnx.ModelProto, an "
                         "onnx_ir.Model or a path")
    original = None
    if verify_model or serialized is None:
        original = onnx.ModelProto()
        original.CopyFrom(proto)
    verifier = None
    if verify:
        from lowerer.verification import make_verifier

        verifier = make_verifier(providers=providers, seed=seed, progress=progress)
    report = run_pipeline(proto, target_opset=target_opset, decompose=decompose, verifier=verifier,
                          serialized=serialized)
    if target_opset is not None or report.decompose:
        from lowerer.validation import check_loads, check_output

        check_output(proto, serialized if serialized is not None else original, target_opset)
        if verify and len(proto.graph.node) <= ORT_LOAD_CHECK_MAX_NODES and not _has_external_data(proto):
            why = check_loads(proto)
            if why is not None:
                _refuse_unloadable(proto, why, serialized if serialized is not None else original, report)
    del serialized
    if verifier is not None:
        report.verification = verifier.summary()
    else:
        for rewrite in report.rewrites:
            rewrite.reason = "verification was turned off (verify=False / --no-verify)"
    if original is not None:
        from lowerer.verification import verify_models

        verify_models(original, proto, providers=providers, seed=seed, base_dir=source_dir, report=report)
    if kind == "ir":
        import onnx_ir as ir

        return ConvertResult(ir.serde.deserialize_model(proto), report)
    return ConvertResult(proto, report)


#: Converted models up to this many main-graph nodes are opened in onnxruntime before they are returned
#: (with verification on); larger ones are left to ``verify_model`` (opening costs ~60 us per node).
ORT_LOAD_CHECK_MAX_NODES = 20_000


def _has_external_data(model: onnx.ModelProto) -> bool:
    from lowerer.model_io import external_data_locations

    return bool(external_data_locations(model))


def _refuse_unloadable(converted: onnx.ModelProto, why: str, source: onnx.ModelProto | bytes | None,
                       report: Report) -> None:
    """Refuse a converted model onnxruntime will not open, unless it will not open the input either."""
    from lowerer.errors import ConversionError
    from lowerer.validation import check_loads

    if source is not None:
        original = source
        if isinstance(source, bytes):
            original = onnx.ModelProto()
            original.ParseFromString(source)
        assert isinstance(original, onnx.ModelProto)
        if check_loads(original) is not None:
            report.notes.append(f"onnxruntime does not open the converted model ({why}), nor the input")
            return
    raise ConversionError(f"onnxruntime does not open the converted model ({why}), though it opens the input; "
                          "the conversion is refused (a gap in lowerer, please report it)")


def _is_ir_model(model: object) -> bool:
    module = type(model).__module__ or ""
    if not module.startswith("onnx_ir"):
        return False
    import onnx_ir as ir

    return isinstance(model, ir.Model)
