"""The argument groups of the ``lowerer`` commands: each option is declared here, once.

A group (after polygraphy's argument groups) holds a few related options. ``Group.options()`` is a
decorator that adds them to a command (``Group.options("seed")``: only those named; ``helps``
replaces a help text where a command means something else by the option); ``Group.take`` removes
the group's values from the command's keyword arguments, and ``parse`` functions turn them into the
keyword arguments of the Python API (:func:`lowerer.api.convert`, the inspection and whole-model
verification functions). :func:`in_order` fixes the order a command shows and processes them in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import click

from lowerer.cli.verbosity import count_flag
from lowerer.core.errors import InputError

if TYPE_CHECKING:
    from lowerer.verification.whole import ModelCheckOptions

__all__ = ["ArgGroup", "ConversionArgs", "ModelCheckArgs", "OutputArgs", "VerbosityArgs", "VerificationArgs",
           "in_order", "split_list"]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=click.Command)

#: A click option: its declarations (option names, then the parameter name) and settings (``type``, ``help`` ...).
Spec = tuple[tuple[str, ...], dict[str, Any]]


class ArgGroup:
    """Options declared once, in :attr:`SPECS` (the click parameter name -> its declaration)."""

    SPECS: ClassVar[dict[str, Spec]] = {}

    @classmethod
    def options(cls, *names: str, helps: Mapping[str, str] | None = None) -> Callable[[F], F]:
        """A decorator adding the group's options to a command: all, or only ``names``.

        Args:
            names: parameter names of the options to add (none: every option of the group).
            helps: help texts replacing the declared ones, by parameter name.
        """
        chosen = names or tuple(cls.SPECS)

        def decorate(fn: F) -> F:
            for name in reversed(chosen):
                decls, settings = cls.SPECS[name]
                if helps and name in helps:
                    settings = {**settings, "help": helps[name]}
                fn = click.option(*decls, **settings)(fn)
            return fn

        return decorate

    @classmethod
    def take(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Remove the group's values from a command's keyword arguments and return them."""
        return {name: values.pop(name) for name in cls.SPECS if name in values}


class VerbosityArgs(ArgGroup):
    """``-v/--verbose`` (repeatable) and ``-q/--quiet``, accepted before or after the subcommand.

    They expose no value: :func:`lowerer.cli.verbosity.verbosity` tells the level.
    """

    SPECS: ClassVar[dict[str, Spec]] = {
        "verbose": (("-v", "--verbose"), {
            "count": True, "expose_value": False, "callback": count_flag,
            "help": "More logging: -v what lowerer does, -vv debug (also other libraries')."}),
        "quiet": (("-q", "--quiet"), {
            "is_flag": True, "expose_value": False, "callback": count_flag,
            "help": "Print only errors (no summary, no warnings)."}),
    }


class OutputArgs(ArgGroup):
    """What a command writes or prints: ``-o``, ``--report``, ``--external-data``, ``--json``."""

    SPECS: ClassVar[dict[str, Spec]] = {
        "output_path": (("-o", "--output", "output_path"), {
            "required": True, "type": click.Path(path_type=Path), "metavar": "OUT.onnx",
            "help": "Where to write the converted model (written atomically)."}),
        "report_path": (("--report", "report_path"), {
            "type": click.Path(path_type=Path), "default": None, "metavar": "R.json",
            "help": "Write a JSON report: one record per rewrite plus a summary."}),
        "external_data": (("--external-data", "external_data"), {
            "default": None, "metavar": "FILE",
            "help": "Write every weight (1 KiB or more) into FILE, one data file beside OUT.onnx "
                    "(default: keep the input's data files, copied beside OUT.onnx when it is elsewhere)."}),
        "as_json": (("--json", "as_json"), {"is_flag": True, "help": "Print JSON instead of text."}),
    }


