"""Histogram and mean observers: shards merge bit for bit to one run, in any order, via JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtool.calibrate.observers import HistogramObserver, MeanObserver, MinMaxObserver

SAMPLE = (3, 5)  # one sample of the observed tensor
VALUES = st.floats(-1e4, 1e4, allow_nan=False, width=32)


def samples(count_min: int = 2):
    return hnp.arrays(
        np.float32, st.tuples(st.integers(count_min, 12), *map(st.just, SAMPLE)), elements=VALUES
    )


def shards_of(values: np.ndarray, data) -> list[np.ndarray]:
    cuts = sorted(data.draw(st.lists(st.integers(1, len(values) - 1), max_size=4, unique=True)))
    parts = np.split(values, cuts)
    return [parts[i] for i in data.draw(st.permutations(range(len(parts))))]


def travelled(observer):
    """The observer as another process would receive it."""
    return type(observer).from_state(json.loads(json.dumps(observer.state())))


@settings(deadline=None, max_examples=40)
@given(samples(), st.data())
def test_mean_shards_merge_bit_for_bit_in_any_order(values: np.ndarray, data) -> None:
    single = MeanObserver([4], {4: SAMPLE})
    single(4, values)
    merged = MeanObserver([4], {4: SAMPLE})
    for part in shards_of(values, data):
        shard = MeanObserver([4], {4: SAMPLE})
        for sample in np.split(part, len(part)):  # chunking inside a shard does not matter
            shard(4, sample)
        merged.merge(travelled(shard))
    assert merged.counts == single.counts == {4: len(values)}
    assert np.array_equal(merged.sums[4], single.sums[4])
    mean = merged.mean(4)
    assert mean.tobytes() == single.mean(4).tobytes()
    assert mean.shape == SAMPLE
    exact = values.astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(mean, exact, rtol=1e-6, atol=MeanObserver.RESOLUTION)


@pytest.mark.parametrize("known_magnitude", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_mean_sums_are_the_exact_fixed_point_integers(dtype, known_magnitude: bool) -> None:
    rng = np.random.default_rng(4)
    magnitudes = rng.choice([1e-9, 6e-8, 1.0, 3e4, 5e6], size=(50, 6))
    largest = float(np.finfo(dtype).max) / 8
    values = np.clip(rng.standard_normal((50, 6)) * magnitudes, -largest, largest).astype(dtype)
    values[0, :3] = [np.inf, -np.inf, 2.0**-25]  # clipped; a tie rounded to even
    observer = MeanObserver([0], {0: (6,)})
    # The finite extremes, as a histogram reports them: the infinities are not within them.
    finite = values[np.isfinite(values)].astype(np.float64)
    observer(0, values, float(np.abs(finite).max()) if known_magnitude else None)
    units = np.rint(values.astype(np.float64) / MeanObserver.RESOLUTION)
    limit = 2.0**22 / MeanObserver.RESOLUTION
    exact = [sum(int(u) for u in column) for column in np.clip(units, -limit, limit).T]
    assert observer.sums[0].tolist() == exact


@settings(deadline=None, max_examples=40)
@given(samples(), st.data())
def test_histogram_shards_merge_exactly_in_any_order(values: np.ndarray, data) -> None:
    elements = {4: int(np.prod(SAMPLE))}
    single = HistogramObserver([4], elements, {4: SAMPLE[-1]})
    single(4, values)
    merged = HistogramObserver([4], elements, {4: SAMPLE[-1]})
    for part in shards_of(values, data):
        shard = HistogramObserver([4], elements, {4: SAMPLE[-1]})
        shard(4, part)
        merged.merge(travelled(shard))
    assert merged.state() == single.state()
    assert merged.ranges() == {4: (float(values.min()), float(values.max()))}


def test_mean_observer_ignores_other_tensors_and_non_finite_values() -> None:
    observer = MeanObserver([1], {1: (2,)})
    observer(2, np.ones((3, 2), np.float32))
    observer(1, np.array([[1.0, np.nan], [3.0, 2.0]], np.float32))
    assert observer.mean(2) is None
    assert observer.mean(1).tolist() == [2.0, 1.0]  # NaN counts as 0, not as a skipped sample
    observer(1, np.array([[np.inf, 0.0]], np.float32))
    assert np.isfinite(observer.mean(1)).all()
    observer(1, np.array([[np.nan, 4.0]], np.float32), 4.0)  # NaN outside a known magnitude
    assert observer.mean(1).tolist() == [(1.0 + 3.0 + 2.0**22) / 4, 1.5]


def test_histogram_observer_splits_engine_rows_into_samples() -> None:
    """The engine may hold one sample as several rows: binning follows `sample_elements`."""
    rng = np.random.default_rng(0)
    per_sample = 64 * 64 * 8
    values = rng.standard_normal((4, 64, 64, 8)).astype(np.float32)
    whole = HistogramObserver([0], {0: per_sample}, {0: 8})
    whole(0, values)
    as_rows = HistogramObserver([0], {0: per_sample}, {0: 8})
    as_rows(0, values.reshape(4 * 64, 64, 8))
    assert as_rows.state() == whole.state()
    histogram = whole.histograms[0]
    assert 0 < histogram.counts.sum() < values.size  # subsampled, per sample


def test_observers_refuse_to_merge_other_kinds() -> None:
    with pytest.raises(TypeError, match="MinMaxObserver"):
        HistogramObserver([0]).merge(MinMaxObserver([0]))


@settings(deadline=None, max_examples=30)
@given(st.data())
def test_open_float64_sums_give_the_fixed_point_integers(data) -> None:
    # Chunks known finite and bounded add into a float64 sum left open across chunks (up to
    # BLOCK samples); others take the checked path. Any mix gives the same integers.
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    total = data.draw(st.integers(1, 3 * MeanObserver.BLOCK))
    values = (rng.standard_normal((total, 3)) * rng.choice([1e-9, 1.0, 4e6], (total, 3))).astype(
        np.float32
    )
    if data.draw(st.booleans()):
        values[data.draw(st.integers(0, total - 1)), 0] = np.nan
    reference = MeanObserver([0], {0: (3,)})
    reference(0, values)  # no magnitude known: every chunk checked
    chunked = MeanObserver([0], {0: (3,)})
    start = 0
    while start < total:
        stop = min(total, start + data.draw(st.integers(1, MeanObserver.BLOCK + 5)))
        chunk = values[start:stop]
        finite = bool(np.isfinite(chunk).all())
        magnitude = float(np.abs(chunk[np.isfinite(chunk)]).max(initial=0.0))
        chunked(0, chunk, magnitude, finite)
        if data.draw(st.booleans()):
            assert (
                chunked.mean(0).tobytes()
                == MeanObserver.from_state(chunked.state()).mean(0).tobytes()
            )
        start = stop
    assert chunked.counts == reference.counts
    assert chunked.sums[0].tolist() == reference.sums[0].tolist()


def test_a_mean_follows_the_samples_added_after_it_was_read() -> None:
    observer = MeanObserver([0], {0: (2,)})
    observer(0, np.array([[1.0, 2.0]], np.float32))
    first = observer.mean(0)
    assert first.tolist() == [1.0, 2.0] and not first.flags.writeable
    assert observer.mean(0) is first  # computed once per sample count
    observer(0, np.array([[3.0, 4.0]], np.float32), 4.0, True)
    assert observer.mean(0).tolist() == [2.0, 3.0]
    other = MeanObserver([0], {0: (2,)})
    other(0, np.array([[5.0, 6.0]], np.float32))
    observer.merge(other)
    assert observer.mean(0).tolist() == [3.0, 4.0]
