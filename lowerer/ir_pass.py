"""lowerer as an onnx_ir pass, for onnx_ir/onnxscript pass pipelines (needs onnx-ir: ``lowerer[ir]``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import onnx_ir as ir

from lowerer.report import Report

__all__ = ["LowerPass"]


class LowerPass(ir.passes.InPlacePass):
    """Convert an ``onnx_ir.Model`` to ``target_opset`` and apply decompositions, in place.

    The model is serialized once, converted by lowerer's protobuf pipeline (with per-rewrite
    verification unless ``verify=False``) and its graph, functions and opset imports replaced
    by the converted ones. As with onnxscript's version converter, the main graph's nodes (and
    those of its subgraphs) in the default domain carry ``version`` = ``target_opset``. The last
    report is kept in :attr:`report`. Every keyword :func:`lowerer.convert` takes is accepted
    (``for_backend``, ``max_ulp``, ``verify_model`` ...), checked when the pass is made. Errors are
    :class:`lowerer.LowererError` (onnx_ir's own errors included); inside ``ir.passes.Sequential``
    onnx_ir wraps them in its ``PassError``.

    Example::

        passes = ir.passes.Sequential(LowerPass(target_opset=11, decompose=["hardmax"]))
        result = passes(model)
    """

    def __init__(self, target_opset: int | None = None, *, decompose: Iterable[str] = (),
                 verify: bool = True, providers: Sequence[str] | None = None, seed: int = 0, **options: Any) -> None:
        from lowerer.options import ConvertOptions

        super().__init__()
        #: Every option, checked once here (the same object :func:`lowerer.convert` builds).
        self.options = ConvertOptions.create(target_opset=target_opset, decompose=decompose, verify=verify,
                                             providers=providers, seed=seed, **options)
        self.target_opset = target_opset
        self.report: Report | None = None

    def __repr__(self) -> str:
        o = self.options
        return (f"LowerPass(target_opset={o.target_opset!r}, decompose={tuple(sorted(o.decompose))!r}, "
                f"verify={o.verify!r}, providers={o.providers!r}, seed={o.seed!r})")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Run the conversion; ``modified`` is True when any node was rewritten or the opset changed."""
        from lowerer.api import run

        before = model.opset_imports.get("", None)
        result = run(model, self.options)
        converted: ir.Model = result.model
        self.report = result.report
        opsets = dict(converted.opset_imports)  # Model.opset_imports may be the graph's own dict
        functions = dict(converted.functions)
        model.graph = converted.graph
        model.functions.clear()
        model.functions.update(functions)
        model.opset_imports.clear()
        model.opset_imports.update(opsets)
        model.ir_version = converted.ir_version
        if self.target_opset is not None:
            for node in ir.traversal.RecursiveGraphIterator(model.graph):
                if node.domain in ("", "ai.onnx"):
                    node.version = self.target_opset
        modified = bool(result.report.rewrites) or before != converted.opset_imports.get("", None)
        return ir.passes.PassResult(model, modified)
