"""How a ``lowerer`` command ends: one ``lowerer: error:`` line and the documented exit code.

Exit codes: 0 success, 1 verification failed, 2 bad input or usage (from
:attr:`lowerer.core.errors.LowererError.exit_code` and click), 3 internal error, 130 interrupted,
141 output pipe closed.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from lowerer.core.errors import ConversionError, LowererError, one_line

__all__ = ["ERROR_PREFIX", "EXIT_BROKEN_PIPE", "EXIT_INTERNAL", "exit_on_broken_pipe", "fail", "guard"]

#: Exit code of a bug in lowerer (0, 1 and 2 come from LowererError.exit_code and click).
EXIT_INTERNAL = 3
#: Exit code when the reader of our output went away (``lowerer inspect m.onnx | head -1``): 128 + SIGPIPE,
#: what a Unix tool killed by SIGPIPE reports.
EXIT_BROKEN_PIPE = 141


def fail(message: str, code: int) -> NoReturn:
    """Print ``lowerer: error: <message>`` as one line (control characters escaped) and exit with ``code``."""
    import contextlib

    with contextlib.suppress(OSError, ValueError):  # stderr closed: the exit code still tells
        click.echo(f"{ERROR_PREFIX}{one_line(message)}", err=True)
    sys.exit(code)


def guard(fn: Callable[..., None]) -> Callable[..., None]:
    """Turn lowerer errors into one line on stderr and the documented exit code."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, while we can still exit quietly
        except BrokenPipeError:
            exit_on_broken_pipe()
        except ConversionError as e:
            fail(_refusal(e), e.exit_code)
        except LowererError as e:
            fail(str(e), e.exit_code)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            fail("interrupted; nothing was written", 130)
        except Exception as e:
            if logging.getLogger("lowerer").isEnabledFor(logging.DEBUG):
                raise
            fail(f"internal error (a bug in lowerer, please report it): {type(e).__name__}: {e}; "
                 "rerun with -v -v for the traceback", EXIT_INTERNAL)

    return wrapper


#: What comes before a message on an error line.
ERROR_PREFIX = "lowerer: error: "


def _refusal(error: ConversionError) -> str:
    """A refusal's line: whole when it fits in the line, else shortened, saying where the full text is."""
    from lowerer.core.remedies import REFUSAL_LINE_MAX, refusal_line

    room = REFUSAL_LINE_MAX - len(ERROR_PREFIX)
    message = str(error)
    if error.in_full is None:
        return refusal_line(message, room)
    where = f"in full: {error.in_full}"
    if len(message) + len(where) + 3 <= room:
        return f"{message} ({where})"
    return refusal_line(message, room, where)


def exit_on_broken_pipe() -> NoReturn:
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
