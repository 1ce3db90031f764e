"""Symmetric few-bit weights (qtool/numerics/lowbit.py): ranges, scales, blocks, bfloat16
mantissas, and the scale search for weights that are their op's output."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from qtool.errors import UsageError
from qtool.numerics.lowbit import element_scales, quantize_weights, round_to_mantissa

RNG = np.random.default_rng(3)


@given(st.floats(min_value=1e-30, max_value=1e30, allow_nan=False))
def test_rounding_to_seven_mantissa_bits_is_what_bfloat16_holds(value: float) -> None:
    found = float(round_to_mantissa(np.array([value], np.float32), 7)[0])
    bits = np.array([found], np.float32).view(np.uint32)[0]
    assert bits & 0xFFFF == 0  # a bfloat16 value: the low 16 bits are zero
    assert abs(found - np.float32(value)) <= abs(np.float32(value)) * 2**-8


@pytest.mark.parametrize(("bits", "top"), [(8, 127), (4, 7)])
def test_symmetric_narrow_values_and_largest_magnitude_scales(bits: int, top: int) -> None:
    weights = RNG.standard_t(3, (16, 40)).astype(np.float32)
    q = quantize_weights(weights, bits, axis=0)
    assert q.values.min() >= -top and q.values.max() <= top
    np.testing.assert_allclose(q.scale, np.abs(weights).max(axis=1) / top, rtol=1e-6)
    assert np.abs(q.real() - weights).max() <= q.scale.max() / 2 * (1 + 1e-6)


def test_blocks_have_one_bfloat16_float16_scale_each() -> None:
    weights = RNG.normal(0, 0.1, (8, 128)).astype(np.float32)
    q = quantize_weights(weights, 4, block_size=32, mantissa_bits=7)
    assert q.scale.shape == (8, 4)
    np.testing.assert_array_equal(q.scale, round_to_mantissa(q.scale, 7))
    np.testing.assert_array_equal(q.scale.astype(np.float16).astype(np.float32), q.scale)
    assert element_scales(q).shape == weights.shape
    with pytest.raises(UsageError, match="do not tile"):
        quantize_weights(weights, 4, block_size=48)


def test_the_scale_search_lowers_the_squared_error_of_heavy_tailed_weights() -> None:
    weights = RNG.standard_t(2, (32, 64)).astype(np.float32)
    plain = quantize_weights(weights, 4, axis=0)
    searched = quantize_weights(weights, 4, axis=0, search=True)
    error = [np.sum((q.real() - weights) ** 2) for q in (plain, searched)]
    assert error[1] < 0.97 * error[0]  # t(2): 4.5% less, measured


def test_an_all_zero_channel_gets_scale_one() -> None:
    weights = np.zeros((2, 8), np.float32)
    weights[1] = 1.0
    q = quantize_weights(weights, 4, axis=0)
    assert q.scale[0] == 1.0 and not q.values[0].any()
