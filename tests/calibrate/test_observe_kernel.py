"""The C kernel that observes a chunk in one pass (qtool/calibrate/_observe.c) gives the numpy
passes' statistics bit for bit: extremes, histogram counts and the means' fixed-point sums."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import qtool.calibrate.histogram as histogram_module
import qtool.calibrate.statistics as statistics_module
from qtool.calibrate import activation_tensors
from qtool.calibrate.histogram import BINS, Histogram, sampling_stride
from qtool.calibrate.observers import MeanObserver
from tests.calibrate.test_statistics import recorded, statistics_of

KERNEL = histogram_module.one_pass
LIMIT = 2.0**22  # MeanObserver's clipping limit


def test_make_install_builds_the_kernel() -> None:
    # pyproject.toml builds it (optional only where no C compiler is): a broken build would
    # silently leave every calibration on the numpy passes.
    assert KERNEL is not None


@pytest.fixture
def numpy_passes(monkeypatch: pytest.MonkeyPatch):
    """Within the block, the numpy passes observe (as on a machine without the kernel)."""

    def use(kernel: bool) -> None:
        for module in (histogram_module, statistics_module):
            monkeypatch.setattr(module, "one_pass", KERNEL if kernel else None)

    return use


def hostile(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Values of every kind the kernel treats apart: zeros of both signs, denormals,
    infinities, NaN, magnitudes beyond the means' clipping limit, ties of rounding (k + 0.5
    units of 2^-24), and ordinary activations."""
    values = rng.normal(0, 3, shape).astype(np.float32)
    flat = values.reshape(-1)
    picks = rng.integers(0, flat.size, size=(7, max(1, flat.size // 20)))
    flat[picks[0]] = 0.0
    flat[picks[1]] = -0.0
    flat[picks[2]] = np.float32(1e-40) * rng.choice([-1, 1], picks[2].size)
    flat[picks[3]] = (rng.integers(-50, 50, picks[3].size) + 0.5) * 2.0**-24
    flat[picks[4]] = rng.choice([-1, 1], picks[4].size) * np.float32(3e7)  # beyond 2^22
    flat[picks[5][:1]] = np.inf
    flat[picks[6][:1]] = np.nan
    return values


def observed(rows: np.ndarray, channels: int, shape: tuple[int, ...]) -> tuple:
    """A histogram and a mean observer after the rows, in two chunks; the means through the
    kernel's open sums where it is used, else through MeanObserver's own passes."""
    histogram = Histogram()
    means = MeanObserver([0], {0: shape})
    for part in np.array_split(rows, 2):
        if not len(part):
            continue
        if histogram_module.one_pass is not None:
            histogram.add(part, channels, means.open_sum(0, part))
        else:
            histogram.add(part, channels)
            means(0, part)
    return histogram, means


@pytest.mark.parametrize(
    "rows,shape,channels",
    [
        (1, (1,), 1),
        (3, (7, 5), 5),  # tails shorter than a vector
        (4, (40, 40, 3), 3),  # the histogram's stride above 1
        (2, (130, 130, 16), 16),  # several column blocks
        (5, (33, 65), 65),
    ],
)
def test_one_pass_equals_the_numpy_passes(numpy_passes, rows, shape, channels) -> None:
    rng = np.random.default_rng(rows * 1000 + channels)
    values = hostile(rng, (rows, *shape)).reshape(rows, -1)
    found = {}
    for kernel in (True, False):
        numpy_passes(kernel)
        histogram, means = observed(values, channels, shape)
        found[kernel] = (histogram.counts.copy(), histogram.min, histogram.max, means.sums[0])
    (k_counts, k_min, k_max, k_sums), (n_counts, n_min, n_max, n_sums) = found[True], found[False]
    assert np.array_equal(k_counts, n_counts)
    assert (k_min, k_max) == (n_min, n_max)
    assert np.array_equal(k_sums, n_sums)
    stride = sampling_stride(values.shape[1], channels)
    assert k_counts.sum() == np.isfinite(values[:, ::stride]).sum()  # every finite binned value


@settings(deadline=None, max_examples=60)
@given(
    hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 3), st.integers(1, 70)),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True),
    )
)
def test_one_pass_equals_the_numpy_passes_on_any_floats(values: np.ndarray) -> None:
    # Hypothesis draws the edge cases: all NaN, all infinite, extremes of float32.
    found = []
    for kernel in (KERNEL, None):
        histogram_module.one_pass = kernel
        try:
            histogram, means = observed(values, 1, (values.shape[1],))
        finally:
            histogram_module.one_pass = KERNEL
        found.append((histogram.counts.copy(), histogram.min, histogram.max, means.sums[0]))
    (k_counts, k_min, k_max, k_sums), (n_counts, n_min, n_max, n_sums) = found
    assert np.array_equal(k_counts, n_counts) and np.array_equal(k_sums, n_sums)
    assert (k_min, k_max) == (n_min, n_max)


