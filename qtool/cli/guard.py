"""What surrounds every command: signals, warnings, and errors as one line.

- SIGTERM and SIGHUP raise `Terminated` (SIGINT raises KeyboardInterrupt as usual), so that the
  code being interrupted unwinds and removes its temporary files; whatever is left is removed on
  the way out. The exit code is 128 + the signal number. A signal that arrives while a group of
  files is renamed into place takes effect once they all are.
- numpy's floating-point warnings are off (the data checks say what matters); any other Python
  warning is one line, `qtool: warning: ...`.
- What native libraries log straight to file descriptor 2 (LiteRT's "INFO: Created TensorFlow
  Lite XNNPACK delegate", a kernel's "ERROR:" lines before the exception that says the same) goes
  to /dev/null; Python's stderr keeps writing where it did. `--debug` (and `python -X
  importtime`, which reports there) leaves it visible.
- Standard output nobody reads (a closed pipe or descriptor) ends the run quietly with 141, as
  SIGPIPE would; one that cannot hold the output (a full disk) is one error line and exit 2
  (`stdout.py`).
- A QtoolError is one line, `qtool: error: ...`, with its exit code (2 unless it says otherwise),
  control characters escaped (a file name must not break the line or forge another one, such as
  a CI system's `::error` workflow command).
  Anything else is a bug: one line `qtool: internal error: ...`, exit code 3. `--debug` (or
  QTOOL_DEBUG=1) adds the traceback, including that of the user's own generator code.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import click

from qtool.cli.stdout import OutputLost, guarded_stdout
from qtool.display import printable
from qtool.errors import QtoolError, first_line
from qtool.files import defer_interrupt, os_reason, recording_inputs, remove_temporaries
from qtool.signals import HANDLED_SIGNALS

EXIT_INTERNAL = 3


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: unwind like Ctrl-C, then exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupt(signum: int, frame: Any) -> None:
    if defer_interrupt(signum):  # files are being renamed into place: after that
        return
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


@contextlib.contextmanager
def _signal_handlers() -> Iterator[list[BaseException]]:
    """Signals become exceptions. One raised where Python ignores exceptions (a weakref
    callback, an at-fork hook: "Exception ignored in ...", a traceback on stderr) would be
    lost; it is kept instead, for the caller to raise when the command returns."""
    numbers = [getattr(signal, name) for name in HANDLED_SIGNALS if hasattr(signal, name)]
    try:
        previous = {number: signal.signal(number, _interrupt) for number in numbers}
    except ValueError:  # not the main thread: leave signals alone
        previous = {}
    swallowed: list[BaseException] = []
    default_hook = sys.unraisablehook

    def keep_interrupts(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            swallowed.append(unraisable.exc_value)
        else:
            default_hook(unraisable)

    sys.unraisablehook = keep_interrupts
    try:
        yield swallowed
    finally:
        sys.unraisablehook = default_hook
        for number, handler in previous.items():
            signal.signal(number, handler)


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"qtool: warning: {category.__name__}: {printable(first_line(message))}", err=True)


@contextlib.contextmanager
def _quiet_warnings() -> Iterator[None]:
    import numpy as np  # here: `qtool --help` imports no numpy

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.showwarning = _one_line_warning
        yield


def _writes_to_descriptor_2(stream: Any) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # a StringIO, a closed or detached stream
        return False


@contextlib.contextmanager
def _native_stderr_discarded() -> Iterator[None]:
    """File descriptor 2 to /dev/null; sys.stderr, if it wrote there, to a copy of it."""
    stream = sys.stderr
    try:
        stream.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):  # no descriptor 2 (`2>&-`): nothing to keep clean
        yield
        return
    rebound = None
    try:
        if _writes_to_descriptor_2(stream):
            rebound = open(  # noqa: SIM115 - lives until the command ends
                saved, "w", encoding=stream.encoding, errors="backslashreplace", closefd=False
            )
            rebound.reconfigure(line_buffering=True)
            sys.stderr = rebound
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.close(devnull)
        yield
    finally:
        if rebound is not None:
            rebound.flush()
            sys.stderr = stream
        os.dup2(saved, 2)
        os.close(saved)


def _import_times_requested() -> bool:
    """`python -X importtime` (or PYTHONPROFILEIMPORTTIME) reports on descriptor 2 too."""
    return bool(sys._xoptions.get("importtime")) or bool(os.environ.get("PYTHONPROFILEIMPORTTIME"))


def debug_requested() -> bool:
    return os.environ.get("QTOOL_DEBUG", "") not in ("", "0")


def _escape_unencodable() -> None:
    """Print what the terminal cannot encode (undecodable file names) as escapes, not crash."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")


