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
from lowerer.errors import LowererError, one_line

__all__ = ["main"]

#: Exit code of a bug in lowerer (0, 1 and 2 come from LowererError.exit_code and click).
EXIT_INTERNAL = 3

_EPILOG = """\b
Examples:
  lowerer convert model.onnx -o model-11.onnx --target-opset 11
  lowerer convert model.onnx -o lowered.onnx --decompose hardmax,globalmaxpool
  lowerer convert model.onnx -o out.onnx --target-opset 13 --report report.json
  lowerer inspect model.onnx --target-opset 11
  lowerer verify original.onnx converted.onnx

\b
Exit codes: 0 success, 1 verification failed, 2 bad input or usage, 3 internal error.
"""


def _fail(message: str, code: int) -> NoReturn:
    """Print ``lowerer: error: <message>`` as one line (control characters escaped) and exit with ``code``."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # stderr closed: the exit code still tells
        click.echo(f"lowerer: error: {one_line(message)}", err=True)
    sys.exit(code)


class _Group(click.Group):
    """The top-level group: usage errors too are one ``lowerer: error:`` line (exit 2), never a traceback."""

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
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


def _guard(fn: Callable[..., None]) -> Callable[..., None]:
    """Turn lowerer errors into one line on stderr and the documented exit code."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
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


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="lowerer: %(levelname)s: %(message)s", stream=sys.stderr)
    logging.getLogger("lowerer").setLevel(level)


def _providers_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option("--providers", metavar="LIST", default=None,
                      help="Execution providers for verification, comma-separated: cuda, dml, cpu "
                           "(default: CUDA, then DirectML, then CPU, whichever onnxruntime offers).")(fn)
    fn = click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
                      help="Seed of the generated verification inputs.")(fn)
    return fn


def _split(value: str | None) -> list[str] | None:
    return None if value is None else [p.strip() for p in value.split(",") if p.strip()]


@click.group(cls=_Group, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="lowerer")
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors.")
def main(verbose: int, quiet: bool) -> None:
    """Convert ONNX models between opsets and lower ops, verifying every rewrite.

    lowerer converts Hardmax/Softmax/LogSoftmax and ArgMax/ArgMin exactly across every opset
    (up and down), decomposes Hardmax and GlobalMaxPool for backends that lack them, and runs
    each rewrite before and after in onnxruntime, comparing the outputs exactly.
    """
    _setup_logging(verbose, quiet)


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
@click.option("--verify-model", is_flag=True, help="Also run the whole models before and after and compare.")
@_providers_option
@_guard
def convert(input_path: Path, output_path: Path, target_opset: int | None, decompose: str | None,
            report_path: Path | None, verify: bool, verify_model: bool, providers: str | None,
            seed: int, external_data: str | None = None) -> None:
    """Convert IN.onnx and write OUT.onnx.

    Nothing is written when a node cannot be converted exactly (exit 2) or a rewrite fails
    verification (exit 1); an existing OUT.onnx is then left untouched.
    """
    from lowerer.api import convert as convert_model
    from lowerer.errors import VerificationError
    from lowerer.model_io import load_input, plan_outputs, write_outputs
    from lowerer.options import decompose_names, provider_list

    # Options, then the input, then every output path: all checked before any work.
    if target_opset is not None:
        from lowerer.opsets import check_target_opset

        check_target_opset(target_opset)
    names = decompose_names(decompose)
    if target_opset is None and not names:
        raise click.UsageError("nothing to do: give --target-opset and/or --decompose")
    chosen = provider_list(_split(providers))
    source = load_input(input_path)
    plan = plan_outputs(output_path, locations=list(source.data_files), source_dir=source.directory,
                        input_model=source.path, external_data=external_data, report=report_path)
    progress = _Progress()
    try:
        result = convert_model(source, target_opset=target_opset, decompose=names, verify=verify,
                               providers=chosen, seed=seed, verify_model=verify_model,
                               progress=progress if progress.enabled else None)
    except VerificationError as e:
        if plan.report is not None and e.report is not None:  # the failing record, for the user to read
            write_outputs(plan, None, _report_text(e.report))
            e.args = (f"{e.args[0]}; the report is in {plan.report}",)
        raise
    finally:
        progress.close()
    report = result.report
    write_outputs(plan, result.model, _report_text(report) if plan.report is not None else None)
    _print_summary(report)
    click.echo(f"wrote {one_line(str(output_path))}", err=True)


def _report_text(report: Any) -> str:
    return json.dumps(report.to_dict(), indent=2) + "\n"


