"""lowerer as an onnx_ir pass, for onnx_ir/onnxscript pass pipelines (needs onnx-ir: ``lowerer[ir]``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import onnx_ir as ir

from lowerer.core.errors import LowererError
from lowerer.core.report import Report

__all__ = ["LowerPass", "lowerer_error"]


def lowerer_error(error: BaseException) -> LowererError | None:
    """The :class:`~lowerer.LowererError` behind ``error`` (itself, or along its ``__cause__`` chain), or None.

    onnx_ir wraps what a pass raises in its ``PassError`` (twice in a ``PassManager``); this finds
    lowerer's own error, with its exit code and (for a refusal) its node, under those wrappers.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, LowererError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


class LowerPass(ir.passes.InPlacePass):
    """Convert an ``onnx_ir.Model`` to ``target_opset`` and apply decompositions, in place.

    The model is serialized once, converted by lowerer's protobuf pipeline (with per-rewrite
    verification unless ``verify=False``) and its graph, functions and opset imports replaced
    by the converted ones. As with onnxscript's version converter, the main graph's nodes (and
    those of its subgraphs) in the default domain carry ``version`` = ``target_opset``. The last
    report is kept in :attr:`report`. Every keyword :func:`lowerer.convert` takes is accepted
    (``for_backend``, ``max_ulp``, ``verify_model``, ``keep_imports`` ...), checked when the pass is
    made; those set away from their defaults show in its ``repr``. Errors are
    :class:`lowerer.LowererError` (onnx_ir's own errors included), kept in :attr:`error`; inside
    ``ir.passes.Sequential`` onnx_ir wraps them in its ``PassError``, whose message names the pass by
    ``str(pass)``: after a failure that is lowerer's line followed by the pass, so the ``PassError``
    says why (``PassManager`` adds one more wrapper, "An error occurred at step 0", whose direct
    ``__cause__`` is that ``PassError``). :func:`lowerer_error` finds lowerer's error under the wrappers.

    Example::

        passes = ir.passes.Sequential(LowerPass(target_opset=11, decompose=["hardmax"]))
        result = passes(model)
    """

    def __init__(self, target_opset: int | None = None, *, decompose: Iterable[str] = (),
                 verify: bool = True, providers: Sequence[str] | None = None, seed: int = 0, **options: Any) -> None:
        from lowerer.passes.options import ConvertOptions

        super().__init__()
        #: Every option, checked once here (the same object :func:`lowerer.convert` builds).
        self.options = ConvertOptions.create(target_opset=target_opset, decompose=decompose, verify=verify,
                                             providers=providers, seed=seed, **options)
        self.target_opset = target_opset
        self.report: Report | None = None
        #: The error of the last run, when it failed (cleared when a run starts).
        self.error: LowererError | None = None

    def __str__(self) -> str:
        """The pass; after a failed run, lowerer's line first, then the pass (onnx_ir's ``PassError`` quotes it)."""
        return repr(self) if self.error is None else f"{self.error} (in {self!r})"

    def __repr__(self) -> str:
        o = self.options
        return (f"LowerPass(target_opset={o.target_opset!r}, decompose={tuple(sorted(o.decompose))!r}, "
                f"verify={o.verify!r}, providers={o.providers!r}, seed={o.seed!r}{self._more()})")

    def _more(self) -> str:
        """The options set away from their defaults, other than those :meth:`__repr__` always shows."""
        o = self.options
        parts = [f"for_backend={o.profile.spec!r}"] if o.profile is not None else []
        parts += ["allow_fallback=True"] if o.allow_fallback else []
        parts += ["strict_backend=True"] if o.strict_backend else []
        parts += ["fold_dequantize=True"] if o.fold_dequantize else []
        parts += [f"max_ulp={o.max_ulp!r}"] if o.max_ulp is not None else []
        parts += ["exact=True"] if o.exact else []
        parts += ["verify_model=True"] if o.verify_model is not None else []
        parts += ["optimize=True"] if o.optimize is not None else []
        parts += [f"ir_version={o.ir_version!r}"] if o.ir_version is not None else []
        parts += ["no_loops=True"] if o.no_loops else []
        parts += ["keep_imports=True"] if o.keep_imports else []
        return "".join(f", {p}" for p in parts)

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        """Run the conversion; ``modified`` is True when any node was rewritten or the opset changed."""
        from lowerer.api import run

        before = model.opset_imports.get("", None)
        self.error = None
        try:
            result = run(model, self.options)
        except LowererError as e:
            self.error = e
            raise
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
