"""The argument groups of the ``lowerer`` command line: each option declared once, parsed into API arguments."""

from __future__ import annotations

from typing import Any

import click
import pytest

from lowerer.cli import main
from lowerer.cli.groups import (
    ConversionArgs,
    ModelCheckArgs,
    OutputArgs,
    VerbosityArgs,
    VerificationArgs,
    in_order,
    split_list,
)
from lowerer.core.errors import InputError
from lowerer.passes.options import ConvertOptions

GROUPS = (ConversionArgs, ModelCheckArgs, OutputArgs, VerbosityArgs, VerificationArgs)


def _commands() -> dict[str, click.Command]:
    assert isinstance(main, click.Group)
    return {"lowerer": main, **main.commands}


def test_every_option_is_declared_in_one_group_only() -> None:
    declared = [opt for group in GROUPS for decls, _ in group.SPECS.values() for decl in decls
                for opt in decl.split("/") if opt.startswith("-")]
    assert len(declared) == len(set(declared)), sorted(o for o in declared if declared.count(o) > 1)
    for name, command in _commands().items():
        for param in command.params:
            if isinstance(param, click.Option) and param.name not in ("reach", "version"):
                assert set(param.opts + param.secondary_opts) <= set(declared), (name, param.opts)


def test_an_option_shared_by_commands_means_the_same_value() -> None:
    seen: dict[str, tuple[Any, ...]] = {}
    for command in _commands().values():
        for p in command.params:
            if isinstance(p, click.Option):
                key = (p.name, type(p.type).__name__, p.default, p.is_flag, p.multiple, p.metavar)
                assert seen.setdefault(p.opts[-1], key) == key, p.opts


def test_in_order_refuses_a_list_that_is_not_the_commands_parameters() -> None:
    @click.command()
    @click.option("--a")
    @click.option("--b")
    def command(a: str, b: str) -> None:
        """A command."""

    with pytest.raises(ValueError, match="order given"):
        in_order("a")(command)
    assert [p.name for p in in_order("b", "a")(command).params] == ["b", "a"]


def _conversion(**given: Any) -> dict[str, Any]:
    return {"target_opset": None, "decompose": None, "for_backend": None, "allow_fallback": False, **given}


def test_conversion_args_parse_into_api_arguments() -> None:
    values = {**_conversion(target_opset=13, decompose="hardmax"), "other": 1}
    api = ConversionArgs.parse(values)
    assert api == {"target_opset": 13, "decompose": "hardmax", "for_backend": None, "allow_fallback": False}
    assert values == {"other": 1}  # the group's values are taken out
    with pytest.raises(click.UsageError, match="nothing to do"):
        ConversionArgs.parse(_conversion(decompose=","))
    with pytest.raises(click.UsageError, match="--allow-fallback goes with --for"):
        ConversionArgs.parse(_conversion(target_opset=13, allow_fallback=True))
    # values are checked once, by ConvertOptions.create (the command calls it before reading the model)
    assert ConversionArgs.parse(_conversion(target_opset=10_000))["target_opset"] == 10_000
    with pytest.raises(InputError, match="out of range"):
        ConvertOptions.create(**ConversionArgs.parse(_conversion(target_opset=10_000)))


def _checks(**given: Any) -> dict[str, Any]:
    return {"verify_model": False, "optimize": False, "atol": 0.0, "rtol": 0.0, "max_ulp": None, "input_shapes": (),
            "val_range": (), "load_inputs": (), "save_inputs": None, "allow_unverified": False, **given}


def test_model_check_args_for_convert() -> None:
    with pytest.raises(click.UsageError, match=r"^--atol, --input-shapes steer the whole-model check"):
        ModelCheckArgs.parse_for_convert(_checks(atol=0.5, input_shapes=("x:1",)), exact=False)
    with pytest.raises(click.UsageError, match="--exact accepts no difference"):
        ModelCheckArgs.parse_for_convert(_checks(max_ulp=2), exact=True)
    values = _checks(max_ulp=3)
    api, options = ModelCheckArgs.parse_for_convert(values, exact=False)
    assert api == {"max_ulp": 3, "verify_model": False, "optimize": False} and options is None and not values
    api, options = ModelCheckArgs.parse_for_convert(_checks(verify_model=True, atol=0.5), exact=False)
    assert options is not None and options.tolerance.atol == 0.5
    assert api["verify_model"] is options and api["optimize"] is False


def test_split_list() -> None:
    assert split_list(None) is None
    assert split_list(" cuda, ,cpu ") == ["cuda", "cpu"]
    assert VerificationArgs.take({"seed": 3, "x": 1}) == {"seed": 3}
