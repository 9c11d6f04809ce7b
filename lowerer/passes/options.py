"""The options every entry point takes (API, command line, onnx_ir pass), checked once.

:meth:`ConvertOptions.create` checks every option of a conversion and returns them frozen; the
command line, :func:`lowerer.convert` and :class:`lowerer.LowerPass` all build one. Each check
returns the option in its canonical form or raises :class:`~lowerer.core.errors.InputError` with one
line; a wrong type (``decompose=123``, ``providers=[None]``) is an ``InputError`` too.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lowerer.core.errors import InputError
from lowerer.steps.registry import NO_REQUEST, Request

if TYPE_CHECKING:
    import onnx

    from lowerer.backends.profile import Profile
    from lowerer.core.progress import ProgressCallback
    from lowerer.verification.whole import ModelCheckOptions

__all__ = ["ConvertOptions", "check_flag", "check_progress", "decompose_names", "normalize_decompose",
           "provider_list", "seed_value"]


@dataclass(frozen=True)
class ConvertOptions:
    """Every option of a conversion, checked (build it with :meth:`create`).

    Attributes:
        target_opset: the default-domain opset to convert to; None keeps the model's.
        decompose: the decomposition names asked for, canonical (lower case).
        request: what the step engine is asked of every node (lowerer's decompositions, expansions).
        verify: run each rewrite before and after and compare.
        providers: the execution providers (full names), or None for the default choice.
        seed: seed of the generated verification inputs.
        verify_model: the whole-model check's options, or None when it does not run.
        optimize: the optimization check's options, or None when ``optimize`` is off.
        progress: the progress callback, or None.
        max_ulp: the error budget of function-body expansions (None: per-type defaults).
        exact: accept no difference at all.
        profile: the backend profile (``for_backend``), or None.
        allow_fallback: with ``profile``, keep nodes no exact form replaces.
        strict_backend: with ``profile``, refuse a node of the model that the runtime computes differently
            (a ``departure`` entry) instead of converting it with a warning.
        ir_version: the IR version to write (None: the lowest the target and the model allow).
        no_loops: refuse the forms that write a node as a loop over its data (``request.no_loops``).
        fold_dequantize: fold a DequantizeLinear of constants the target cannot express into a float
            constant (``request.fold_dequantize``).
        keep_imports: keep the imports of domains no node uses (else they are dropped, with a note).
    """

    target_opset: int | None = None
    decompose: frozenset[str] = frozenset()
    request: Request = NO_REQUEST
    verify: bool = True
    providers: tuple[str, ...] | None = None
    seed: int = 0
    verify_model: ModelCheckOptions | None = None
    optimize: ModelCheckOptions | None = None
    progress: ProgressCallback | None = None
    max_ulp: int | None = None
    exact: bool = False
    profile: Profile | None = None
    allow_fallback: bool = False
    strict_backend: bool = False
    ir_version: int | None = None
    no_loops: bool = False
    fold_dequantize: bool = False
    keep_imports: bool = False

    @property
    def converts(self) -> bool:
        """Whether the model may change (a target, a decomposition, a backend or an IR version)."""
        return self.target_opset is not None or bool(self.decompose) or self.profile is not None or \
            self.ir_version is not None

    def target_for(self, source_opset: int | None, model: onnx.ModelProto | None = None) -> int | None:
        """The target opset for a model at ``source_opset``.

        ``target_opset`` when given; else, for a runtime whose load limits are known, the model's own or the
        highest the runtime loads, whichever is lower (its IR version then goes as low as the opsets allow).
        For a named onnxruntime release and a ``model``, it goes lower still where the release has no
        kernel of an op the model holds at that opset (:mod:`lowerer.backends.release`).
        """
        return self.target_and_why(source_opset, model)[0]

    def target_and_why(self, source_opset: int | None,
                       model: onnx.ModelProto | None = None) -> tuple[int | None, str | None]:
        """:meth:`target_for`, and why the target is below what the runtime loads (None: it is not)."""
        loads = None if self.profile is None else self.profile.loads
        if self.target_opset is not None or loads is None or loads.max_opset is None or source_opset is None:
            return self.target_opset, None
        ceiling = min(source_opset, loads.max_opset)
        assert self.profile is not None
        if model is None or self.profile.release is None:
            return ceiling, None
        from lowerer.backends.release import target_for_release

        return target_for_release(model, ceiling, self.profile.release, self.profile.provider)

    @classmethod
    def create(cls, *, target_opset: Any = None, decompose: Any = (), verify: Any = True, providers: Any = None,
               seed: Any = 0, verify_model: Any = False, optimize: Any = False, progress: Any = None,
               max_ulp: Any = None, exact: Any = False, for_backend: Any = None,
               allow_fallback: Any = False, ir_version: Any = None, no_loops: Any = False,
               fold_dequantize: Any = False, keep_imports: Any = False,
               strict_backend: Any = False) -> ConvertOptions:
        """Check every option (see :func:`lowerer.convert` for their meaning) and freeze them.

        Raises:
            InputError: an option of the wrong type or value, or two that contradict each other.
        """
        from lowerer.core.opsets import check_target_opset
        from lowerer.model_io.ir_version import check_ir_version

        if target_opset is not None:
            check_target_opset(target_opset)
        names = decompose_names(decompose)
        exact = check_flag(exact, "exact")
        if max_ulp is not None and (not isinstance(max_ulp, int) or isinstance(max_ulp, bool) or max_ulp < 0):
            raise InputError(f"max_ulp must be a non-negative integer or None, not {max_ulp!r}")
        if exact and max_ulp:
            raise InputError("exact=True accepts no difference; it cannot go with max_ulp")
        chosen = provider_list(providers)
        check = model_check_options(verify_model)
        tuned = None if optimize is False or optimize is None else (
            check or model_check_options(True) if optimize is True else model_check_options(optimize, "optimize"))
        profile = None
        if for_backend is not None:
            from lowerer.backends.profile import load_profile

            profile = load_profile(for_backend)
            allow_fallback = check_flag(allow_fallback, "allow_fallback")
            strict_backend = check_flag(strict_backend, "strict_backend")
        elif allow_fallback is not False or strict_backend is not False:
            raise InputError(f"{'allow_fallback' if allow_fallback is not False else 'strict_backend'} goes with "
                             "for_backend (a backend name)")
        no_loops = check_flag(no_loops, "no_loops")
        fold = check_flag(fold_dequantize, "fold_dequantize")
        request = request_for(names, no_loops, fold)
        if profile is not None and not profile.loops and not no_loops:  # a runtime without Loop refuses them too
            request = dataclasses.replace(request, no_loops=True, loops_refused_by=profile.spec)
        return cls(target_opset=target_opset, decompose=names, request=request,
                   verify=check_flag(verify, "verify"), providers=None if chosen is None else tuple(chosen),
                   seed=seed_value(seed), verify_model=check, optimize=tuned, progress=check_progress(progress),
                   max_ulp=max_ulp, exact=exact, profile=profile, allow_fallback=bool(allow_fallback),
                   strict_backend=bool(strict_backend), ir_version=check_ir_version(ir_version), no_loops=no_loops,
                   fold_dequantize=fold, keep_imports=check_flag(keep_imports, "keep_imports"))


def model_check_options(value: object, name: str = "verify_model") -> ModelCheckOptions | None:
    """A whole-model check's options: False/None (no check), True (the defaults) or a ModelCheckOptions."""
    if value is False or value is None:
        return None
    from lowerer.verification.whole import ModelCheckOptions

    if value is True:
        return ModelCheckOptions()
    if isinstance(value, ModelCheckOptions):
        return value
    raise InputError(f"{name} must be True, False or a ModelCheckOptions, not {type(value).__name__}")


def request_for(names: frozenset[str], no_loops: bool = False, fold_dequantize: bool = False) -> Request:
    """The engine's request: decompositions ``names`` (lowerer's own, ops to expand), ``no_loops``, the fold."""
    from lowerer.rules import REGISTRY
    from lowerer.steps.expansion import expandable_ops

    own = frozenset(n for n in names if n in REGISTRY.decompositions)
    ops = expandable_ops()
    return Request(own, frozenset(ops[n] for n in names - own if n in ops), no_loops, fold_dequantize)


def normalize_decompose(decompose: Iterable[str] | str | None) -> frozenset[str]:
    """Validate decomposition names; raises InputError listing valid names.

    A name is one of lowerer's own exact decompositions (``hardmax``, ``globalmaxpool``), ``all``
    (every one of those), or any op with a function body in onnx's schemas (``layernormalization``,
    ``gelu``, ``hardswish`` ...), case-insensitive: that op is expanded into its body.
    """
    from lowerer.rules import REGISTRY
    from lowerer.steps.expansion import expandable_ops

    own = REGISTRY.decompositions
    if decompose is None:
        return frozenset()
    items: list[object] = [decompose] if isinstance(decompose, str) else list(decompose)
    names: set[str] = set()
    for item in items:
        if not isinstance(item, str):
            raise InputError(f"decompose names must be strings, got {item!r}")
        for part in (p.strip().lower() for p in item.split(",")):
            if part == "all":
                names.update(own)
            elif part in own or part in expandable_ops():
                names.add(part)
            elif part:
                valid = ", ".join([*sorted(own), "all"])
                raise InputError(f"unknown decomposition {part!r}; valid names: {valid}, or any op with a function "
                                 "body in onnx's schemas (e.g. layernormalization, gelu, hardswish; see "
                                 "'lowerer inspect --help')")
    return frozenset(names)


def decompose_names(value: Any) -> frozenset[str]:
    """Decomposition names: a comma-separated string or an iterable of names (``all`` means every one)."""
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return normalize_decompose(value)
    if isinstance(value, (bytes, bytearray, dict)) or not isinstance(value, Iterable):
        raise InputError(f"decompose must be a name or a list of names (hardmax, globalmaxpool, all), not a "
                         f"{type(value).__name__}")
    items = list(value)
    for item in items:
        if not isinstance(item, str):
            raise InputError(f"decompose must list names (strings), got {item!r} ({type(item).__name__})")
    return normalize_decompose(items)


def provider_list(value: Any) -> list[str] | None:
    """Execution providers: None (the default choice), a comma-separated string or a sequence of names.

    The names are checked against the installed onnxruntime (imported here when a list is given),
    whether or not verification runs.
    """
    if value is None:
        return None
    if isinstance(value, str):
        items = [p.strip() for p in value.split(",")]
    elif isinstance(value, (bytes, bytearray, dict)) or not isinstance(value, Iterable):
        raise InputError(f"providers must be a list of names (cuda, dml, cpu or full names), not a "
                         f"{type(value).__name__}")
    else:
        items = list(value)
        for item in items:
            if not isinstance(item, str):
                raise InputError(f"providers must list names (strings), got {item!r} ({type(item).__name__})")
    from lowerer.verification.providers import select_providers

    return select_providers(items)


def seed_value(value: Any) -> int:
    """The seed of the generated verification inputs: an integer, 0 or more."""
    if isinstance(value, bool):
        raise InputError(f"seed must be an integer, 0 or more, not {value!r}")
    try:
        seed = operator.index(value)
    except TypeError:
        raise InputError(f"seed must be an integer, 0 or more, not a {type(value).__name__}") from None
    if seed < 0:
        raise InputError(f"seed must be 0 or more, got {seed}")
    return seed


def check_flag(value: Any, name: str) -> bool:
    """A True/False option (numpy's bools too; no other truthy values)."""
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise InputError(f"{name} must be True or False, not {value!r}")


def check_progress(value: Any) -> Any:
    """A progress callback: None or a callable."""
    if value is not None and not callable(value):
        raise InputError(f"progress must be a callable or None, not a {type(value).__name__}")
    return value
