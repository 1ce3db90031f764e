"""The engine's heap setting: only in a process that asked for it (the qtool program), and it
outlives its run without slowing what comes after."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

AFTER_A_RUN = """
import resource
import numpy as np
from qtool.heap import retained_heap, tune_heap_for_runs
tune_heap_for_runs()  # as the qtool program does
with retained_heap():
    pass
np.ones(1 << 20, np.float32)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    np.ones(1 << 20, np.float32)  # 4 MB, freed at once: a temporary
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="qtool tunes the heap with glibc's mallopt(3) only; other C libraries keep their own policy",
)
def test_megabyte_temporaries_after_a_run_come_from_the_heap() -> None:
    # Thresholds back at 128 KB made each 4 MB temporary a fresh mmap: ~1,000 page faults each.
    out = subprocess.run(
        [sys.executable, "-c", AFTER_A_RUN], capture_output=True, text=True, check=True
    )
    assert int(out.stdout) < 1000  # 20 temporaries, not 20,000 faults


def test_a_library_user_keeps_the_allocator_as_it_was(monkeypatch) -> None:
    """Importing qtool and running its engine changes no process-wide allocator setting unless
    the program opted in (the qtool program does, in its entry point)."""
    from qtool import heap

    calls = []
    monkeypatch.setattr(heap, "_tuning_allowed", False)
    monkeypatch.setattr(heap, "_load_mallopt", lambda: lambda *args: calls.append(args))
    with heap.retained_heap():
        pass
    assert calls == []
    monkeypatch.setattr(heap, "_tuning_allowed", True)
    with heap.retained_heap():
        pass
    assert [what for what, _ in calls] == [heap._M_MMAP_THRESHOLD, heap._M_TRIM_THRESHOLD] * 2


FREED_INSIDE_THE_HEAP = """
import numpy as np
from qtool.heap import release_free_heap, retained_heap, tune_heap_for_runs

def resident_mib():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

tune_heap_for_runs()
with retained_heap():  # 1 MB blocks from the heap, as after a run that raised the thresholds
    blocks = [np.ones(1 << 18, np.float32) for _ in range(48)]
    pinned = np.ones(1 << 18, np.float32)  # above them: the heap's top is not free
    del blocks
    held = resident_mib()
    release_free_heap()  # a run is going on: its freed blocks stay for the next chunk
    kept = resident_mib()
release_free_heap()
print(round(held - kept), round(kept - resident_mib()))
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc",
    reason="qtool hands freed heap memory back through glibc's malloc_trim(3); another C "
    "library (musl, say) has no such call, so a run there keeps its freed heap until it ends "
    "(the process's peak is the same) and there is nothing to check",
)
def test_freed_heap_goes_back_to_the_system_between_runs_only() -> None:
    out = subprocess.run(
        [sys.executable, "-c", FREED_INSIDE_THE_HEAP], capture_output=True, text=True, check=True
    )
    during, after = (int(x) for x in out.stdout.split())
    assert during == 0 and after >= 40  # 48 MB freed below a live block
