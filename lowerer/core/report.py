"""What a conversion did: one record per rewrite, and a summary; its JSON form (``--report``).

The JSON form is described by ``lowerer/core/report.schema.json`` (JSON Schema, draft 2020-12) and
carries :data:`SCHEMA_VERSION`. Identical checks are stored once under ``checks`` and referenced
by id from each rewrite record; a record names only its own node's values.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import onnx

__all__ = ["SCHEMA_VERSION", "STATUSES", "Crossing", "Report", "Rewrite", "RewriteStatus", "tool_versions"]

#: The version of the report's JSON layout: the major number changes when a field is removed or
#: changes meaning, the minor one when fields are added.
SCHEMA_VERSION = "2.6"

#: ``field(metadata=...)`` key: a field that is working data, not part of the JSON record.
INTERNAL = "lowerer_internal"
#: Fields of a :class:`Rewrite` that describe its check; identical checks are stored once.
CHECK_FIELDS = ("status", "reason", "provider", "details")

#: What a rewrite's check concluded: ``verified`` (run before and after and compared),
#: ``reference-only`` (compared, but onnxruntime could not run a side: lowerer's numpy reference was the
#: only judge of it), ``unverified`` (not run, with the reason) or ``failed`` (the outputs differ).
RewriteStatus = Literal["verified", "reference-only", "unverified", "failed"]
#: The statuses in the order summaries list them.
STATUSES: tuple[RewriteStatus, ...] = ("verified", "reference-only", "unverified", "failed")
#: How many emitted ops a ``repr`` lists before it counts the rest.
_REPR_OPS = 6
#: How many nodes the loop warning names before it counts the rest.
_LOOPS_SHOWN = 3
#: What a Loop over updates costs, measured (``benchmarks/loop_forms.py``; the README's lowering list).
LOOP_COST = "3 to 9 us per iteration in onnxruntime 1.32 CPU: 13x to 1600x on a small GNN"


@dataclass(frozen=True)
class Crossing:
    """One registry entry applied to a node on its way to the target (provenance, as data).

    Attributes:
        kind: the entry's kind (``rule``, ``adapter``, ``generic``, ``expansion``, ``lowering``, ``form`` ...).
        entry: the entry's name (``shape_15_13``, ``coerced-axis``, ``generic`` ...).
        op: the op of the node it was applied to.
        start: that node's since-version.
        end: the since-version it was taken to by a version step, or None (a rule, expansion or form,
            whose output is written for ``opset``).
        opset: the default-domain opset what it emitted is valid at (None: a function body's own opset).
        why: why this entry was applied (an expansion's reason), or "".
        budgeted: its float arithmetic may round differently from the original op's kernel (a function
            body, a budgeted lowering): judged by the expansion's ulp budget.
        loop: the loop over the node's data it wrote (``a Loop over updates``: the entry's
            :attr:`~lowerer.steps.registry.RegistryEntry.loop_form`, a slower cost class than the op), or "".
        trips: that loop's trip count where static, else None.
    """

    kind: str
    entry: str
    op: str
    start: int
    end: int | None = None
    opset: int | None = None
    why: str = ""
    budgeted: bool = False
    loop: str = ""
    trips: int | None = None

    def describe(self) -> str:
        """The crossing in words (``ReduceSum 13 → 11: generic``)."""
        if self.end is not None:
            return f"{self.op} {self.start} → {self.end}: {self.entry}"
        if self.kind == "expansion":
            return f"{self.op}-{self.start} → its function body at opset {self.opset} ({self.why}): " \
                   f"rule {self.entry}"
        if self.kind == "lowering":
            return f"{self.op}-{self.start} → ops that exist below it ({self.why}): {self.entry}"
        return f"{self.op}-{self.start} → opset {self.opset}: rule {self.entry}"


@dataclass
class Rewrite:
    """One rewrite of one node.

    Fields other than the working data (``original``, ``replacement``, ``constants``,
    ``input_types``, marked ``metadata={INTERNAL: True}``) are serialized by :meth:`to_dict`;
    fields added later are serialized too.

    Attributes:
        node: the node's name (or ``<op>#<index>`` when it has none).
        op_type: the original op.
        scope: where the node lives (``graph``, ``graph/loop.body``, ``function:pkg.F``).
        from_version: since-version of the original op's schema.
        to_opset: default-domain opset the replacement is written for.
        rule: the rule that made the rewrite.
        emitted: op types of the replacement nodes, in order.
        status: ``verified``, ``reference-only``, ``unverified`` or ``failed``.
        reason: why it is unverified (or how it was verified).
        provider: the onnxruntime execution provider (or ``numpy-reference``) that checked it.
        details: free-form verification details (input sets used, max difference ...).
        original: a copy of the original node (for verification; not serialized).
        replacement: the replacement nodes (for verification; not serialized).
        constants: initializers the replacement needs (for verification; not serialized).
        from_opset: the default-domain opset of the original node's scope.
        input_types: element type and dims of each input of the original node, where known.
        input_values: the constant inputs of the original node (verification feeds them as they are).
        derived_inputs: shape inputs computed from the other inputs' dims (an ``int`` or an
            ``(input, dim)`` per element): verification computes them from the shapes it generates.
        crossings: each registry entry applied on the way, in order (provenance, as data).
    """

    node: str
    op_type: str
    scope: str
    from_version: int
    to_opset: int
    rule: str
    emitted: list[str]
    status: RewriteStatus = "unverified"
    reason: str = "verification not run"
    provider: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    original: onnx.NodeProto | None = field(default=None, repr=False, metadata={INTERNAL: True})
    replacement: list[onnx.NodeProto] = field(default_factory=list, repr=False, metadata={INTERNAL: True})
    constants: list[onnx.TensorProto] = field(default_factory=list, repr=False, metadata={INTERNAL: True})
    from_opset: int = 0
    input_types: dict[str, Any] = field(default_factory=dict, repr=False, metadata={INTERNAL: True})
    input_values: dict[str, Any] = field(default_factory=dict, repr=False, metadata={INTERNAL: True})
    derived_inputs: dict[str, Any] = field(default_factory=dict, repr=False, metadata={INTERNAL: True})
    crossings: list[Crossing] = field(default_factory=list)

    def __repr__(self) -> str:
        """One short line: where, what became what, by which rule, and the check's status."""
        ops = " + ".join(self.emitted[:_REPR_OPS]) or "nothing"
        if len(self.emitted) > _REPR_OPS:
            ops += f" + ... ({len(self.emitted)} ops)"
        return (f"<Rewrite {self.scope}:{self.node} {self.op_type}-{self.from_version} -> {ops} "
                f"(opset {self.to_opset}, rule {self.rule}, {self.status})>")

    @property
    def steps(self) -> list[str]:
        """Each crossing in words (``ReduceSum 13 → 11: generic``)."""
        return [c.describe() for c in self.crossings]

    @property
    def loops(self) -> list[Crossing]:
        """The crossings that wrote the node as a loop over its data (:attr:`Crossing.loop`)."""
        return [c for c in self.crossings if c.loop]

    @property
    def nan_differs(self) -> bool:
        """Whether the check recorded a NaN input on which the replacement computes differently (not judged)."""
        nan = self.details.get("nan")
        return isinstance(nan, str) and "recorded, not judged" in nan

    @property
    def change(self) -> str:
        """The rewrite in plain words: the op, its versions and how (``ScatterND 18 -> 13 as a Loop over updates``)."""
        return f"{self.op_type} {self.from_version} -> {self.to_opset} {change_words(self)}"

    def values(self) -> dict[str, list[str]]:
        """The names of the original node's input and output values (this node's own)."""
        if self.original is None:
            return {"inputs": [], "outputs": []}
        return {"inputs": list(self.original.input), "outputs": list(self.original.output)}

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data: every public field, and the node's own value names."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.metadata.get(INTERNAL):
                continue
            out[f.name] = jsonable(getattr(self, f.name))
        out["steps"] = self.steps
        out["change"] = self.change
        out["values"] = self.values()
        return out


