"""Backend profiles: what an execution provider cannot run, as data (one JSON file per backend).

A profile (``lowerer/backends/<name>.json``) lists entries. Each entry names an op (or several),
the range of its since-versions, an optional condition on the node (attribute values, attributes
written at all, input element types, whether an input is a literal constant, a constant input's value, the rank,
static dims, an Einsum equation repeating a letter within an operand, whether the node is its model's only
node: :mod:`lowerer.backends.conditions`), what lowerer does
with such a node (``rewrite``: the name of an exact form, or null when lowerer has none), why the
backend cannot run it, and the source of that statement (a document or code location). Entries
that could not be confirmed in their source say so (``"confirmed": false`` and a ``note``).

A backend is named on the command line as ``NAME`` (its newest version), or with a version
bound where the profile has version-dependent entries: ``tensorrt<9.2``, ``tensorrt==8.6``,
``tensorrt>=10``. An entry with ``backend_versions`` (``"<9.2"``) applies when some version the
user named falls in its range. A profile's ``loads`` table (:mod:`lowerer.backends.loads`) says
which opset and IR version each runtime release loads; ``onnxruntime`` names the CPU profile with
onnxruntime's versions (``onnxruntime==1.14``).

An entry with ``"departure": true`` says the runtime computes the op itself differently from ONNX
(OpenVINO's TopK on ties): the original model departs there already. With ``"rewrite": null``
lowerer has no form that fixes it; with a rewrite, its form fixes it where it can be written (its
opset), and elsewhere lowerer has none. A node of the user's own model it names that no form
replaces is converted as it is, with a warning line naming node and runtime, and recorded in
``report.backend["departures"]`` (``strict_backend=True``, ``--strict-backend``, refuses it instead).
An entry without it says lowerer's output would break there: a node lowerer wrote is refused (or kept with
``--allow-fallback``) whatever the entry says.

A profile's top-level ``"loops": false`` says the runtime has no ``Loop``: the forms that write a node
as a Loop over its data are refused as under ``--no-loops``, in one line naming the runtime and the
lowest opset that keeps the op's own form.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from lowerer.backends.conditions import CHECKS, describe_condition
from lowerer.backends.loads import Loads, loads_for, parse_loads
from lowerer.backends.runtimes import runtime_of, witnesses_for
from lowerer.backends.witnesses import installed_release
from lowerer.core.errors import InputError

if TYPE_CHECKING:
    from lowerer.facts import Facts

__all__ = ["BACKENDS", "FALLBACK_RUNTIMES", "REWRITES", "DomainSupport", "Entry", "Profile", "aliases_of",
           "backend_names", "load_profile", "load_rows"]

#: The backends that ship a profile (``lowerer/backends/<name>.json``), by canonical name: cpu, then by name.
BACKENDS = tuple(sorted((p.stem for p in Path(__file__).parent.glob("*.json")), key=lambda n: (n != "cpu", n)))
#: The runtimes (a profile's ``runtime``) that hand a node their kernels refuse to another provider, so that
#: ``--allow-fallback`` keeps a model running: onnxruntime's providers, TensorRT as onnxruntime's TensorRT
#: provider (tensorrt.json: "Nodes TensorRT rejects go to the next provider"), Windows ML (onnxruntime's, with
#: DirectML and the CPU). OpenVINO and rknn-toolkit2 on their own load the whole model or refuse it.
FALLBACK_RUNTIMES = frozenset({"onnxruntime", "onnxruntime-qnn", "tensorrt", "winml"})
#: Other names of backends: ``onnxruntime`` is its default (CPU) provider, with onnxruntime's versions.
_ALIASES = {"directml": "dml", "trt": "tensorrt", "nvidia-tensorrt": "tensorrt", "ov": "openvino",
            "onnxruntime": "cpu", "ort": "cpu", "windowsml": "winml", "rknpu": "rknn"}

#: The exact forms an entry may name, and what each does (for messages and ``inspect``).
REWRITES: dict[str, str] = {
    "hardmax": "Hardmax -> ArgMax + one-hot (Equal against an iota + Cast)",
    "globalmaxpool": "GlobalMaxPool -> ReduceMax over the spatial axes",
    "argmax-flip": "select_last_index=1 -> reverse the axis, first extremum, index mapped back",
    "last-axis": "the op on the last axis (Transpose around it, or Flatten + Reshape for the 2-D meaning)",
    "constant-inputs": "inputs proven constant written as initializers",
    "argmax-topk": "ArgMax/ArgMin -> TopK(k=1) indices (the first extremum), Squeeze for keepdims=0",
    "hardmax-topk": "Hardmax -> TopK(k=1) indices + one-hot (the hardmax decomposition's, TopK for ArgMax)",
    "shape-slice": "Shape start/end -> Shape + Slice (constant starts/ends, axes 0)",
    "argmax-reduce": "ArgMax/ArgMin -> ReduceMin(Where(Equal(x, ReduceMax(x)), iota, n-1)) (no ArgMax/TopK)",
    "hardmax-reduce": "Hardmax -> first maximum from ReduceMax + Equal + Where + ReduceMin, + one-hot (no ArgMax/TopK)",
    "expand": "the op's ONNX function body",
    "isnan-equal": "IsNaN -> Not(Equal(x, x)) (NaN is the one value unequal to itself)",
    "isnan-ordered": "IsNaN -> Not(LessOrEqual(x, +inf)) (NaN is the one value not at most +inf)",
    "constant-fill": "ConstantOfShape of a provably constant shape -> the filled tensor as an initializer",
    "explicit-fill": "ConstantOfShape without value -> the same node with value = float32 0 (its default) written",
    "gelu-mul": "Gelu (approximate=none) -> 0.5 x (1 + Erf(x * (1/sqrt 2))) (Mul, not the body's Div by Sqrt(2))",
    "gelu-tanh-cube": "Gelu (approximate=tanh) -> its function body with x * x * x for Pow(x, 3)",
    "einsum-diagonal": "Einsum with a letter repeated in an operand -> its diagonal by Gather, then Einsum over it",
    "einsum-pairwise": "Einsum of three or more operands -> pairwise contractions (Transpose, Mul, MatMul, ReduceSum)",
    "attention-scale-after": "Attention -> its function body with the scale applied to Q K^T (MatMul, then Mul), "
                             "not sqrt(scale) to Q and to K^T",
    "attention-float-mask": "Attention with a bool attn_mask -> the same node given Where(mask, 0, -inf) in Q's type "
                            "(the additive mask its body makes of it)",
    "attention-trilu-isinf": "Attention -> its function body with the causal mask as Trilu of a -inf fill and the "
                             "guard of a wholly masked row as ReduceMin of IsInf (not ReduceMax == -inf)",
    "gather-slices": "Gather with constant indices (rank >= 1) -> one Slice per index, concatenated along the axis",
    "where-constant": "Where with a constant condition all true or all false -> the branch it takes (Expand where "
                      "the output is broadcast larger)",
}

_ENTRY_KEYS = frozenset({"op", "ops", "versions", "when", "rewrite", "why", "source", "confirmed", "note",
                         "backend_versions", "departure"})
_SPEC = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_-]*)\s*(?:(<=|>=|==|=|<|>|@)\s*(\d+(?:\.\d+)*))?\s*$")

_WIDTH = 8
#: A bound of a version range: the version padded to :data:`_WIDTH` numbers, and whether it is inclusive.
_Bound = tuple[tuple[int, ...], bool]
_LOWEST: tuple[int, ...] = (-1,) * _WIDTH
_HIGHEST: tuple[int, ...] = (1 << 30,) * _WIDTH


def _version(text: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in text.split("."))[:_WIDTH]
    return parts + (0,) * (_WIDTH - len(parts))


@dataclass(frozen=True)
class VersionRange:
    """A range of backend versions between two bounds (each inclusive or not)."""

    low: _Bound = (_LOWEST, False)
    high: _Bound = (_HIGHEST, False)

    @staticmethod
    def parse(op: str | None, version: str | None) -> VersionRange:
        """The range of ``<V``, ``<=V``, ``>V``, ``>=V``, ``==V`` (or none: every version)."""
        if op is None or version is None:
            return VersionRange()
        v = _version(version)
        if op == "<":
            return VersionRange(high=(v, False))
        if op == "<=":
            return VersionRange(high=(v, True))
        if op == ">":
            return VersionRange(low=(v, False))
        if op == ">=":
            return VersionRange(low=(v, True))
        return VersionRange((v, True), (v, True))

    def overlaps(self, other: VersionRange) -> bool:
        """Whether some version lies in both ranges."""
        low = max(self.low, other.low, key=lambda b: (b[0], not b[1]))
        high = min(self.high, other.high, key=lambda b: (b[0], b[1]))
        if low[0] < high[0]:
            return True
        return low[0] == high[0] and low[1] and high[1]

    def contains_newest(self) -> bool:
        """Whether the range is open upwards (it holds the newest version)."""
        return self.high[0] == _HIGHEST


@dataclass(frozen=True)
class Entry:
    """One thing a backend cannot run.

    Attributes:
        ops: the default-domain ops it names.
        versions: the since-versions it covers, inclusive (``None``: open).
        when: the condition on the node (see the module docstring); empty: every node of the ops.
        rewrite: the exact form lowerer applies (a key of :data:`REWRITES`), or None when it has none.
        why: what the backend does with such a node.
        source: where that is documented or implemented.
        confirmed: False when the statement could not be confirmed in the source.
        note: what was or was not confirmed, and caveats.
        backend_versions: the backend versions the entry applies to (None: all).
        departure: the runtime computes the op of the original model differently; where no form of
            lowerer's fixes it (none, or its form cannot be written there), the user's own node is said,
            not refused (see the module docstring).
    """

    ops: tuple[str, ...]
    versions: tuple[int | None, int | None]
    when: Mapping[str, Any]
    rewrite: str | None
    why: str
    source: str
    confirmed: bool = True
    note: str = ""
    backend_versions: VersionRange | None = None
    #: ``backend_versions`` as written (``<9.2``), for messages.
    backend_versions_text: str = ""
    departure: bool = False

    def covers(self, op: str, version: int) -> bool:
        """Whether the entry names ``op`` at since-version ``version`` (before its condition)."""
        low, high = self.versions
        return op in self.ops and (low is None or version >= low) and (high is None or version <= high)

    def matches(self, node: onnx.NodeProto, version: int, facts: Facts) -> bool:
        """Whether ``node`` (``op``-``version``) is one the backend cannot run, as far as ``facts`` tell.

        Unknown facts count as matching where the condition is about a limitation (an unknown rank
        may be the one the backend lacks), and as not matching for element types (an entry for
        double inputs does not claim a node of unknown type).
        """
        if not self.covers(node.op_type, version):
            return False
        return all(CHECKS[name](node, version, facts, value) for name, value in self.when.items())

    def describe(self) -> str:
        """The entry in a few words: ``Hardmax (all versions)``, ``ArgMax-12+ with select_last_index=1``."""
        low, high = self.versions
        if low is None and high is None:
            span = ""
        elif high is None:
            span = f"-{low}+"
        elif low == high:
            span = f"-{low}"
        else:
            span = f"-{low or 1}..{high}"
        parts = [f"{'/'.join(self.ops)}{span}"]
        for name, value in self.when.items():
            parts.append(describe_condition(name, value))
        if self.backend_versions is not None:
            parts.append(f"(backend versions {self.backend_versions_text})")
        return " ".join(p for p in parts if p)


@dataclass(frozen=True)
class DomainSupport:
    """Which ops of a non-default domain (``ai.onnx.ml``, ``com.microsoft``) the backend's runtime imports.

    A profile's ``domains`` list: a domain it does not name is not known either way (nothing is checked).

    Attributes:
        domain: the domain.
        ops: the ops of it the runtime imports; None: all of them (an empty set: none).
        source: where that is documented or implemented.
        confirmed: False when the statement could not be confirmed in the source.
        note: caveats.
    """

    domain: str
    ops: frozenset[str] | None
    source: str
    confirmed: bool = True
    note: str = ""

    def lacks(self, op: str) -> bool:
        """Whether the runtime has no importer for ``op`` of this domain."""
        return self.ops is not None and op not in self.ops


@dataclass(frozen=True)
class Profile:
    """A backend's profile: its onnxruntime execution provider and the entries that apply.

    Attributes:
        name: canonical backend name (``cuda``).
        spec: what the user wrote (``tensorrt<9.2``).
        provider: the onnxruntime execution provider that runs this backend.
        description: a line on the backend and how the profile was built.
        entries: the entries that apply to the backend version(s) named.
        loads: the highest opset and IR version the runtime version named loads (None: no table).
        release: for an onnxruntime provider, the onnxruntime release named (``1.15`` for
            ``onnxruntime==1.15``, ``cuda<=1.20``; the newest shipped table below it for ``<``); None
            when none was named (the installed release).
    """

    name: str
    spec: str
    provider: str
    description: str
    entries: tuple[Entry, ...] = field(default_factory=tuple)
    loads: Loads | None = None
    release: str | None = None
    runtime: str = ""
    #: The backend versions named (every version when none was).
    named: VersionRange = field(default_factory=VersionRange)
    #: How the version was chosen when none was named: ``the installed release (OpenVINO 2026.4.1)``,
    #: ``the newest row (2026.4)``; empty when the user named one.
    chosen: str = ""
    #: The largest difference a float output may show on the backend's runtime, relative to the output's
    #: largest magnitude, and where that figure comes from (see :mod:`lowerer.backends.deployment`).
    tolerance: float = 1e-5
    tolerance_source: str = ""
    #: The non-default domains whose ops the runtime imports (see :class:`DomainSupport`).
    domains: tuple[DomainSupport, ...] = ()
    #: False when the runtime has no ``Loop`` (the profile's ``"loops": false``): loop forms are refused.
    loops: bool = True

    @property
    def ops(self) -> frozenset[str]:
        """Every op some entry names."""
        return frozenset(op for e in self.entries for op in e.ops)

    def entry_for(self, node: onnx.NodeProto, version: int, facts: Facts) -> Entry | None:
        """The first entry naming ``node`` (default domain, at since-version ``version``), or None."""
        if node.domain not in ("", "ai.onnx"):
            return None
        for entry in self.entries:
            if entry.matches(node, version, facts):
                return entry
        return None


def aliases_of(name: str) -> list[str]:
    """The other names of backend ``name`` (``cpu``: onnxruntime, ort)."""
    return [alias for alias, target in _ALIASES.items() if target == name]


def load_rows(name: str) -> tuple[Loads, ...]:
    """Backend ``name``'s table of what each runtime release loads (empty: none), oldest first."""
    rows: tuple[Loads, ...] = _profile_data(name)["loads"]
    return rows


