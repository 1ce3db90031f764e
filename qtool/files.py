"""Reading and writing user-named paths without being turned against the machine.

Reading: only regular files are read; a FIFO, a device, a socket or a directory where a file is
expected is refused before anything blocks on it (files are opened non-blocking, then checked).
Failures are OSErrors; `os_reason` words them to follow the path in a one-line error.

Inputs: every file a run reads is recorded (`InputFiles`, by device and inode, so that `..`,
symbolic and hard links all lead to the same record); no output of the run may replace one.
`open_regular` records what it opens in the recorders active at the time (`recording_inputs`:
the CLI keeps one per command, the API one per call).

Writing: every file is first written whole to a temporary beside its destination (`stage`), and
only put in place once everything a command writes is complete (`commit`, with SIGINT, SIGTERM
and SIGHUP held back so that a group of renames is never cut in half). Without `overwrite` the
last step is a hard link, which fails when the name exists: two runs never both create the same
output. A file gets the mode a plain write would give it (the umask's), or keeps an existing
file's mode when it replaces it. Temporaries still on disk when a run ends are removed
(`remove_temporaries`, which the CLI calls on every exit, interrupted or not); only SIGKILL can
leave one (`.qtool-*.tmp`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
from collections.abc import Iterable, Iterator
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
    """Open a regular file for reading (recorded as an input of the run); anything else raises
    (never blocks on a FIFO)."""
    if str(path) == "":
        raise FileNotFoundError(errno.ENOENT, "no such file (empty path)")
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        mode = info.st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(kind_of(mode))
        note_input(path, info)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# =========================================================================== inputs


class InputFiles:
    """The files a run reads, by device and inode: an output that would replace one of them is
    refused, whichever spelling reaches it (`..`, a symbolic link, a hard link)."""

    def __init__(self) -> None:
        self._files: dict[tuple[int, int], str] = {}

    def add(self, path: str | os.PathLike, info: os.stat_result | None = None) -> None:
        """Record `path` (looked up now unless its status is given); nothing when it is gone."""
        if info is None:
            try:
                info = lookup(path)
            except (OSError, ValueError):
                return
            if info is None:
                return
        self._files.setdefault((info.st_dev, info.st_ino), os.fspath(path))

    def replaced_by(self, output: str | os.PathLike) -> str | None:
        """The input that writing `output` would replace (as it was named), or None."""
        try:
            info = lookup(output)
        except (OSError, ValueError):
            return None  # what cannot be looked up cannot be written: the writer says why
        if info is None:
            return None
        return self._files.get((info.st_dev, info.st_ino))

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike]) -> InputFiles:
        inputs = cls()
        for path in paths:
            inputs.add(path)
        return inputs


# The recorders of the runs in progress (the CLI's command, an API call): every file opened
# with open_regular is recorded in each. A list, not a context variable: reads may happen on
# the engine's threads.
_RECORDERS: list[InputFiles] = []


@contextlib.contextmanager
def recording_inputs(inputs: InputFiles | None = None) -> Iterator[InputFiles]:
    """Record every file read meanwhile in `inputs` (a new record unless given)."""
    recorder = InputFiles() if inputs is None else inputs
    _RECORDERS.append(recorder)
    try:
        yield recorder
    finally:
        _RECORDERS.remove(recorder)


def note_input(path: str | os.PathLike, info: os.stat_result | None = None) -> None:
    """Record a file the run reads (opened elsewhere than open_regular: a Python module)."""
    for recorder in _RECORDERS:
        recorder.add(path, info)


def refuse_input(output: str | os.PathLike, inputs: InputFiles | None = None) -> None:
    """Raise UsageError when writing `output` would replace a file this run reads (one recorded
    so far, or one of `inputs`)."""
    for recorder in (*_RECORDERS, *([inputs] if inputs is not None else [])):
        source = recorder.replaced_by(output)
        if source is not None:
            raise UsageError(f"{os.fspath(output)}: refusing to overwrite the input file {source}")


def same_destination(first: str | os.PathLike, second: str | os.PathLike) -> bool:
    """Whether two output paths name one file (after `..` and symbolic links)."""
    try:
        return os.path.realpath(first) == os.path.realpath(second)
    except (OSError, ValueError):
        return False


def refuse_shared_destinations(*paths: str | os.PathLike, what: str) -> None:
    """UsageError when two of the outputs of one run are the same file."""
    for i, first in enumerate(paths):
        if any(same_destination(first, second) for second in paths[i + 1 :]):
            raise UsageError(f"{what} must be written to different files")


# =========================================================================== writing

# Temporaries written but neither renamed into place nor removed yet: what an interrupted run
# must remove (the CLI does, on any exit).
_TEMPORARIES: set[Path] = set()


@dataclass(frozen=True)
class Staged:
    """A complete file in a temporary beside its destination, not yet put in place."""

    path: Path
    temporary: Path
    overwrite: bool = True  # False: the destination must not exist when the file is put there
    inputs: InputFiles | None = None  # files the write must not replace, besides the run's


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


def check_destination(
    path: str | os.PathLike, overwrite: bool, inputs: InputFiles | None = None
) -> None:
    """UsageError unless a file can be written at `path`: a place to write, no existing file
    unless `overwrite`, and never a file the run reads (recorded, or one of `inputs`)."""
    refuse_input(path, inputs)
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


def stage(
    path: str | os.PathLike,
    chunks: Any,
    *,
    overwrite: bool = True,
    inputs: InputFiles | None = None,
) -> Staged:
    """Write `chunks` (bytes-like or str) to a temporary beside `path`, complete and synced, with
    the mode the file will have: an existing file's own, else what the umask allows."""
    check_destination(path, overwrite, inputs)
    path = Path(path)
    found = lookup(path)
    mode = stat.S_IMODE(found.st_mode) if found is not None else _new_file_mode()
    if isinstance(chunks, str | bytes | bytearray | memoryview):
        chunks = [chunks]
    try:
        fd, name = tempfile.mkstemp(prefix=".qtool-", suffix=".tmp", dir=path.parent)
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot write {path}: {os_reason(exc)}") from None
    staged = Staged(path, Path(name), overwrite, inputs)
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
    """Put staged files in place, in order; SIGINT/SIGTERM/SIGHUP wait until all are. A file
    staged without `overwrite` is linked to its name, which fails if the name exists by now
    (another run made it): then the files this call already created are removed again."""
    created: list[Path] = []
    try:
        with _signals_deferred():
            for item in staged:
                refuse_input(item.path, item.inputs)  # a file read since it was staged
                if item.overwrite:
                    os.replace(item.temporary, item.path)
                else:
                    _create_exclusively(item)
                    created.append(item.path)
                _TEMPORARIES.discard(item.temporary)
    except FileExistsError as exc:
        _undo(created)
        discard(*staged)
        raise UsageError(
            f"{exc.filename}: already exists (use `force=True` to replace it)"
        ) from None
    except OSError as exc:
        _undo(created)
        discard(*staged)
        raise UsageError(
            f"cannot write {exc.filename2 or exc.filename}: {os_reason(exc)}"
        ) from None
    except BaseException:
        _undo(created)
        discard(*staged)
        raise


def _create_exclusively(item: Staged) -> None:
    """The temporary under its final name, only if that name is free (atomically: a hard link);
    where the file system has no hard links, a placeholder claimed with O_EXCL, then replaced."""
    try:
        os.link(item.temporary, item.path)
    except FileExistsError as exc:
        raise FileExistsError(exc.errno, exc.strerror, os.fspath(item.path)) from None
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        try:
            os.close(os.open(item.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError as exc:
            raise FileExistsError(exc.errno, exc.strerror, os.fspath(item.path)) from None
        os.replace(item.temporary, item.path)
        return
    os.unlink(item.temporary)


def _undo(created: list[Path]) -> None:
    for path in created:
        with contextlib.suppress(OSError):
            path.unlink()


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


def write_atomic(
    path: str | os.PathLike,
    chunks: Any,
    *,
    overwrite: bool = True,
    inputs: InputFiles | None = None,
) -> None:
    """Write `chunks` to `path` through a temporary file and a rename, so that readers never see
    a partial file and a failed write leaves nothing behind (and an existing file untouched)."""
    staged = stage(path, chunks, overwrite=overwrite, inputs=inputs)
    try:
        commit(staged)
    except BaseException:
        discard(staged)
        raise
