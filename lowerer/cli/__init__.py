"""The ``lowerer`` command line: convert, inspect and verify ONNX models.

The click group :func:`main` is here; each command has its module (:mod:`lowerer.cli.convert`,
:mod:`lowerer.cli.inspect`, :mod:`lowerer.cli.verify`, :mod:`lowerer.cli.targets`), its options come
from the argument groups of :mod:`lowerer.cli.groups`; :mod:`.inspection` is what ``inspect`` reports and
:mod:`.probes` the probe suite that measures a backend's runtime (``python -m lowerer.cli.probes``). Heavy
modules (onnx, onnxruntime, numpy) are imported inside the commands so that ``lowerer --help`` answers at once.
The top layer: it may import everything.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from lowerer._version import __version__
from lowerer.cli import convert, inspect, targets, verify
from lowerer.cli.epilog import EPILOG
from lowerer.cli.exits import EXIT_INTERNAL, exit_on_broken_pipe, fail
from lowerer.cli.groups import VerbosityArgs

__all__ = ["main"]


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
            exit_on_broken_pipe()
        except click.exceptions.Abort:  # KeyboardInterrupt without lowerer's signal handler (in-process use)
            fail("interrupted; nothing was written", 130)
        except click.ClickException as e:
            if type(e).__name__ == "NoArgsIsHelpError":  # bare ``lowerer``: the help, as click shows it
                e.show()
                sys.exit(e.exit_code)
            hint = f" (see '{e.ctx.command_path} --help')" if isinstance(e, click.UsageError) and e.ctx else ""
            fail(f"{e.format_message()}{hint}", e.exit_code)
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as e:  # a bug outside a command (option parsing ...)
            fail(f"internal error (a bug in lowerer, please report it): {type(e).__name__}: {e}", EXIT_INTERNAL)
        sys.exit(code if isinstance(code, int) else 0)


#: ``lowerer --help``: what lowerer does, then each command in a line (``\b``: click keeps the lines as they are).
_HELP = """Convert ONNX models between opsets, exactly, verifying every rewrite in onnxruntime.

    \b
    convert  Take a model to another default-domain opset, down or up, for every op:
             version steps, lowerings into ops the target has, function-body
             expansions (e.g. LayerNormalization, Attention below their opsets),
             decompositions (--decompose); --for BACKEND lowers for a runtime
             (onnxruntime==1.16, cuda, tensorrt==8.6, coreml ...) and picks its opset.
             Each rewrite runs before and after in onnxruntime, compared exactly
             or within its documented budget; a node with no exact form is
             refused (exit 2), never approximated.
    inspect  A model at a glance, and what convert would do (a dry run).
    verify   Run two models on the same inputs and compare every output.
    targets  The runtimes --for knows, with the opset and IR version each loads.
    """


@click.group(cls=_Group, help=_HELP, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="lowerer")
@VerbosityArgs.options()
def main() -> None:
    """The ``lowerer`` group (its help is :data:`_HELP`)."""


for _command in (convert.convert, inspect.inspect, verify.verify, targets.targets):
    main.add_command(_command)


if __name__ == "__main__":  # pragma: no cover
    main()
