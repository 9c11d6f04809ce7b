"""The ``lowerer`` command line: convert, inspect and verify ONNX models.

Heavy modules (onnx, onnxruntime, numpy) are imported inside the commands so that
``lowerer --help`` answers at once.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from lowerer._version import __version__
from lowerer.cli_options import (
    any_model_check_option,
    check_written_path,
    model_check_options,
    model_check_settings,
    verbosity,
    verbosity_options,
)
from lowerer.cli_output import TerminalProgress, model_check_table, print_convert_summary
from lowerer.errors import LowererError, one_line
from lowerer.progress import Progress

__all__ = ["main"]

#: Exit code of a bug in lowerer (0, 1 and 2 come from LowererError.exit_code and click).
EXIT_INTERNAL = 3
#: Exit code when the reader of our output went away (``lowerer inspect m.onnx | head -1``): 128 + SIGPIPE,
#: what a Unix tool killed by SIGPIPE reports.
EXIT_BROKEN_PIPE = 141

_EPILOG = """\b
Examples:
  lowerer convert model.onnx -o model-11.onnx --target-opset 11
  lowerer convert model.onnx -o lowered.onnx --decompose hardmax,globalmaxpool
  lowerer convert model.onnx -o out.onnx --target-opset 13 --report report.json
  lowerer convert model.onnx -o model-cuda.onnx --for cuda
  lowerer inspect model.onnx --target-opset 11
  lowerer inspect model.onnx --for coreml
  lowerer verify original.onnx converted.onnx --rtol 1e-6 --input-shapes ids:1x128

\b
Exit codes: 0 success, 1 verification failed (or a check asked for could not run),
2 bad input or usage, 3 internal error, 130 interrupted, 141 output pipe closed.
"""


def _fail(message: str, code: int) -> NoReturn:
    """Print ``lowerer: error: <message>`` as one line (control characters escaped) and exit with ``code``."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # stderr closed: the exit code still tells
        click.echo(f"lowerer: error: {one_line(message)}", err=True)
    sys.exit(code)


