"""Candidate int8 models run in LiteRT, in a child process that may die without taking qtool.

The auto choice and the estimate score plans by their outputs on held-out samples. Running
the planned int8 model in LiteRT measures them exactly (the simulation approximates kernel
rounding) and several times faster than the simulation, but LiteRT aborts the whole process on
some int8 models (a TFLITE_CHECK inside a kernel), and candidates are not audited yet. So they
run in one child process (`litert_child.py`, started on first use and reused, stopped at exit);
a model the child refuses or dies on gets None, and the caller simulates it instead.
"""

from __future__ import annotations

import atexit
import pickle
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qtool.quantize.litert_child import _read, _write

_CHILD = Path(__file__).with_name("litert_child.py")


class _Worker:
    def __init__(self) -> None:
        # -I: the child imports numpy and LiteRT from this interpreter's environment, never a
        # module of the current directory.
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(_CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.inputs: Sequence[np.ndarray] | None = None  # the inputs the child holds

    def call(self, model: bytes, inputs: Sequence[np.ndarray], leading_one: bool) -> object:
        """The child's reply for `model` on `inputs`, which travel only when they are not the
        ones it already holds (every candidate of a quantization runs on the same samples)."""
        fresh = inputs is not self.inputs
        self.inputs = None  # unknown until the child has read the request
        _write(
            self.process.stdin,
            (model, [np.asarray(x) for x in inputs] if fresh else None, leading_one),
        )
        self.inputs = inputs
        return _read(self.process.stdout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()


_lock = threading.Lock()
_worker: _Worker | None = None


def litert_outputs(
    model: bytes, inputs: Sequence[np.ndarray], leading_one: bool
) -> list[np.ndarray] | None:
    """The model's outputs (samples stacked) on `inputs` (samples along axis 0, fed one at a
    time, with a leading 1 when `leading_one`), run by LiteRT; None when it cannot."""
    global _worker
    with _lock:
        try:
            if _worker is None:
                _worker = _Worker()
            reply = _worker.call(model, inputs, leading_one)
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # the child is gone
            reply = None
        except BaseException:  # interrupted mid-reply: the pipe is out of step, start afresh
            _stop()
            raise
        if reply is None:
            _stop()
            return None
    kind, found = reply
    return found if kind == "outputs" else None


def _stop() -> None:
    global _worker
    if _worker is not None:
        _worker.stop()
        _worker = None


atexit.register(_stop)
