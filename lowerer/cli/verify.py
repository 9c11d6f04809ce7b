"""``lowerer verify``: run two models on the same inputs and compare every output."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import guard
from lowerer.cli.groups import ModelCheckArgs, OutputArgs, VerbosityArgs, VerificationArgs, in_order, split_list
from lowerer.cli.output import TerminalProgress, model_check_table
from lowerer.cli.verbosity import verbosity
from lowerer.cli.written_paths import check_written_path

if TYPE_CHECKING:
    import onnx

    from lowerer.verification.propagated import ModelBudget
    from lowerer.verification.whole import ModelCheckOptions, ModelComparison, ModelSource

__all__ = ["verify"]


@in_order("first_path", "second_path", "report_path", "budget_from", "exact", "seed", "providers", "atol", "rtol",
          "max_ulp", "input_shapes", "val_range", "load_inputs", "save_inputs", "allow_unverified", "verbose", "quiet")
@click.command(epilog=EPILOG)
@click.argument("first_path", metavar="A.onnx", type=click.Path(path_type=Path))
@click.argument("second_path", metavar="B.onnx", type=click.Path(path_type=Path))
@OutputArgs.options("report_path", helps={"report_path": "Write a JSON report (the convert report's schema): "
                                                           "the comparison under summary.model_check."})
@ModelCheckArgs.options("budget_from")
@VerificationArgs.options("exact", helps={"exact": "Ignore any budget lowerer recorded: float outputs must be "
                                                   "bit-identical (unless --atol, --rtol or --max-ulp accept more)."})
@VerificationArgs.options("seed", "providers")
@ModelCheckArgs.options(*ModelCheckArgs.STEERING)
@VerbosityArgs.options()
@guard
def verify(first_path: Path, second_path: Path, **values: Any) -> None:
    """Run A.onnx and B.onnx on the same inputs and compare every output, with statistics.

    Inputs are generated (seeded; dynamic dims bound to 1, then 2; index-like integer inputs
    inside the range their Gather/OneHot/... allows) unless given with --load-inputs. Float
    outputs are judged as convert --verify-model judged the pair when lowerer made it: by the
    budget propagated from its rewrites, which convert records in the converted model's
    metadata (or --budget-from R.json, its report); otherwise, or with --exact, exactly. --atol,
    --rtol and --max-ulp accept more; integer and bool outputs are always exact. The first line
    says which judgement was used. Prints one row per output: largest absolute and relative
    difference, largest ulp distance, the share of mismatches and the worst value. With
    --report R.json, writes the comparison as a report with convert's schema (also when the
    outputs differ).

    Exit 0 when all outputs match, 1 when one differs or the models could not be run on the
    inputs (unless --allow-unverified), 2 when a model cannot be read or the two take
    different inputs.
    """
    from lowerer.model_io.external_data import external_data_locations
    from lowerer.model_io.reading import load_model
    from lowerer.verification.whole import ModelSource, compare_models

    verification = VerificationArgs.take(values)
    report_path: Path | None = OutputArgs.take(values)["report_path"]
    budget_from: Path | None = values.pop("budget_from")
    if verification["exact"] and budget_from is not None:
        raise click.UsageError("--exact ignores recorded budgets; it cannot go with --budget-from")
    seed = verification["seed"]
    options = ModelCheckArgs.settings(values)
    first, second = load_model(first_path), load_model(second_path)
    budget, judged_by = _budget(first, second, (first_path, second_path), budget_from, verification["exact"])
    options = dataclasses.replace(options, budget=budget)
    data_files = [p.parent / loc for p, m in ((first_path, first), (second_path, second))
                  for loc in external_data_locations(m)]
    reads = [first_path, second_path, *data_files, *options.load_inputs]
    if options.save_inputs is not None:
        check_written_path(options.save_inputs, "--save-inputs", reads=reads,
                           writes=[] if report_path is None else [report_path])
    if report_path is not None:
        check_written_path(report_path, "--report", reads=reads, writes=[])
    names = (str(first_path), str(second_path))
    if verbosity() >= 0:
        click.echo(f"judged by: {judged_by}")
    progress = TerminalProgress()
    try:
        source = ModelSource(first, first_path.parent.resolve(), names[0])
        result = compare_models(source, ModelSource(second, second_path.parent.resolve(), names[1]),
                                options=options, providers=split_list(verification["providers"]), seed=seed,
                                progress=progress if progress.enabled else None)
    finally:
        progress.close()
    if report_path is not None:
        write_report(report_path, result, first, second)
    _print_and_judge(result, options, source, names, seed)


def _budget(first: onnx.ModelProto, second: onnx.ModelProto, paths: tuple[Path, Path], budget_from: Path | None,
            exact: bool) -> tuple[ModelBudget | None, str]:
    """The budget float outputs are judged by, and which it is in words (the line ``verify`` prints first).

    ``--exact``: none. ``--budget-from R.json``: the report's. Else the one ``lowerer convert`` recorded
    in B's metadata, or A's (a pair given the other way round); none there: exact.

    Raises:
        InputError: the report cannot be read, or a recorded budget is malformed.
    """
    from lowerer.cli.budgets import METADATA_KEY, from_model, from_report

    if exact:
        return None, "exact (--exact: any budget lowerer recorded is ignored)"
    if budget_from is not None:
        budget = from_report(budget_from)
        return budget, f"the budget lowerer recorded in {budget_from}: {budget.describe()}"
    for path, model in ((paths[1], second), (paths[0], first)):
        recorded = from_model(model, str(path))
        if recorded is not None:
            return recorded, (f"the budget lowerer recorded in {path}'s metadata ({METADATA_KEY}): "
                              f"{recorded.describe()}; --exact compares exactly")
    return None, ("exact (neither model records a budget of lowerer's; convert records one where a rewrite is not "
                  "exact, --budget-from R.json reads it from a convert report)")


def write_report(path: Path, result: ModelComparison, first: onnx.ModelProto, second: onnx.ModelProto) -> None:
    """Write the comparison as a report with the convert report's schema (atomically).

    The comparison is the report's ``whole-model check`` (``summary.model_check``); the opsets and IR
    versions are A's (``source_*``) and B's; there are no rewrites.
    """
    import sys

    from lowerer.core.opsets import default_opset
    from lowerer.core.report import Report
    from lowerer.model_io.files import Transaction

    report = Report(source_opset=default_opset(first.opset_import), target_opset=default_opset(second.opset_import),
                    source_ir_version=first.ir_version, ir_version=second.ir_version,
                    notes=[f"whole-model check: {result.status}: {result.reason}"],
                    model_checks={"whole-model check": result.to_dict()})
    text = report.to_json(command=["lowerer", *sys.argv[1:]])
    with Transaction() as tx:
        tx.make_dirs(path.parent)
        fd, tmp = tx.temp_file(path.parent, mode_like=path)
        with open(fd, "w", encoding="utf-8") as f:
            f.write(text)
        tx.stage(tmp, path, replace=True)
        tx.commit()


def _print_and_judge(result: ModelComparison, options: ModelCheckOptions, first: ModelSource, names: tuple[str, str],
                     seed: int) -> None:
    """Print the comparison (unless ``-q``) and raise unless the outputs are equal.

    Raises:
        InputError: the two models cannot be compared.
        VerificationError: an output differs, or the comparison could not run (unless allowed).
    """
    from lowerer.core.errors import InputError, VerificationError
    from lowerer.core.remedies import ALLOW_UNVERIFIED
    from lowerer.verification.whole import not_run_remedy

    level = verbosity()
    if level >= 0 and result.outputs:
        budget = "" if options.budget is None or options.budget.exact else ", and the recorded budget"
        click.echo(f"A: {names[0]}; B: {names[1]}; {len(result.input_sets)} input set(s), seed {seed}, on "
                   f"{result.provider}; tolerance: {result.tolerance.describe()}{budget} (integer and bool outputs "
                   "exact)")
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
            remedy = not_run_remedy(result, options, first)
            remedy = " (--allow-unverified makes this a warning)" if remedy == ALLOW_UNVERIFIED else f"; {remedy}"
            raise VerificationError(f"the comparison could not run: {result.reason}{remedy}")
        logging.getLogger("lowerer").warning("the comparison could not run: %s", result.reason)
        return
    if level >= 0:
        click.echo(f"equal: {result.reason}")
