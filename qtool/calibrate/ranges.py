"""Calibration methods: the activation range each one picks from a tensor's histogram.

- `minmax`: the exact minimum and maximum seen (TensorFlow's rule).
- `percentile[:P]`: the P-th percentile of the values on the high side and the (100 - P)-th on
  the low side (default P = 99.99); outliers beyond are clipped.
- `mse`: the range minimising the expected squared error of int8 quantization of the tensor's own
  values: rounding noise inside the range, clipping error outside it.
- `kl`: the entropy method (TensorRT's): the clipping threshold whose 8-bit quantized
  distribution is closest, in KL divergence, to the observed one.

Every method returns a range within [min, max]; the activation parameters are then computed from
it as for min/max (widened to include 0). The methods read the same statistics, so switching
method never needs another calibration pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.histogram import Histogram, bin_centers, bin_edges
from qtool.errors import UsageError

DEFAULT_PERCENTILE = 99.99
LEVELS = 256  # int8 codes
_CANDIDATES = 96  # clipping thresholds tried per side (geometric, from max down to max / 2^12)
_KL_BINS = 2048
_KL_STEP = 16


@dataclass(frozen=True)
class Method:
    """A calibration method with its parameter, as `--calibration` spells it."""

    name: str
    percentile: float = DEFAULT_PERCENTILE

    def __str__(self) -> str:
        return f"percentile:{self.percentile:g}" if self.name == "percentile" else self.name

    def range(self, histogram: Histogram) -> tuple[float, float]:
        """The (low, high) range this method picks from a histogram, within the observed [min,
        max]; ValueError when the histogram is empty."""
        if histogram.empty:
            raise ValueError("no values observed")
        if self.name == "percentile":
            low, high = percentile_range(histogram, self.percentile)
        else:
            low, high = _METHODS[self.name](histogram)
        # A method reads bins, not values: with one value (a bin wider than the data) its
        # choice can fall outside what was observed (kl on [115.0] gave 114.1).
        low = min(max(low, histogram.min), histogram.max)
        return low, min(max(high, low), histogram.max)


METHOD_NAMES = ("minmax", "percentile", "mse", "kl")
MINMAX = Method("minmax")


def parse_method(text: str) -> Method:
    """`minmax`, `percentile`, `percentile:99.9`, `mse` or `kl`."""
    name, _, argument = text.partition(":")
    if name not in METHOD_NAMES:
        raise UsageError(
            f"calibration method must be one of {', '.join(METHOD_NAMES)} (or auto), not {text!r}"
        )
    if not argument:
        return Method(name)
    if name != "percentile":
        raise UsageError(f"calibration method {name} takes no parameter (got {text!r})")
    try:
        value = float(argument)
    except ValueError:
        raise UsageError(f"percentile must be a number, not {argument!r}") from None
    if not 50 < value <= 100:
        raise UsageError(f"percentile must be in (50, 100], not {value:g}")
    return Method(name, value)


def minmax_range(histogram: Histogram) -> tuple[float, float]:
    """The exact minimum and maximum observed."""
    return histogram.min, histogram.max


def _quantile(histogram: Histogram, fraction: float) -> float:
    """The value below which `fraction` of the binned values lie (linear within a bin)."""
    counts = histogram.counts
    total = counts.sum()
    if not total:
        return histogram.min if fraction < 0.5 else histogram.max
    lower, upper = bin_edges()
    cumulative = np.cumsum(counts)
    target = fraction * total
    b = int(np.searchsorted(cumulative, target, side="left"))
    before = cumulative[b] - counts[b]
    within = (target - before) / counts[b] if counts[b] else 0.0
    value = lower[b] + within * (upper[b] - lower[b])
    return float(np.clip(value, histogram.min, histogram.max))


def percentile_range(histogram: Histogram, percentile: float) -> tuple[float, float]:
    """The (100 - P)-th and P-th percentiles of the binned values (interpolated within a bin)."""
    keep = percentile / 100
    return _quantile(histogram, 1 - keep), _quantile(histogram, keep)


def _occupied(histogram: Histogram) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Representative value, width and count of every non-empty bin, in value order."""
    nonzero = np.flatnonzero(histogram.counts)
    lower, upper = bin_edges()
    values = np.clip(bin_centers()[nonzero], histogram.min, histogram.max)
    return values, (upper - lower)[nonzero], histogram.counts[nonzero].astype(np.float64)