def backend_names() -> str:
    """The backend names, for messages."""
    return ", ".join(BACKENDS)


def load_profile(spec: object) -> Profile:
    """The profile named by ``spec`` (``cuda``, ``tensorrt<9.2``), with the entries that apply.

    Raises:
        InputError: an unknown backend, a malformed version bound, or a profile file that is not valid.
    """
    if not isinstance(spec, str):
        raise InputError(f"for_backend must be a backend name ({backend_names()}), not a {type(spec).__name__}")
    m = _SPEC.match(spec)
    if m is None:
        raise InputError(f"cannot read backend {spec!r}: give a name ({backend_names()}), optionally with a "
                         "version bound such as tensorrt<9.2")
    name = m.group(1).lower()
    name = _ALIASES.get(name, name)
    if name not in BACKENDS:
        raise InputError(f"unknown backend {m.group(1)!r}; known backends: {backend_names()}")
    op: str | None = {"=": "==", "@": "=="}.get(m.group(2) or "", m.group(2))
    version: str | None = m.group(3)
    data = _profile_data(name)
    chosen = ""
    if op is None and data["witnessed"]:
        op, version, chosen = _unnamed_version(data)
    named = VersionRange.parse(op, version)
    entries = []
    for entry in data["entries"]:
        applies = entry.backend_versions
        if applies is None or (named.overlaps(applies) if op is not None else applies.contains_newest()):
            entries.append(entry)
    rows = data["loads"]
    return Profile(name=name, spec=spec.strip(), provider=data["provider"], description=data["description"],
                   entries=tuple(entries), loads=loads_for(rows, op, version) if rows else None,
                   release=_release(data, op, version), runtime=data["runtime"], named=named,
                   chosen=chosen, tolerance=data["tolerance"], tolerance_source=data["tolerance_source"],
                   domains=data["domains"], loops=data["loops"])


