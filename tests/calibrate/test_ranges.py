"""Calibration methods: the range each one reads from a histogram, and how they are spelled."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtool.calibrate.histogram import Histogram
from qtool.calibrate.ranges import METHOD_NAMES, Method, _ExpectedError, _occupied, parse_method
from qtool.errors import UsageError
from qtool.numerics import activation_params, fake_quantize

METHODS = [*METHOD_NAMES, "percentile:99"]


def histogram_of(values: np.ndarray) -> Histogram:
    histogram = Histogram()
    histogram.add(values.reshape(len(values), -1))
    return histogram


def int8_mse(values: np.ndarray, low: float, high: float) -> float:
    """The actual mean squared error of int8 quantization of `values` with this range."""
    params = activation_params(low, high, dtype=np.int8)
    snapped = fake_quantize(values, params.scale[0], int(params.zero_point[0]), -128, 127)
    return float(np.mean((snapped.astype(np.float64) - values) ** 2))


def heavy_tailed() -> np.ndarray:
    """Laplace values (every sample binned whole) and one far outlier, on the high side."""
    values = np.random.default_rng(0).laplace(0.0, 1.0, (64, 4096)).astype(np.float32)
    values[0, 0] = 60.0
    return values


def tensor_values(bound: float) -> st.SearchStrategy[np.ndarray]:
    """A few samples of a small tensor, values within +-bound."""
    return hnp.arrays(
        np.float32,
        st.tuples(st.integers(1, 4), st.integers(1, 64)),
        elements=st.floats(-bound, bound, allow_nan=False, width=32),
    )


@settings(deadline=None, max_examples=30)
@given(
    tensor_values(2.0**20),
    st.sampled_from(METHODS),
)
def test_every_method_stays_within_the_observed_values(values: np.ndarray, method: str) -> None:
    histogram = histogram_of(values)
    low, high = parse_method(method).range(histogram)
    assert float(values.min()) <= low <= high <= float(values.max())


@pytest.mark.parametrize("value", [0.0, 5.0, -3.0, 1e-30, 3e38])
@pytest.mark.parametrize("method", METHODS)
def test_a_constant_tensor_keeps_its_value(value: float, method: str) -> None:
    histogram = histogram_of(np.full((2, 10), value, np.float32))
    assert parse_method(method).range(histogram) == (np.float32(value),) * 2


def test_minmax_is_exact() -> None:
    values = heavy_tailed()
    assert parse_method("minmax").range(histogram_of(values)) == (values.min(), values.max())


@pytest.mark.parametrize("percentile", [99.0, 99.99])
def test_percentile_matches_the_data_within_a_bin(percentile: float) -> None:
    values = heavy_tailed()
    low, high = Method("percentile", percentile).range(histogram_of(values))
    want_low, want_high = np.percentile(values, [100 - percentile, percentile])
    assert low == pytest.approx(want_low, rel=1 / 32)
    assert high == pytest.approx(want_high, rel=1 / 32)
    assert high < 20  # the outlier is clipped


def test_mse_finds_the_range_of_least_quantization_error() -> None:
    values = heavy_tailed()
    low, high = parse_method("mse").range(histogram_of(values))
    best = min(
        int8_mse(values, -a, b) for a in np.geomspace(2, 14, 24) for b in np.geomspace(2, 60, 32)
    )
    assert int8_mse(values, low, high) <= 1.03 * best
    for other in ("minmax", "percentile", "kl"):
        assert int8_mse(values, low, high) < int8_mse(
            values, *parse_method(other).range(histogram_of(values))
        )


def expected_error_bin_by_bin(histogram: Histogram, low: float, high: float) -> float:
    """The error model of `mse`, written out value by value: clipped outside the range, the
    rounding noise step^2 / 12 inside it, except near zero, where a value rounds to the zero
    point (its square plus its bin's spread)."""
    values, widths, counts = _occupied(histogram)
    low, high = min(low, 0.0), max(high, 0.0)
    step = (high - low) / 255
    total = 0.0
    for x, width, count in zip(values, widths, counts, strict=True):
        if x > high:
            error = (x - high) ** 2
        elif x < low:
            error = (x - low) ** 2
        elif abs(x) < step / 2:
            error = x**2 + width**2 / 12
        else:
            error = step**2 / 12
        total += count * error
    return total


@settings(deadline=None, max_examples=40)
@given(
    tensor_values(1e4),
    st.lists(st.tuples(st.floats(-2e4, 0.0), st.floats(0.0, 2e4)), min_size=1, max_size=8),
)
def test_the_prefix_sum_error_is_the_bin_by_bin_error(
    values: np.ndarray, ranges: list[tuple[float, float]]
) -> None:
    histogram = histogram_of(values)
    lows, highs = (np.array(side) for side in zip(*ranges, strict=True))
    errors = _ExpectedError(histogram)(lows, highs)
    for (low, high), error in zip(ranges, errors, strict=True):
        expected = expected_error_bin_by_bin(histogram, low, high)
        scale = float(np.sum(_occupied(histogram)[2] * (np.abs(values).max() + high - low) ** 2))
        assert error == pytest.approx(expected, rel=1e-9, abs=1e-12 * scale)


@pytest.mark.parametrize("low, high", [(-60.0, 60.0), (-5.0, 5.0), (0.0, 3.0), (-1.0, 0.0)])
def test_the_prefix_sum_error_counts_values_rounded_to_zero(low: float, high: float) -> None:
    histogram = histogram_of(heavy_tailed())
    (error,) = _ExpectedError(histogram)(np.array([low]), np.array([high]))
    assert error == pytest.approx(expected_error_bin_by_bin(histogram, low, high), rel=1e-9)


def test_kl_clips_outliers_but_keeps_a_uniform_tensor_whole() -> None:
    values = heavy_tailed()
    low, high = parse_method("kl").range(histogram_of(values))
    assert high < 60 / 2
    assert np.mean((values >= low) & (values <= high)) > 0.999
    uniform = np.random.default_rng(1).uniform(0, 6, (16, 1000)).astype(np.float32)
    low, high = parse_method("kl").range(histogram_of(uniform))
    assert (low, high) == (uniform.min(), pytest.approx(uniform.max(), rel=0.05))


def test_an_empty_histogram_has_no_range() -> None:
    with pytest.raises(ValueError, match="no values"):
        parse_method("mse").range(Histogram())


@pytest.mark.parametrize("text", [*METHOD_NAMES, "percentile:99.9", "percentile:100"])
def test_method_names_round_trip(text: str) -> None:
    method = parse_method(text)
    assert parse_method(str(method)) == method
    assert str(method) == ("percentile:99.99" if text == "percentile" else text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("auto", "must be one of minmax, percentile, mse, kl"),
        ("entropy", "must be one of"),
        ("", "must be one of"),
        ("mse:3", "mse takes no parameter"),
        ("kl:99", "kl takes no parameter"),
        ("percentile:high", "percentile must be a number, not 'high'"),
        ("percentile:50", r"must be in \(50, 100\], not 50"),
        ("percentile:100.5", "not 100.5"),
    ],
)
def test_parse_method_errors_name_the_parameter(text: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        parse_method(text)