def test_a_model_s_statistics_are_the_same_with_either(numpy_passes) -> None:
    # Every activation of the fixture CNN in chunks of unequal sizes, as an engine delivers them.
    model, values = recorded("cnn")
    states = {}
    for kernel in (True, False):
        numpy_passes(kernel)
        stats = statistics_of(model, values, slice(0, 5))
        stats.merge(statistics_of(model, values, slice(5, 24)))
        states[kernel] = json.dumps(stats.state(), sort_keys=True)
    assert states[True] == states[False]
    assert len(activation_tensors(model)) == len(
        json.loads(states[True])["subgraphs"]["0"]["histograms"]
    )
    assert json.loads(states[True])["subgraphs"]["0"]["means"]  # the means went through it too


def test_the_kernel_refuses_buffers_of_the_wrong_size() -> None:
    values = np.zeros((2, 10), np.float32)
    with pytest.raises(ValueError, match="counts"):
        KERNEL(values, 2, 10, 1, np.zeros(BINS - 1, np.int64), None)
    with pytest.raises(ValueError, match="total"):
        KERNEL(values, 2, 10, 1, None, np.zeros(9))
    with pytest.raises(ValueError, match="values"):
        KERNEL(values, 3, 10, 1, None, None)
    with pytest.raises(ValueError, match="values"):
        KERNEL(values.view(np.int32), 2, 10, 1, None, None)  # the right size, another type
    with pytest.raises(ValueError, match="counts"):
        KERNEL(values, 2, 10, 1, np.zeros(BINS), None)
    with pytest.raises(BufferError):
        KERNEL(values, 2, 10, 1, np.zeros(BINS, np.int64).tobytes(), None)  # not writable


@pytest.mark.parametrize("sizes", [(5, 11), (100, 100), (128, 1), (40, 90, 3)])
def test_open_sums_merge_as_closed_ones(sizes) -> None:
    # The folds' statistics merge into the fitting fold's with their sums still open (float64,
    # at most BLOCK samples together; beyond, closed into int64): the same integers as one pass.
    rng = np.random.default_rng(sum(sizes))
    values = hostile(rng, (sum(sizes), 6, 4))
    single = MeanObserver([0], {0: (6, 4)})
    for start in range(0, len(values), MeanObserver.BLOCK):
        single(0, values[start : start + MeanObserver.BLOCK])
    merged = None
    for part in np.split(values, np.cumsum(sizes)[:-1]):
        shard = MeanObserver([0], {0: (6, 4)})
        shard.open_sum(0, part.reshape(len(part), -1))[...] = observed_units(part)
        if merged is None:
            merged = shard
        else:
            merged.merge(shard)
    assert merged.counts == single.counts == {0: len(values)}
    assert np.array_equal(merged.sums[0], single.sums[0])


def observed_units(rows: np.ndarray) -> np.ndarray:
    """The fixed-point units of rows, summed (what the kernel adds to an open sum)."""
    units = np.rint(np.clip(np.nan_to_num(rows, nan=0.0), -LIMIT, LIMIT).astype(np.float64) * 2**24)
    return units.sum(axis=0)
