"""Options the ``lowerer`` commands share: verbosity and the whole-model check options.

``-q/-v/-vv`` are accepted before or after the subcommand; the whole-model check options
(tolerances, inputs under control) come with their parsing and the check of the paths they write.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from lowerer.errors import InputError

if TYPE_CHECKING:
    from lowerer.verification.whole import ModelCheckOptions

__all__ = ["check_written_path", "configure_logging", "model_check_options", "model_check_settings",
           "verbosity", "verbosity_options"]

F = TypeVar("F", bound=Callable[..., Any])

_KEY = "lowerer.verbosity"
_HANDLER_NAME = "lowerer-cli"


def verbosity() -> int:
    """-1 (``-q``), 0 (default), 1 (``-v``) or 2 (``-vv``) for the command running now."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return 0
    state = ctx.find_root().meta.get(_KEY)
    if not state:
        return 0
    return -1 if state["quiet"] else min(int(state["verbose"]), 2)


def configure_logging(level: int) -> None:
    """Route lowerer's log records to stderr: errors only at -1, warnings at 0, info at 1, debug at 2.

    Other libraries' records (onnxscript, onnx_ir) are shown only from errors, or everything at 2.
    """
    lowerer_level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(level, logging.DEBUG)
    log = logging.getLogger("lowerer")
    log.setLevel(lowerer_level)
    log.propagate = False
    handler = next((h for h in log.handlers if isinstance(h, logging.StreamHandler) and h.get_name() == _HANDLER_NAME),
                   None)
    if handler is None:
        handler = logging.StreamHandler()
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(_Formatter())
        log.addHandler(handler)
    handler.setStream(sys.stderr)  # click's test runner swaps sys.stderr per invocation
    logging.getLogger().setLevel(logging.DEBUG if level >= 2 else logging.ERROR)


class _Formatter(logging.Formatter):
    """``lowerer: warning: message`` (one line: newlines and control characters escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.levelno <= logging.DEBUG:
            text += "\n" + self.formatException(record.exc_info)
            return f"lowerer: {record.levelname.lower()}: {text}"
        text = " ".join(text.split())
        return f"lowerer: {record.levelname.lower()}: {text}"


def _count(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    state = ctx.find_root().meta.setdefault(_KEY, {"verbose": 0, "quiet": False})
    if param.name == "verbose":
        state["verbose"] += int(value or 0)
    elif value:
        state["quiet"] = True
    configure_logging(-1 if state["quiet"] else min(state["verbose"], 2))
    return value


def verbosity_options(fn: F) -> F:
    """``-v/--verbose`` (repeatable) and ``-q/--quiet``, accepted before or after the subcommand."""
    fn = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_count,
                      help="Print only errors (no summary, no warnings).")(fn)
    fn = click.option("-v", "--verbose", count=True, expose_value=False, callback=_count,
                      help="More logging: -v what lowerer does, -vv debug (also other libraries').")(fn)
    return fn


def model_check_options(fn: F) -> F:
    """The whole-model check options of ``verify`` and ``convert --verify-model/--optimize``."""
    options = [
        click.option("--atol", type=float, default=0.0, show_default=True, metavar="X",
                     help="Accept float values this close (absolute difference)."),
        click.option("--rtol", type=float, default=0.0, show_default=True, metavar="X",
                     help="Accept float values this close relative to the first model's value."),
        click.option("--max-ulp", type=click.IntRange(min=0), default=None, metavar="N",
                     help="Accept float values at most N units in the last place apart (default 0: exact; for "
                          "convert it is also the error budget of function-body expansions, default per type). A "
                          "value passes when any tolerance accepts it; integer and bool outputs are always exact."),
        click.option("--input-shapes", "input_shapes", multiple=True, metavar="NAME:DIMS",
                     help="Shape of an input, e.g. ids:1x128 (repeatable; default: dynamic dims 1, then 2)."),
        click.option("--val-range", "val_range", multiple=True, metavar="[NAME:]LO,HI",
                     help="Inclusive value range of an input (or of every input without NAME), e.g. ids:0,30521 "
                          "(repeatable; default: index inputs in range, others random)."),
        click.option("--load-inputs", "load_inputs", multiple=True, metavar="IN.npz",
                     type=click.Path(path_type=Path),
                     help="Run on these inputs (arrays named after the inputs) instead of generated ones."),
        click.option("--save-inputs", "save_inputs", default=None, metavar="OUT.npz",
                     type=click.Path(path_type=Path), help="Write the inputs the check ran on (for --load-inputs)."),
        click.option("--allow-unverified", is_flag=True,
                     help="A whole-model check that cannot run is a warning, not a failure (exit 0)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def model_check_settings(*, atol: float, rtol: float, max_ulp: int | None, input_shapes: Sequence[str],
                         val_range: Sequence[str], load_inputs: Sequence[Path], save_inputs: Path | None,
                         allow_unverified: bool) -> ModelCheckOptions:
    """The :class:`~lowerer.verification.whole.ModelCheckOptions` the options describe.

    Raises:
        InputError: a malformed or contradictory option.
    """
    from lowerer.verification.compare import Tolerance
    from lowerer.verification.feeds import parse_input_shapes, parse_value_range
    from lowerer.verification.whole import ModelCheckOptions

    try:
        tolerance = Tolerance(ulps=max_ulp or 0, atol=atol, rtol=rtol)
    except ValueError as e:
        raise InputError(f"--atol/--rtol/--max-ulp: {e}") from None
    if load_inputs and (input_shapes or val_range):
        raise InputError("--load-inputs gives the inputs; --input-shapes and --val-range apply to generated ones, "
                         "not both")
    return ModelCheckOptions(tolerance=tolerance, input_shapes=parse_input_shapes(input_shapes),
                             value_ranges=parse_value_range(val_range), load_inputs=list(load_inputs),
                             save_inputs=save_inputs, allow_unverified=allow_unverified)


def any_model_check_option(values: dict[str, Any]) -> list[str]:
    """The whole-model check options given (by their command-line names)."""
    names = {"atol": "--atol", "rtol": "--rtol", "max_ulp": "--max-ulp", "input_shapes": "--input-shapes",
             "val_range": "--val-range", "load_inputs": "--load-inputs", "save_inputs": "--save-inputs",
             "allow_unverified": "--allow-unverified"}
    return [flag for key, flag in names.items() if values.get(key) not in (None, False, 0, 0.0, (), [])]


def check_written_path(path: Path, option: str, *, reads: Iterable[Path], writes: Iterable[Path]) -> None:
    """Refuse a path lowerer would write that is one it reads or another output, a directory, FIFO or device.

    Raises:
        InputError: as above, naming ``option``.
    """
    target = _identity(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise InputError(f"{option} {path}: is {kind}; give a file path")
    for other in reads:
        if _identity(other) == target:
            raise InputError(f"{option} {path}: is {other}, which lowerer reads; writing there would destroy it")
    for other in writes:
        if _identity(other) == target:
            raise InputError(f"{option} {path}: is also where {other} is written; give another path")


def _identity(path: Path) -> tuple[int, int] | Path:
    """The file's (device, inode) when it exists, else its resolved path."""
    try:
        st = os.stat(path)
        return (st.st_dev, st.st_ino)
    except OSError:
        return Path(os.path.abspath(path)).resolve()