class _ExpectedError:
    """Total squared int8 quantization error of a histogram's binned values, for any range.

    Inside a range, values more than half a step from zero spread over many steps and carry the
    uniform rounding noise step^2 / 12; values nearer zero round to the exact zero point and lose
    themselves (x^2, plus the bin's own spread width^2 / 12). Outside, a value is clipped to the
    nearer end. The bins are in value order, so each of these regions is a run of bins, and
    prefix sums of count, count * x, count * x^2 and count * width^2 / 12 give the error of every
    candidate range from a few look-ups (no candidates x bins matrix).
    """

    def __init__(self, histogram: Histogram) -> None:
        values, widths, counts = _occupied(histogram)
        self.values = values
        self.count, self.first, self.second, self.spread = (
            np.concatenate(([0.0], np.cumsum(weighted)))
            for weighted in (counts, counts * values, counts * values**2, counts * widths**2 / 12)
        )

    def __call__(self, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
        lows, highs = np.minimum(lows, 0.0), np.maximum(highs, 0.0)
        step = (highs - lows) / (LEVELS - 1)
        find = self.values.searchsorted
        start = find(lows, "left")  # first value >= low
        stop = find(highs, "right")  # first value > high
        zero_start = np.maximum(find(-step / 2, "right"), start)  # first value > -step / 2
        zero_stop = np.maximum(np.minimum(find(step / 2, "left"), stop), zero_start)
        return (
            self._squared_distance(0, start, lows)
            + self._squared_distance(stop, self.values.size, highs)
            + self._squared_distance(zero_start, zero_stop, 0.0)
            + self._between(self.spread, zero_start, zero_stop)
            + (
                self._between(self.count, start, stop)
                - self._between(self.count, zero_start, zero_stop)
            )
            * step**2
            / 12
        )

    @staticmethod
    def _between(prefix: np.ndarray, start: np.ndarray | int, stop: np.ndarray | int) -> np.ndarray:
        return prefix[stop] - prefix[start]

    def _squared_distance(self, start, stop, point) -> np.ndarray:
        """Sum of count * (x - point)^2 over the bins [start, stop)."""
        return (
            self._between(self.second, start, stop)
            - 2 * point * self._between(self.first, start, stop)
            + point**2 * self._between(self.count, start, stop)
        )


def _candidates(extreme: float) -> np.ndarray:
    if extreme == 0:
        return np.zeros(1)
    return extreme * np.geomspace(1.0, 2.0**-12, _CANDIDATES)


def mse_range(histogram: Histogram) -> tuple[float, float]:
    """Alternate the best high end for the current low end and vice versa (three rounds)."""
    expected_error = _ExpectedError(histogram)
    low, high = min(histogram.min, 0.0), max(histogram.max, 0.0)
    low_candidates, high_candidates = _candidates(low), _candidates(high)
    for _ in range(3):
        errors = expected_error(np.full(high_candidates.size, low), high_candidates)
        high = float(high_candidates[np.argmin(errors)])
        errors = expected_error(low_candidates, np.full(low_candidates.size, high))
        low = float(low_candidates[np.argmin(errors)])
    return max(low, histogram.min), min(high, histogram.max)


def _linear_magnitudes(histogram: Histogram, top: float) -> np.ndarray:
    """Counts of |x| over `_KL_BINS` equal bins of [0, top], each grid bin spread evenly."""
    nonzero = np.flatnonzero(histogram.counts)
    lower, upper = bin_edges()
    a = np.minimum(np.abs(lower[nonzero]), np.abs(upper[nonzero]))
    b = np.maximum(np.abs(lower[nonzero]), np.abs(upper[nonzero]))
    cdf_edges = np.linspace(0.0, top, _KL_BINS + 1)
    # Each grid bin's count is spread uniformly over [a, b]: the mass below every edge.
    span = np.maximum(b - a, 1e-300)
    below = np.clip((cdf_edges[:, None] - a[None, :]) / span[None, :], 0.0, 1.0)
    mass = below @ histogram.counts[nonzero].astype(np.float64)
    mass[-1] = histogram.counts[nonzero].sum()
    return np.diff(mass)


def _kl_divergence(clipped: np.ndarray, outliers: float, levels: int) -> float:
    """KL(P || Q) of TensorRT's entropy calibration: P is the histogram cut at a threshold with
    the values beyond it piled into its last bin (what clipping does to them); Q is the cut
    histogram without them, merged into `levels` equal groups and spread back evenly over the
    bins that hold values. Tight thresholds pile up many outliers that Q lacks."""
    group = np.arange(clipped.size) * levels // clipped.size
    occupied = clipped > 0
    mass = np.bincount(group, weights=clipped, minlength=levels)
    members = np.bincount(group, weights=occupied, minlength=levels)
    quantized = np.where(occupied, (mass / np.maximum(members, 1))[group], 0.0)
    reference = clipped.copy()
    reference[-1] += outliers
    p = reference / reference.sum()
    q = quantized / quantized.sum()
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-300))))


def kl_range(histogram: Histogram) -> tuple[float, float]:
    """Threshold on |x| (two-sided tensors use 128 levels a side, one-sided ones all 256)."""
    top = max(abs(histogram.min), abs(histogram.max))
    if top == 0:
        return histogram.min, histogram.max
    two_sided = histogram.min < 0 < histogram.max
    levels = LEVELS // 2 if two_sided else LEVELS
    magnitudes = _linear_magnitudes(histogram, top)
    best, best_bins = np.inf, _KL_BINS
    beyond = np.cumsum(magnitudes[::-1])[::-1]  # mass at or above each bin
    for bins in range(levels, _KL_BINS + 1, _KL_STEP):
        clipped = magnitudes[:bins]
        if clipped.sum() <= 0:
            continue
        outliers = float(beyond[bins]) if bins < _KL_BINS else 0.0
        divergence = _kl_divergence(clipped, outliers, levels)
        if divergence < best:
            best, best_bins = divergence, bins
    threshold = top * best_bins / _KL_BINS
    return max(histogram.min, -threshold), min(histogram.max, threshold)


_METHODS: dict[str, Callable[[Histogram], tuple[float, float]]] = {
    "minmax": minmax_range,
    "mse": mse_range,
    "kl": kl_range,
}
