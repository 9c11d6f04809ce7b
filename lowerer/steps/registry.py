"""The one registry of every way lowerer changes a node, and the one :meth:`Registry.resolve`.

Every way is a :class:`RegistryEntry`, keyed by ``(domain, op, from, to)`` for a version step or a span
of versions, or by ``(domain, op, form)`` for a form the caller picks:

========================  =====================================  ======================================
kind                      key                                    what it does
========================  =====================================  ======================================
``rule``                  (op, from, to) since-versions          an op-wide rule lowerer owns converts the
                                                                 node in one go (ArgMax/ArgMin, Hardmax,
                                                                 Softmax, LogSoftmax)
``same-meaning``          (op, from, to)                         the owned op means the same there: the node
                                                                 stays as it is (a relabel)
``adapter``               (op, from, to), one version step       an adapter crosses that step (``shape_15_13``)
``refusal``               (op, from, to), one version step       a documented step with no exact crossing
``generic``               every other step                       the schema-derived crossing of the step's
                                                                 classified changes (:mod:`.generic`)
``expansion``             (op, ``function-body``)                the node becomes its schema's function body
``lowering``              (op, since-version)                    the node becomes ops that exist before the op
                                                                 did, for a target that lacks it (Trilu, Mod,
                                                                 CumSum ...: ops with no function body)
``decomposition``         (op, name)                             a decomposition the caller asked for
``form``                  (op, name)                             a backend form a profile picked (``--for``)
========================  =====================================  ======================================

Entries are registered explicitly, by importing the modules of :mod:`lowerer.rules` (its
``__init__`` imports each one and seals :data:`REGISTRY`); the generic crossing and the
function-body expansion are registered here, being schema-derived. :meth:`Registry.resolve` is
the dispatch order, the one the engine runs and :meth:`Registry.explain` (``lowerer inspect``)
describes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import onnx

from lowerer.core.opsets import since_version
from lowerer.steps.changes import Step
from lowerer.steps.expansion import has_body
from lowerer.steps.table import step as table_step

if TYPE_CHECKING:
    from lowerer.steps.emitter import Emitter, Rule
    from lowerer.steps.specialize import MadeRewrite

__all__ = ["DOWN", "NO_REQUEST", "PICKED", "REGISTRY", "UP", "Adapter", "Kind", "Lowering", "Registry", "RegistryEntry",
           "Request", "Resolution", "adapter", "history", "lowering", "made_rewrite"]

DOWN = "down"
UP = "up"

#: Emits ``em.node`` across ``step`` in ``direction`` into ``em`` (whose opset is the far side).
Adapter = Callable[["Emitter", Step, str], None]

Kind = Literal["rule", "same-meaning", "adapter", "refusal", "generic", "expansion", "lowering", "decomposition",
               "form"]

#: Emits ``em.node`` as ops valid at ``em.opset`` (the node's own since-version) that exist below the op.
Lowering = Callable[["Emitter"], None]

#: The key of the function-body expansion entries.
FUNCTION_BODY = "function-body"
#: Why a form is applied: a backend profile picked it (``Crossing.why`` of such rewrites).
PICKED = "the backend profile names it"


@functools.lru_cache(maxsize=4096)
def history(op: str) -> tuple[int, ...]:
    """The since-versions of ``op`` in onnx's schemas, oldest first (empty for an unknown op)."""
    from lowerer.steps.schemas import versions

    try:  # read from the schema table once (get_schema per opset and op costs about 35 ms at import)
        found = versions(op)
    except KeyError:
        return ()
    newest = onnx.defs.onnx_opset_version()
    return tuple(v for v in found if v <= newest)


def next_step(op: str, version: int, direction: str) -> Step:
    """The step of ``op``'s history crossed leaving since-version ``version`` in ``direction``."""
    versions = history(op)
    i = versions.index(version)
    return table_step(op, version if direction == DOWN else versions[i + 1])


def step_ends(step: Step, direction: str) -> tuple[int, int]:
    """The (from, to) since-versions of ``step`` crossed in ``direction``."""
    return (step.version, step.previous) if direction == DOWN else (step.previous, step.version)


