"""``lowerer convert``: convert a model and write it, with its report."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import guard
from lowerer.cli.groups import (
    ConversionArgs,
    ModelCheckArgs,
    OutputArgs,
    VerbosityArgs,
    VerificationArgs,
    in_order,
)
from lowerer.cli.output import TerminalProgress, print_convert_summary
from lowerer.cli.verbosity import verbosity
from lowerer.cli.written_paths import check_written_path
from lowerer.core.errors import LowererError, ModelRefusedError, one_line
from lowerer.core.progress import Progress

if TYPE_CHECKING:
    import onnx

    from lowerer.core.errors import ConversionError
    from lowerer.core.report import Report
    from lowerer.model_io.reading import InputModel
    from lowerer.model_io.saving import OutputPlan
    from lowerer.passes.options import ConvertOptions

__all__ = ["convert"]


@in_order("input_path", "output_path", "target_opset", "decompose", "report_path", "external_data", "verify",
          "verify_model", "exact", "optimize", "for_backend", "allow_fallback", "strict_backend", "ir_version",
          "no_loops", "fold_dequantize", "keep_imports", "seed",
          "providers", "atol", "rtol", "max_ulp", "input_shapes", "val_range", "load_inputs", "save_inputs",
          "allow_unverified", "verbose", "quiet")
@click.command(epilog=EPILOG)
@click.argument("input_path", metavar="IN.onnx", type=click.Path(path_type=Path))
@OutputArgs.options("output_path", "report_path", "external_data")
@ConversionArgs.options()
@VerificationArgs.options()
@ModelCheckArgs.options("verify_model", "optimize", *ModelCheckArgs.STEERING)
@VerbosityArgs.options()
@guard
def convert(input_path: Path, **values: Any) -> None:
    """Convert IN.onnx and write OUT.onnx.

    Nothing is written when a node cannot be converted exactly (exit 2) or a rewrite fails
    verification (exit 1); an existing OUT.onnx is then left untouched.
    """
    from lowerer.model_io.reading import load_input
    from lowerer.model_io.saving import plan_outputs
    from lowerer.passes.options import ConvertOptions

    # Options, then the input, then every output path: all checked before any work.
    api = ConversionArgs.parse(values)
    model_check, options = ModelCheckArgs.parse_for_convert(values, exact=values["exact"])
    api |= model_check | VerificationArgs.parse(values)
    checked = ConvertOptions.create(**api)  # every option checked, once, before the model is read
    output_path, report_path, external_data = (values[k] for k in ("output_path", "report_path", "external_data"))
    try:
        source = load_input(input_path, beside=True)  # onnx's checks of the input run beside the work (joined in run)
    except ModelRefusedError as e:  # the model was read: its refusal gets a report too
        if report_path is not None:
            _report_refused_input(e, input_path, output_path, report_path, checked)
        raise
    try:
        plan = plan_outputs(output_path, locations=list(source.data_files), source_dir=source.directory,
                            input_model=source.path, external_data=external_data, report=report_path)
        if options is not None and options.save_inputs is not None:
            _check_save_inputs(options.save_inputs, [input_path, *options.load_inputs],
                               [p for p in (output_path, report_path) if p is not None])
    except BaseException:
        if source.checks is not None:  # an input failing its own checks is named first, as before
            source.checks.finish()
        raise
    report = _convert_and_write(source, plan, checked)
    level = verbosity()
    print_convert_summary(report, level)
    if level >= 0 and report.backend is not None:
        from lowerer.backends.lowering import placement_line

        click.echo(placement_line(report.backend), err=True)
    if level >= 0:
        click.echo(f"wrote {one_line(str(output_path))}", err=True)


def _convert_and_write(source: InputModel, plan: OutputPlan, options: ConvertOptions) -> Report:
    """Convert with :func:`lowerer.api.run` (progress on a terminal), then write the model and report.

    A failed verification writes its report (the failing record, for the user to read) and says where.
    """
    import onnx

    from lowerer.api import run
    from lowerer.core.errors import ConversionError, VerificationError
    from lowerer.core.opsets import default_opset
    from lowerer.model_io.saving import write_outputs

    progress = TerminalProgress()
    command = ["lowerer", *sys.argv[1:]]
    source_opset = default_opset(source.model.opset_import)  # the model is converted in place
    try:
        try:
            result = run(source, dataclasses.replace(options, progress=progress if progress.enabled else None))
        except VerificationError as e:
            if plan.report is not None and e.report is not None:
                write_outputs(plan, None, e.report.to_json(command=command))
                e.args = (f"{e.args[0]}; the report is in {plan.report}",)
            raise
        except ConversionError as e:
            if plan.report is not None:
                refused = _refusal_report(e, source_opset, options)
                write_outputs(plan, None, refused.to_json(command=command))
                e.in_full = str(plan.report)
            raise
        except LowererError as e:  # the input's or an option's refusal, found in the work
            if plan.report is not None:
                write_outputs(plan, None, _input_report(e, source_opset, options).to_json(command=command))
                e.args = (f"{e.args[0]}; the report is in {plan.report}",)
            raise
        report = result.report
        progress(Progress("write", 0, 1, "files"))
        assert isinstance(result.model, onnx.ModelProto)  # a path in, a ModelProto out
        _record_budget(result.model, report, options)
        write_outputs(plan, result.model, report.to_json(command=command) if plan.report is not None else None)
        progress(Progress("write", 1, 1, "files"))
    finally:
        progress.close()
    return report


def _refusal_report(error: ConversionError, source_opset: int | None, options: ConvertOptions) -> Report:
    """The report of a refused conversion: every node that cannot be converted (``summary.refused``), nothing else."""
    from lowerer.core.report import Report
    from lowerer.passes.reach import limit

    target = options.target_for(source_opset)
    refused = list(error.refused)
    if not refused:  # a refusal from outside the walk (the backend's, the output gate's): as its message names it
        found = limit(target or 0, str(error))
        refused = [{"node": found["node"], "op_type": found["op_type"], "version": found["version"],
                    "scope": found["scope"], "refusal": str(error)}]
    count = len(refused)
    return Report(source_opset=source_opset, target_opset=target, decompose=tuple(sorted(options.decompose)),
                  notes=[f"refused: {count} node{'s' if count != 1 else ''} cannot be converted (summary.refused); "
                         "nothing was written"], refused=refused)


def _input_report(error: LowererError, source_opset: int | None, options: ConvertOptions) -> Report:
    """The report of a conversion refused for its input (not a node's refusal): the refusal, in its notes."""
    from lowerer.core.report import Report

    return Report(source_opset=source_opset, target_opset=options.target_for(source_opset),
                  decompose=tuple(sorted(options.decompose)),
                  notes=[f"refused: {error}", "nothing was written"])


def _report_refused_input(error: ModelRefusedError, input_path: Path, output_path: Path, report_path: Path,
                          options: ConvertOptions) -> None:
    """Write the report of a model refused as it was read (its paths checked first; if they fail, no report)."""
    from lowerer.core.errors import InputError
    from lowerer.model_io.saving import plan_outputs, write_outputs

    try:
        plan = plan_outputs(output_path, source_dir=input_path.parent, input_model=input_path, report=report_path)
        write_outputs(plan, None, _input_report(error, None, options).to_json(command=["lowerer", *sys.argv[1:]]))
    except InputError:
        return  # the paths' own problem: the refusal of the model is what the user sees
    error.args = (f"{error.args[0]}; the report is in {report_path}",)


def _record_budget(model: onnx.ModelProto, report: Report, options: ConvertOptions) -> None:
    """Record the whole-model budget of the rewrites: in the report, and (unless exact) in the model's metadata.

    ``lowerer verify`` then judges the pair as ``--verify-model`` would (see :mod:`lowerer.cli.budgets`).
    """
    from lowerer.cli.budgets import record_in_model, to_record
    from lowerer.verification.propagated import model_budget

    if not options.converts:
        return
    budget = model_budget(report.rewrites, options.max_ulp, options.exact)
    report.model_budget = to_record(record_in_model(model, budget))


def _check_save_inputs(path: Path, reads: list[Path], writes: list[Path]) -> None:
    """--save-inputs must not land on a model, one of its data files, another input or output."""
    from lowerer.model_io.external_data import external_data_locations
    from lowerer.model_io.reading import load_model

    data_files = []
    for model_path in [p for p in reads if p.suffix != ".npz"]:
        if model_path.is_file():
            model = load_model(model_path)
            data_files += [model_path.parent / loc for loc in external_data_locations(model)]
    check_written_path(path, "--save-inputs", reads=[*reads, *data_files], writes=writes)
