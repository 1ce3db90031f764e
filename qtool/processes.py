"""The cores this process may use, and LiteRT's child processes started as early as can be.

The auto choice and the estimate run candidate int8 models in LiteRT child processes
(`qtool.quantize.litert_worker`). A child imports numpy and LiteRT (about 0.1 s of CPU) before
it answers anything. Started when calibration begins, those imports competed with it for both
cores; the `qtool` program starts them instead before its own imports (`start_early`), which
run on one core for about 0.3 s while the other idles. This module imports nothing heavy, so
the entry point can use it first. A child started early and never used ends with this process:
its stdin closes.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quantize", "litert_child.py")
MAX_CHILDREN = 2  # one per core, up to two (litert_worker says why)

_lock = threading.Lock()
_early: list[subprocess.Popen] = []


def available_cores() -> int:
    """The cores this process may run on (its affinity, where the system tells)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def children_wanted() -> int:
    """How many LiteRT children a run of many samples uses: one per core, up to MAX_CHILDREN."""
    return max(1, min(MAX_CHILDREN, available_cores()))


def start_child() -> subprocess.Popen:
    """A new LiteRT child process (OSError when none can start). -I: it imports numpy and
    LiteRT from this interpreter's environment, never a module of the current directory."""
    return subprocess.Popen(
        [sys.executable, "-I", CHILD],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def start_early() -> None:
    """Start the children a quantization will use, where LiteRT is installed (never raises:
    a child that cannot start now is tried again when needed)."""
    if importlib.util.find_spec("ai_edge_litert") is None:
        return
    with _lock:
        try:
            while len(_early) < children_wanted():
                _early.append(start_child())
        except OSError:
            return


def take_child() -> subprocess.Popen:
    """A child started early, if one is left; else a new one."""
    with _lock:
        if _early:
            return _early.pop(0)
    return start_child()
