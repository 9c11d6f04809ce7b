"""onnxruntime-qnn: Qualcomm's QNN execution provider as an onnxruntime plugin, on its HTP simulator, fp16.

The plugin (``onnxruntime_qnn.get_library_path()``) is registered with
``register_execution_provider_library`` and its devices added with ``backend_type=htp``,
``enable_htp_fp16_precision=1`` and ``soc_model=60`` (the HTP simulator on x86 Linux). Versioned as the
plugin (2.7.0), not as onnxruntime. Loaded by path in the witness worker: imports only the standard
library, numpy, onnxruntime and onnxruntime_qnn.

A model runs as users run it: with onnxruntime's CPU fallback on (its default), the free dims fixed to
the input set's shapes (``add_free_dimension_override_by_name``; QNN takes no node of a model whose
shapes are dynamic, so every dynamic-batch export would run wholly on the CPU otherwise: measured on
the real fixtures, 2026-11-28), one session per input shape. :func:`placement` says which nodes the
CPU took (``session.record_ep_graph_assignment_info``); the deployment check reports them, and judges
what lowerer changed (``JUDGES_CHANGES``): a failure or difference the original model shows there too
is recorded, not a failed verification. ``onnxruntime-qnn:htp-only`` turns the fallback off
(``session.disable_cpu_ep_fallback=1``: what QNN cannot take fails to compile): the probe suite's
mode, which says what QNN itself computes.
"""

from __future__ import annotations

import importlib
from typing import Any

NAME = "onnxruntime-qnn"
LABEL = "onnxruntime-qnn"
DEVICE = "QNNExecutionProvider (HTP simulator, fp16)"
DISTRIBUTION = "onnxruntime-qnn"
INSTALL = "pip install onnxruntime-qnn"
BACKENDS = ("qnn",)
BUDGET = 1e-2
BUDGET_SOURCE = ("the HTP computes in float16 (provider option enable_htp_fp16_precision=1): float16's unit "
                 "roundoff is 2^-11 (4.9e-4), 1e-2 x scale allows about 20 of them, as for rknn-toolkit2")
JUDGES_CHANGES = True
#: The parameter (``onnxruntime-qnn:htp-only``) that turns the CPU fallback off.
HTP_ONLY = "htp-only"
_PROVIDER = "QNNExecutionProvider"
_CPU = "CPUExecutionProvider"
_OPTIONS = {"backend_type": "htp", "enable_htp_fp16_precision": "1", "soc_model": "60"}


def version(param: str) -> dict[str, str]:
    """The plugin's version (ImportError: not installed)."""
    from importlib import metadata

    importlib.import_module("onnxruntime_qnn")
    return {"version": metadata.version(DISTRIBUTION)}


def load(model: str, param: str) -> Any:
    """The model's path (onnxruntime reads it when it builds a session)."""
    return model


class _Sessions:
    """The sessions of one model, one per input shape (free dims fixed to them), and where their nodes went."""

    def __init__(self, model: str, param: str) -> None:
        ort = importlib.import_module("onnxruntime")
        plugin = importlib.import_module("onnxruntime_qnn")
        if not any(d.ep_name == _PROVIDER for d in ort.get_ep_devices()):
            ort.register_execution_provider_library(_PROVIDER, plugin.get_library_path())
        self.ort, self.model, self.fallback = ort, model, param != HTP_ONLY
        self.devices = [d for d in ort.get_ep_devices() if d.ep_name == _PROVIDER]
        bare = ort.SessionOptions()
        bare.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        bare.log_severity_level = 3
        self.dims = [(i.name, list(i.shape)) for i in ort.InferenceSession(model, bare, providers=[_CPU]).get_inputs()]
        self.sessions: dict[tuple[Any, ...], Any] = {}
        self.on_cpu: dict[str, str] = {}
        self.nodes = 0

    def session(self, feeds: dict[str, Any]) -> Any:
        key = tuple((name, tuple(getattr(feeds.get(name), "shape", ()))) for name, _ in self.dims)
        if key not in self.sessions:
            options = self.ort.SessionOptions()
            options.log_severity_level = 3
            options.add_provider_for_devices(self.devices, dict(_OPTIONS))
            options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
            if not self.fallback:
                options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
            fixed: dict[str, int] = {}
            for name, shape in self.dims:
                value = feeds.get(name)
                for k, dim in enumerate(shape):
                    if isinstance(dim, str) and value is not None and k < value.ndim and dim not in fixed:
                        fixed[dim] = int(value.shape[k])
                        options.add_free_dimension_override_by_name(dim, fixed[dim])
            made = self.ort.InferenceSession(self.model, options)
            self._record(made)
            self.sessions[key] = made
        return self.sessions[key]

    def _record(self, session: Any) -> None:
        get = getattr(session, "get_provider_graph_assignment_info", None)
        if get is None:
            return
        count = 0
        for subgraph in get():
            for node in subgraph.get_nodes():
                count += 1
                if subgraph.ep_name == _CPU:
                    self.on_cpu[str(node.name) or f"({node.op_type})"] = str(node.op_type)
        self.nodes = max(self.nodes, count)


def prepare(loaded: Any, names: list[str] | None, feeds: dict[str, Any], param: str) -> Any:
    """The first input set's session (CPU fallback on, unless ``htp-only``; the free dims fixed to its shapes)."""
    sessions = _Sessions(loaded, param)
    sessions.session(feeds)
    return sessions


def infer(prepared: Any, feeds: dict[str, Any], names: list[str] | None, order: list[str]) -> list[Any]:
    """One input set run, in the session of its shapes."""
    return list(prepared.session(feeds).run(names, feeds))


def placement(prepared: Any) -> dict[str, Any]:
    """Whether the CPU fallback was on, the nodes placed (the most of any session) and those on the CPU."""
    return {"fallback": prepared.fallback, "nodes": prepared.nodes, "provider": _PROVIDER,
            "on_cpu": [[name, op] for name, op in prepared.on_cpu.items()]}
