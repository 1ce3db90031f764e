"""Run qtool in-process on one command line and judge it against the robustness invariants.

A run fails, in one or more categories, when:
- traceback: an exception escaped the CLI, or it printed a traceback or an internal error;
- hang: it did not finish within its deadline;
- crash: the process died (judged by the pool: a worker that disappears);
- files: a failed run left a file behind (a temporary, half an output) or changed or removed a
  file that was there; a successful run wrote anything but the model and its report, or not both;
- invalid: exit 0 although the written model does not load (qtool's reader or LiteRT), or a
  case known to be bad input was accepted;
- untidy: an error that is not exactly one `qtool: error: ...` line, or warnings on stderr;
- unexpected: a case with a known outcome ended with another exit code.
"""

from __future__ import annotations

import contextlib
import faulthandler
import hashlib
import io
import os
import signal
import stat
import sys
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = ("traceback", "hang", "crash", "files", "invalid", "untidy", "unexpected")
QTOOL_ROOT = str(Path(__file__).resolve().parents[2] / "qtool")


class Deadline(BaseException):
    """Raised by SIGALRM inside a run that takes too long (BaseException: nothing swallows it)."""


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    native_stderr: str = ""  # written to file descriptor 2 directly (LiteRT's C++ logging)
    error: BaseException | None = None
    site: str | None = None  # where an escaped exception was raised (innermost qtool frame)
    hung: bool = False


