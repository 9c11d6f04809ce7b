"""Where onnxruntime placed each node, and why a node is on the CPU: the classes a placement proof judges by.

onnxruntime puts a node on the CPU for one of three reasons, and only two of them are a backend's
gap:

* ``no-kernel``: the provider registers no kernel for the node's op, since-version and input
  types (read from the provider's kernel table of the release, :mod:`lowerer.backends.installed_kernels`);
* ``rejected``: a kernel exists but refuses the node for an attribute or type the backend's
  profile names (the CUDA ArgMax kernels and ``select_last_index=1``: ``lowerer/backends/cuda.json``);
* ``cpu-preferred``: the provider has a kernel, and onnxruntime itself chose the CPU because the
  node only computes on values already on the CPU (shape subgraphs: Shape, Gather, Concat,
  Unsqueeze ... on int64 shapes). ``GetCpuPreferredNodes`` in onnxruntime's
  ``onnxruntime/core/framework/fallback_cpu_capability.cc`` does this on purpose; its verbose log
  says "ORT optimization- Force fallback to CPU execution for node".

Placement is proven when only the last class is on the CPU. The recorded placement comes from
``InferenceSession.get_provider_graph_assignment_info()`` with
``session.record_ep_graph_assignment_info=1`` (onnxruntime >= 1.24.1), or, without a GPU, from
the kernel table alone (then it is stated as the table's, not run here).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from lowerer.model_io.naming import node_key

__all__ = ["CPU_PREFERRED", "NO_KERNEL", "REJECTED", "Assigned", "Classified", "assigned_nodes", "classify",
           "record_option"]

NO_KERNEL = "no-kernel"
REJECTED = "rejected"
CPU_PREFERRED = "cpu-preferred"

#: The session option that makes onnxruntime keep where each node went.
_RECORD = "session.record_ep_graph_assignment_info"


@dataclass(frozen=True)
class Assigned:
    """One node as onnxruntime assigned it: name, op, domain, provider."""

    name: str
    op_type: str
    domain: str
    provider: str


@dataclass
class Classified:
    """The CPU-placed nodes of a model, by class (each entry ``'name' (Op-v): why``)."""

    provider: str
    classes: dict[str, list[str]] = field(default_factory=lambda: {NO_KERNEL: [], REJECTED: [], CPU_PREFERRED: []})
    on_provider: int = 0
    #: The op types in each class.
    op_types: dict[str, set[str]] = field(default_factory=dict)
    #: True when read from the kernel table alone (nothing was run: the CPU preference is not predicted).
    predicted: bool = False

    def add(self, cls: str, op_type: str, entry: str) -> None:
        """Put one CPU-placed node in ``cls``."""
        self.classes[cls].append(entry)
        self.op_types.setdefault(cls, set()).add(op_type)

    @property
    def proven(self) -> bool:
        """Whether only onnxruntime's own CPU preference put nodes on the CPU."""
        return not self.classes[NO_KERNEL] and not self.classes[REJECTED]

    def compute_ops(self) -> set[str]:
        """The op types of the CPU-placed compute nodes (no kernel, or rejected)."""
        return self.op_types.get(NO_KERNEL, set()) | self.op_types.get(REJECTED, set())

    def describe(self, limit: int = 6) -> str:
        """``3 nodes on the CPU: 2 without a CUDA kernel ('a' (X-1), ...); 1 by onnxruntime's preference ...``."""
        short = self.provider.replace("ExecutionProvider", "")
        parts = []
        words = {NO_KERNEL: f"without a {short} kernel", REJECTED: f"that the {short} kernel refuses",
                 CPU_PREFERRED: "placed there by onnxruntime's preference for shape computation "
                                "(GetCpuPreferredNodes)"}
        for cls in (NO_KERNEL, REJECTED, CPU_PREFERRED):
            nodes = self.classes[cls]
            if nodes:
                shown = ", ".join(nodes[:limit]) + (f", ... ({len(nodes) - limit} more)" if len(nodes) > limit else "")
                parts.append(f"{len(nodes)} {words[cls]}: {shown}")
        total = sum(len(v) for v in self.classes.values())
        if self.predicted:
            if not total:
                return f"every node ({self.on_provider}) has a {short} kernel"
            return f"{total} of {total + self.on_provider} node(s) would run on the CPU: " + "; ".join(parts)
        if not total:
            return f"every node on {self.provider}"
        return f"{total} node(s) on the CPU, {self.on_provider} on {self.provider}; " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"provider": self.provider, "on_provider": self.on_provider, **{k: list(v) for k, v in
                                                                             self.classes.items()}}


