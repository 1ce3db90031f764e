"""Timing shared by the benchmarks: the best of a few runs (the least disturbed by other load)."""

from __future__ import annotations

import time
from collections.abc import Callable

REPEATS = 3


def best_of(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    """The shortest wall time of `repeats` calls of `fn`, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)
