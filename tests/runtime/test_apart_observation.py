"""Observers that keep statistics tensor by tensor (`tensors_apart`) see a LiteRT chunk's tensors
on several threads at once: each tensor's values still arrive one call at a time, in chunk
order, and the statistics are those of one thread."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import numpy as np
import pytest

from qtool.calibrate import activation_tensors
from qtool.calibrate.statistics import new_subgraph_statistics
from qtool.model import load_model
from qtool.runtime.litert import XnnpackRunner
from qtool.runtime.parallel import ApartObservation, spread_by_size
from tests.conftest import DATA, MODELS


def _samples(name: str, count: int) -> np.ndarray:
    with np.load(DATA / f"{name}_holdout.npz") as data:
        (values,) = data.values()
    return np.resize(values, (count, *values.shape[1:]))


class PerTensor:
    """Records each tensor's values and the threads that delivered them; fails if two calls
    for one tensor ever overlap."""

    def __init__(self, apart: bool) -> None:
        self.tensors_apart = apart
        self.values: dict[int, list[bytes]] = defaultdict(list)
        self.threads: set[str] = set()
        self.busy: set[int] = set()
        self.lock = threading.Lock()
        self.overlaps = 0  # calls for different tensors running at once

    def __call__(self, tensor: int, value: np.ndarray) -> None:
        with self.lock:
            assert tensor not in self.busy, "one tensor observed twice at once"
            self.overlaps += bool(self.busy)
            self.busy.add(tensor)
            self.threads.add(threading.current_thread().name)
        time.sleep(0.001)  # let the other thread call in, were it able to
        self.values[tensor].append(value.tobytes())
        with self.lock:
            self.busy.discard(tensor)


def _run(name: str, observers, monkeypatch, threads: str = "2") -> None:
    monkeypatch.setenv("QTOOL_THREADS", threads)
    model = load_model(MODELS / f"{name}.tflite")
    runner = XnnpackRunner(model, activation_tensors(model))
    runner.batch = 3  # several chunks
    runner.run([_samples(name, 10)], observers)


@pytest.mark.parametrize("name", ["cnn", "mixed_ops"])
def test_tensors_observed_apart_arrive_in_chunk_order_as_on_one_thread(
    name: str, monkeypatch
) -> None:
    alone = PerTensor(apart=False)
    _run(name, [alone], monkeypatch)
    apart = PerTensor(apart=True)
    _run(name, [apart], monkeypatch)
    assert dict(apart.values) == dict(alone.values)
    assert alone.overlaps == 0 and len(alone.threads) == 1
    assert len(apart.threads) == 2 and apart.overlaps > 0


def test_statistics_observed_apart_are_those_of_one_thread(monkeypatch) -> None:
    model = load_model(MODELS / "cnn.tflite")
    tensors = activation_tensors(model)
    found = []
    for threads in ("1", "2"):
        statistics = new_subgraph_statistics(model, 0, tensors, True)
        _run("cnn", [statistics], monkeypatch, threads)
        statistics.flush()
        found.append(
            (
                {
                    t: (h.min, h.max, h.counts.tobytes())
                    for t, h in statistics.histograms.histograms.items()
                },
                statistics.means.state(),
            )
        )
    assert found[0] == found[1]


def test_a_failure_on_a_helper_thread_is_raised_after_the_chunk() -> None:
    seen = []

    def observer(tensor: int, value: np.ndarray) -> None:
        seen.append(tensor)
        if tensor == 2:
            raise ValueError("no room for tensor 2")

    with (
        ApartObservation([observer], [[0, 1], [2, 3]]) as apart,
        pytest.raises(ValueError, match="tensor 2"),
    ):
        apart.observe({t: np.zeros(1) for t in range(4)})
    assert sorted(seen) == [0, 1, 2]  # the first group finished; the helper stopped at 2


def test_groups_are_about_equal_in_size() -> None:
    sizes = {0: 100, 1: 60, 2: 50, 3: 40, 4: 10, 5: 10}
    groups = spread_by_size(sizes, 2)
    assert sorted(t for g in groups for t in g) == list(sizes)
    assert [sum(sizes[t] for t in g) for g in groups] == [140, 130]
    assert spread_by_size({}, 2) == [[], []]


def test_overlapped_parts_are_observed_as_one_interpreter_would(monkeypatch) -> None:
    """Two interpreters in turn (the next part runs while the last is observed) give the
    statistics of one interpreter observing each part before running the next."""
    monkeypatch.setenv("QTOOL_THREADS", "2")
    model = load_model(MODELS / "cnn.tflite")
    tensors = activation_tensors(model)
    found, interpreters = [], []
    for overlap in (False, True):
        runner = XnnpackRunner(model, tensors)
        runner.batch = 3
        runner._overlap = overlap
        statistics = new_subgraph_statistics(model, 0, tensors, True)
        runner.run([_samples("cnn", 10)], [statistics])
        statistics.flush()
        found.append(
            {
                t: (h.min, h.max, h.counts.tobytes())
                for t, h in statistics.histograms.histograms.items()
            }
        )
        interpreters.append(sum(len(free) for free in runner._free.values()))
    assert found[0] == found[1]
    assert interpreters[1] > interpreters[0]  # a second interpreter took every other part