def _unnamed_version(data: dict[str, Any]) -> tuple[str | None, str | None, str]:
    """For a backend named without a version: the installed release of its runtime, else the newest row."""
    runtime = data["runtime"]
    installed = installed_release(data["backend"])
    if installed is not None:
        found = re.match(r"\d+(?:\.\d+)*", installed[0])
        if found is not None:
            return "==", found.group(0), f"the installed release ({installed[1]})"
    rows = data["loads"]
    record = runtime_of(runtime)
    label = record.label if record is not None else runtime
    newest = f"the newest row of lowerer's table ({rows[-1].version}); {label} is not installed" if rows else ""
    return None, None, newest


def _release(data: Mapping[str, Any], op: str | None, version: str | None) -> str | None:
    """The onnxruntime release a spec names (see :attr:`Profile.release`).

    A runtime other than onnxruntime whose profile says ``"onnxruntime_versions": "<2"`` numbered its older
    releases as onnxruntime's (onnxruntime-qnn 1.x was onnxruntime's own QNN build; 2.x is a plugin): a
    version in that range names that onnxruntime release.
    """
    if version is None or op in (None, ">", ">="):
        return None
    ours = data.get("onnxruntime_versions")
    if data["runtime"] != "onnxruntime":
        high, inclusive = VersionRange.parse(op, version).high
        if ours is None or not (high < ours.high[0] or (high == ours.high[0] and (ours.high[1] or not inclusive))):
            return None
    if op != "<":
        return version
    from lowerer.backends.kernel_tables import shipped_releases

    below = [r for r in shipped_releases() if _version(r) < _version(version)]
    return below[-1] if below else None