class ConversionArgs(ArgGroup):
    """What a conversion is to do: ``--target-opset``, ``--decompose``, ``--for``, IR version, ``--no-loops`` ..."""

    SPECS: ClassVar[dict[str, Spec]] = {
        "target_opset": (("--target-opset",), {
            "type": int, "default": None, "metavar": "N",
            "help": "Default-domain opset to convert to (default: keep the model's)."}),
        "decompose": (("--decompose",), {
            "default": None, "metavar": "NAMES",
            "help": "Comma-separated decompositions: hardmax and globalmaxpool (lowerer's exact decompositions), "
                    "all (both of those), or any op with a function body in onnx's schemas, expanded into "
                    "that body (e.g. layernormalization, gelu, hardswish); case-insensitive. Example: "
                    "--decompose hardmax,layernormalization."}),
        "for_backend": (("--for", "for_backend"), {
            "metavar": "BACKEND", "default": None,
            "help": "Lower for a runtime target: a backend profile's name, optionally with a version bound "
                    "(onnxruntime==1.14, tensorrt==8.6, openvino, qnn==2.7, tract ...; 'lowerer targets' lists "
                    "them). Takes the model to the highest opset and IR version it loads (unless "
                    "--target-opset / --ir-version say otherwise) and rewrites exactly the nodes its profile "
                    "names, with exact forms, each verified; proves the placement where its onnxruntime "
                    "provider is installed."}),
        "allow_fallback": (("--allow-fallback",), {
            "is_flag": True,
            "help": "With --for: keep a node the backend cannot run and lowerer has no exact form for (a "
                    "warning line names it), and accept an unproven placement, instead of refusing."}),
        "strict_backend": (("--strict-backend",), {
            "is_flag": True,
            "help": "With --for: refuse a node of the model that the runtime computes differently and lowerer "
                    "has no form to fix (OpenVINO's TopK on ties), instead of converting it as it is with a "
                    "warning line (the original model departs there too)."}),
        "ir_version": (("--ir-version",), {
            "type": int, "default": None, "metavar": "N",
            "help": "IR version to write (default: with a target opset, the lowest that the opsets and the "
                    "model's features allow; without one, the model's)."}),
        "no_loops": (("--no-loops",), {
            "is_flag": True,
            "help": "Refuse the forms that turn one node into a Loop over its data (ScatterND/ScatterElements "
                    "reductions with run-time indices below the opset that brought them: much slower), naming "
                    "the node and the lowest opset that keeps its own form."}),
        "fold_dequantize": (("--fold-dequantize",), {
            "is_flag": True,
            "help": "Fold a DequantizeLinear of constant weights into a float constant where the target cannot "
                    "express it (per-channel scales below opset 13, int16/int4/float8 types or blocks below "
                    "their opsets): a quantized model keeps float weights there; bit-exact, verified."}),
        "keep_imports": (("--keep-imports",), {
            "is_flag": True,
            "help": "Keep the opset imports of domains no node uses (such as an ai.onnx.ml import in a model "
                    "without ml nodes); without it they are dropped, with a note. Either way they do not raise "
                    "the IR version."}),
    }

    @classmethod
    def parse(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The API's ``target_opset``, ``decompose``, ``for_backend``, ``allow_fallback``, ``ir_version``, ``no_loops``.

        Their values are checked once, by :meth:`lowerer.passes.options.ConvertOptions.create`, which the command
        calls before it reads the model; here only what is a matter of the command line.

        Raises:
            click.UsageError: ``--allow-fallback`` without ``--for``, or nothing to do.
        """
        given = cls.take(values)
        for flag in ("allow_fallback", "strict_backend"):
            if given.get(flag) and given["for_backend"] is None:
                raise click.UsageError(f"--{flag.replace('_', '-')} goes with --for BACKEND")
        if given["target_opset"] is None and not (given["decompose"] or "").strip(", ") and \
                given["for_backend"] is None and given.get("ir_version") is None:
            raise click.UsageError("nothing to do: give --target-opset, --decompose, --for and/or --ir-version")
        return {k: given[k] for k in ("target_opset", "decompose", "for_backend", "allow_fallback", "ir_version",
                                      "no_loops", "fold_dequantize", "keep_imports", "strict_backend") if k in given}


class VerificationArgs(ArgGroup):
    """How each rewrite is verified: ``--verify/--no-verify``, ``--exact``, ``--seed``, ``--providers``."""

    SPECS: ClassVar[dict[str, Spec]] = {
        "verify": (("--verify/--no-verify",), {
            "default": True, "show_default": True,
            "help": "Run each rewrite before and after in onnxruntime and compare exactly."}),
        "exact": (("--exact",), {
            "is_flag": True,
            "help": "Accept no difference at all: function-body expansions and kernels that may round differently "
                    "must be bit-identical on the verification inputs (default: the documented ulp budgets)."}),
        "seed": (("--seed",), {
            "type": click.IntRange(min=0), "default": 0, "show_default": True,
            "help": "Seed of the generated verification inputs."}),
        "providers": (("--providers",), {
            "metavar": "LIST", "default": None,
            "help": "Execution providers to verify on, comma-separated, in priority order: cuda, dml, cpu "
                    "or full names. A strict list: one this onnxruntime does not offer is an error "
                    "(default: CUDA, then DirectML, then CPU, whichever onnxruntime offers)."}),
    }

    @classmethod
    def parse(cls, values: dict[str, Any]) -> dict[str, Any]:
        """The API's ``verify``, ``exact``, ``seed`` and ``providers`` (checked against this onnxruntime).

        Raises:
            InputError: a provider this onnxruntime does not offer.
        """
        given = cls.take(values)
        return {"verify": given["verify"], "exact": given["exact"], "seed": given["seed"],
                "providers": split_list(given["providers"])}


class ModelCheckArgs(ArgGroup):
    """The whole-model check: ``--verify-model``, ``--optimize`` (convert) and its tolerances and inputs."""

    SPECS: ClassVar[dict[str, Spec]] = {
        "verify_model": (("--verify-model",), {
            "is_flag": True,
            "help": "Also run the whole models before and after on the same inputs and compare every output, "
                    "judged by the rewrites' own budgets (exact where every rewrite was exact; see the options "
                    "below)."}),
        "optimize": (("--optimize",), {
            "is_flag": True,
            "help": "Then fold constant shape arithmetic and remove dead nodes with onnxscript's optimizer, and "
                    "check that the optimized model computes the same outputs (needs onnxscript)."}),
        "atol": (("--atol",), {
            "type": float, "default": 0.0, "show_default": True, "metavar": "X",
            "help": "Accept float values this close (absolute difference)."}),
        "rtol": (("--rtol",), {
            "type": float, "default": 0.0, "show_default": True, "metavar": "X",
            "help": "Accept float values this close relative to the first model's value."}),
        "max_ulp": (("--max-ulp",), {
            "type": click.IntRange(min=0), "default": None, "metavar": "N",
            "help": "Accept float values at most N units in the last place apart (verify: default 0, exact). For "
                    "convert it is the error budget of function-body expansions (default per type) and of the "
                    "whole-model check, also as N epsilons of each output's largest magnitude. A value passes "
                    "when any tolerance accepts it; integer and bool outputs are always exact."}),
        "input_shapes": (("--input-shapes", "input_shapes"), {
            "multiple": True, "metavar": "NAME:DIMS",
            "help": "Shape of an input, e.g. ids:1x128 (repeatable; default: dynamic dims 1, then 2)."}),
        "val_range": (("--val-range", "val_range"), {
            "multiple": True, "metavar": "[NAME:]LO,HI",
            "help": "Inclusive value range of an input (or of every input without NAME), e.g. ids:0,30521 "
                    "(repeatable; default: index inputs in range, others random)."}),
        "load_inputs": (("--load-inputs", "load_inputs"), {
            "multiple": True, "metavar": "IN.npz", "type": click.Path(path_type=Path),
            "help": "Run on these inputs (arrays named after the inputs) instead of generated ones."}),
        "save_inputs": (("--save-inputs", "save_inputs"), {
            "default": None, "metavar": "OUT.npz", "type": click.Path(path_type=Path),
            "help": "Write the inputs the check ran on (for --load-inputs)."}),
        "budget_from": (("--budget-from", "budget_from"), {
            "type": click.Path(path_type=Path), "default": None, "metavar": "R.json",
            "help": "Judge float outputs by the whole-model budget recorded in this convert report (default: the "
                    "one lowerer convert recorded in B's or A's metadata; none: exact)."}),
        "allow_unverified": (("--allow-unverified",), {
            "is_flag": True,
            "help": "A whole-model check that cannot run is a warning, not a failure (exit 0)."}),
    }

    #: The options that steer the check (not those that turn it on), by parameter name.
    STEERING: ClassVar[tuple[str, ...]] = ("atol", "rtol", "max_ulp", "input_shapes", "val_range", "load_inputs",
                                           "save_inputs", "allow_unverified")

    @classmethod
    def settings(cls, values: dict[str, Any]) -> ModelCheckOptions:
        """The :class:`~lowerer.verification.whole.ModelCheckOptions` the steering options describe.

        Raises:
            InputError: a malformed or contradictory option.
        """
        from lowerer.verification.compare import Tolerance
        from lowerer.verification.graph_inputs import parse_input_shapes, parse_value_range
        from lowerer.verification.whole import ModelCheckOptions

        given = cls.take(values)
        try:
            tolerance = Tolerance(max_ulp=given["max_ulp"] or 0, atol=given["atol"], rtol=given["rtol"])
        except ValueError as e:
            raise InputError(f"--atol/--rtol/--max-ulp: {e}") from None
        load_inputs, input_shapes, val_range = given["load_inputs"], given["input_shapes"], given["val_range"]
        if load_inputs and (input_shapes or val_range):
            raise InputError("--load-inputs gives the inputs; --input-shapes and --val-range apply to generated ones, "
                             "not both")
        return ModelCheckOptions(tolerance=tolerance, input_shapes=parse_input_shapes(input_shapes),
                                 value_ranges=parse_value_range(val_range), load_inputs=list(load_inputs),
                                 save_inputs=given["save_inputs"], allow_unverified=given["allow_unverified"])

    @classmethod
    def parse_for_convert(cls, values: dict[str, Any], *,
                          exact: bool) -> tuple[dict[str, Any], ModelCheckOptions | None]:
        """The API's ``max_ulp``, ``verify_model`` and ``optimize``, and the check's options (None: no check).

        Raises:
            click.UsageError: a steering option without ``--verify-model`` or ``--optimize``, or
                ``--exact`` with ``--max-ulp``.
            InputError: a malformed or contradictory option.
        """
        verify_model, optimize = values.pop("verify_model"), values.pop("optimize")
        max_ulp = values["max_ulp"]  # also the expansions' budget: not a whole-model option alone
        given = [cls.SPECS[name][0][0] for name in cls.STEERING
                 if name != "max_ulp" and values[name] not in (None, False, 0, 0.0, (), [])]
        if given and not (verify_model or optimize):
            raise click.UsageError(f"{', '.join(given)} steer the whole-model check: add --verify-model "
                                   "(or --optimize)")
        if exact and max_ulp:
            raise click.UsageError("--exact accepts no difference; it cannot go with --max-ulp")
        options = cls.settings(values) if (verify_model or optimize) else None
        cls.take(values)
        return ({"max_ulp": max_ulp, "verify_model": options if verify_model and options is not None else False,
                 "optimize": options if optimize and options is not None else False}, options)


def split_list(value: str | None) -> list[str] | None:
    """A comma-separated option's items (blanks dropped), or None when it was not given."""
    return None if value is None else [p.strip() for p in value.split(",") if p.strip()]


def in_order(*names: str) -> Callable[[C], C]:
    """A decorator putting a command's parameters in this order: the order its help lists and click processes them.

    Raises:
        ValueError: ``names`` are not exactly the command's parameters (at import: a programming error).
    """

    def arrange(command: C) -> C:
        if sorted(names) != sorted(p.name or "" for p in command.params):
            raise ValueError(f"{command.name}: parameters {sorted(p.name or '' for p in command.params)}, "
                             f"order given for {sorted(names)}")
        command.params.sort(key=lambda p: names.index(p.name or ""))
        return command

    return arrange
