"""Chunks on threads: observers see exactly what one thread would show them, one call at a time."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from qtool.errors import UsageError
from qtool.model import load_model
from qtool.runtime import Engine
from qtool.runtime.parallel import (
    MAX_DEFAULT_THREADS,
    OrderedObservation,
    available_cores,
    engine_threads,
    run_chunks,
)
from tests.conftest import DATA, MODELS


def _samples(name: str, count: int) -> np.ndarray:
    with np.load(DATA / f"{name}_holdout.npz") as data:
        (values,) = data.values()
    return np.resize(values, (count, *values.shape[1:]))


class Recorder:
    """Records every call; fails if two calls ever overlap."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, tuple, bytes]] = []
        self.busy = threading.Lock()

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        assert self.busy.acquire(blocking=False), "observers called concurrently"
        try:
            time.sleep(0)  # let another thread run, were it able to call in
            self.calls.append((tensor, value.shape, value.tobytes()))
        finally:
            self.busy.release()


@pytest.mark.parametrize("name", ["cnn", "mixed_ops"])
def test_threads_change_nothing_observers_or_outputs_see(name: str) -> None:
    model = load_model(MODELS / f"{name}.tflite")
    samples = _samples(name, 23)  # 8 chunks of 3, the last one short
    runs = {}
    for threads in (1, 2, 4):
        recorder = Recorder()
        outputs = Engine(model, threads=threads).run([samples], [recorder], chunk=3)
        runs[threads] = (recorder.calls, [o.tobytes() for o in outputs])
    assert runs[1][0] and runs[2] == runs[1] and runs[4] == runs[1]
    tensors_per_chunk = len(runs[1][0]) // 8
    assert [shape[0] for _, shape, _ in runs[1][0][::tensors_per_chunk]] == [3] * 7 + [2]


def test_an_observer_error_stops_the_run_and_is_raised() -> None:
    model = load_model(MODELS / "cnn.tflite")
    seen = []

    def failing(tensor: int, value: np.ndarray) -> None:
        seen.append(tensor)
        if len(seen) == 25:
            raise ValueError("observer gave up")

    with pytest.raises(ValueError, match="observer gave up"):
        Engine(model, threads=2).run([_samples("cnn", 40)], [failing], chunk=2)
    assert len(seen) == 25  # nothing was delivered after the failure


def test_chunks_running_ahead_wait_their_turn() -> None:
    # Chunk 1 starts first; its values reach the observer only after chunk 0's, and with a
    # one-byte queue bound its second value waits for its turn instead of queueing.
    seen, events = [], []
    first_emitted = threading.Event()

    def work(k: int, order: OrderedObservation) -> int:
        if k == 0:
            assert first_emitted.wait(timeout=5)
        for t in range(3):
            order.emit(k, t, np.full(4, k, np.float32))
            events.append((k, t))
            if k == 1:
                first_emitted.set()
        return k

    results = run_chunks(
        2, work, [lambda t, v: seen.append((t, int(v[0])))], threads=2, max_pending_bytes=1
    )
    assert results == [0, 1]
    assert seen == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert events.index((1, 1)) > events.index((0, 2))  # it waited for chunk 0


def test_values_are_delivered_before_wait_observed_returns() -> None:
    delivered = []

    def work(k: int, order: OrderedObservation) -> None:
        order.emit(k, 0, np.array([k], np.float32))
        order.finish(k)
        order.wait_observed(k)
        assert k in delivered  # what the LiteRT engine relies on before reusing its buffers

    run_chunks(6, work, [lambda t, v: delivered.append(int(v[0]))], threads=3)
    assert delivered == list(range(6))


def test_thread_count_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("QTOOL_THREADS", raising=False)
    assert engine_threads() == min(available_cores(), MAX_DEFAULT_THREADS)
    monkeypatch.setenv("QTOOL_THREADS", "3")
    assert engine_threads() == 3
    assert Engine(load_model(MODELS / "mlp.tflite")).threads == 3
    monkeypatch.setenv("QTOOL_THREADS", "many")
    with pytest.raises(UsageError, match="QTOOL_THREADS"):
        engine_threads()