def run_guarded(
    invoke: Callable[[], Any],
    debug: Callable[[], bool],
    flags: Callable[[], Mapping[str, str]] = dict,
) -> Any:
    """Run a command; every way it can end becomes an exit code and at most one line. `flags`
    maps the running command's parameter names to its options, for library messages."""
    _escape_unencodable()
    keep_native = debug() or _import_times_requested()
    quiet_native = contextlib.nullcontext() if keep_native else _native_stderr_discarded()
    try:
        # Every file the command reads is recorded: none of its outputs may replace one.
        with (
            _signal_handlers() as swallowed,
            _quiet_warnings(),
            quiet_native,
            recording_inputs(),
            guarded_stdout(),
        ):
            result = invoke()
            sys.stdout.flush()  # a closed pipe or a full disk shows now, not at exit
            if swallowed:
                raise swallowed[0]
            return result
    except QtoolError as exc:
        if debug():
            traceback.print_exception(exc)
        click.echo(f"qtool: error: {printable(as_options(str(exc), flags()))}", err=True)
        sys.exit(exc.exit_code)
    except click.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else "qtool"
        message = printable(f"{exc.format_message()} (see {command} --help)")
        click.echo(f"qtool: error: {message}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"qtool: error: {printable(exc.format_message())}", err=True)
        sys.exit(2)
    except Terminated as exc:
        click.echo(f"qtool: terminated by {signal.Signals(exc.signum).name}", err=True)
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        click.echo("qtool: interrupted", err=True)
        sys.exit(130)
    except MemoryError:
        click.echo("qtool: error: out of memory", err=True)
        sys.exit(2)
    except BrokenPipeError:
        # Nobody reads standard output (`qtool ... | head`, `>&-`): end as a program that
        # SIGPIPE stops does, quietly, with nothing left to flush into the closed pipe.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)
    except OutputLost as exc:  # a full disk: the output is lost, which must not pass
        with contextlib.suppress(OSError, ValueError):
            click.echo(f"qtool: error: cannot write standard output: {os_reason(exc)}", err=True)
        with contextlib.suppress(AttributeError, OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(2)
    except (click.exceptions.Exit, click.exceptions.Abort, SystemExit):
        raise
    except Exception as exc:  # a bug: one line, the traceback only on request
        if debug():
            traceback.print_exception(exc)
        hint = "" if debug() else " (rerun with --debug for the traceback)"
        message = printable(f"{type(exc).__name__}: {first_line(exc)}")
        click.echo(f"qtool: internal error: {message}{hint}", err=True)
        sys.exit(EXIT_INTERNAL)
    finally:
        remove_temporaries()


QUOTES = "'\""
_PARAMETER = re.compile(r"`([a-z_][a-z0-9_]*)(?:=([^`]*))?`")


def as_options(message: str, flags: Mapping[str, str]) -> str:
    """A library message for the command line: each backquoted parameter that a flag of the
    running command sets becomes that flag (`engine='litert'` -> --engine litert, `force=True` ->
    --force, `data` -> --data); other backquoted text stays as it is."""

    def option(match: re.Match[str]) -> str:
        flag = flags.get(match.group(1))
        if flag is None:
            return match.group(0)
        value = match.group(2)
        if value is None or value == "True":
            return flag
        return f"{flag} {value.strip(QUOTES)}"

    return _PARAMETER.sub(option, message)