@dataclass
class Verdict:
    case: str
    command: str
    failures: dict[str, str] = field(default_factory=dict)  # category -> detail
    site: str | None = None
    litert_refuses_input: bool = False
    succeeded: bool = False

    def fail(self, category: str, detail: str) -> None:
        self.failures.setdefault(category, detail[:500])


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    def expire(signum, frame):
        raise Deadline()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def crash_site(exc: BaseException) -> str:
    """`Type at file:line (function)` of the innermost frame inside qtool, else the innermost."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if f.filename.startswith(QTOOL_ROOT)] or frames
    where = inside[-1] if inside else None
    place = (
        f"{os.path.relpath(where.filename, Path(QTOOL_ROOT).parent)}:{where.lineno} ({where.name})"
        if where
        else "?"
    )
    return f"{type(exc).__name__} at {place}"


@contextlib.contextmanager
def native_stderr() -> Iterator[io.BytesIO]:
    """What native code writes to file descriptor 2 meanwhile (Python's sys.stderr is apart)."""
    captured = io.BytesIO()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.write(sink.read())


def run_cli(argv: list[str], timeout: float) -> CliResult:
    """`qtool argv...` in this process, stdout/stderr captured (also what native code writes to
    file descriptor 2), signal handlers restored after."""
    from qtool.cli import main

    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    result = CliResult(code=0, stdout="", stderr="")
    native = io.BytesIO()
    try:
        with (
            native_stderr() as native,
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            deadline(timeout),
        ):
            main.main(args=argv, prog_name="qtool", standalone_mode=True)
    except SystemExit as exc:
        result.code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Deadline:
        result.code, result.hung = -1, True
    except BaseException as exc:  # what a user would see as a traceback
        result.code, result.error, result.site = -2, exc, crash_site(exc)
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    result.stdout, result.stderr = out.getvalue(), err.getvalue()
    result.native_stderr = native.getvalue().decode(errors="replace")
    return result


# --------------------------------------------------------------------------- judging output


def judge_streams(verdict: Verdict, result: CliResult, check: bool = False) -> None:
    """`check` reports an unreadable model in its report (exit 2), not necessarily on stderr."""
    if result.hung:
        verdict.fail("hang", "did not finish within the deadline")
        return
    if result.error is not None:
        verdict.site = result.site
        text = "".join(traceback.format_exception_only(type(result.error), result.error))
        verdict.fail("traceback", f"{result.site}: {text.strip()}")
        return
    stderr = result.stderr
    internal = ("Traceback (most recent call last)", "internal error", "out of memory")
    if any(marker in stderr for marker in internal):
        verdict.site = next(
            (line for line in stderr.splitlines() if any(m in line for m in internal[1:])),
            "traceback",
        )
        verdict.fail("traceback", stderr.strip().splitlines()[-1])
        return
    native = result.native_stderr.strip()
    if native:
        verdict.fail("untidy", f"native code wrote to stderr: {native.splitlines()[0]}")
    lines = [line for line in stderr.splitlines() if line.strip()]
    noisy = [
        line
        for line in lines
        if ("Warning" in line or "warnings.warn" in line) and not line.startswith("qtool: warning:")
    ]
    if noisy:
        verdict.fail("untidy", f"warning on stderr: {noisy[0]}")
    if result.code not in (0, 1):
        errors = [line for line in lines if line.startswith("qtool: error: ")]
        others = [
            line
            for line in lines
            if not line.startswith(("qtool: error: ", "qtool: interrupted", "qtool: warning: "))
        ]
        if (not errors and not check) or (len(errors) > 1 and not check) or others:
            verdict.fail("untidy", f"exit {result.code}, stderr {stderr.strip()[:300]!r}")


# --------------------------------------------------------------------------- files


def snapshot(directory: Path) -> dict[str, tuple]:
    """Every entry below `directory` (not following links): kind, content hash, mode."""
    entries: dict[str, tuple] = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs + files:
            path = Path(root) / name
            relative = str(path.relative_to(directory))
            info = path.lstat()
            if stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                entries[relative] = ("file", digest, stat.S_IMODE(info.st_mode))
            elif stat.S_ISLNK(info.st_mode):
                entries[relative] = ("link", os.readlink(path))
            else:
                entries[relative] = (stat.filemode(info.st_mode)[0], stat.S_IMODE(info.st_mode))
    return entries


def judge_files(
    verdict: Verdict,
    before: dict[str, tuple],
    after: dict[str, tuple],
    written: set[str],
    code: int,
) -> bool:
    """Check the write invariants; returns whether the model and report were written."""
    new = after.keys() - before.keys()
    removed = before.keys() - after.keys()
    changed = {k for k in before.keys() & after.keys() if before[k] != after[k]}
    touched = written & (new | changed)
    wrote = bool(touched) and code in (0, 1)
    if wrote or code == 0:
        missing = written - touched
        if missing:
            verdict.fail("files", f"exit {code} but not written: {sorted(missing)}")
        extra = (new | changed | removed) - written
        if extra:
            verdict.fail("files", f"exit {code} and also touched {sorted(extra)}")
    elif new or removed or changed:
        verdict.fail(
            "files",
            f"exit {code}: left {sorted(new)}, removed {sorted(removed)}, changed {sorted(changed)}",
        )
    return wrote


def loads_everywhere(blob: bytes) -> str | None:
    """Why a written model is not valid: qtool's reader or LiteRT refuses it (None: it loads).

    Runs in a forked child: LiteRT aborts the whole process on some inconsistent models.
    """
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        message = b""
        try:
            faulthandler.disable()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            from qtool.model import parse_model

            parse_model(blob)
            message = _litert_refusal(blob).encode()
        except BaseException as exc:
            message = f"qtool cannot read it back: {type(exc).__name__}: {exc}".encode()
        os.write(write, message[:2000])
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"LiteRT aborts on it (signal {os.WTERMSIG(status)})"
    return message or None


def _litert_refusal(blob: bytes) -> str:
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        return ""
    try:
        Interpreter(model_content=blob).allocate_tensors()
    except BaseException as exc:
        return (
            f"LiteRT refuses it: {str(exc).strip().splitlines()[0] if str(exc).strip() else exc!r}"
        )
    return ""


def quiet_numpy_warnings_visible() -> None:
    """Make every warning print each time, so a leak is seen in every run that has it."""
    import warnings

    warnings.simplefilter("always")
    sys.stderr.flush()
