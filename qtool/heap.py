"""Keeping freed activation buffers in the process heap while the engine runs.

Every operator allocates its output, and numpy its temporaries, most of them megabytes: glibc
serves such sizes with fresh mmap()s and returns them on free(), so each pass over a chunk
page-faults its buffers in again. That was measured at 15-20% of the engine's time on small real
models, and much more on a loaded machine (a 4.6 MB im2col buffer taking 12 ms to fault in
instead of 0.3 ms to fill). During a run, `retained_heap` raises glibc's mmap and trim
thresholds so that freed buffers stay in the heap and the next chunk reuses them. When the last
concurrent run ends they drop to where glibc's own adaptive thresholds end up (32 MB for mmap,
twice that for trimming), not to the 128 KB they start at: setting a threshold switches the
adaptation off for good, and at 128 KB every later temporary of a megabyte or more was a fresh
mmap (quantize's statistics after a numpy-engine run: 183 -> 68 samples/s on face_detection).
Elsewhere than glibc it does nothing.

The thresholds are the whole process's, and glibc cannot give back its adaptive behaviour once
they are set: so they are only touched in a process that asked for it. The `qtool` program does
(`qtool.entry`); a program using qtool as a library keeps its allocator as it was unless it
calls `tune_heap_for_runs()` itself.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_ADAPTED_MMAP = 32 << 20  # DEFAULT_MMAP_THRESHOLD_MAX of 64-bit glibc (mallopt(3))
_ADAPTED_TRIM = 2 * _ADAPTED_MMAP  # glibc keeps trimming at twice the adapted mmap threshold
_RETAIN = 1 << 30  # allocations below this come from the heap, which never shrinks below it

_lock = threading.Lock()
_active = 0
_tuning_allowed = False


def tune_heap_for_runs() -> None:
    """Let engine runs raise glibc's heap thresholds in this process (see the module's text):
    faster calibration, at the price of a process-wide allocator setting that stays."""
    global _tuning_allowed
    _tuning_allowed = True


@functools.cache
def _load_libc():
    # Imported here: the qtool program opts in at start-up, before it knows whether any engine
    # will run (`qtool --help` loads no ctypes).
    import ctypes
    import ctypes.util
    import platform

    if platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


@functools.cache
def _load_mallopt():
    import ctypes

    libc = _load_libc()
    if libc is None:
        return None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        mallopt.restype = ctypes.c_int
    return mallopt


@contextmanager
def retained_heap() -> Iterator[None]:
    """Freed buffers stay in the heap while the block runs (where `tune_heap_for_runs` allowed
    it; otherwise nothing changes)."""
    global _active
    mallopt = _load_mallopt() if _tuning_allowed else None
    with _lock:
        if _active == 0 and mallopt is not None:
            mallopt(_M_MMAP_THRESHOLD, _RETAIN)
            mallopt(_M_TRIM_THRESHOLD, _RETAIN)
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and mallopt is not None:
                mallopt(_M_MMAP_THRESHOLD, _ADAPTED_MMAP)
                mallopt(_M_TRIM_THRESHOLD, _ADAPTED_TRIM)


def release_free_heap() -> None:
    """Give the heap's free pages back to the system (glibc's malloc_trim; elsewhere nothing),
    unless an engine run keeps them on purpose (`retained_heap`). Freed memory below glibc's
    mmap threshold stays in the heap: after calibration, XNNPACK's packed weights, a model's
    size (a 300 MB model then wrote its int8 form at 3.11x its size above the imports, 2.x
    once they went back)."""
    libc = _load_libc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return
    with _lock:
        if _active == 0:
            libc.malloc_trim(0)


_MADV_DONTNEED = 4  # Linux's value on every architecture


def drop_file_pages(path: str) -> None:
    """Drop this process's resident pages of every mapping of the file at `path` (glibc on
    Linux; elsewhere nothing). Pages of a file mapped read-only are cache: one read again is
    read again from the file, so only a file nobody rewrites meanwhile may be given."""
    libc = _load_libc()
    madvise = getattr(libc, "madvise", None)
    if madvise is None:
        return
    import ctypes

    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    try:
        with open("/proc/self/maps") as maps:
            spans = [line.split(None, 1)[0] for line in maps if _mapped_path(line) == path]
    except OSError:
        return
    for span in spans:
        start, end = (int(bound, 16) for bound in span.split("-"))
        madvise(start, end - start, _MADV_DONTNEED)


def _mapped_path(line: str) -> str:
    """The path a line of /proc/self/maps maps (empty for anonymous memory)."""
    fields = line.rstrip("\n").split(None, 5)
    return fields[5].removesuffix(" (deleted)") if len(fields) == 6 else ""