#: The longest list of emitted ops a change names (longer: counted).
_CHANGE_OPS = 24


def _ops_words(rewrite: Rewrite) -> str:
    """The ops ``rewrite`` emitted, each once (``Shape + Slice``), or how many when that is long (``11 ops``)."""
    listed = " + ".join(dict.fromkeys(rewrite.emitted))
    return listed if len(listed) <= _CHANGE_OPS else f"{len(rewrite.emitted)} ops"


def change_words(rewrite: Rewrite) -> str:
    """How ``rewrite`` changed its node, in a few words: ``as a Loop over updates``, ``coerced axis`` ...

    The loop form when one was written; else what the first entry that makes the whole node did (a
    function body, a lowering, a decomposition, a backend form, a named rule such as ``coerced-axis``);
    else (version steps) the ops it became, or ``stepped down``/``stepped up`` when it stays one node of its op.
    """
    loops = rewrite.loops
    if loops:
        return f"as {loops[0].loop}"
    if rewrite.op_type == "DequantizeLinear" and (rewrite.emitted in (["initializer"], ["Constant"])
                                                  or rewrite.emitted[-1:] == ["Mul"]):
        return "folded into a float constant"  # fold_dequantize (times a DequantizeLinear of 1 from opset 10)
    for c in rewrite.crossings:
        if c.kind == "expansion":
            return "as its function body"
        if c.kind == "lowering":
            return f"lowered to {_ops_words(rewrite)}"
        if c.kind == "decomposition":
            return f"decomposed to {_ops_words(rewrite)}"
        if c.kind == "form":
            return f"in the {c.entry} form"
        if c.kind == "rule" and "-" in c.entry:
            return c.entry.replace("-", " ")
    if list(dict.fromkeys(rewrite.emitted)) in ([rewrite.op_type], []):
        return "stepped down" if rewrite.to_opset < rewrite.from_opset else "stepped up"
    return f"as {_ops_words(rewrite)}"


