"""Candidate int8 models run in LiteRT, in child processes that may die without taking qtool.

The auto choice and the estimate score plans by their outputs on held-out samples. Running
the planned int8 model in LiteRT measures them exactly (the simulation approximates kernel
rounding) and several times faster than the simulation, but LiteRT aborts the whole process on
some int8 models (a TFLITE_CHECK inside a kernel), and candidates are not audited yet. So they
run in child processes (`litert_child.py`, started on first use and reused, stopped at exit):
one per core, up to two, each running its share of the samples (LiteRT's int8 kernels gain
nothing from a second thread on an int8 palm_detection_lite, two processes halve its time). A
model a child refuses or dies on gets None, and the caller simulates it instead.
"""

from __future__ import annotations

import atexit
import itertools
import pickle
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from qtool.model import Model
from qtool.model.temporary import TemporaryModelFile, model_for_litert
from qtool.quantize.litert_child import _read, _write
from qtool.runtime.parallel import available_cores
from qtool.runtime.state import keeps_state

_CHILD = Path(__file__).with_name("litert_child.py")
MAX_CHILDREN = 2


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
        self.held: tuple[Sequence[np.ndarray], slice] | None = None  # the samples it holds

    def send(
        self,
        model: bytes | TemporaryModelFile,
        inputs: Sequence[np.ndarray],
        share: slice,
        leading_one: bool,
    ) -> None:
        """Ask for `model`'s outputs on the `share` of `inputs`, which travel only when they
        are not the ones the child already holds (every candidate of a quantization runs on
        the same samples); a model in a file travels as its path."""
        held, self.held = self.held, None  # unknown until the child has read the request
        fresh = held is None or held[0] is not inputs or held[1] != share
        samples = [np.asarray(x[share]) for x in inputs] if fresh else None
        sent = model.path if isinstance(model, TemporaryModelFile) else pickle.PickleBuffer(model)
        _write(self.process.stdin, (sent, samples, leading_one))
        self.held = (inputs, share)

    def receive(self) -> object | None:
        return _read(self.process.stdout)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            stream.close()


_lock = threading.Lock()
_workers: list[_Worker] = []


def _shares(samples: int, sequence: bool = False) -> list[slice]:
    """Consecutive shares of the samples, one per child (at most one per core); one share for
    a `sequence` (the samples of a stateful model, each continuing from the state the last
    left)."""
    children = 1 if sequence else max(1, min(MAX_CHILDREN, available_cores(), samples))
    bounds = [samples * k // children for k in range(children + 1)]
    return [slice(start, stop) for start, stop in itertools.pairwise(bounds)]


def start_children() -> None:
    """Start every child ahead of the first model, so that their start-up (importing LiteRT)
    overlaps the caller's calibration."""
    with _lock:
        try:
            while len(_workers) < len(_shares(MAX_CHILDREN)):
                _workers.append(_Worker())
        except OSError:  # no child can start: each model is simulated instead, in its turn
            return


def litert_outputs(
    model: bytes | TemporaryModelFile,
    inputs: Sequence[np.ndarray],
    leading_one: bool,
    sequence: bool = False,
) -> list[np.ndarray] | None:
    """The model's outputs (samples stacked) on `inputs` (samples along axis 0, fed one at a
    time, with a leading 1 when `leading_one`), run by LiteRT; None when it cannot. `model`:
    its bytes or, for a large one, a file the children map (`model_for_litert`). A
    `sequence` runs in one child, its samples in order on one interpreter."""
    shares = _shares(int(inputs[0].shape[0]), sequence)
    with _lock:
        try:
            while len(_workers) < len(shares):
                _workers.append(_Worker())
            # Every request goes out before any reply is read: the children run side by side.
            busy = _workers[: len(shares)]
            for worker, share in zip(busy, shares, strict=True):
                worker.send(model, inputs, share, leading_one)
            replies = [worker.receive() for worker in busy]
        except (OSError, ValueError, EOFError, pickle.UnpicklingError):  # a child is gone
            replies = [None]
        except BaseException:  # interrupted mid-reply: the pipes are out of step, start afresh
            _stop()
            raise
        if any(reply is None for reply in replies):
            _stop()
            return None
    if any(kind != "outputs" for kind, _ in replies):
        return None
    parts = [found for _, found in replies]
    return [np.concatenate(outputs) for outputs in zip(*parts, strict=True)]


class Pending:
    """Outputs being computed by the children while the caller goes on (`submit`)."""

    def __init__(
        self,
        model: bytes | TemporaryModelFile,
        inputs: Sequence[np.ndarray],
        leading_one: bool,
        sequence: bool,
    ) -> None:
        self._outcome: list[np.ndarray] | BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(model, inputs, leading_one, sequence), daemon=True
        )
        self._thread.start()

    def _run(
        self,
        model: bytes | TemporaryModelFile,
        inputs: Sequence[np.ndarray],
        leading_one: bool,
        sequence: bool,
    ) -> None:
        try:
            self._outcome = litert_outputs(model, inputs, leading_one, sequence)
        except BaseException as exc:  # handed to whoever waits for the result
            self._outcome = exc

    def result(self) -> list[np.ndarray] | None:
        """What `litert_outputs` returns for the submitted model (its exception re-raised)."""
        self._thread.join()
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome


def submit(
    model: bytes | TemporaryModelFile,
    inputs: Sequence[np.ndarray],
    leading_one: bool,
    sequence: bool = False,
) -> Pending:
    """`litert_outputs` in the background: the children run the model while the caller
    computes (on the development machine, calibration leaves a core idle while it observes:
    a candidate run beside it costs the calibration nothing, measured)."""
    return Pending(model, inputs, leading_one, sequence)


def submit_model(
    model: Model,
    inputs: Sequence[np.ndarray],
    blob: bytes | TemporaryModelFile | None = None,
) -> Pending:
    """`submit` for subgraph 0 of `model`, fed its way (with a leading 1 where its inputs
    declare one; as one sequence when it keeps state); `blob`: what `model_for_litert` made of
    the model, where the caller has it already."""
    return submit(
        model_for_litert(model) if blob is None else blob,
        inputs,
        model.subgraphs[0].inputs_lead_with_one(),
        keeps_state(model, 0),
    )


def _stop() -> None:
    while _workers:
        _workers.pop().stop()


atexit.register(_stop)
