"""Reading and writing user-named paths without being turned against the machine.

Reading: only regular files are read; a FIFO, a device, a socket or a directory where a file is
expected is refused before anything blocks on it (files are opened non-blocking, then checked).
Failures are OSErrors; `os_reason` words them to follow the path in a one-line error.

Writing: every file is first written whole to a temporary beside its destination (`stage`), and
only renamed into place once everything a command writes is complete (`commit`, with SIGINT,
SIGTERM and SIGHUP held back so that a group of renames is never cut in half). A file gets the
mode a plain write would give it (the umask's), or keeps an existing file's mode when it
replaces it. Temporaries still on disk when a run ends are removed (`remove_temporaries`, which
the CLI calls on every exit, interrupted or not); only SIGKILL can leave one (`.qtool-*.tmp`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from qtool.errors import UsageError

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


class NotRegularFile(OSError):
    """The path exists but is not a regular file."""

    def __init__(self, kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file")
        self.kind = kind  # "a directory", "a FIFO", ...

    def __str__(self) -> str:
        return self.strerror


def kind_of(mode: int) -> str:
    """What a file that is not regular is, from its st_mode, as messages say it ("a directory",
    "a FIFO")."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def os_reason(exc: OSError | ValueError) -> str:
    """What went wrong, without the path (callers put it in front)."""
    if isinstance(exc, ValueError):  # os functions refuse NUL bytes in paths this way
        return "invalid path (it contains a NUL byte)" if "null" in str(exc) else str(exc)
    if isinstance(exc, NotRegularFile):
        return str(exc)
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links (a link loop?)"
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long"
    return (exc.strerror or str(exc)).lower()


def lookup(path: str | os.PathLike) -> os.stat_result | None:
    """The target's status (links followed); None when nothing is there (also a dangling link).

    Raises OSError for paths that cannot be looked up (link loops, names too long, no
    permission) and ValueError for a NUL byte.
    """
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None


def exists(path: str | os.PathLike) -> bool:
    """Whether something is at `path`; False for anything that cannot be looked up."""
    try:
        return lookup(path) is not None
    except (OSError, ValueError):
        return False


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """Open a regular file for reading; anything else raises (never blocks on a FIFO)."""
    if str(path) == "":
        raise FileNotFoundError(errno.ENOENT, "no such file (empty path)")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(kind_of(mode))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# =========================================================================== writing

# Temporaries written but neither renamed into place nor removed yet: what an interrupted run
# must remove (the CLI does, on any exit).
_TEMPORARIES: set[Path] = set()


@dataclass(frozen=True)
class Staged:
    """A complete file in a temporary beside its destination, not yet renamed into place."""

    path: Path
    temporary: Path


def destination_problem(path: str | os.PathLike, overwrite: bool) -> str | None:
    """Why a file cannot be written at `path` (None when it can): as `cannot write PATH: ...`
    reads, or the `already exists` refusal."""
    raw = os.fspath(path)
    if raw == "" or raw.endswith(os.sep):
        return "not a file name"
    try:
        found = lookup(raw)
        parent = lookup(Path(raw).parent)
    except (OSError, ValueError) as exc:
        return os_reason(exc)
    if found is not None:
        if not stat.S_ISREG(found.st_mode):
            return f"it is {kind_of(found.st_mode)}"
        if not overwrite:
            return "already exists (use `force=True` to replace it)"
    if parent is None:
        return "output directory does not exist"
    if not stat.S_ISDIR(parent.st_mode):
        return f"{Path(raw).parent} is not a directory"
    return None


def check_destination(path: str | os.PathLike, overwrite: bool) -> None:
    """UsageError unless a file can be written at `path` (see `destination_problem`)."""
    problem = destination_problem(path, overwrite)
    if problem is not None:
        if problem.startswith("already exists"):
            raise UsageError(f"{os.fspath(path)}: {problem}")
        raise UsageError(f"cannot write {os.fspath(path)}: {problem}")


def _new_file_mode() -> int:
    """The mode a plain `open(path, "w")` gives: 0o666 less the umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def stage(path: str | os.PathLike, chunks: Any, *, overwrite: bool = True) -> Staged:
    """Write `chunks` (bytes-like or str) to a temporary beside `path`, complete and synced, with
    the mode the file will have: an existing file's own, else what the umask allows."""
    check_destination(path, overwrite)
    path = Path(path)
    found = lookup(path)
    mode = stat.S_IMODE(found.st_mode) if found is not None else _new_file_mode()
    if isinstance(chunks, str | bytes | bytearray | memoryview):
        chunks = [chunks]
    try:
        fd, name = tempfile.mkstemp(prefix=".qtool-", suffix=".tmp", dir=path.parent)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write {path}: {os_reason(exc)}") from None
    staged = Staged(path, Path(name))
    _TEMPORARIES.add(staged.temporary)
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk.encode() if isinstance(chunk, str) else chunk)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
    except BaseException as exc:
        discard(staged)
        if isinstance(exc, OSError):
            raise UsageError(f"cannot write {path}: {os_reason(exc)}") from None
        raise
    return staged


class _Interrupts:
    """Signals that arrive while a group of renames runs wait until the group is done.

    Python runs signal handlers in the main thread whichever thread the signal hit, so the
    handlers (installed by the CLI) ask `defer_interrupt` first; blocking the signal in one
    thread would not do, numpy's threads would still take it.
    """

    depth = 0
    pending: int | None = None


def defer_interrupt(signum: int) -> bool:
    """For a signal handler: True when the signal was put off until the renames are done."""
    if _Interrupts.depth:
        _Interrupts.pending = _Interrupts.pending or signum
        return True
    return False


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    _Interrupts.depth += 1
    try:
        yield
    finally:
        _Interrupts.depth -= 1
        pending, _Interrupts.pending = _Interrupts.pending, None
        if pending is not None and not _Interrupts.depth:
            signal.raise_signal(pending)  # delivered now, to the same handler


def commit(*staged: Staged) -> None:
    """Rename staged files into place, in order; SIGINT/SIGTERM/SIGHUP wait until all are."""
    try:
        with _signals_deferred():
            for item in staged:
                os.replace(item.temporary, item.path)
                _TEMPORARIES.discard(item.temporary)
    except OSError as exc:
        discard(*staged)
        raise UsageError(
            f"cannot write {exc.filename2 or exc.filename}: {os_reason(exc)}"
        ) from None


def discard(*staged: Staged) -> None:
    """Delete the temporaries of staged files that will not be committed (errors ignored)."""
    for item in staged:
        with contextlib.suppress(OSError):
            item.temporary.unlink(missing_ok=True)
        _TEMPORARIES.discard(item.temporary)


def remove_temporaries() -> None:
    """Remove every temporary not yet renamed into place (an interrupted or failed run's)."""
    for temporary in list(_TEMPORARIES):
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
        _TEMPORARIES.discard(temporary)


def write_atomic(path: str | os.PathLike, chunks: Any, *, overwrite: bool = True) -> None:
    """Write `chunks` to `path` through a temporary file and a rename, so that readers never see
    a partial file and a failed write leaves nothing behind (and an existing file untouched)."""
    staged = stage(path, chunks, overwrite=overwrite)
    try:
        commit(staged)
    except BaseException:
        discard(staged)
        raise
