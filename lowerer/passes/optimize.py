"""``--optimize``: fold the constant shape arithmetic rewrites leave behind, with onnxscript's optimizer, checked.

Rewrites emit small shape computations (``Shape`` → ``Gather`` → ``Concat`` → ``Reshape``, ``Size`` →
``Equal`` → ``If`` guards ...) that are constant once the model's shapes are static.
``onnxscript.optimizer`` (the field's tool, used by ``torch.onnx``) folds them and removes dead
nodes; model-local functions are kept (not inlined). The optimized model is then run against
the converted one on the same inputs (a whole-model comparison): an optimizer that changed what
the model computes fails the conversion instead of passing unnoticed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from lowerer.core.errors import ConversionError, InputError
from lowerer.core.progress import ProgressCallback, notify
from lowerer.core.report import Report
from lowerer.model_io.scopes import walk_nodes

if TYPE_CHECKING:
    from lowerer.verification.whole import ModelCheckOptions

__all__ = ["count_nodes", "optimize_model"]

logger = logging.getLogger(__name__)


def count_nodes(model: onnx.ModelProto) -> int:
    """Nodes in the main graph, its subgraphs and the model-local functions."""
    return sum(1 for _ in walk_nodes(model))


def optimize_model(model: onnx.ModelProto, source_dir: Path | None, *, report: Report,
                   options: ModelCheckOptions | None, providers: Sequence[str] | None, seed: int,
                   progress: ProgressCallback | None = None) -> onnx.ModelProto:
    """The model after ``onnxscript.optimizer.optimize_ir`` (functions kept), checked against ``model``.

    External data is read (for small constants only) from ``source_dir``, never the working
    directory. ``report.optimization`` records the node counts and the check.

    Raises:
        InputError: onnxscript is not installed.
        ConversionError: the optimizer failed.
        VerificationError: the optimized model computes something else, or the check could not
            run (unless ``options.allow_unverified``).
    """
    try:
        import onnx_ir as ir
        import onnxscript
        import onnxscript.optimizer
    except ImportError:
        raise InputError("--optimize needs onnxscript (and onnx-ir): pip install 'lowerer[optimize]'") from None
    notify(progress, "optimize", 0, 1, "passes")
    before = count_nodes(model)
    try:
        ir_model = ir.serde.deserialize_model(model)
        if source_dir is not None:
            ir.external_data.set_base_dir(ir_model.graph, source_dir)
        onnxscript.optimizer.optimize_ir(ir_model, inline=False)
        optimized = ir.serde.serialize_model(ir_model)
    except Exception as e:
        raise ConversionError(f"onnxscript's optimizer failed on the converted model: {type(e).__name__}: "
                              f"{' '.join(str(e).split())}; convert without --optimize") from None
    mended = _reshape_allowzero_below_14(optimized)
    after = count_nodes(optimized)
    notify(progress, "optimize", 1, 1, "passes")
    version = getattr(onnxscript, "__version__", "?")
    report.optimization = {"tool": f"onnxscript.optimizer.optimize_ir, onnxscript {version}",
                           "functions": "kept (inline=False)", "nodes_before": before, "nodes_after": after}
    if mended:
        report.optimization["mended"] = mended
    logger.info("optimize: %d nodes -> %d", before, after)
    from lowerer.verification.whole import ModelSource, verify_models

    check = verify_models(ModelSource(model, source_dir, "converted"), ModelSource(optimized, source_dir, "optimized"),
                          options=options, providers=providers, seed=seed, report=report,
                          what="optimization check", progress=progress)
    report.optimization["check"] = check.status
    return optimized


def _reshape_allowzero_below_14(model: onnx.ModelProto) -> list[str]:
    """Drop the ``allowzero`` onnxscript's optimizer writes on Reshape below opset 14, where it means nothing else.

    onnxscript 0.7.2's rewrite rule ``MaterializeReshapeShape`` writes ``allowzero=1`` whatever the opset,
    and Reshape has the attribute only from 14: onnxruntime refuses such a model at 13 ("Unrecognized
    attribute: allowzero"). Where the shape is a constant without a 0 (the rule's materialized shape), or
    the attribute is 0, Reshape-5/13 computes the same thing without it, so it is dropped; otherwise it is
    left, and the optimization check reports the model onnxruntime refuses. Returns the nodes mended.
    """
    from lowerer.core.opsets import default_opset

    opset = default_opset(model.opset_import)
    if opset is None or opset >= 14:
        return []
    constants = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.output and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    mended = []
    for node in model.graph.node:
        if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx"):
            continue
        at = next((a for a in node.attribute if a.name == "allowzero"), None)
        if at is None:
            continue
        shape = constants.get(node.input[1]) if len(node.input) > 1 else None
        if at.i == 0 or (shape is not None and 0 not in onnx.numpy_helper.to_array(shape).tolist()):
            node.attribute.remove(at)
            mended.append(node.name or node.output[0])
    return mended
