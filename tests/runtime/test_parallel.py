"""Chunks on threads: observers see exactly what one thread would show them, one call at a time
(observers kept per tensor: each tensor's calls as one thread makes them, tensors at once)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from qtool.calibrate import MinMaxObserver, activation_tensors
from qtool.errors import UsageError
from qtool.model import load_model
from qtool.runtime import Engine
from qtool.runtime.parallel import (
    MAX_DEFAULT_THREADS,
    OrderedObservation,
    TensorOrderedObservation,
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


@pytest.mark.parametrize("apart", [False, True], ids=["serial order", "per tensor"])
def test_an_observer_error_stops_the_run_and_is_raised(apart: bool) -> None:
    # Both orderings (OrderedObservation, and TensorOrderedObservation for an observer that
    # keeps tensors apart) stop at the first failure.
    model = load_model(MODELS / "cnn.tflite")
    seen = []

    def failing(tensor: int, value: np.ndarray) -> None:
        seen.append(tensor)
        if len(seen) == 25:
            raise ValueError("observer gave up")

    failing.tensors_apart = apart
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


class TensorRecorder:
    """Records every call per tensor; fails if one tensor's calls ever overlap."""

    tensors_apart = True

    def __init__(self) -> None:
        self.calls: dict[int, list[bytes]] = {}
        self.busy: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        with self.lock:
            assert tensor not in self.busy, "one tensor observed twice at once"
            self.busy.add(tensor)
        time.sleep(0)  # let another thread call in, were it able to
        self.calls.setdefault(tensor, []).append(value.tobytes())
        with self.lock:
            self.busy.discard(tensor)


@pytest.mark.parametrize("name", ["cnn", "mixed_ops"])
def test_observers_kept_per_tensor_see_each_tensor_in_chunk_order(name: str) -> None:
    # On two threads each tensor's values still arrive chunk after chunk, as one thread shows
    # them, and the outputs are the same.
    model = load_model(MODELS / f"{name}.tflite")
    samples = _samples(name, 23)
    one = TensorRecorder()
    Engine(model, threads=1).run([samples], [one], chunk=3)
    two = TensorRecorder()
    outputs = Engine(model, threads=2).run([samples], [two], chunk=3)
    assert one.calls and two.calls == one.calls
    expected = Engine(model, threads=1).run([samples], chunk=3)
    assert all(np.array_equal(a, b) for a, b in zip(outputs, expected, strict=True))


def test_ranges_observed_per_tensor_are_the_serial_ones() -> None:
    model = load_model(MODELS / "cnn.tflite")
    samples = _samples("cnn", 40)
    ranges = []
    for threads in (1, 2):
        observer = MinMaxObserver(activation_tensors(model))
        Engine(model, threads=threads).run([samples], [observer], chunk=4)
        ranges.append(observer.ranges())
    assert ranges[0] == ranges[1]


def test_different_tensors_are_observed_at_once() -> None:
    # Chunk 0 emits tensor 1, then tensor 0, whose observer waits for a second caller; chunk 1
    # emits tensor 1 once chunk 0's was observed: it is in turn, so its own thread observes it
    # while tensor 0's call is still running. Either call alone would time out the barrier.
    both_inside = threading.Barrier(2, timeout=10)
    first_observed = threading.Event()

    def observe(tensor: int, value: np.ndarray) -> None:
        if tensor == 1 and value[0] == 0:
            first_observed.set()
        else:
            both_inside.wait()

    def work(k: int, order: OrderedObservation) -> None:
        if k == 0:
            order.emit(0, 1, np.array([0], np.float32))
            order.emit(0, 0, np.array([0], np.float32))
        else:
            assert first_observed.wait(timeout=10)
            order.emit(1, 1, np.array([1], np.float32))

    run_chunks(2, work, [observe], threads=2, by_tensor=True)


def test_per_tensor_order_waits_for_chunks_that_never_produce_a_tensor() -> None:
    # Chunk 0 never emits tensor 1: chunk 1's value of it is observed once chunk 0 finished,
    # and with a one-byte queue bound the lowest unfinished chunk never waits.
    seen = []
    order = TensorOrderedObservation([lambda t, v: seen.append((t, int(v[0])))], 3, 1)
    order.emit(1, 1, np.array([1], np.float32))
    order.emit(0, 0, np.array([0], np.float32))
    assert seen == [(0, 0)]
    order.finish(0)
    assert seen == [(0, 0), (1, 1)]
    order.emit(2, 1, np.array([2], np.float32))
    order.finish(1)
    order.finish(2)
    assert seen == [(0, 0), (1, 1), (1, 2)]
