"""The fixed-grid histogram: where values land, exact merging, per-sample subsampling, state."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtool.calibrate.histogram import (
    BINNED_PER_SAMPLE,
    BINS,
    Histogram,
    bin_centers,
    bin_edges,
    sampling_stride,
)

FAST = settings(deadline=None, max_examples=40)
FINITE = st.floats(-(2.0**100), 2.0**100, allow_nan=False, width=32)


def histogram_of(values: np.ndarray, channels: int = 1) -> Histogram:
    histogram = Histogram()
    histogram.add(values, channels)
    return histogram


def same(a: Histogram, b: Histogram) -> bool:
    return np.array_equal(a.counts, b.counts) and (a.min, a.max) == (b.min, b.max)


@FAST
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 4), st.integers(1, 50)), elements=FINITE))
def test_every_value_lands_in_the_bin_that_spans_it(values: np.ndarray) -> None:
    histogram = histogram_of(values)
    lower, upper = bin_edges()
    assert histogram.counts.sum() == values.size  # small samples are binned whole
    assert (histogram.min, histogram.max) == (float(values.min()), float(values.max()))
    for value in np.unique(values):
        one = histogram_of(np.array([[value]], np.float32))
        (b,) = np.flatnonzero(one.counts)
        assert lower[b] <= value <= upper[b]
        # A bin is at most 1/32 of its values wide (3%), down to the denormals.
        assert upper[b] - lower[b] <= abs(float(value)) / 32 + 2.0**-126
    # Ordinals run in value order (-0 before +0): sorting the values sorts their bins.
    ordinals = [
        int(np.flatnonzero(histogram_of(np.array([[v]], np.float32)).counts)[0])
        for v in sorted(values.ravel(), key=lambda v: (v, not np.signbit(v)))
    ]
    assert ordinals == sorted(ordinals)


def test_grid_and_centers() -> None:
    lower, upper = bin_edges()
    finite = upper > lower
    assert np.all(np.diff(lower[finite]) > 0)
    assert np.array_equal(upper[finite][:-1], lower[finite][1:])  # contiguous, no gaps
    assert lower[finite][0] < -3e38 and upper[finite][-1] > 3e38
    centers = bin_centers()
    assert np.all((lower[finite] <= centers[finite]) & (centers[finite] <= upper[finite]))
    zero = histogram_of(np.array([[0.0, -0.0, 1e-45]], np.float32))
    assert np.all(centers[np.flatnonzero(zero.counts)] == 0.0)


def test_non_finite_values_are_skipped() -> None:
    values = np.array([[1.0, np.inf, -2.0, np.nan, -np.inf]], np.float32)
    histogram = histogram_of(values)
    assert histogram.counts.sum() == 2
    assert (histogram.min, histogram.max) == (-2.0, 1.0)
    nothing = histogram_of(np.array([[np.nan, np.inf]], np.float32))
    assert nothing.empty and nothing.counts.sum() == 0


@FAST
@given(
    hnp.arrays(np.float32, st.tuples(st.integers(2, 12), st.integers(1, 30)), elements=FINITE),
    st.data(),
)
def test_merge_is_exact_in_any_split_and_order(values: np.ndarray, data) -> None:
    whole = histogram_of(values)
    cuts = sorted(data.draw(st.lists(st.integers(1, len(values) - 1), max_size=4, unique=True)))
    parts = [histogram_of(part) for part in np.split(values, cuts) if len(part)]
    order = data.draw(st.permutations(range(len(parts))))
    merged = Histogram()
    for i in order:
        merged.merge(parts[i])
    assert same(merged, whole)


@pytest.mark.parametrize(
    ("elements", "channels"),
    [(16 * 16 * 3, 3), (64 * 64 * 32, 32), (96 * 96 * 30, 30), (128 * 128 * 16, 16), (70000, 7)],
)
def test_subsampling_is_bounded_and_sees_every_channel(elements: int, channels: int) -> None:
    stride = sampling_stride(elements, channels)
    assert stride == 1 or channels % stride
    binned = -(-elements // stride)
    assert binned < 2 * BINNED_PER_SAMPLE
    # Channel c holds the value c + 1 everywhere (channel last): every channel is binned.
    sample = np.tile(np.arange(1, channels + 1, dtype=np.float32), elements // channels)
    histogram = histogram_of(sample[None], channels)
    assert histogram.counts.sum() == binned
    seen = {float(c) for c in bin_centers()[np.flatnonzero(histogram.counts)]}
    assert len(seen) == channels


def test_subsampling_depends_on_the_sample_not_the_chunking() -> None:
    rng = np.random.default_rng(0)
    samples = rng.standard_normal((10, 40 * 40 * 24)).astype(np.float32)
    assert sampling_stride(samples.shape[1], 24) > 1
    whole = histogram_of(samples, 24)
    assert whole.counts.sum() < samples.size
    chunked = Histogram()
    for part in np.array_split(samples, [1, 4, 9]):
        chunked.add(part, 24)
    one_by_one = Histogram()
    for sample in samples[::-1]:
        one_by_one.merge(histogram_of(sample[None], 24))
    assert same(chunked, whole) and same(one_by_one, whole)
    assert (whole.min, whole.max) == (float(samples.min()), float(samples.max()))


@FAST
@given(hnp.arrays(np.float32, st.tuples(st.integers(1, 3), st.integers(0, 20)), elements=FINITE))
def test_state_round_trips_through_json(values: np.ndarray) -> None:
    histogram = histogram_of(values)
    state = json.loads(json.dumps(histogram.state()))
    back = Histogram.from_state(state)
    assert same(back, histogram)
    assert back.counts.shape == (BINS,) and back.empty == (values.size == 0)
    assert len(state["counts"]) <= BINS
