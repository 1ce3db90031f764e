"""DirectML's DEQUANTIZE_LINEAR."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.errors import DataError, UsageError
from qtool.numerics import dml_dequantize_linear

INPUT_TYPES = [np.int32, np.int16, np.int8, np.uint32, np.uint16, np.uint8]


@pytest.mark.parametrize("dtype", INPUT_TYPES)
def test_every_input_type(dtype) -> None:
    q = np.array([0, 5, 100], dtype)
    out = dml_dequantize_linear(q, np.float32(0.5), np.array(4, dtype))
    assert out.dtype == np.float32
    assert out.tolist() == [-2.0, 0.5, 48.0]


def test_zero_point_is_optional() -> None:
    out = dml_dequantize_linear(np.array([-3, 3], np.int8), np.float32(0.25))
    assert out.tolist() == [-0.75, 0.75]


def test_scale_type_decides_the_output_type() -> None:
    q = np.array([1, 2, 3], np.uint8)
    half = dml_dequantize_linear(q, np.array([0.1], np.float16), np.uint8(1))
    assert half.dtype == np.float16
    assert half.tolist() == [0.0, float(np.float16(0.1)), float(np.float16(2 * np.float16(0.1)))]
    assert dml_dequantize_linear(q, 0.1).dtype == np.float32  # a Python float is float32
    assert dml_dequantize_linear(q, np.float64(0.1)).dtype == np.float32  # a float subclass


def test_per_axis_broadcast() -> None:
    q = np.array([[10, 10, 10], [20, 20, 20]], np.int16)
    scale = np.array([[1.0], [0.5]], np.float32)  # same rank as the input, broadcast per row
    zero_point = np.array([[0, 1, 2]], np.int16)  # and per column
    out = dml_dequantize_linear(q, scale, zero_point)
    assert out.tolist() == [[10, 9, 8], [10, 9.5, 9]]


def test_int32_extremes_are_exact_in_the_difference() -> None:
    q = np.array([2**31 - 1], np.int32)
    out = dml_dequantize_linear(q, np.float32(1.0), np.array(-(2**31), np.int32))
    assert out.tolist() == [float(np.float32(2**32 - 1))]


@pytest.mark.parametrize(
    ("x", "scale", "zero_point", "error", "match"),
    [
        (np.array([1], np.int8), np.float32(0.0), None, UsageError, "finite and > 0"),
        (np.array([1], np.int8), np.array([1.0, 0.0], np.float32), None, UsageError, "> 0"),
        (np.array([1], np.int8), np.float32(np.inf), None, UsageError, "finite"),
        (np.array([1], np.int8), np.array([1.0]), None, UsageError, "float32 or float16"),
        (np.array([1], np.int8), np.float32(1), np.array(1, np.uint8), UsageError, "input's type"),
        (np.array([1], np.int8), np.float32(1), 300, UsageError, "does not fit"),
        (np.ones(3, np.int8), np.ones(2, np.float32), None, UsageError, "broadcast"),
        (np.ones(3, np.int8), np.float32(1), np.ones((2, 3), np.int8), UsageError, "broadcast"),
        (np.ones(3, np.int64), np.float32(1), None, DataError, "DirectML dequantizes"),
        (np.ones(3, np.float32), np.float32(1), None, DataError, "DirectML dequantizes"),
    ],
)
def test_rejected_arguments(x, scale, zero_point, error, match) -> None:
    with pytest.raises(error, match=match):
        dml_dequantize_linear(x, scale, zero_point)
