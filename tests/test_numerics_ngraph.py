"""nGraph's Quantize: the rounding table, axis sets and saturation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtool.errors import DataError, UsageError
from qtool.numerics import RoundMode, ngraph_quantize

FAST = settings(deadline=None, max_examples=40)

# The reference's table: round(2.5) and round(-3.5) for every nGraph mode.
TABLE = {
    "ROUND_NEAREST_TOWARD_INFINITY": (3, -4),
    "ROUND_NEAREST_TOWARD_ZERO": (2, -3),
    "ROUND_NEAREST_UPWARD": (3, -3),
    "ROUND_NEAREST_DOWNWARD": (2, -4),
    "ROUND_NEAREST_TOWARD_EVEN": (2, -4),
    "ROUND_TOWARD_INFINITY": (3, -4),
    "ROUND_TOWARD_ZERO": (2, -3),
    "ROUND_UP": (3, -3),
    "ROUND_DOWN": (2, -4),
}


@pytest.mark.parametrize("mode", sorted(TABLE))
def test_reference_table_through_quantize(mode: str) -> None:
    expected = list(TABLE[mode])
    assert ngraph_quantize([2.5, -3.5], 1.0, 0, [], np.int8, mode).tolist() == expected
    # The same ties reached by division, with a zero point added after rounding.
    halves = ngraph_quantize(np.array([1.25, -1.75], np.float32), 0.5, 10, [], np.int32, mode)
    assert halves.tolist() == [v + 10 for v in expected]
    assert halves.dtype == np.int32


def test_single_axis() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    out = ngraph_quantize(x, [1.0, 2.0, 4.0], [0, 1, -1], [1], np.int8, "half-to-even")
    # 5 / 2 = 2.5 and 6 / 4 = 1.5 are ties: to even (2, 2), then the zero points 1 and -1.
    assert out.tolist() == [[1, 2, 0], [4, 3, 1]]
    rows = ngraph_quantize(x, [1.0, 0.5], [0, 0], [-2], np.uint8, RoundMode.DOWN)
    assert rows.tolist() == [[1, 2, 3], [8, 10, 12]]


def test_several_axes_and_no_axis() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    scale = np.arange(1, 9, dtype=np.float32).reshape(2, 4)  # x projected onto axes {0, 2}
    zero_point = np.full((2, 4), 3)
    out = ngraph_quantize(x, scale, zero_point, [2, 0], np.int8, "toward-zero")
    expected = np.trunc(x / scale[:, None, :]) + 3
    np.testing.assert_array_equal(out, expected)
    assert ngraph_quantize(x, 2.0, 0, (), np.int8, "up").tolist() == np.ceil(x / 2).tolist()


def test_saturation() -> None:
    x = np.array([-1e9, -200.0, 200.0, 1e9, np.inf, -np.inf])
    assert ngraph_quantize(x, 1.0, 0, [], np.int8, "up").tolist() == [
        -128,
        -128,
        127,
        127,
        127,
        -128,
    ]
    assert ngraph_quantize(x, 1.0, 5, [], np.uint8, "up").tolist() == [0, 0, 205, 255, 255, 0]
    assert ngraph_quantize(x, 1.0, 0, [], np.int32, "up").tolist()[0] == -(10**9)


def test_division_in_the_input_type() -> None:
    # float16: 0.3 / 0.1 is exactly 3 after both are rounded to float16 (float64 gives 2.9999...).
    x16 = np.array([0.3], np.float16)
    assert ngraph_quantize(x16, 0.1, 0, [], np.int8, "down").tolist() == [3]
    assert ngraph_quantize(np.array([0.3]), 0.1, 0, [], np.int8, "down").tolist() == [2]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (([1.0, 2.0], [1.0, 2.0, 3.0], 0, [0], np.int8, "up"), UsageError),
        (([1.0, 2.0], 0.0, 0, [], np.int8, "up"), UsageError),
        (([1.0, 2.0], -1.0, 0, [], np.int8, "up"), UsageError),
        ((np.array([1.0], np.float16), 1e-9, 0, [], np.int8, "up"), UsageError),  # 0 in float16
        (([1.0, 2.0], 1.0, 300, [], np.int8, "up"), UsageError),
        (([1.0, 2.0], 1.0, 0, [1], np.int8, "up"), UsageError),
        ((np.ones((2, 2)), 1.0, 0, [0, -2], np.int8, "up"), UsageError),
        (([1.0, 2.0], 1.0, 0, [], np.float32, "up"), UsageError),
        (([1.0, 2.0], 1.0, 0, [], np.int8, "nearest"), UsageError),
        (([1.0, np.nan], 1.0, 0, [], np.int8, "up"), DataError),
    ],
)
def test_rejected_arguments(args, error) -> None:
    with pytest.raises(error):
        ngraph_quantize(*args)


@FAST
@given(
    hnp.arrays(np.float64, (3, 2, 4), elements=st.floats(-500, 500)),
    hnp.arrays(np.float64, (3, 4), elements=st.floats(0.01, 10)),
    hnp.arrays(np.int64, (3, 4), elements=st.integers(-100, 100)),
    st.sampled_from(list(RoundMode)),
)
def test_axes_equal_slice_by_slice(x, scale, zero_point, mode) -> None:
    out = ngraph_quantize(x, scale, zero_point, [0, 2], np.int8, mode)
    for i in range(3):
        for k in range(4):
            one = ngraph_quantize(x[i, :, k], scale[i, k], zero_point[i, k], [], np.int8, mode)
            np.testing.assert_array_equal(out[i, :, k], one)