@dataclass(frozen=True)
class RegistryEntry:
    """One way of changing a node.

    Attributes:
        kind: what kind of way it is (see the module's table).
        op: the default-domain op it applies to.
        key: ``(from, to)`` since-versions, or a form's name.
        name: the name reports and ``explain`` give it (adapters: ``<op>_<from>_<to>``).
        handler: an :data:`Adapter`, a :class:`~lowerer.steps.emitter.Rule`, a factory of rules (forms that
            take parameters), or None (generic, expansion, same-meaning: the engine knows them).
        why: for a refusal, why the step has no exact crossing and what would work.
        domain: the op's domain (``""``: the default domain).
        budgeted: for a lowering, whether its arithmetic may round differently from the op's kernel (then
            judged by the expansion's ulp budget, like a function body), else exact by construction.
        loop_form: for an entry that may write the node as a loop over its data (a cost class slower than
            the op's kernel: one iteration per update ...), that form in a few words (``a Loop over updates``);
            "" for none. The engine records each use (:attr:`lowerer.core.report.Crossing.loop`), and
            ``no_loops`` refuses it.
    """

    kind: Kind
    op: str
    key: tuple[int, int] | str
    name: str
    handler: Any = None
    why: str = ""
    domain: str = ""
    budgeted: bool = False
    loop_form: str = ""

    def describe(self) -> str:
        """``adapter shape_15_13``, ``rule 'coerced-axis'``, ``generic`` ..."""
        if self.kind in ("rule", "decomposition", "form"):
            return f"{self.kind} {self.name!r}"
        if self.kind in ("adapter", "same-meaning", "lowering"):
            slow = f" (may become {self.loop_form})" if self.loop_form else ""
            return f"{self.kind} {self.name}{slow}"
        return self.kind if self.kind in ("generic", "expansion") else f"refusal ({self.why})"


@dataclass(frozen=True)
class Request:
    """What the caller asks of every node, besides the target opset.

    Attributes:
        decompose: lowerer's own decompositions asked for, by name (``hardmax``, ``globalmaxpool``).
        expand: ops to expand into their function bodies (schema spelling).
        no_loops: refuse the forms that write a node as a loop over its data (:attr:`RegistryEntry.loop_form`).
        fold_dequantize: fold a DequantizeLinear of constants into a float constant where the target's
            DequantizeLinear cannot express it (:mod:`lowerer.rules.dequantize_fold`).
        loops_refused_by: who refuses the loop forms when not ``--no-loops``: a runtime without Loop
            (its profile's ``"loops": false``), named in the refusal.
    """

    decompose: frozenset[str] = frozenset()
    expand: frozenset[str] = frozenset()
    no_loops: bool = False
    fold_dequantize: bool = False
    loops_refused_by: str = ""


#: Nothing asked besides the target.
NO_REQUEST = Request()


@dataclass(frozen=True)
class Resolution:
    """What happens to a node next: the entry applied, the step it crosses, the entry tried if it refuses.

    Attributes:
        entry: the entry applied.
        far: the opset what it emits is valid at (None: the function body's own opset).
        step: the version step crossed (adapters, refusals, generic), else None.
        direction: ``down`` or ``up`` for a step, else None.
        fallback: the entry applied when ``entry`` refuses (the function body, going down), or None.
        why: why this entry (an expansion's reason, for reports).
    """

    entry: RegistryEntry
    far: int | None
    step: Step | None = None
    direction: str | None = None
    fallback: RegistryEntry | None = None
    why: str = ""

    def describe(self) -> str:
        """One line: the step (or span) and what crosses it."""
        how = self.entry.describe()
        if self.fallback is not None:
            how += f", else {self.fallback.describe()}"
        if self.step is not None:
            return f"{self.step.describe()} [{self.direction}: {how}]"
        return f"{self.entry.op} [{how}{f': {self.why}' if self.why else ''}]"


