"""The public names do not move when modules do: ``lowerer.convert``, ``LowerPass``, ``__all__``, the CLI.

Internal modules may be regrouped into packages (issue 33); these are the names users import or
run, and where they live.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
from pathlib import Path

import click
from click.testing import CliRunner

import lowerer

PUBLIC = ["ConversionError", "ConvertResult", "InputError", "LowerPass", "LowererError", "ModelCheckOptions",
          "Progress", "Report", "Rewrite", "Tolerance", "VerificationError", "__version__", "convert"]
COMMANDS = {"convert", "inspect", "verify", "targets"}


def test_all_names_and_where_they_live() -> None:
    assert sorted(lowerer.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(lowerer, name) is not None, name
    assert lowerer.convert is importlib.import_module("lowerer.api").convert
    assert inspect.isfunction(lowerer.convert)
    assert lowerer.LowerPass is importlib.import_module("lowerer.ir_pass").LowerPass
    assert inspect.isclass(lowerer.LowerPass)
    assert issubclass(lowerer.InputError, lowerer.LowererError)
    assert issubclass(lowerer.ConversionError, lowerer.LowererError)
    assert issubclass(lowerer.VerificationError, lowerer.LowererError)


def test_convert_takes_the_model_then_its_keywords() -> None:
    params = inspect.signature(lowerer.convert).parameters
    first, *rest = params.values()
    assert first.name == "model" and first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in rest)
    documented = {"target_opset", "decompose", "verify", "providers", "seed", "verify_model", "optimize",
                  "progress", "max_ulp", "exact", "for_backend", "ir_version"}
    assert documented <= set(params), documented - set(params)


def test_console_script_is_main_main() -> None:
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert re.search(r'(?m)^lowerer = "lowerer\.__main__:main"$', pyproject)
    installed = [e for e in importlib.metadata.entry_points(group="console_scripts") if e.name == "lowerer"]
    assert [e.value for e in installed] == ["lowerer.__main__:main"]
    main = importlib.import_module("lowerer.__main__").main
    assert callable(main) and installed[0].load() is main


def test_cli_group_and_its_commands() -> None:
    from lowerer.cli import main

    assert isinstance(main, click.Group)
    assert set(main.commands) == COMMANDS
    result = CliRunner().invoke(main, ["--help"], prog_name="lowerer")
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        assert re.search(rf"(?m)^\s+{name}\b", result.output), name
        sub = CliRunner().invoke(main, [name, "--help"], prog_name="lowerer")
        assert sub.exit_code == 0 and f"lowerer {name}" in sub.output, (name, sub.output)


def test_model_io_public_api_is_save_model() -> None:
    # lowerer.model_io's public API is save_model (docs/files.md); everything else is imported from the module
    # that defines it (tests/test_no_reexports.py)
    model_io = importlib.import_module("lowerer.model_io")
    assert "save_model" in model_io.__all__ and callable(model_io.save_model)