def record_option(options: Any) -> None:
    """Ask onnxruntime (session options ``options``) to keep where each node went."""
    options.add_session_config_entry(_RECORD, "1")


def assigned_nodes(session: Any) -> list[Assigned] | None:
    """Where each node of an open session went (None: this onnxruntime cannot say, before 1.24.1)."""
    get = getattr(session, "get_provider_graph_assignment_info", None)
    if get is None:
        return None
    out = []
    for subgraph in get():
        for node in subgraph.get_nodes():
            out.append(Assigned(str(node.name), str(node.op_type), str(getattr(node, "domain", "") or ""),
                                str(subgraph.ep_name)))
    return out


def _types(model: onnx.ModelProto) -> dict[str, str]:
    """Every top-level value's element type, spelled ``tensor(float)`` (onnx's inference, not strict)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # a model onnx cannot infer: its declared types only
        inferred = model
    g = inferred.graph
    out = {}
    for vi in (*g.input, *g.value_info, *g.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            out[vi.name] = f"tensor({onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()})"
    for t in g.initializer:
        out[t.name] = f"tensor({onnx.TensorProto.DataType.Name(t.data_type).lower()})"
    return out


def _missing_kernel(node: onnx.NodeProto, version: int, opset: int, rows: Sequence[tuple[int, int | None, Any]],
                    types: dict[str, str]) -> str | None:
    """Why the provider's kernel table has no kernel for ``node`` (None: it has one)."""
    from lowerer.backends.kernel_tables import holds

    held = [(lo, hi, c) for lo, hi, c in rows if holds(lo, hi, version)]
    if not held:
        return f"no kernel of since-version {version}"
    try:
        formal = onnx.defs.get_schema(node.op_type, opset, "").inputs
    except onnx.defs.SchemaError:
        return None
    for i, name in enumerate(node.input):
        if not name or not formal or name not in types:
            continue
        param = formal[min(i, len(formal) - 1)].type_str
        allowed: set[str] = set()
        constrained = False
        for _, _, constraints in held:
            if param in constraints:
                constrained = True
                allowed.update(constraints[param])
        if constrained and types[name] not in allowed:
            return f"no kernel for {types[name]}"
    return None


def classify(model: onnx.ModelProto, placed: Iterable[Assigned] | None, provider: str,
             kernels: dict[str, list[tuple[int, int | None, Any]]] | None, rejected: dict[str, str]) -> Classified:
    """Class each CPU-placed node of ``model`` (see the module docstring).

    Args:
        model: the model opened.
        placed: where onnxruntime put each node; None classes every top-level node by the kernel table
            alone (what would go to the CPU for want of a kernel; the CPU preference is not predicted).
        provider: the backend's provider.
        kernels: the provider's default-domain kernel table (op -> rows); None: unknown (no node is
            called kernel-less).
        rejected: node name -> why, for nodes the backend's profile names (a kernel that refuses them).
    """
    from lowerer.core.opsets import default_opset, since_version

    opset = default_opset(model.opset_import) or 1
    by_name = {n.name: n for n in model.graph.node if n.name}
    types = _types(model) if kernels is not None else {}
    predicted = placed is None
    out = Classified(provider, predicted=predicted)
    if placed is None:
        placed = [Assigned(node_key(n, i), n.op_type, n.domain, "CPUExecutionProvider")
                  for i, n in enumerate(model.graph.node)]
    for a in placed:
        if a.provider != "CPUExecutionProvider":
            out.on_provider += 1
            continue
        node = by_name.get(a.name)
        default = a.domain in ("", "ai.onnx")
        version = since_version(a.op_type, opset) if default else None
        label = (f"{a.name!r} ({a.op_type}-{version})" if version else
                 f"{a.name!r} ({a.domain or 'ai.onnx'}.{a.op_type})")
        if a.name in rejected:
            out.add(REJECTED, a.op_type, f"{label}: {rejected[a.name]}")
            continue
        if kernels is None:
            why: str | None = "the provider's kernel table is unknown: a missing kernel cannot be told from " \
                              "onnxruntime's preference"
        elif not default or version is None:
            why = "not a default-domain op of the model's opset"
        else:
            rows = kernels.get(a.op_type, [])
            why = "no kernel at all" if not rows else (
                _missing_kernel(node, version, opset, rows, types) if node is not None else None)
        if why is not None:
            out.add(NO_KERNEL, a.op_type, f"{label}: {why}")
        elif predicted:
            out.on_provider += 1
        else:
            out.add(CPU_PREFERRED, a.op_type, label)
    return out
