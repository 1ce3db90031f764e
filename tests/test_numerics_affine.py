"""The TFLite affine scheme: activation/weight parameters, quantize/dequantize, bias, multipliers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtool.errors import DataError, UsageError
from qtool.numerics import (
    INT32_LIMIT,
    MIN_SCALE,
    AffineParams,
    RoundMode,
    activation_params,
    bias_overflow,
    bias_scale,
    dequantize,
    quantize,
    quantize_bias,
    quantize_multiplier,
    symmetric_params,
)

FAST = settings(deadline=None, max_examples=60)


def f32(lo: float, hi: float) -> st.SearchStrategy[float]:
    """float32 values in [lo, hi] (the bounds rounded to float32, as hypothesis requires)."""
    return st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32)


# ---------------------------------------------------------------- activation params


def test_activation_params_worked_range() -> None:
    p = activation_params(-10.0, 9.0)
    assert p.scale.dtype == np.float32 and p.scale.shape == (1,)
    assert p.scale[0] == np.float32(19) / np.float32(255)  # 0.07450981
    # zero_point = round(-128 - (-10) / scale) = round(6.21...) = 6
    assert p.zero_point.tolist() == [6] and p.zero_point.dtype == np.int64
    assert p.axis is None
    assert quantize(0.0, p).tolist() == 6


@pytest.mark.parametrize(
    ("lo", "hi", "dtype", "scale", "zero_point"),
    [
        (0.0, 6.0, np.uint8, np.float32(6) / np.float32(255), 0),
        (0.0, 6.0, np.int8, np.float32(6) / np.float32(255), -128),
        (2.0, 5.0, np.int8, np.float32(5) / np.float32(255), -128),  # widened to [0, 5]
        (-5.0, -2.0, np.int8, np.float32(5) / np.float32(255), 127),  # widened to [-5, 0]
        (-3.0, 1.0, "int16", np.float32(3) / np.float32(32767), 0),  # 16x8: symmetric
        (0.0, 0.0, np.int8, np.float32(1.0), -128),  # zero-width: scale 1.0 as MLIR's quantizer
        (0.0, 1e-12, np.int8, MIN_SCALE, -128),  # tiny: floored
    ],
)
def test_activation_params_cases(lo, hi, dtype, scale, zero_point) -> None:
    p = activation_params(lo, hi, dtype)
    assert p.scale[0] == scale
    assert p.zero_point[0] == zero_point


@pytest.mark.parametrize(
    ("lo", "hi", "dtype", "error"),
    [
        (1.0, 0.0, np.int8, "min > max"),
        (float("nan"), 1.0, np.int8, "finite"),
        (0.0, float("inf"), np.int8, "finite"),
        (-3e38, 3e38, np.int8, "too wide"),
        (0.0, 1.0, np.uint16, "TFLite activations"),
        (0.0, 1.0, "int4", "TFLite activations"),
    ],
)
def test_activation_params_rejects(lo, hi, dtype, error) -> None:
    with pytest.raises(UsageError, match=error):
        activation_params(lo, hi, dtype)


@FAST
@given(f32(-1e30, 1e30), f32(-1e30, 1e30), st.sampled_from([np.int8, np.uint8, "int16"]))
def test_activation_scale_is_always_usable(a: float, b: float, dtype) -> None:
    lo, hi = min(a, b), max(a, b)
    assume(np.isfinite(np.float32(max(hi, 0)) - np.float32(min(lo, 0))))
    p = activation_params(lo, hi, dtype)
    scale = p.scale[0]
    assert np.isfinite(scale) and scale >= MIN_SCALE > np.finfo(np.float32).tiny
    qmin, qmax = np.iinfo(np.dtype(dtype)).min, np.iinfo(np.dtype(dtype)).max
    assert qmin <= p.zero_point[0] <= qmax
    # Real 0 is exactly representable: it maps to the zero point and back to 0.
    assert quantize(0.0, p, dtype=dtype) == p.zero_point[0]
    assert dequantize(p.zero_point, p) == 0.0


@FAST
@given(
    f32(-100, 0),
    f32(0, 100),
    hnp.arrays(np.float32, 20, elements=f32(0, 1)),
    st.sampled_from([np.int8, np.uint8, "int16"]),
)
def test_round_trip_within_half_a_step(lo, hi, fractions, dtype) -> None:
    p = activation_params(lo, hi, dtype)
    qmin, qmax = np.iinfo(np.dtype(dtype)).min, np.iinfo(np.dtype(dtype)).max
    s, zp = np.float64(p.scale[0]), int(p.zero_point[0])
    # Anywhere inside the representable range [(qmin - zp) * s, (qmax - zp) * s].
    x = ((qmin - zp) + fractions.astype(np.float64) * (qmax - qmin)) * s
    x = x.astype(np.float32)  # what quantize sees; the float32 result adds one rounding too
    back = dequantize(quantize(x, p, dtype=dtype), p)
    assert (np.abs(back - x) <= s * (0.5 + 1e-4) + np.abs(x) * 2.0**-23).all()


# ---------------------------------------------------------------- symmetric params


def test_symmetric_per_tensor_and_per_axis() -> None:
    w = np.array([[0.5, -1.27, 0.0], [0.0, 0.0, 0.0], [2.54, 1.0, -0.3]], np.float32)
    per_tensor = symmetric_params(w)
    assert per_tensor.scale.tolist() == [np.float32(2.54) / np.float32(127)]
    assert per_tensor.zero_point.tolist() == [0] and per_tensor.axis is None
    per_row = symmetric_params(w, axis=0)
    expected = [np.float32(1.27) / np.float32(127), 1.0, np.float32(2.54) / np.float32(127)]
    assert per_row.scale.tolist() == expected  # the all-zero row gets scale 1.0
    assert per_row.axis == 0 and per_row.zero_point.tolist() == [0, 0, 0]
    q = quantize(w, per_row, dtype=np.int8, narrow_range=True)
    assert q[0].tolist() == [50, -127, 0] and q[2].tolist() == [127, 50, -15]
    assert q[1].tolist() == [0, 0, 0]


def test_symmetric_negative_axis_for_depthwise_weights() -> None:
    w = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4) - 12
    p = symmetric_params(w, axis=-1)
    assert p.axis == 3 and p.scale.shape == (4,)
    expected = np.abs(w).max(axis=(0, 1, 2)).astype(np.float32) / np.float32(127)
    np.testing.assert_array_equal(p.scale, expected)


def test_symmetric_qmax_and_tiny_weights() -> None:
    assert symmetric_params([0.7], qmax=7).scale[0] == np.float32(0.7) / np.float32(7)
    assert symmetric_params([1e-30]).scale[0] == MIN_SCALE


@pytest.mark.parametrize(
    ("weights", "kwargs", "error"),
    [
        ([1.0, np.inf], {}, DataError),
        ([1.0, np.nan], {}, DataError),
        (np.zeros((0, 3)), {}, DataError),
        ([1.0], {"axis": 1}, UsageError),
        ([1.0], {"qmax": 0}, UsageError),
        ([1.0], {"qmax": 1.5}, UsageError),
    ],
)
def test_symmetric_rejects(weights, kwargs, error) -> None:
    with pytest.raises(error):
        symmetric_params(np.asarray(weights, np.float32), **kwargs)


# ---------------------------------------------------------------- quantize / dequantize


def test_quantize_rounds_half_away_and_saturates() -> None:
    x = np.array([0.25, -0.25, 0.75, 1000.0, -1000.0, np.inf, -np.inf], np.float32)
    assert quantize(x, 0.5, 0).tolist() == [1, -1, 2, 127, -128, 127, -128]
    assert quantize(x, 0.5, 0, narrow_range=True).tolist()[-4:] == [127, -127, 127, -127]
    assert quantize(x, 0.5, 0, round_mode="half-to-even").tolist()[:3] == [0, 0, 2]
    assert quantize(x, 0.5, 10, dtype=np.uint8).tolist() == [11, 9, 12, 255, 0, 255, 0]


def test_quantize_dtypes() -> None:
    x = np.array([-100000.0, -3.0, 0.0, 3.0, 100000.0])
    assert quantize(x, 1.0, 0, dtype="int4").tolist() == [-8, -3, 0, 3, 7]
    assert quantize(x, 1.0, 0, dtype="int4").dtype == np.int8
    assert quantize(x, 1.0, 0, dtype="int4", narrow_range=True)[0] == -7
    assert quantize(x, 1.0, 0, dtype=np.int16).tolist() == [-32768, -3, 0, 3, 32767]
    assert quantize(x, 1.0, 0, dtype=np.uint16).tolist() == [0, 0, 0, 3, 65535]
    big = quantize(np.array([-3e9, 3e9]), 1.0, 0, dtype=np.int32)
    assert big.dtype == np.int32 and big.tolist() == [-(2**31), 2**31 - 1]


def test_quantize_is_float32_division() -> None:
    # 3.7f / 0.2f is exactly 18.5 in float32 (-> 19) but 18.49999996 in float64 (-> 18).
    assert quantize(np.float32(3.7), np.float32(0.2), 0).tolist() == 19
    x = np.float64(np.float32(1.5)) + 1e-12  # converted to float32 first: exactly 1.5, a tie
    assert quantize(x, 1.0, 0).tolist() == 2


def test_per_axis_quantize_and_dequantize() -> None:
    x = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], np.float32)
    params = AffineParams(np.array([1.0, 0.5, 0.25], np.float32), np.array([0, 1, -1]), axis=0)
    q = quantize(x, params)
    assert q.tolist() == [[1, 2], [3, 5], [3, 7]]
    np.testing.assert_array_equal(dequantize(q, params), x)
    q_last = quantize(x.T, [1.0, 0.5, 0.25], [0, 1, -1], axis=-1)
    assert q_last.tolist() == q.T.tolist()


def test_dequantize_output_types() -> None:
    q = np.array([-128, 0, 127], np.int8)
    out = dequantize(q, 0.1, -128)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(
        out, (np.array([0, 128, 255]) * np.float64(np.float32(0.1))).astype(np.float32)
    )
    assert dequantize(q, 0.1, out_dtype=np.float16).dtype == np.float16


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: quantize([1.0], 0.0, 0), UsageError),
        (lambda: quantize([1.0], -1.0, 0), UsageError),
        (lambda: quantize([1.0], np.inf, 0), UsageError),
        (lambda: quantize([1.0], 1e-50, 0), UsageError),  # 0 once stored as float32
        (lambda: quantize([1.0], 1.0, 128), UsageError),
        (lambda: quantize([1.0], 1.0, 1.5), UsageError),
        (lambda: quantize([1.0], [1.0, 2.0], 0), UsageError),
        (lambda: quantize(np.ones((2, 3)), [1.0, 2.0], 0, axis=1), UsageError),
        (lambda: quantize(np.ones((2, 3)), [1.0], [0, 1, 2, 3], axis=1), UsageError),
        (lambda: quantize(np.ones((2, 3)), [1.0], 0, axis=2), UsageError),
        (lambda: quantize([1.0], 1.0, 0, dtype=np.float32), UsageError),
        (lambda: quantize([1.0], 1.0, 0, round_mode="nearest"), UsageError),
        (lambda: quantize([np.nan], 1.0, 0), DataError),
        (lambda: quantize(["a"], 1.0, 0), DataError),
        (lambda: quantize([1.0], activation_params(0, 1), 0), UsageError),
        (lambda: dequantize([1.5], 1.0, 0), DataError),
        (lambda: dequantize(np.array([1], np.int8), 1.0, 200), UsageError),
        (lambda: dequantize(np.array([1], np.int8), 1.0, 0, out_dtype=np.float64), UsageError),
        (lambda: AffineParams(np.array([1.0, 2.0]), np.array([0, 0])), UsageError),
        (lambda: AffineParams(np.array([1.0, 2.0]), np.array([0, 0, 0]), axis=0), UsageError),
    ],
)
def test_rejected_arguments(call, error) -> None:
    with pytest.raises(error):
        call()


@FAST
@given(
    hnp.arrays(np.float32, 25, elements=f32(-1e4, 1e4)),
    f32(1e-3, 10),
    st.integers(-128, 127),
    st.sampled_from(list(RoundMode)),
)
def test_quantize_is_monotonic(x, scale, zero_point, mode) -> None:
    q = quantize(np.sort(x), scale, zero_point, round_mode=mode)
    assert (np.diff(q.astype(np.int64)) >= 0).all()


@FAST
@given(
    hnp.arrays(np.float32, (2, 3, 4), elements=f32(-50, 50)),
    hnp.arrays(np.float32, 3, elements=f32(1e-2, 5)),
    hnp.arrays(np.int64, 3, elements=st.integers(-20, 20)),
    st.booleans(),
)
def test_per_axis_equals_per_tensor_slice_by_slice(x, scales, zero_points, narrow) -> None:
    per_axis = quantize(x, scales, zero_points, axis=1, narrow_range=narrow)
    back = dequantize(per_axis, scales, zero_points, axis=1)
    for c in range(3):
        per_tensor = quantize(x[:, c], scales[c], zero_points[c], narrow_range=narrow)
        np.testing.assert_array_equal(per_axis[:, c], per_tensor)
        np.testing.assert_array_equal(back[:, c], dequantize(per_tensor, scales[c], zero_points[c]))


# ---------------------------------------------------------------- bias


def test_bias_scale_is_the_float32_product() -> None:
    s = bias_scale(np.float32(0.1), np.array([0.3, 0.7], np.float32))
    assert s.dtype == np.float32
    assert s.tolist() == [np.float32(0.1) * np.float32(0.3), np.float32(0.1) * np.float32(0.7)]
    with pytest.raises(UsageError):
        bias_scale([0.1, 0.2], [0.3])
    with pytest.raises(UsageError, match="underflows"):
        bias_scale(1e-30, [1e-30])  # a product below float32's normal range is unusable


def test_quantize_bias_rounds_and_clamps() -> None:
    bias = np.array([1.0, -1.0, 0.1875, -0.1875, 0.0625, 1e30, -1e30], np.float32)
    q = quantize_bias(bias, 0.5, [0.25])  # bias scale 0.125
    assert q.dtype == np.int32
    assert q[:5].tolist() == [8, -8, 2, -2, 1]  # 1.5 and 0.5 steps round away from zero
    # Clamped symmetrically: -(2^31 - 1), never -2^31.
    assert q[5:].tolist() == [INT32_LIMIT, -INT32_LIMIT]


def test_quantize_bias_per_channel() -> None:
    q = quantize_bias([1.0, 1.0, 1.0], 0.5, [1.0, 0.5, 0.25])
    assert q.tolist() == [2, 4, 8]
    with pytest.raises(UsageError):
        quantize_bias([1.0, 1.0], 0.5, [1.0, 0.5, 0.25])
    with pytest.raises(UsageError):
        quantize_bias([[1.0]], 0.5, [1.0])


@FAST
@given(
    hnp.arrays(np.float32, 4, elements=f32(-1e12, 1e12)),
    f32(1e-6, 1),
    hnp.arrays(np.float32, 4, elements=f32(1e-6, 1)),
)
def test_bias_clamp_property(bias, input_scale, weight_scale) -> None:
    q = quantize_bias(bias, input_scale, weight_scale).astype(np.int64)
    assert (np.abs(q) <= INT32_LIMIT).all()
    exact = bias.astype(np.float64) / bias_scale(input_scale, weight_scale).astype(np.float64)
    fits = np.abs(exact) < INT32_LIMIT
    assert (np.abs(q[fits] - exact[fits]) <= 0.5).all()
    assert (q[~fits] == np.sign(exact[~fits]) * INT32_LIMIT).all()


def test_bias_overflow_enlarges_only_overflowing_channels() -> None:
    bias = np.array([1e5, 1.0, -3e4], np.float32)
    weight_scale = np.array([1e-3, 1e-3, 0.5], np.float32)
    mask, enlarged = bias_overflow(bias, 1e-4, weight_scale)
    assert mask.tolist() == [True, False, False]
    assert enlarged.dtype == np.float32
    assert enlarged[1:].tolist() == weight_scale[1:].tolist()
    q = quantize_bias(bias, 1e-4, enlarged)
    assert abs(int(q[0])) < INT32_LIMIT  # fits without clamping
    # The smallest such float32: one ulp less overflows again.
    smaller = enlarged.copy()
    smaller[0] = np.nextafter(enlarged[0], np.float32(0))
    assert bias_overflow(bias, 1e-4, smaller)[0].tolist() == [True, False, False]


def test_bias_overflow_per_tensor_and_headroom() -> None:
    bias = np.array([1e5, -2e5, 1.0], np.float32)
    mask, enlarged = bias_overflow(bias, 1e-4, [1e-3])
    assert mask.tolist() == [True, True, False] and enlarged.shape == (1,)
    assert (np.abs(quantize_bias(bias, 1e-4, enlarged)) < INT32_LIMIT).all()
    # headroom=0.5 keeps biases in the middle half of int32, as TFLite's quantizer.
    mask, half = bias_overflow(bias, 1e-4, [1e-3], headroom=0.5)
    assert half[0] > enlarged[0]
    assert (np.abs(quantize_bias(bias, 1e-4, half)) <= INT32_LIMIT // 2).all()
    fine_mask, same = bias_overflow([1.0], 1.0, [1.0])
    assert fine_mask.tolist() == [False] and same.tolist() == [1.0]
    with pytest.raises(UsageError):
        bias_overflow([1.0], 1.0, [1.0], headroom=0)
    with pytest.raises(DataError):
        bias_overflow([np.inf], 1.0, [1.0])


@FAST
@given(
    hnp.arrays(np.float32, 3, elements=f32(-1e15, 1e15)),
    f32(1e-8, 1),
    hnp.arrays(np.float32, 3, elements=f32(1e-8, 1)),
)
def test_bias_overflow_always_makes_the_bias_fit(bias, input_scale, weight_scale) -> None:
    mask, enlarged = bias_overflow(bias, input_scale, weight_scale)
    q = quantize_bias(bias, input_scale, enlarged).astype(np.int64)
    exact = bias.astype(np.float64) / bias_scale(input_scale, enlarged).astype(np.float64)
    assert (np.abs(exact) < INT32_LIMIT + 0.5).all()
    assert (np.abs(q) <= INT32_LIMIT).all()
    assert (enlarged[~mask] == weight_scale[~mask]).all()
    assert (enlarged[mask] > weight_scale[mask]).all()


# ---------------------------------------------------------------- multipliers


@pytest.mark.parametrize(
    ("real", "mantissa", "shift"),
    [
        (0.5, 2**30, 0),
        (1.0, 2**30, 1),
        (0.75, 3 * 2**29, 0),
        (0.1, 1717986918, -3),  # round(0.8 * 2^31)
        (3.0, 3 * 2**29, 2),
        (1 - 2**-40, 2**30, 1),  # the fraction rounds up to 2^31: halved, shift + 1
        (2.0**-31, 2**30, -30),
        (2.0**-33, 0, 0),  # shift < -31: flushed to zero
        (0.0, 0, 0),
        (-0.75, -3 * 2**29, 0),
    ],
)
def test_quantize_multiplier(real: float, mantissa: int, shift: int) -> None:
    m, s = quantize_multiplier(real)
    assert (int(m), int(s)) == (mantissa, shift)
    assert isinstance(m, np.int32) and isinstance(s, np.int32)


def test_quantize_multiplier_arrays_and_errors() -> None:
    m, s = quantize_multiplier(np.array([[0.5, 1.0], [0.1, 0.0]]))
    assert m.shape == s.shape == (2, 2)
    assert m.tolist() == [[2**30, 2**30], [1717986918, 0]] and s.tolist() == [[0, 1], [-3, 0]]
    with pytest.raises(UsageError):
        quantize_multiplier(float("inf"))


@FAST
@given(st.floats(2.0**-30, 2.0**30))
def test_quantize_multiplier_reconstructs(real: float) -> None:
    m, s = quantize_multiplier(real)
    assert 2**30 <= int(m) < 2**31
    assert abs(int(m) * 2.0 ** (int(s) - 31) - real) <= real * 2.0**-30
