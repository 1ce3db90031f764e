"""The `qtool` program's entry point (`python -m qtool` too): signals are handled from the
first instant.

The command line's guard (`qtool.cli.guard`) turns signals into one line and an exit code
while a command runs, but importing the command line takes tens of milliseconds first: a
SIGINT then was a KeyboardInterrupt traceback (found by the fuzz campaign's process cases).
Until the guard takes over, a signal ends the program at once, with one line: nothing has been
written yet. The handlers are installed here, not on import of `qtool.cli`, so that programs
importing qtool keep their own.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys

from qtool.signals import HANDLED_SIGNALS  # the ones the guard handles too


def _stop(signum: int, frame: object) -> None:
    os.write(2, b"qtool: interrupted\n")
    os._exit(128 + signum)


def main() -> None:
    """Run the `qtool` command line: signal handlers first, then the CLI, exiting with its
    status."""
    for name in HANDLED_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _stop)
    # Before numpy loads OpenBLAS (a user's own setting stands): qtool's engines and LiteRT take
    # the cores, the numpy engine runs each product on one thread (5x faster than two on a
    # 2-core machine, bench/speed.py), and an idle OpenBLAS thread spins after any product:
    # 12% of `qtool quantize`'s CPU on pose_landmark_full (perf), its LiteRT children's too.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from qtool.cli import main as run
    from qtool.heap import tune_heap_for_runs

    tune_heap_for_runs()  # this process is qtool's own: its allocator may be tuned

    try:
        run()
    except SystemExit as done:
        _exit_now(done.code)
    _exit_now(0)


def _exit_now(code: object) -> None:
    """End the process as Python's exit would, without its last step.

    That step frees every object one by one: 80 ms after a quantization of pose_detection (the
    heap of retained activation buffers, thousands of arrays), 4% of the command. The operating
    system frees the memory at once. The exit handlers (LiteRT's children, temporary files) and
    buffered output go first, as they would.
    """
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # A reader that has gone: the status already says so. None: the descriptor was closed.
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    os._exit(status)