@functools.cache
def _profile_data(name: str) -> dict[str, Any]:
    """The parsed and checked profile file of backend ``name`` (read once)."""
    text = resources.files("lowerer.backends").joinpath(f"{name}.json").read_text(encoding="utf-8")
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise InputError(f"the profile of backend {name!r} is not valid JSON: {e}") from None
    data = parse_profile(raw, f"{name}.json")
    shared = raw.get("loads") if isinstance(raw, dict) else None
    if isinstance(shared, str):  # an onnxruntime provider: onnxruntime's versions and limits
        if shared not in BACKENDS or shared == name:
            raise InputError(f"profile {name}.json: 'loads' names no other backend: {shared!r}")
        data["loads"] = _profile_data(shared)["loads"]
        if not data["domains"]:  # a provider inside that runtime: its other domains' kernels are the runtime's
            data["domains"] = _profile_data(shared)["domains"]
    return data


def parse_profile(raw: object, source: str) -> dict[str, Any]:
    """Check a profile's data and turn its entries into :class:`Entry` objects.

    Raises:
        InputError: naming the file and the entry at fault.
    """
    if not isinstance(raw, dict) or not isinstance(raw.get("provider"), str) or \
            not isinstance(raw.get("entries"), list):
        raise InputError(f"profile {source}: needs 'provider' (a string) and 'entries' (a list)")
    entries = [_entry(item, f"{source} entry {i}") for i, item in enumerate(raw["entries"])]
    loads = raw.get("loads")
    rows = () if loads is None or isinstance(loads, str) else \
        parse_loads(loads, str(raw.get("runtime") or raw.get("backend") or source), source)
    runtime = str(raw.get("runtime") or "")
    backend = str(raw.get("backend") or source.rsplit(".", 1)[0])
    tolerance = raw.get("tolerance", {"relative": 1e-5, "source": ""})
    if not isinstance(tolerance, dict) or not isinstance(tolerance.get("relative"), (int, float)) or \
            not 0 <= tolerance["relative"] < 1:
        raise InputError(f"profile {source}: 'tolerance' must be {{\"relative\": a number in [0, 1), \"source\": ...}}")
    ours = raw.get("onnxruntime_versions")
    if ours is not None and not (isinstance(ours, str) and re.match(r"^\s*(<=|<)\s*\d+(?:\.\d+)*\s*$", ours)):
        raise InputError(f"profile {source}: 'onnxruntime_versions' must be like '<2'")
    onnxruntime_versions = None if ours is None else VersionRange.parse(*re.findall(r"<=|<|\d+(?:\.\d+)*", ours))
    loops = raw.get("loops", True)
    if not isinstance(loops, bool):
        raise InputError(f"profile {source}: 'loops' must be true or false")
    return {"loops": loops, "provider": raw["provider"], "description": str(raw.get("description", "")),
            "entries": entries,
            "onnxruntime_versions": onnxruntime_versions,
            "loads": rows, "runtime": runtime, "backend": backend, "witnessed": bool(witnesses_for(backend)),
            "tolerance": float(tolerance["relative"]), "tolerance_source": str(tolerance.get("source", "")),
            "domains": tuple(_domain(item, f"{source} domains[{i}]") for i, item in enumerate(raw.get("domains", [])))}


