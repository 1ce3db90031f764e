"""Standard output that cannot take the command's output, told apart by why.

- Nobody reads it: the reader went away (`qtool ... | head`, EPIPE) or the descriptor is closed
  (`qtool ... >&-`, EBADF, or Python started without one). The command ends as SIGPIPE ends
  other programs: quietly, exit 141 (the guard's BrokenPipeError handling).
- It cannot hold it: a full disk or a quota (ENOSPC, EDQUOT, EFBIG), an I/O error. The output is
  lost, which a CI job must not take for success: one line `qtool: error: cannot write standard
  output: ...` and exit 2 (`OutputLost`).
"""

from __future__ import annotations

import contextlib
import errno
import sys
from collections.abc import Iterator
from typing import Any


class OutputLost(OSError):
    """Standard output refused the command's output for a reason other than a missing reader."""


def _translated(exc: OSError) -> OSError:
    if isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.EBADF):
        return BrokenPipeError(errno.EPIPE, "nobody reads standard output")
    return OutputLost(exc.errno, exc.strerror or str(exc))


class GuardedStdout:
    """Wraps sys.stdout (None when the descriptor was closed at start): failed writes raise
    BrokenPipeError or OutputLost, everything else is the stream's own."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def write(self, text: Any) -> int:
        if self._stream is None:
            if not isinstance(text, str):  # what a text stream says (click probes with b"")
                raise TypeError(f"write() argument must be str, not {type(text).__name__}")
            if not text:
                return 0
            raise BrokenPipeError(errno.EPIPE, "standard output is closed")
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise _translated(exc) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as exc:
            raise _translated(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout() -> Iterator[None]:
    """sys.stdout is a GuardedStdout meanwhile."""
    original = sys.stdout
    sys.stdout = GuardedStdout(original)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = original
