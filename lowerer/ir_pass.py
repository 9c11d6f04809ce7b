"""lowerer as an onnx_ir pass, for onnx_ir/onnxscript pass pipelines (needs onnx-ir: ``lowerer[ir]``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import onnx_ir as ir

from lowerer.report import Report

__all__ = ["LowerPass"]


class LowerPass(ir.passes.InPlacePass):
    """Convert an ``onnx_ir.Model`` to ``target_opset`` and apply decompositions, in place.

    The model is serialized once, converted by lowerer's protobuf pipeline (with per-rewrite
    verification unless ``verify=False``) and its graph, functions and opset imports replaced
    by the converted ones. As with onnxscript's version converter, the main graph's nodes (and
    those of its subgraphs) in the default domain carry ``version`` = ``target_opset``. The last
    report is kept in :attr:`report`. Errors are :class:`lowerer.LowererError` (onnx_ir's own
    errors included); inside ``ir.passes.Sequential`` onnx_ir wraps them in its ``PassError``.

    Example::

        passes = ir.passes.Sequential(LowerPass(target_opset=11, decompose=["hardmax"]))
        result = passes(model)
    """

    def __init__(self, target_opset: int | None = None, *, decompose: Iterable[str] = (),
                 verify: bool = True, providers: Sequence[str] | None = None, seed: int = 0) -> None:
        super().__init__()
        self.target_opset = target_opset
        self.decompose = tuple(decompose)
        self.verify = verify
        self.providers = None if providers is None else tuple(providers)
        self.seed = seed
        self.report: Report | None = None

    def __repr__(self) -> str:
        return (f"LowerPass(target_opset={self.target_opset!r}, decompose={self.decompose!r}, verify={self.verify!r}, "
                f"providers={self.providers!r}, seed={self.seed!r})")

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Run the conversion; ``modified`` is True when any node was rewritten or the opset changed."""
        from lowerer.api import convert

        before = model.opset_imports.get("", None)
        result = convert(model, target_opset=self.target_opset, decompose=self.decompose, verify=self.verify,
                         providers=self.providers, seed=self.seed)
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
