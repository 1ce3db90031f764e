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

import os
import signal

HANDLED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")  # the ones the guard handles too


def _stop(signum: int, frame: object) -> None:
    os.write(2, b"qtool: interrupted\n")
    os._exit(128 + signum)


def main() -> None:
    for name in HANDLED_SIGNALS:
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), _stop)
    from qtool.cli import main as run

    run()
