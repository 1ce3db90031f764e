"""TensorFlow's Quantize op: the reference's worked values and what TensorFlow really computes.

Expected values not printed in the reference were recorded from tf.raw_ops.QuantizeV2
(TensorFlow 2.21, TF_ENABLE_ONEDNN_OPTS=0); test_numerics_tf_compare.py re-checks against a live
TensorFlow when one is installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from qtool.errors import DataError, UsageError
from qtool.numerics import RoundMode, tf_quantize

FAST = settings(deadline=None, max_examples=40)
WORKED_INPUT = np.array([-10, -3.5, 0, 2.5, 6, 9, 12], np.float32)


def _run(x, lo, hi, T, mode, **kw):
    r = tf_quantize(np.asarray(x, np.float32), lo, hi, T, mode, **kw)
    return r.output.tolist(), float(r.output_min), float(r.output_max)


@pytest.mark.parametrize(
    ("T", "mode", "narrow", "expected", "out_range"),
    [
        ("qint8", "MIN_COMBINED", False, [-128, -41, 6, 40, 87, 127, 127], (-10, 9)),
        ("quint8", "MIN_COMBINED", False, [0, 87, 134, 168, 215, 255, 255], (-10, 9)),
        ("qint8", "SCALED", False, [-128, -45, 0, 32, 77, 115, 127], (-10, 9.921875)),
        ("quint8", "SCALED", False, [0, 0, 0, 71, 170, 255, 255], (0, 9)),
        ("qint8", "SCALED", True, [-127, -44, 0, 32, 76, 114, 127], (-10, 10)),
    ],
)
def test_reference_worked_values(T, mode, narrow, expected, out_range) -> None:
    result = tf_quantize(
        WORKED_INPUT, -10.0, 9.0, T, mode, narrow_range=narrow, ensure_minimum_range=0
    )
    assert result.output.tolist() == expected
    assert result.output.dtype == (np.int8 if T == "qint8" else np.uint8)
    assert (float(result.output_min), float(result.output_max)) == out_range


def test_scaled_reference_examples() -> None:
    # -10/9: the min side wins (128/10 = 12.8 < 127/9), max_range becomes 127/12.8.
    _, lo, hi = _run(WORKED_INPUT, -10.0, 9.0, "qint8", "SCALED", ensure_minimum_range=0)
    assert (lo, hi) == (-10.0, 9.921875) and hi == np.float32(127 / 12.8)
    # -10/10: the max side wins (127/10 = 12.7), min_range becomes -128/12.7 = -10.0787...
    x = [-10, -3.5, 0, 2.5, 6, 9, 10, 12]
    out, lo, hi = _run(x, -10.0, 10.0, "qint8", "SCALED", ensure_minimum_range=0)
    assert out == [-127, -44, 0, 32, 76, 114, 127, 127]
    assert lo == pytest.approx(-10.0787, abs=1e-4) and lo == np.float32(-128 / np.float32(12.7))
    assert hi == 10.0


def test_min_combined_quint8_zero_to_six() -> None:
    # Every value is multiplied by 255/6 and cast; qint8 additionally subtracts 128.
    x = [0, 1, 3, 6, 7, -1, 2.9]
    assert _run(x, 0.0, 6.0, "quint8", "MIN_COMBINED") == ([0, 43, 128, 255, 255, 0, 123], 0, 6)
    assert _run(x, 0.0, 6.0, "qint8", "MIN_COMBINED") == (
        [-128, -86, -1, 127, 127, -128, -5],
        0,
        6,
    )


def test_min_first_matches_min_combined_on_worked_values() -> None:
    for T in ("qint8", "quint8"):
        first = tf_quantize(WORKED_INPUT, -10, 9, T, "MIN_FIRST", ensure_minimum_range=0)
        combined = tf_quantize(WORKED_INPUT, -10, 9, T, "MIN_COMBINED", ensure_minimum_range=0)
        assert first.output.tolist() == combined.output.tolist()


@pytest.mark.parametrize("T", ["qint8", "quint8", "qint16", "quint16"])
def test_min_first_reference_formula(T: str) -> None:
    info = np.iinfo({"qint8": np.int8, "quint8": np.uint8, "qint16": np.int16}.get(T, np.uint16))
    steps = 2.0 ** (8 * info.dtype.itemsize)
    range_scale = steps / ((9.0 - -10.0) * (steps / (steps - 1)))
    x = WORKED_INPUT.astype(np.float64)

    def std_round(v):  # the reference's round is C's: half away from zero
        return np.sign(v) * np.floor(np.abs(v) + 0.5)

    formula = std_round(x * range_scale) - std_round(-10.0 * range_scale) + info.min
    expected = np.clip(formula, info.min, info.max)
    result = tf_quantize(WORKED_INPUT, -10, 9, T, "MIN_FIRST", ensure_minimum_range=0)
    assert result.output.tolist() == expected.tolist()


def test_wider_types_recorded_from_tensorflow() -> None:
    kw = {"ensure_minimum_range": 0}
    assert _run(WORKED_INPUT, -10, 9, "qint16", "SCALED", **kw) == (
        [-32768, -11469, 0, 8192, 19661, 29491, 32767],
        -10.0,
        float(np.float32(9.999695)),
    )
    assert _run(WORKED_INPUT, -10, 9, "quint16", "MIN_COMBINED", **kw)[0] == [
        0,
        22420,
        34492,
        43115,
        55187,
        65535,
        65535,
    ]
    assert _run(WORKED_INPUT, -10, 9, "qint32", "MIN_FIRST", **kw)[0] == [
        -2147483648,
        -678152640,
        113025536,
        678152832,
        1469330944,
        2147483520,
        2147483520,
    ]


def test_qint32_top_of_range_wraps_like_tensorflow() -> None:
    # In float32 the top of the range computes to exactly 2^31, which x86 converts to -2^31.
    out, lo, hi = _run([9, 10, 12, -10, -12], -10, 9, "qint32", "SCALED", ensure_minimum_range=0)
    assert out == [1932735360, -(2**31), -(2**31), -(2**31), -(2**31)]
    assert (lo, hi) == (-10.0, 10.0)
    out, _, _ = _run([-10, 8.99, 9, 12], -10, 9, "qint32", "MIN_COMBINED", ensure_minimum_range=0)
    assert out == [-(2**31), 2145223168, -(2**31), -(2**31)]


def test_half_to_even_in_scaled_mode() -> None:
    x = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]
    even = _run(x, -128, 127, "qint8", "SCALED", round_mode="HALF_TO_EVEN", ensure_minimum_range=0)
    away = _run(x, -128, 127, "qint8", "SCALED", ensure_minimum_range=0)
    assert even[0] == [0, 2, 2, 0, -2, -2, 126]
    assert away[0] == [1, 2, 3, -1, -2, -3, 127]


def test_ensure_minimum_range() -> None:
    # [0, 0] is widened to [0, 0.01]; [100, 100] keeps 0 and so is already wide.
    assert _run([0, 0.005, 0.01, 1], 0, 0, "quint8", "MIN_COMBINED") == (
        [0, 128, 255, 255],
        0.0,
        float(np.float32(0.01)),
    )
    assert _run([0, 50, 100], 100, 100, "quint8", "MIN_FIRST") == ([0, 128, 255], 0, 100)
    # The range always includes 0: [-1, -0.5] becomes [-1, 0].
    assert _run([0, 0.5, 1, 2], -1, -0.5, "qint8", "MIN_COMBINED") == ([127] * 4, -1, 0)


def test_denormals_are_flushed_like_tensorflow() -> None:
    # SCALED quint8 narrow on [0, 0]: min_range = 1 / FLT_MAX is subnormal, TensorFlow flushes it.
    out, lo, hi = _run(
        [-1, 0, 1e-37, 1], 0, 0, "quint8", "SCALED", narrow_range=True, ensure_minimum_range=0
    )
    assert out == [0, 0, 34, 255]
    assert lo == 0.0 and hi == float(np.float32(7.493777e-37))
    # A subnormal range bound counts as 0.
    out, lo, _ = _run([-1, 1e-39], -1e-39, 0, "qint8", "SCALED", ensure_minimum_range=0)
    assert out == [-128, 0] and lo < 0


def test_per_axis_recorded_from_tensorflow() -> None:
    x = np.array([[-1, 0.5, 1, 3], [-2, 0.25, 2, -3], [-0.1, 0.05, 0.1, 5]], np.float32)
    lo, hi = [-1, -2, -0.1], [1, 2, 0.1]
    combined = tf_quantize(x, lo, hi, "qint8", "MIN_COMBINED", axis=0, ensure_minimum_range=0)
    assert combined.output.tolist() == [
        [-128, 63, 127, 127],
        [-128, 15, 127, -128],
        [-128, 63, 127, 127],
    ]
    assert combined.output_min.shape == (3,)
    scaled = tf_quantize(x, lo, hi, "qint8", "SCALED", axis=0, ensure_minimum_range=0)
    assert scaled.output.tolist() == [
        [-127, 64, 127, 127],
        [-127, 16, 127, -128],
        [-127, 64, 127, 127],
    ]
    expected_min = np.array([-1.007874, -2.015748, -0.1007874], np.float32)
    np.testing.assert_array_equal(scaled.output_min, expected_min)
    np.testing.assert_array_equal(scaled.output_max, np.array(hi, np.float32))


@FAST
@given(
    hnp.arrays(np.float32, (3, 4, 2), elements=st.floats(-20, 20, width=32)),
    st.lists(
        st.tuples(st.floats(-15, 0, width=32), st.floats(0, 15, width=32)), min_size=4, max_size=4
    ),
    st.sampled_from(["MIN_COMBINED", "SCALED"]),
    st.sampled_from(["qint8", "quint8", "qint16"]),
    st.booleans(),
)
def test_per_axis_equals_per_tensor_slice_by_slice(x, ranges, mode, T, narrow) -> None:
    lo = [r[0] for r in ranges]
    hi = [r[1] for r in ranges]
    per_axis = tf_quantize(x, lo, hi, T, mode, narrow_range=narrow, axis=-2)
    for c in range(4):
        per_tensor = tf_quantize(x[:, c, :], lo[c], hi[c], T, mode, narrow_range=narrow)
        assert per_axis.output[:, c, :].tolist() == per_tensor.output.tolist()
        assert per_axis.output_min[c] == per_tensor.output_min
        assert per_axis.output_max[c] == per_tensor.output_max


@FAST
@given(
    hnp.arrays(np.float32, 30, elements=st.floats(-50, 50, width=32)),
    st.floats(-40, 0, width=32),
    st.floats(0.0625, 40, width=32),
    st.sampled_from(["MIN_COMBINED", "MIN_FIRST", "SCALED"]),
    st.sampled_from(["qint8", "quint8", "qint16", "quint16"]),
)
def test_monotonic_and_within_type(x, lo, hi, mode, T) -> None:
    result = tf_quantize(np.sort(x), lo, hi, T, mode)
    out = result.output.astype(np.int64)
    assert (np.diff(out) >= 0).all()
    info = np.iinfo(result.output.dtype)
    assert info.min <= out.min() and out.max() <= info.max
    assert float(result.output_min) <= 0 <= float(result.output_max)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"mode": "MIN_FIRST", "round_mode": "HALF_TO_EVEN"}, "only supported in SCALED"),
        ({"mode": "MIN_COMBINED", "round_mode": RoundMode.HALF_TO_EVEN}, "only supported"),
        ({"mode": "SCALED", "round_mode": "half-up"}, "no round mode half-up"),
        ({"mode": "NEAREST"}, "unknown TensorFlow quantize mode"),
        ({"T": "qint4"}, "unknown TensorFlow quantized type"),
        ({"T": "int8"}, "unknown TensorFlow quantized type"),
        ({"min_range": 1.0, "max_range": 0.0}, "min_range must be <= max_range"),
        ({"min_range": float("nan")}, "must be finite"),
        ({"max_range": float("inf")}, "must be finite"),
        ({"min_range": [-1, -2]}, "must be single numbers"),
        ({"ensure_minimum_range": -1}, "ensure_minimum_range"),
        (
            {"mode": "MIN_FIRST", "axis": 0, "min_range": [-1] * 3, "max_range": [1] * 3},
            "no per-axis form",
        ),
        ({"axis": 0, "min_range": [-1, -1], "max_range": [1, 1]}, "need 3 values"),
        ({"axis": 2, "min_range": [-1] * 3, "max_range": [1] * 3}, "out of range"),
        ({"min_range": 0.0, "max_range": 0.0, "ensure_minimum_range": 0}, "NaN or infinity"),
    ],
)
def test_rejected_parameters(kwargs: dict, error: str) -> None:
    args = {
        "x": np.zeros((3, 2), np.float32),
        "min_range": -1.0,
        "max_range": 1.0,
        "T": "qint8",
        "mode": "MIN_COMBINED",
    } | kwargs
    with pytest.raises(UsageError, match=error):
        tf_quantize(**args)


def test_nan_input_is_refused() -> None:
    with pytest.raises(DataError, match="NaN"):
        tf_quantize([0.0, float("nan")], -1, 1, "qint8", "SCALED")


def test_infinities_saturate() -> None:
    for mode in ("MIN_COMBINED", "MIN_FIRST", "SCALED"):
        out, _, _ = _run([-np.inf, np.inf], -1, 1, "qint8", mode)
        assert out == [-128, 127]


def test_names_are_case_insensitive() -> None:
    a = tf_quantize(WORKED_INPUT, -10, 9, "QINT8", "min-combined").output
    b = tf_quantize(WORKED_INPUT, -10, 9, "qint8", "MIN_COMBINED").output
    assert a.tolist() == b.tolist()
