"""A histogram of float32 values over one fixed, global grid, so that statistics merge exactly.

The bin of a value is its float32 bit pattern shifted right by 18: sign, exponent and the top
`MANTISSA_BITS` mantissa bits. Every octave [2^e, 2^(e+1)) is cut into 32 equal bins, so a bin
is at most 1/32 (3%) of the values it holds wide, from denormals to 3e38, with no range to choose
up front. Because the grid never moves, histograms of different shards, chunks or machines add
up bin by bin: merging is exact and order does not matter. Counts are kept in value order
(ordinals 0..16383: most negative first), 128 KB per tensor at most.

Only a deterministic subset of each sample's elements is binned (every `stride`-th, with a prime
stride that does not divide the channel count so every channel is seen): at most
`BINNED_PER_SAMPLE` values per sample and tensor keep binning cheap next to inference. The
subset depends only on the sample, never on how samples are chunked or sharded, so exact merging
holds. The minimum and maximum are exact over every element.

Where qtool was built with its C extension (`_observe.c`, built by `pip install`), one pass over
memory computes the extremes and the counts (and, for a layer's input, the means' sums: see
`SubgraphStatistics`) with the numpy code's results bit for bit; the numpy passes below are the
fallback where no C compiler was found (docs/performance.md: "One pass over the activations").
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

try:
    from qtool.calibrate._observe import observe as one_pass
except ImportError:  # built without a C compiler: numpy's passes
    one_pass = None

MANTISSA_BITS = 5
SHIFT = 23 - MANTISSA_BITS
MAGNITUDES = 1 << (31 - SHIFT)  # bins per sign: 8 exponent + 5 mantissa bits
BINS = 2 * MAGNITUDES
FINITE_MAGNITUDES = 255 << MANTISSA_BITS  # exponent 255 holds inf and NaN
BINNED_PER_SAMPLE = 1 << 14


@functools.cache
def _magnitude_edges() -> np.ndarray:
    """Lower edge of every magnitude bin (float64), plus the upper edge of the last finite one."""
    bits = (np.arange(FINITE_MAGNITUDES + 1, dtype=np.uint64) << SHIFT).astype(np.uint32)
    return bits.view(np.float32).astype(np.float64)


@functools.cache
def bin_edges() -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) value of every ordinal bin, float64; non-finite bins are empty spans."""
    edges = _magnitude_edges()
    lower = np.zeros(BINS)
    upper = np.zeros(BINS)
    finite = FINITE_MAGNITUDES
    # Positive magnitudes m sit at ordinal MAGNITUDES + m, negative ones at MAGNITUDES - 1 - m.
    lower[MAGNITUDES : MAGNITUDES + finite] = edges[:-1]
    upper[MAGNITUDES : MAGNITUDES + finite] = edges[1:]
    lower[MAGNITUDES - finite : MAGNITUDES] = -edges[1:][::-1]
    upper[MAGNITUDES - finite : MAGNITUDES] = -edges[:-1][::-1]
    return lower, upper


@functools.cache
def bin_centers() -> np.ndarray:
    """The value standing for each bin: its midpoint, except 0 for the two bins at zero (they
    hold exact zeros, which every activation grid represents exactly, and denormals)."""
    lower, upper = bin_edges()
    centers = (lower + upper) / 2
    centers[MAGNITUDES - 1 : MAGNITUDES + 1] = 0.0
    return centers


def _ordinal_counts(raw: np.ndarray) -> np.ndarray:
    """Counts indexed by bit-pattern bin (positives, then negatives) reordered by value."""
    counts = np.empty(BINS, np.int64)
    counts[MAGNITUDES:] = raw[:MAGNITUDES]
    counts[:MAGNITUDES] = raw[MAGNITUDES:][::-1]
    counts[MAGNITUDES + FINITE_MAGNITUDES :] = 0
    counts[: MAGNITUDES - FINITE_MAGNITUDES] = 0
    return counts


@functools.cache
def sampling_stride(sample_elements: int, channels: int) -> int:
    """Every how many elements of a sample get binned: 1 for small tensors, otherwise the
    smallest prime that keeps the count near `BINNED_PER_SAMPLE` and does not divide the channel
    count (a stride sharing a factor with it would only ever see some channels)."""
    wanted = sample_elements // BINNED_PER_SAMPLE
    if wanted <= 1:
        return 1
    candidate = max(wanted, 2)
    while True:
        if _is_prime(candidate) and channels % candidate:
            return candidate
        candidate += 1


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