def _domain(item: object, where: str) -> DomainSupport:
    """One entry of a profile's ``domains``: ``{"domain", "ops": "all" or a list, "source", "confirmed", "note"}``."""
    if not isinstance(item, dict) or not isinstance(item.get("domain"), str) or item["domain"] in ("", "ai.onnx") \
            or not isinstance(item.get("source"), str) or not item["source"]:
        raise InputError(f"profile {where}: needs 'domain' (a non-default domain) and 'source' (a non-empty string)")
    unknown = set(item) - {"domain", "ops", "source", "confirmed", "note"}
    if unknown:
        raise InputError(f"profile {where}: unknown key(s) {', '.join(sorted(unknown))}")
    ops = item.get("ops")
    if ops != "all" and not (isinstance(ops, list) and all(isinstance(o, str) for o in ops)):
        raise InputError(f"profile {where}: 'ops' must be \"all\" or a list of op names")
    return DomainSupport(item["domain"], None if ops == "all" else frozenset(ops), item["source"],
                         bool(item.get("confirmed", True)), str(item.get("note", "")))


def _entry(item: object, where: str) -> Entry:
    if not isinstance(item, dict):
        raise InputError(f"profile {where}: an entry must be an object")
    unknown = set(item) - _ENTRY_KEYS
    if unknown:
        raise InputError(f"profile {where}: unknown key(s) {', '.join(sorted(unknown))}")
    ops = item.get("ops", [item["op"]] if "op" in item else None)
    if not isinstance(ops, list) or not ops or not all(isinstance(o, str) and onnx.defs.has(o) for o in ops):
        raise InputError(f"profile {where}: 'op'/'ops' must name default-domain ops")
    versions = item.get("versions", [None, None])
    if not isinstance(versions, list) or len(versions) != 2 or \
            not all(v is None or (isinstance(v, int) and v > 0) for v in versions):
        raise InputError(f"profile {where}: 'versions' must be [low, high] (integers or null)")
    when = item.get("when", {})
    if not isinstance(when, dict) or set(when) - set(CHECKS):
        raise InputError(f"profile {where}: 'when' may hold only {', '.join(sorted(CHECKS))}")
    values = when.get("input_values_outside", {})
    if not isinstance(values, dict) or not all(
            isinstance(k, str) and k.isdigit() and isinstance(v, list) and v and
            all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v) for k, v in values.items()):
        raise InputError(f"profile {where}: 'input_values_outside' must map input positions to lists of numbers "
                         '({"1": [2, 3]})')
    rewrite = item.get("rewrite")
    if rewrite is not None and rewrite not in REWRITES:
        raise InputError(f"profile {where}: unknown rewrite {rewrite!r} (known: {', '.join(REWRITES)})")
    for key in ("why", "source"):
        if not isinstance(item.get(key), str) or not item[key].strip():
            raise InputError(f"profile {where}: '{key}' must be a non-empty string")
    departure = item.get("departure", False)
    if not isinstance(departure, bool):
        raise InputError(f"profile {where}: 'departure' must be true or false")
    applies = None
    if "backend_versions" in item:
        m = re.match(r"^\s*(<=|>=|==|<|>)\s*(\d+(?:\.\d+)*)\s*$", str(item["backend_versions"]))
        if m is None:
            raise InputError(f"profile {where}: 'backend_versions' must be like '<9.2'")
        applies = VersionRange.parse(m.group(1), m.group(2))
    return Entry(ops=tuple(ops), versions=(versions[0], versions[1]), when=dict(when), rewrite=rewrite,
                 why=item["why"].strip(), source=item["source"].strip(), confirmed=bool(item.get("confirmed", True)),
                 note=str(item.get("note", "")), backend_versions=applies,
                 backend_versions_text=str(item.get("backend_versions", "")).replace(" ", ""), departure=departure)
