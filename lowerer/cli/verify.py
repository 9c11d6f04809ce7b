"""``lowerer verify``: run two models on the same inputs and compare every output."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import guard
from lowerer.cli.groups import ModelCheckArgs, VerbosityArgs, VerificationArgs, in_order, split_list
from lowerer.cli.output import TerminalProgress, model_check_table
from lowerer.cli.verbosity import verbosity
from lowerer.cli.written_paths import check_written_path

if TYPE_CHECKING:
    from lowerer.verification.whole import ModelCheckOptions, ModelComparison

__all__ = ["verify"]


@in_order("first_path", "second_path", "seed", "providers", "atol", "rtol", "max_ulp", "input_shapes", "val_range",
          "load_inputs", "save_inputs", "allow_unverified", "verbose", "quiet")
@click.command(epilog=EPILOG)
@click.argument("first_path", metavar="A.onnx", type=click.Path(path_type=Path))
@click.argument("second_path", metavar="B.onnx", type=click.Path(path_type=Path))
@VerificationArgs.options("seed", "providers")
@ModelCheckArgs.options(*ModelCheckArgs.STEERING)
@VerbosityArgs.options()
@guard
def verify(first_path: Path, second_path: Path, **values: Any) -> None:
    """Run A.onnx and B.onnx on the same inputs and compare every output, with statistics.

    Inputs are generated (seeded; dynamic dims bound to 1, then 2; index-like integer inputs
    inside the range their Gather/OneHot/... allows) unless given with --load-inputs. Float
    outputs are compared exactly unless --atol, --rtol or --max-ulp accept a difference;
    integer and bool outputs always exactly. Prints one row per output: largest absolute and
    relative difference, largest ulp distance, the share of mismatches and the worst value.

    Exit 0 when all outputs match, 1 when one differs or the models could not be run on the
    inputs (unless --allow-unverified), 2 when a model cannot be read or the two take
    different inputs.
    """
    from lowerer.model_io import external_data_locations, load_model
    from lowerer.verification.whole import ModelSource, compare_models

    verification = VerificationArgs.take(values)
    seed = verification["seed"]
    options = ModelCheckArgs.settings(values)
    first, second = load_model(first_path), load_model(second_path)
    if options.save_inputs is not None:
        data_files = [p.parent / loc for p, m in ((first_path, first), (second_path, second))
                      for loc in external_data_locations(m)]
        check_written_path(options.save_inputs, "--save-inputs",
                           reads=[first_path, second_path, *data_files, *options.load_inputs], writes=[])
    names = (str(first_path), str(second_path))
    progress = TerminalProgress()
    try:
        result = compare_models(ModelSource(first, first_path.parent.resolve(), names[0]),
                                ModelSource(second, second_path.parent.resolve(), names[1]),
                                options=options, providers=split_list(verification["providers"]), seed=seed,
                                progress=progress if progress.enabled else None)
    finally:
        progress.close()
    _print_and_judge(result, options, names, seed)


def _print_and_judge(result: ModelComparison, options: ModelCheckOptions, names: tuple[str, str], seed: int) -> None:
    """Print the comparison (unless ``-q``) and raise unless the outputs are equal.

    Raises:
        InputError: the two models cannot be compared.
        VerificationError: an output differs, or the comparison could not run (unless allowed).
    """
    from lowerer.errors import InputError, VerificationError

    level = verbosity()
    if level >= 0 and result.outputs:
        click.echo(f"A: {names[0]}; B: {names[1]}; {len(result.input_sets)} input set(s), seed {seed}, on "
                   f"{result.provider}; tolerance: {result.tolerance.describe()} (integer and bool outputs exact)")
        for note in result.details.get("inputs", []):
            click.echo(f"inputs: {note}")
        for line in model_check_table([o.to_dict() for o in result.outputs], ("A", "B")):
            click.echo(line)
    if result.status == "incomparable":
        raise InputError(f"cannot compare: {result.reason}")
    if result.status == "different":
        raise VerificationError(result.reason)
    if result.status == "not-run":
        if not options.allow_unverified:
            raise VerificationError(f"the comparison could not run: {result.reason} (--allow-unverified makes "
                                    "this a warning)")
        logging.getLogger("lowerer").warning("the comparison could not run: %s", result.reason)
        return
    if level >= 0:
        click.echo(f"equal: {result.reason}")