class Histogram:
    """Value counts of one tensor over the global grid, with its exact minimum and maximum.

    Added values are counted in bit-pattern order (`np.bincount`'s) and put in value order
    when `counts` is read: once per read instead of once per chunk (16,384 bins, a fifth of
    the cost of a small tensor's chunk)."""

    def __init__(self) -> None:
        # Value order; made when first read (a statistics set makes one histogram per tensor,
        # most of them read once: no array of zeros to fault in and add to first).
        self._counts: np.ndarray | None = None
        self._raw: np.ndarray | None = None  # bit-pattern order, not yet in _counts
        self.min = float("inf")
        self.max = float("-inf")

    @property
    def counts(self) -> np.ndarray:
        """The count of every bin, in value order (ordinals 0..BINS-1)."""
        if self._raw is not None:
            # inf/NaN patterns fall in zeroed bins
            self._counts = _added(self._counts, _ordinal_counts(self._raw), copy=False)
            self._raw = None
        if self._counts is None:
            self._counts = np.zeros(BINS, np.int64)
        return self._counts

    @property
    def empty(self) -> bool:
        """Whether no finite value has been added (min > max)."""
        return self.min > self.max

    def add(
        self,
        samples: np.ndarray,
        channels: int = 1,
        unit_sums: np.ndarray | None = None,
        classes: tuple | None = None,
    ) -> bool:
        """Fold in values shaped (samples, elements per sample); non-finite values are skipped.
        Returns whether every value was finite. Only where `one_pass` exists, one of:
        `unit_sums`, float64 per element of a sample, to which every sample's `MeanObserver`
        units are added in the same pass; `classes`, the kernel's argument for units added per
        class of positions (`MeanObserver.class_target`)."""
        values = np.asarray(samples, dtype=np.float32)
        if not values.size:
            return True
        stride = sampling_stride(values.shape[1], channels)
        if self._raw is None:
            self._raw = np.zeros(BINS, np.int64)
        if one_pass is not None:
            low, high, every_finite = one_pass(
                np.ascontiguousarray(values), *values.shape, stride, self._raw, unit_sums, classes
            )
            if low > high:  # no finite value
                return False
        else:
            # min() and max() are NaN when any value is: finite extremes mean finite values.
            low, high = float(values.min()), float(values.max())
            every_finite = bool(np.isfinite(low) and np.isfinite(high))
            if not every_finite:
                finite = np.isfinite(values)
                if not finite.any():
                    return False
                low, high = float(values[finite].min()), float(values[finite].max())
            binned = values[:, ::stride] if stride > 1 else values
            # Straight to the index type bincount counts in: no conversion pass inside it.
            patterns = np.right_shift(binned.view(np.uint32), SHIFT, dtype=np.intp)
            self._raw += np.bincount(patterns.reshape(-1), minlength=BINS)
        self.min, self.max = min(self.min, low), max(self.max, high)
        return every_finite

    def merge(self, other: Histogram) -> None:
        """Add another histogram's counts and widen min/max to include its (exact, in any order).
        Counts not yet in value order add as they are (no reordering per merge)."""
        if other._raw is not None:
            self._raw = _added(self._raw, other._raw)
        if other._counts is not None:
            self._counts = _added(self._counts, other._counts)
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)

    def state(self) -> dict[str, Any]:
        """JSON-ready: exact min/max and the counts between the first and last non-empty bin."""
        nonzero = np.flatnonzero(self.counts)
        first = int(nonzero[0]) if nonzero.size else 0
        last = int(nonzero[-1]) + 1 if nonzero.size else 0
        return {
            "min": self.min if not self.empty else None,
            "max": self.max if not self.empty else None,
            "first_bin": first,
            "counts": self.counts[first:last].tolist(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> Histogram:
        """The histogram a `state()` describes."""
        histogram = cls()
        if state["min"] is not None:
            histogram.min, histogram.max = float(state["min"]), float(state["max"])
        counts = np.asarray(state["counts"], np.int64)
        first = int(state["first_bin"])
        histogram.counts[first : first + counts.size] = counts
        return histogram


def _added(total: np.ndarray | None, more: np.ndarray, copy: bool = True) -> np.ndarray:
    """`total` with `more` added in place; `more` itself (a copy unless `copy` is False) where
    there is no total yet."""
    if total is None:
        return more.copy() if copy else more
    total += more
    return total


def counts_below(histogram: Histogram, values: np.ndarray | float) -> np.ndarray:
    """How many binned values lie below each of `values`, each bin's count spread evenly over
    its span (clipped to the exact minimum and maximum): the cumulative count, for re-binning
    onto another grid and for the share of values a range clips."""
    points = np.asarray(values, np.float64)
    total = float(histogram.counts.sum())
    nonzero = np.flatnonzero(histogram.counts)
    if not nonzero.size:
        return np.zeros_like(points)
    first, last = int(nonzero[0]), int(nonzero[-1]) + 1
    lower, upper = bin_edges()
    edges = np.clip(np.append(lower[first], upper[first:last]), histogram.min, histogram.max)
    cumulative = np.append(0.0, np.cumsum(histogram.counts[first:last], dtype=np.float64))
    # Clipping leaves runs of equal edges at both ends only, where the answer is 0 or total.
    inside = np.interp(points, edges, cumulative)
    return np.where(points <= histogram.min, 0.0, np.where(points >= histogram.max, total, inside))