def jsonable(value: object) -> Any:
    """``value`` as JSON-ready data: containers and dataclasses recursively, enums by value, protobufs left out.

    Non-finite floats become the strings ``"inf"``, ``"-inf"``, ``"nan"`` (JSON has no such numbers).
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else str(value)
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        if callable(to_dict):
            return jsonable(to_dict())
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.metadata.get(INTERNAL)}
    if hasattr(value, "SerializeToString"):  # a protobuf message: working data, not reported
        return None
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return jsonable(item())
    return str(value)


def tool_versions() -> dict[str, str | None]:
    """The versions of lowerer, Python, onnx and onnxruntime (None where not installed)."""
    from lowerer._version import __version__

    versions: dict[str, str | None] = {"lowerer": __version__,
                                       "python": ".".join(map(str, sys.version_info[:3]))}
    for module, dists in (("onnx", ("onnx",)), ("onnxruntime", ("onnxruntime", "onnxruntime-gpu",
                                                                 "onnxruntime-directml", "onnxruntime-openvino"))):
        loaded = sys.modules.get(module)
        version = getattr(loaded, "__version__", None) if loaded is not None else None
        if version is None:
            from importlib import metadata

            for dist in dists:
                try:
                    version = metadata.version(dist)
                    break
                except metadata.PackageNotFoundError:
                    continue
        versions[module] = None if version is None else str(version)
    return versions


@dataclass
class Report:
    """All rewrites of one conversion, plus what was done to the model as a whole.

    Iterating a report gives its :class:`Rewrite` records.
    """

    rewrites: list[Rewrite] = field(default_factory=list)
    source_opset: int | None = None
    target_opset: int | None = None
    decompose: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)
    #: How per-rewrite verification ran (providers, distinct checks, cache hits, sessions, seconds).
    verification: dict[str, Any] | None = None
    #: Whole-model checks by name (``whole-model check``: ``--verify-model``; ``optimization check``:
    #: ``--optimize``): status, reason, provider, tolerance, input sets, statistics per output.
    model_checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The IR version before and after.
    source_ir_version: int | None = None
    ir_version: int | None = None
    #: What ``--optimize`` did (nodes before and after), when it ran.
    optimization: dict[str, Any] | None = None
    #: The command line that made the report (set by the CLI), for the JSON form.
    command: list[str] | None = None
    #: Whether the input passed onnx's strict inference during the conversion, and every distinct
    #: rewrite passed its own (what lets the validation gate skip the whole-model inference).
    strictly_checked: bool = field(default=False, repr=False, metadata={INTERNAL: True})
    #: Every name read once the conversion walk was done (None: not collected): the clean-up pass's input.
    read_names: set[str] | None = field(default=None, repr=False, metadata={INTERNAL: True})
    #: ``for_backend`` (``--for``): the backend, the nodes its profile named, what was rewritten, what was
    #: left (with ``allow_fallback``), and the placement: proven, or per the profile, not proven here.
    backend: dict[str, Any] | None = None
    #: The whole-model budget propagated from the rewrites (``lowerer convert`` records it, and in the model's
    #: metadata where it is not exact; ``lowerer verify --budget-from`` reads it), or None.
    model_budget: dict[str, Any] | None = None
    #: The nodes a refused conversion could not convert: node, op, version, scope and refusal of each.
    refused: list[dict[str, Any]] | None = None
    #: The rewrites (scope, node) whose NaN handling differs (:attr:`Rewrite.nan_differs`) that no float
    #: graph input reaches: a NaN input cannot get there, so the terminal's NaN note leaves them out
    #: (their ``details.nan`` keeps the difference).
    nan_unreached: set[tuple[str, str]] = field(default_factory=set, repr=False, metadata={INTERNAL: True})

    def __iter__(self) -> Iterator[Rewrite]:
        return iter(self.rewrites)

    def __repr__(self) -> str:
        """One short line: opsets, IR versions, and the rewrites counted by status."""
        counts = Counter(r.status for r in self.rewrites)
        statuses = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s])
        ir = f", IR {self.source_ir_version} -> {self.ir_version}" if self.ir_version is not None else ""
        checks = "".join(f", {name}: {c.get('status')}" for name, c in self.model_checks.items())
        return (f"<Report opset {self.source_opset} -> {self.target_opset}{ir}: {len(self.rewrites)} rewrite"
                f"{'' if len(self.rewrites) == 1 else 's'}{f' ({statuses})' if statuses else ''}{checks}>")

    def __len__(self) -> int:
        return len(self.rewrites)

    @property
    def model_check(self) -> dict[str, Any] | None:
        """The ``--verify-model`` check (original against converted), when it ran."""
        return self.model_checks.get("whole-model check")

    def loops(self) -> list[dict[str, Any]]:
        """Each node written as a loop over its data (a record per node).

        node, scope, op_type, from_version, to_opset, the form, its trip count (None: not static) and ``keep``,
        the lowest opset where the node needs no loop (the version its form came at).
        """
        return [{"node": r.node, "scope": r.scope, "op_type": r.op_type, "from_version": r.from_version,
                 "to_opset": r.to_opset, "form": c.loop, "trips": c.trips, "keep": c.start}
                for r in self.rewrites for c in r.loops[:1]]

    def loop_warning(self, no_keep: str | None = None) -> str | None:
        """One line naming the nodes written as a loop over their data (:meth:`loops`), or None when none is.

        What the loop costs is measured in ``benchmarks/loop_forms.py`` (the README's lowering list states it).
        ``no_keep``: why no target opset keeps the nodes' own forms on the runtime named (``--for``), said
        instead of the opset that keeps them; None: that opset is said.
        """
        loops = self.loops()
        if not loops:
            return None
        forms = {entry["form"] for entry in loops}
        form = forms.pop() if len(forms) == 1 else "a loop over its data"
        shown = [f"{entry['node']} ({entry['op_type']} {entry['from_version']} -> {entry['to_opset']}, "
                 + (f"{entry['trips']} iterations)" if entry["trips"] is not None else "one iteration per update)")
                 for entry in loops[:_LOOPS_SHOWN]]
        more = f" and {len(loops) - _LOOPS_SHOWN} more" if len(loops) > _LOOPS_SHOWN else ""
        count = len(loops)
        keep = max(entry["keep"] for entry in loops)
        kept = (no_keep if no_keep is not None else f"a target opset >= {keep} keeps {'them' if count != 1 else 'it'}"
                f" as {'they are' if count != 1 else 'it is'}")
        return (f"{count} node{'s' if count != 1 else ''} became {form}, far slower than the op ({LOOP_COST}): "
                f"{', '.join(shown)}{more}; {kept}, and --no-loops (API: no_loops=True) refuses such forms")

    def summary(self) -> dict[str, Any]:
        """Counts of rewrites by rule and by verification status, and what was done to the whole model."""
        by_rule: dict[str, Counter[str]] = {}
        for r in self.rewrites:
            by_rule.setdefault(r.rule, Counter())[r.status] += 1
        return {
            "rewrites": len(self.rewrites),
            "by_rule": {rule: dict(c) for rule, c in sorted(by_rule.items())},
            "by_status": dict(Counter(r.status for r in self.rewrites)),
            "source_opset": self.source_opset,
            "target_opset": self.target_opset,
            "source_ir_version": self.source_ir_version,
            "ir_version": self.ir_version,
            "decompose": list(self.decompose),
            "notes": list(self.notes),
            "verification": self.verification,
            "model_check": self.model_check,
            "model_checks": dict(self.model_checks),
            "optimization": self.optimization,
            "backend": self.backend,
            "model_budget": self.model_budget,
            "refused": self.refused,
            "loops": self.loops(),
            "unverified_reasons": dict(Counter(r.reason for r in self.rewrites if r.status == "unverified")),
        }

    def to_json(self, command: Sequence[str] | None = None) -> str:
        """:meth:`to_dict` as JSON text: the summary indented, one line per check and per rewrite record."""
        import json

        data = self.to_dict(command)
        lines = ["{"]
        keys = list(data)
        for k, key in enumerate(keys):
            comma = "," if k < len(keys) - 1 else ""
            value = data[key]
            if key in ("checks", "rewrites"):
                items = [json.dumps(item, separators=(", ", ": ")) for item in value]
                body = ",\n".join(f"    {item}" for item in items)
                lines.append(f'  "{key}": [\n{body}\n  ]{comma}' if items else f'  "{key}": []{comma}')
            else:
                text = json.dumps(value, indent=2).replace("\n", "\n  ")
                lines.append(f'  "{key}": {text}{comma}')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_dict(self, command: Sequence[str] | None = None) -> dict[str, Any]:
        """The report as JSON-ready data (see ``lowerer/core/report.schema.json``).

        Rewrites whose checks are identical (same status, reason, provider and details, apart
        from whether the result was reused) share one entry of ``checks``, referenced by id.
        The check's details name the values of the node it ran on (``checked_on``); each rewrite
        record names its own (``values``).
        """
        checks: list[dict[str, Any]] = []
        index: dict[str, int] = {}
        records: list[dict[str, Any]] = []
        import json

        for i, rewrite in enumerate(self.rewrites):
            record = rewrite.to_dict()
            check = {name: record.pop(name) for name in CHECK_FIELDS if name in record}
            details = dict(check.get("details") or {})
            details.pop("reused", None)
            check["details"] = details
            key = json.dumps(check, sort_keys=True)
            check_id = index.get(key)
            if check_id is None:
                check_id = index[key] = len(checks)
                checks.append({"id": check_id, **check, "checked_on": i, "used_by": 0})
            checks[check_id]["used_by"] += 1
            records.append({"id": i, **record, "status": check.get("status"), "check": check_id})
        return {
            "schema_version": SCHEMA_VERSION,
            "tool": tool_versions(),
            "command": list(command) if command is not None else (list(self.command) if self.command else None),
            "summary": jsonable(self.summary()),
            "checks": checks,
            "rewrites": records,
        }