def _guard(fn: Callable[..., None]) -> Callable[..., None]:
    """Turn lowerer errors into one line on stderr and the documented exit code."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, while we can still exit quietly
        except BrokenPipeError:
            _broken_pipe()
        except LowererError as e:
            _fail(str(e), e.exit_code)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            _fail("interrupted; nothing was written", 130)
        except Exception as e:
            if logging.getLogger("lowerer").isEnabledFor(logging.DEBUG):
                raise
            _fail(f"internal error (a bug in lowerer, please report it): {type(e).__name__}: {e}; "
                  "rerun with -v -v for the traceback", EXIT_INTERNAL)

    return wrapper


def _broken_pipe() -> NoReturn:
    """The reader of stdout went away: stop quietly, as Unix tools do (no message, exit 141)."""
    import os

    for stream in (sys.stdout, sys.stderr):  # keep the interpreter's final flush from failing too
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
    sys.exit(EXIT_BROKEN_PIPE)


def _command_line() -> list[str]:
    return ["lowerer", *sys.argv[1:]]


def _providers_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--providers", metavar="LIST", default=None,
                      help="Execution providers to verify on, comma-separated, in priority order: cuda, dml, cpu "
                           "or full names. A strict list: one this onnxruntime does not offer is an error "
                           "(default: CUDA, then DirectML, then CPU, whichever onnxruntime offers).")(fn)
    fn = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                      help="Seed of the generated verification inputs.")(fn)
    return fn


def _backend_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--allow-fallback", is_flag=True,
                      help="With --for: keep a node the backend cannot run and lowerer has no exact form for (a "
                           "warning line names it), and accept an unproven placement, instead of refusing.")(fn)
    fn = click.option("--for", "for_backend", metavar="BACKEND", default=None,
                      help="Lower for a backend: cpu, cuda, dml, tensorrt (e.g. tensorrt<9.2), openvino, coreml, qnn, "
                           "webgpu, webnn. Rewrites exactly the nodes its profile names, with exact forms, each "
                           "verified; proves the placement where its onnxruntime provider is installed.")(fn)
    return fn


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [p.strip() for p in value.split(",") if p.strip()]


class _Group(click.Group):
    """The ``lowerer`` group: usage errors are one line, a closed output pipe ends the run quietly.

    Usage errors print one ``lowerer: error:`` line (exit 2), never a traceback; a reader that closes
    our output early ends the run quietly (exit 141).
    """

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except BrokenPipeError:
            _broken_pipe()
        except click.exceptions.Abort:  # KeyboardInterrupt without lowerer's signal handler (in-process use)
            _fail("interrupted; nothing was written", 130)
        except click.ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare ``lowerer``: the help, as click shows it
                e.show()
                sys.exit(e.exit_code)
            hint = f" (see '{e.ctx.command_path} --help')" if isinstance(e, click.UsageError) and e.ctx else ""
            _fail(f"{e.format_message()}{hint}", e.exit_code)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:  # a bug outside a command (option parsing ...)
            _fail(f"internal error (a bug in lowerer, please report it): {type(e).__name__}: {e}", EXIT_INTERNAL)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Group, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="lowerer")
@verbosity_options
def main() -> None:
    """Convert ONNX models between opsets and lower ops, verifying every rewrite.

    lowerer converts Hardmax/Softmax/LogSoftmax and ArgMax/ArgMin exactly across every opset
    (up and down), decomposes Hardmax and GlobalMaxPool for backends that lack them, and runs
    each rewrite before and after in onnxruntime, comparing the outputs exactly.
    """


@main.command(epilog=_EPILOG)
@click.argument("input_path", metavar="IN.onnx", type=click.Path(path_type=Path))
@click.option("-o", "--output", "output_path", required=True, type=click.Path(path_type=Path),
              metavar="OUT.onnx", help="Where to write the converted model (written atomically).")
@click.option("--target-opset", type=int, default=None, metavar="N",
              help="Default-domain opset to convert to (default: keep the model's).")
@click.option("--decompose", default=None, metavar="NAMES",
              help="Comma-separated decompositions: hardmax, globalmaxpool, all.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), default=None, metavar="R.json",
              help="Write a JSON report: one record per rewrite plus a summary.")
@click.option("--external-data", "external_data", default=None, metavar="FILE",
              help="Write every weight (1 KiB or more) into FILE, one data file beside OUT.onnx "
                   "(default: keep the input's data files, copied beside OUT.onnx when it is elsewhere).")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Run each rewrite before and after in onnxruntime and compare exactly.")
@click.option("--verify-model", is_flag=True,
              help="Also run the whole models before and after on the same inputs and compare every output "
                   "(see the options below).")
@click.option("--exact", is_flag=True,
              help="Accept no difference at all: function-body expansions and kernels that may round differently "
                   "must be bit-identical on the verification inputs (default: the documented ulp budgets).")
@click.option("--optimize", is_flag=True,
              help="Then fold constant shape arithmetic and remove dead nodes with onnxscript's optimizer, and "
                   "check that the optimized model computes the same outputs (needs onnxscript).")
@_backend_options  # --for BACKEND, --allow-fallback (lowerer.backends)
@_providers_option
@model_check_options
@verbosity_options
@_guard
def convert(input_path: Path, output_path: Path, target_opset: int | None, decompose: str | None,
            report_path: Path | None, verify: bool, verify_model: bool, providers: str | None,
            seed: int, external_data: str | None = None, optimize: bool = False, exact: bool = False,
            for_backend: str | None = None, allow_fallback: bool = False, **check: Any) -> None:
    """Convert IN.onnx and write OUT.onnx.

    Nothing is written when a node cannot be converted exactly (exit 2) or a rewrite fails
    verification (exit 1); an existing OUT.onnx is then left untouched.
    """
    import onnx

    from lowerer.api import convert as convert_model
    from lowerer.errors import VerificationError
    from lowerer.model_io import load_input, plan_outputs, write_outputs
    from lowerer.options import decompose_names, provider_list

    # Options, then the input, then every output path: all checked before any work.
    if target_opset is not None:
        from lowerer.opsets import check_target_opset

        check_target_opset(target_opset)
    names = decompose_names(decompose)
    if allow_fallback and for_backend is None:
        raise click.UsageError("--allow-fallback goes with --for BACKEND")
    if target_opset is None and not names and for_backend is None:
        raise click.UsageError("nothing to do: give --target-opset, --decompose and/or --for")
    if for_backend is not None:
        from lowerer.backends.lowering import make_plan

        make_plan(for_backend, allow_fallback)  # an unknown backend is refused before the model is read
    max_ulp = check.get("max_ulp")  # also the expansions' budget: not a whole-model option alone
    given = any_model_check_option({k: v for k, v in check.items() if k != "max_ulp"})
    if given and not (verify_model or optimize):
        raise click.UsageError(f"{', '.join(given)} steer the whole-model check: add --verify-model (or --optimize)")
    if exact and max_ulp:
        raise click.UsageError("--exact accepts no difference; it cannot go with --max-ulp")
    options = model_check_settings(**check) if (verify_model or optimize) else None
    chosen = provider_list(_split(providers))
    source = load_input(input_path)
    plan = plan_outputs(output_path, locations=list(source.data_files), source_dir=source.directory,
                        input_model=source.path, external_data=external_data, report=report_path)
    if options is not None and options.save_inputs is not None:
        _check_save_inputs(options.save_inputs, [input_path, *options.load_inputs],
                           [p for p in (output_path, report_path) if p is not None])
    progress = TerminalProgress()
    command = _command_line()
    try:
        try:
            result = convert_model(source, target_opset=target_opset, decompose=names, verify=verify,
                                   providers=chosen, seed=seed, max_ulp=max_ulp, exact=exact,
                                   verify_model=options if verify_model and options is not None else False,
                                   optimize=options if optimize and options is not None else False,
                                   progress=progress if progress.enabled else None,
                                   for_backend=for_backend, allow_fallback=allow_fallback)
        except VerificationError as e:
            if plan.report is not None and e.report is not None:  # the failing record, for the user to read
                write_outputs(plan, None, e.report.to_json(command=command))
                e.args = (f"{e.args[0]}; the report is in {plan.report}",)
            raise
        report = result.report
        progress(Progress("write", 0, 1, "files"))
        assert isinstance(result.model, onnx.ModelProto)  # a path in, a ModelProto out
        write_outputs(plan, result.model, report.to_json(command=command) if plan.report is not None else None)
        progress(Progress("write", 1, 1, "files"))
    finally:
        progress.close()
    level = verbosity()
    print_convert_summary(report, level)
    if level >= 0 and report.backend is not None:
        from lowerer.backends.lowering import placement_line

        click.echo(placement_line(report.backend), err=True)
    if level >= 0:
        click.echo(f"wrote {one_line(str(output_path))}", err=True)


def _check_save_inputs(path: Path, reads: list[Path], writes: list[Path]) -> None:
    """--save-inputs must not land on a model, one of its data files, another input or output."""
    from lowerer.model_io import external_data_locations, load_model

    data_files = []
    for model_path in [p for p in reads if p.suffix != ".npz"]:
        if model_path.is_file():
            model = load_model(model_path)
            data_files += [model_path.parent / loc for loc in external_data_locations(model)]
    check_written_path(path, "--save-inputs", reads=[*reads, *data_files], writes=writes)


@main.command(epilog=_EPILOG)
@click.argument("input_path", metavar="IN.onnx", type=click.Path(path_type=Path))
@click.option("--target-opset", type=int, default=None, metavar="N", help="Show what converting to N would do.")
@click.option("--decompose", default=None, metavar="NAMES", help="Show what these decompositions would do.")
@click.option("--reach", is_flag=True, help="Also find the lowest and highest opsets the model converts to.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@click.option("--for", "for_backend", metavar="BACKEND", default=None,
              help="List the nodes BACKEND cannot run (per its profile) and what lowerer would do with each.")
@verbosity_options
@_guard
def inspect(input_path: Path, target_opset: int | None, decompose: str | None, reach: bool, as_json: bool,
            for_backend: str | None = None) -> None:
    """Show IN.onnx's opsets, the nodes lowerer owns, and what a conversion would do (writes nothing).

    With --target-opset or --decompose it is a dry run of the conversion (without verification):
    each rewrite it would make (rule, or the function body a node would be expanded into, and why);
    exit 2 with the refusal when the conversion would be refused. With --for, the nodes BACKEND
    cannot run and what lowerer would do with each.
    """
    from lowerer.errors import ConversionError
    from lowerer.inspection import inspect_model

    if for_backend is not None:  # inspect --for BACKEND (lowerer.backends)
        from lowerer.backends.lowering import backend_table, inspect_backend

        found = inspect_backend(input_path, for_backend, target_opset=target_opset, decompose=decompose)
        for line in ([json.dumps(found, indent=2)] if as_json else backend_table(found)):
            click.echo(line)
        return
    info = inspect_model(input_path, target_opset=target_opset, decompose=decompose, reach=reach)
    refused = info.get("plan", {}).get("refused")
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(f"model: {input_path} (IR version {info['ir_version']})")
        click.echo("opset imports: " + ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in info["opset_imports"].items()))
        click.echo(f"owned nodes: {len(info['nodes'])}")
        for n in info["nodes"]:
            attrs = " ".join(f"{k}={v}" for k, v in n["attributes"].items())
            click.echo(f"  {n['scope']}: {n['name']} {n['op_type']}-{n['version']} {attrs}".rstrip())
        if "reachable_opsets" in info:
            r = info["reachable_opsets"]
            click.echo(f"converts to opsets {r['lowest']} .. {r['highest']}")
        if "plan" in info and not refused:
            plan = info["plan"]
            expanded = [r for r in plan["rewrites"] if r["rule"] == "function-expansion"]
            click.echo(f"would rewrite {len(plan['rewrites'])} node(s), {len(expanded)} by expanding a function body:")
            for r in plan["rewrites"]:
                why = next((h.split(" (", 1)[1].rsplit("): rule", 1)[0] for h in r.get("steps", [])
                            if "function body" in h and " (" in h), None)
                how = f"expanded ({why})" if r["rule"] == "function-expansion" and why else f"rule {r['rule']}"
                click.echo(f"  {r['scope']}: {r['node']} {r['op_type']}-{r['from_version']} -> "
                           f"{' + '.join(r['emitted'])} (opset {r['to_opset']}, {how})")
    if refused:
        raise ConversionError(f"would refuse: {refused}")


@main.command(epilog=_EPILOG)
@click.argument("first_path", metavar="A.onnx", type=click.Path(path_type=Path))
@click.argument("second_path", metavar="B.onnx", type=click.Path(path_type=Path))
@_providers_option
@model_check_options
@verbosity_options
@_guard
def verify(first_path: Path, second_path: Path, providers: str | None, seed: int, **check: Any) -> None:
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
    from lowerer.errors import InputError, VerificationError
    from lowerer.model_io import external_data_locations, load_model
    from lowerer.verification.whole import ModelSource, compare_models

    options = model_check_settings(**check)
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
                                options=options, providers=_split(providers), seed=seed,
                                progress=progress if progress.enabled else None)
    finally:
        progress.close()
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


if __name__ == "__main__":  # pragma: no cover
    main()