@dataclass
class Registry:
    """Every :class:`RegistryEntry`, and :meth:`resolve`, the one dispatch order."""

    _steps: dict[tuple[str, str, int, int], RegistryEntry] = field(default_factory=dict)
    _spans: dict[tuple[str, str], Rule] = field(default_factory=dict)
    _forms: dict[tuple[str, str, str], RegistryEntry] = field(default_factory=dict)
    _lowerings: dict[tuple[str, str, int], RegistryEntry] = field(default_factory=dict)
    _made: dict[str, MadeRewrite] = field(default_factory=dict)
    #: Decompositions by the name callers pass to ``decompose``.
    decompositions: dict[str, Rule] = field(default_factory=dict)
    sealed: bool = False

    # -- registering -------------------------------------------------------------------------
    def _add_step(self, entry: RegistryEntry) -> None:
        assert isinstance(entry.key, tuple)
        key = (entry.domain, entry.op, *entry.key)
        if key in self._steps:
            raise RuntimeError(f"two entries for {entry.op} {entry.key[0]} → {entry.key[1]}")
        self._steps[key] = entry

    def adapter(self, ops: str | tuple[str, ...], version: int | tuple[int, ...], *directions: str,
                loop_form: str = "") -> Callable[[Adapter], Adapter]:
        """Register the decorated function as the adapter of ``ops``' step into ``version``(s), in ``directions``.

        ``version`` is the newer side of the step; a version that is not a step of the op's history is an
        error at import. Each entry is named ``<op>_<from>_<to>``. ``loop_form``: the loop over the node's
        data the adapter may write (see :attr:`RegistryEntry.loop_form`; it says so with
        :meth:`~lowerer.steps.emitter.Emitter.loop_form`). Example::

            @adapter("Shape", 15, DOWN)
            def shape_15_13(em: Emitter, step: Step, direction: str) -> None: ...
        """
        names = (ops,) if isinstance(ops, str) else ops
        versions = (version,) if isinstance(version, int) else version

        def register(fn: Adapter) -> Adapter:
            for op in names:
                for v in versions:
                    for direction in directions or (DOWN, UP):
                        entry = self._step_entry("adapter", op, v, direction, fn)
                        self._add_step(dataclasses.replace(entry, loop_form=loop_form))
            return fn

        return register

    def refusal(self, op: str, version: int, direction: str, why: str) -> None:
        """Document that ``op``'s step into ``version`` has no exact crossing in ``direction``, and why."""
        self._add_step(self._step_entry("refusal", op, version, direction, None, why))

    @staticmethod
    def _step_entry(kind: Kind, op: str, version: int, direction: str, handler: Any, why: str = "") -> RegistryEntry:
        versions = history(op)
        if version not in versions or versions.index(version) == 0:
            raise RuntimeError(f"{op}-{version} is not the newer side of a step of {op} (versions {versions})")
        start, end = step_ends(table_step(op, version), direction)
        return RegistryEntry(kind, op, (start, end), f"{op.lower()}_{start}_{end}", handler, why)

    def lowering(self, op: str, versions: int | tuple[int, ...] | None = None, budgeted: bool = False
                 ) -> Callable[[Lowering], Lowering]:
        """Register the decorated function as the lowering of ``op``-``versions`` (default: every version).

        A lowering writes the node with ops that exist below the op, valid at the node's own
        since-version (``em.opset``); the engine then takes those to the target like any node. It is
        applied when the target lacks the op, and going down when a step has no exact crossing.
        ``budgeted``: its float arithmetic may round differently from the op's kernel. Example::

            @REGISTRY.lowering("Trilu")
            def trilu(em: Emitter) -> None: ...
        """
        chosen = history(op) if versions is None else (versions,) if isinstance(versions, int) else versions

        def register(fn: Lowering) -> Lowering:
            for v in chosen:
                if v not in history(op):
                    raise RuntimeError(f"{op}-{v} is not a version of {op} (versions {history(op)})")
                key = ("", op, v)
                if key in self._lowerings:
                    raise RuntimeError(f"two lowerings for {op}-{v}")
                self._lowerings[key] = RegistryEntry("lowering", op, (v, 0), f"{op.lower()}_{v}_lowering", fn,
                                             budgeted=budgeted)
            return fn

        return register

    def made_rewrite(self, op: str) -> Callable[[MadeRewrite], MadeRewrite]:
        """Register the decorated function as how a node of ``op`` a function body makes is rewritten.

        The engine passes these to the expansion (:func:`~lowerer.steps.specialize.fold`): a node of
        ``op`` that an expansion makes for a target lacking ``op`` is rewritten where it is made, its
        body still at the body's opset. So the step layer gets a rule's rewrite without importing the
        rule. Example::

            @REGISTRY.made_rewrite("Scan")
            def loop_from_scan(em, node, body, opset): ...
        """

        def register(fn: MadeRewrite) -> MadeRewrite:
            if op in self._made:
                raise RuntimeError(f"two rewrites of a made {op}")
            self._made[op] = fn
            return fn

        return register

    @property
    def made_rewrites(self) -> Mapping[str, MadeRewrite]:
        """The rewrites of made nodes registered with :meth:`made_rewrite`, by op."""
        return MappingProxyType(self._made)

    def lowering_entry(self, op: str, version: int) -> RegistryEntry | None:
        """The lowering registered for ``op``-``version``, or None."""
        return self._lowerings.get(("", op, version))

    def _lowered_below(self, op: str, version: int) -> int | None:
        """The newest version of ``op`` older than ``version`` that has a lowering (None: none has)."""
        older = [v for (domain, name, v) in self._lowerings if not domain and name == op and v < version]
        return max(older) if older else None

    def rule(self, rule: Rule) -> None:
        """Register an op-wide rule: it converts each of its ops between any two of its versions."""
        for op in rule.op_types:
            if ("", op) in self._spans:
                raise RuntimeError(f"two rules for {op}")
            self._spans[("", op)] = rule

    def decomposition(self, rule: Rule) -> None:
        """Register a decomposition, asked for by ``rule.decomposition``; also a form profiles may pick."""
        assert rule.decomposition is not None
        self.decompositions[rule.decomposition] = rule
        for op in rule.op_types:
            entry = RegistryEntry("decomposition", op, rule.decomposition, rule.name, rule)
            self._forms[("", op, rule.decomposition)] = entry

    def form(self, name: str, ops: tuple[str, ...], make: Callable[..., Rule]) -> None:
        """Register a backend form ``name`` of ``ops`` (``*``: any op): ``make(*params)`` builds its rule."""
        for op in ops:
            self._forms[("", op, name)] = RegistryEntry("form", op, name, name, make)

    def seal(self) -> None:
        """Mark the registry complete (:mod:`lowerer.rules` has registered everything)."""
        self.sealed = True

    # -- reading -----------------------------------------------------------------------------
    def entries(self) -> Iterator[RegistryEntry]:
        """Every registered entry (spans as one ``rule`` entry per op)."""
        yield from self._steps.values()
        yield from self._forms.values()
        yield from self._lowerings.values()
        for (domain, op), rule in self._spans.items():
            yield RegistryEntry("rule", op, (0, 0), rule.name, rule, domain=domain)

    def loop_forms(self) -> list[RegistryEntry]:
        """Every entry that may write a node as a loop over its data (:attr:`RegistryEntry.loop_form` set)."""
        return [e for e in self.entries() if e.loop_form]

    def span_rule(self, op: str) -> Rule | None:
        """The op-wide rule lowerer owns for ``op``, or None."""
        return self._spans.get(("", op))

    def step_entry(self, op: str, start: int, end: int) -> RegistryEntry | None:
        """The entry registered for ``op``'s step from since-version ``start`` to ``end`` (None: generic)."""
        return self._steps.get(("", op, start, end))

    def form_entry(self, op: str, name: str) -> RegistryEntry:
        """The form (or decomposition, or ``expand``) ``name`` of ``op``."""
        if name in ("expand", FUNCTION_BODY):
            return expansion_entry(op)
        entry = self._forms.get(("", op, name)) or self._forms.get(("", "*", name))
        if entry is None:
            raise KeyError(f"no form {name!r} for {op}")
        return entry

    def resolve(self, op: str, version: int, target: int, request: Request = NO_REQUEST,
                form: str | None = None) -> Resolution | None:
        """What happens next to a default-domain ``op`` node at since-``version``, bound for opset ``target``.

        The dispatch order, first match wins:

        1. ``form``: the form a backend profile picked for this node (``--for``), applied at ``target``;
        2. a decomposition the caller asked for (``decompose=hardmax``), applied at ``target``;
        3. an expansion the caller asked for (``decompose=layernormalization``): the function body;
        4. an op-wide rule lowerer owns: the node stays where the op means the same at the target's
           version (``same-meaning``), else the rule converts it to ``target`` in one go;
        5. the op has the same version at ``target``: None, the node stays as it is;
        6. the op does not exist at ``target``: its registered lowering; else, when an older version
           has one, the next step towards that version (as in 7); else its function body, else a
           refusal;
        7. the next version step towards ``target``: its registered adapter or refusal, else the
           generic crossing; going down, the lowering (else the function body) is the fallback when
           that refuses.

        What an entry emits is resolved again from the far side it is valid at, until ``target``.
        Returns None when the node stays as it is.
        """
        if not self.sealed:
            raise RuntimeError("the registry is not complete: import lowerer.rules first")
        if form is not None:
            return Resolution(self.form_entry(op, form), target if form != "expand" else None, why=PICKED)
        for name in request.decompose:
            decomposition = self.decompositions[name]
            if op in decomposition.op_types:
                return Resolution(RegistryEntry("decomposition", op, name, decomposition.name, decomposition), target)
        if op in request.expand:
            return Resolution(expansion_entry(op), None, why="asked for")
        tv = since_version(op, target)
        rule = self.span_rule(op)
        if rule is not None:
            return self._span(rule, op, version, tv, target)
        if tv == version:
            return None
        lowering = self.lowering_entry(op, version)
        if tv is None:
            if lowering is not None:
                return Resolution(lowering, None, why=f"no {op} at opset {target}")
            tv = self._lowered_below(op, version)
            if tv is None:
                if has_body(op, version):
                    return Resolution(expansion_entry(op), None, why=f"no {op} at opset {target}")
                return Resolution(missing_entry(op, target), target)
        direction = DOWN if tv < version else UP
        step = next_step(op, version, direction)
        start, end = step_ends(step, direction)
        entry = self.step_entry(op, start, end) or RegistryEntry("generic", op, (start, end), "generic")
        fallback = None
        if direction == DOWN:
            fallback = lowering if lowering is not None else expansion_entry(op) if has_body(op, version) else None
        return Resolution(entry, end if direction == UP else step.version - 1, step, direction, fallback)

    @staticmethod
    def _span(rule: Rule, op: str, version: int, tv: int | None, target: int) -> Resolution | None:
        if tv == version:
            return None
        key = (version, tv or 0)
        if key in rule.same_meaning:
            return Resolution(RegistryEntry("same-meaning", op, key, f"{op.lower()}_{version}_{tv}", rule), target)
        return Resolution(RegistryEntry("rule", op, key, rule.name, rule), target)

    def explain(self, op: str, source_version: int, target_version: int, request: Request = NO_REQUEST) -> list[str]:
        """One line per step (or span) crossed from ``source_version`` to ``target_version``, and what crosses it.

        Each line comes from :meth:`resolve`, as the engine runs it; a node the entry emits under another op
        goes on by its own resolution (not listed).
        """
        lines: list[str] = []
        version = source_version
        while True:
            resolution = self.resolve(op, version, target_version, request)
            if resolution is None:
                if not lines:
                    lines.append(f"{op}-{source_version} stays as it is at version {target_version}")
                return lines
            lines.append(resolution.describe())
            far = resolution.far
            if resolution.step is None or far is None or resolution.entry.kind == "refusal":
                return lines
            next_version = since_version(op, far)
            if next_version is None or next_version == version:
                return lines
            version = next_version


@functools.cache
def expansion_entry(op: str) -> RegistryEntry:
    """The function-body expansion entry of ``op`` (schema-derived: any op whose schema has a body)."""
    return RegistryEntry("expansion", op, FUNCTION_BODY, "function-expansion")


def missing_entry(op: str, target: int) -> RegistryEntry:
    """The refusal of an op that does not exist at ``target`` and has no body."""
    return RegistryEntry("refusal", op, FUNCTION_BODY, "missing", why=f"{op} does not exist at opset {target}")


#: The registry :mod:`lowerer.rules` fills (and seals).
REGISTRY = Registry()

#: ``@adapter("Op", version, DOWN)`` registers into :data:`REGISTRY`.
adapter = REGISTRY.adapter
#: ``@lowering("Trilu")`` registers into :data:`REGISTRY`.
lowering = REGISTRY.lowering
#: ``@made_rewrite("Scan")`` registers into :data:`REGISTRY`.
made_rewrite = REGISTRY.made_rewrite