def _print_summary(report: Any) -> None:
    summary = report.summary()
    if not summary["by_rule"]:
        click.echo("no rewrites: the model already matches the request", err=True)
        return
    width = max(len("rule"), *(len(rule) for rule in summary["by_rule"])) + 2
    click.echo(f"{'rule':<{width}}{'rewrites':>9}{'verified':>10}{'unverified':>12}", err=True)
    for rule, counts in summary["by_rule"].items():
        total = sum(counts.values())
        click.echo(f"{rule:<{width}}{total:>9}{counts.get('verified', 0):>10}{counts.get('unverified', 0):>12}",
                   err=True)
    for reason, count in sorted(summary.get("unverified_reasons", {}).items(), key=lambda kv: -kv[1])[:3]:
        click.echo(f"unverified ({count}): {reason}", err=True)
    if summary.get("model_check"):
        check = summary["model_check"]
        click.echo(f"whole-model check: {check['status']}: {check['reason']}", err=True)


class _Progress:
    """A one-line counter on stderr for long verifications; silent unless stderr is a terminal."""

    def __init__(self, delay: float = 1.0, interval: float = 0.1) -> None:
        import time

        self.enabled = sys.stderr.isatty()
        self._clock = time.monotonic
        self._start = self._clock()
        self._delay = delay
        self._interval = interval
        self._last = 0.0
        self._shown = False

    def __call__(self, rewrites: int, checks: int) -> None:
        now = self._clock()
        if now - self._start < self._delay or now - self._last < self._interval:
            return
        self._last = now
        self._shown = True
        click.echo(f"\rverifying: {rewrites} rewrites, {checks} distinct checks", err=True, nl=False)

    def close(self) -> None:
        """Clear the line if anything was shown."""
        if self._shown:
            click.echo("\r\033[K", err=True, nl=False)


@main.command(epilog=_EPILOG)
@click.argument("input_path", metavar="IN.onnx", type=click.Path(path_type=Path))
@click.option("--target-opset", type=int, default=None, metavar="N", help="Show what converting to N would do.")
@click.option("--decompose", default=None, metavar="NAMES", help="Show what these decompositions would do.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")
@_guard
def inspect(input_path: Path, target_opset: int | None, decompose: str | None, as_json: bool) -> None:
    """Show IN.onnx's opsets, the nodes lowerer owns, and what a conversion would do (writes nothing)."""
    from lowerer.inspection import inspect_model

    info = inspect_model(input_path, target_opset=target_opset, decompose=decompose)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    click.echo(f"model: {input_path} (IR version {info['ir_version']})")
    click.echo("opset imports: " + ", ".join(f"{d or 'ai.onnx'}={v}" for d, v in info["opset_imports"].items()))
    click.echo(f"owned nodes: {len(info['nodes'])}")
    for n in info["nodes"]:
        attrs = " ".join(f"{k}={v}" for k, v in n["attributes"].items())
        click.echo(f"  {n['scope']}: {n['name']} {n['op_type']}-{n['version']} {attrs}".rstrip())
    if "plan" in info:
        plan = info["plan"]
        if plan.get("refused"):
            click.echo(f"would refuse: {plan['refused']}")
        else:
            click.echo(f"would rewrite {len(plan['rewrites'])} node(s):")
            for r in plan["rewrites"]:
                click.echo(f"  {r['scope']}: {r['node']} {r['op_type']}-{r['from_version']} -> "
                           f"{' + '.join(r['emitted'])} (opset {r['to_opset']}, rule {r['rule']})")


@main.command(epilog=_EPILOG)
@click.argument("first_path", metavar="A.onnx", type=click.Path(path_type=Path))
@click.argument("second_path", metavar="B.onnx", type=click.Path(path_type=Path))
@_providers_option
@_guard
def verify(first_path: Path, second_path: Path, providers: str | None, seed: int) -> None:
    """Run A.onnx and B.onnx on the same generated inputs and compare every output exactly.

    Exit 0 when all outputs are equal, 1 when one differs (the first difference is printed),
    2 when a model cannot be read or run, or the two take different inputs.
    """
    from lowerer.errors import InputError, VerificationError
    from lowerer.model_io import load_model
    from lowerer.verification.whole import compare_models

    first, second = load_model(first_path), load_model(second_path)
    result = compare_models(first, second, providers=_split(providers), seed=seed,
                            base_dir_a=first_path.resolve().parent, base_dir_b=second_path.resolve().parent)
    reason = result.reason.replace("first model", str(first_path)).replace("second model", str(second_path))
    if result.status == "skipped":
        raise InputError(f"cannot compare: {reason}")
    if result.status == "different":
        raise VerificationError(f"{first_path} and {second_path} differ on {result.provider}: "
                                f"{reason.replace('first', 'A').replace('second', 'B')}")
    click.echo(f"equal: {reason}")

if __name__ == "__main__":  # pragma: no cover
    main()
