"""Rounding modes: the nGraph table, name parsing and exactness on hard values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtool.errors import UsageError
from qtool.numerics import RoundMode, round_values

FAST = settings(deadline=None, max_examples=60)

# The reference's table: mode -> (round(2.5), round(-3.5)), by nGraph name.
NGRAPH_TABLE = {
    "ROUND_NEAREST_TOWARD_INFINITY": (RoundMode.HALF_AWAY_FROM_ZERO, 3, -4),
    "ROUND_NEAREST_TOWARD_ZERO": (RoundMode.HALF_TOWARD_ZERO, 2, -3),
    "ROUND_NEAREST_UPWARD": (RoundMode.HALF_UP, 3, -3),
    "ROUND_NEAREST_DOWNWARD": (RoundMode.HALF_DOWN, 2, -4),
    "ROUND_NEAREST_TOWARD_EVEN": (RoundMode.HALF_TO_EVEN, 2, -4),
    "ROUND_TOWARD_INFINITY": (RoundMode.AWAY_FROM_ZERO, 3, -4),
    "ROUND_TOWARD_ZERO": (RoundMode.TOWARD_ZERO, 2, -3),
    "ROUND_UP": (RoundMode.UP, 3, -3),
    "ROUND_DOWN": (RoundMode.DOWN, 2, -4),
}


@pytest.mark.parametrize("ngraph_name", sorted(NGRAPH_TABLE))
def test_reference_table(ngraph_name: str) -> None:
    mode, at_2_5, at_minus_3_5 = NGRAPH_TABLE[ngraph_name]
    assert RoundMode.parse(ngraph_name) is mode
    for dtype in (np.float16, np.float32, np.float64):
        result = round_values(np.array([2.5, -3.5], dtype), mode)
        assert result.dtype == dtype
        assert result.tolist() == [at_2_5, at_minus_3_5]


@pytest.mark.parametrize("mode", list(RoundMode))
def test_parse_accepts_cli_and_enum_names(mode: RoundMode) -> None:
    assert RoundMode.parse(mode.cli_name) is mode
    assert RoundMode.parse(mode.name) is mode
    assert RoundMode.parse(mode) is mode


def test_parse_accepts_tensorflow_names() -> None:
    assert RoundMode.parse("HALF_AWAY_FROM_ZERO") is RoundMode.HALF_AWAY_FROM_ZERO
    assert RoundMode.parse("HALF_TO_EVEN") is RoundMode.HALF_TO_EVEN


def test_parse_rejects_unknown_names() -> None:
    with pytest.raises(UsageError, match="half-away-from-zero"):
        RoundMode.parse("sideways")


def test_near_half_values_are_not_ties() -> None:
    # 0.49999997 + 0.5 rounds to 1.0 in float32: rounding by "add 0.5, floor" gets it wrong.
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    x = np.array([below_half, -below_half], np.float32)
    for mode in (RoundMode.HALF_AWAY_FROM_ZERO, RoundMode.HALF_UP, RoundMode.HALF_TO_EVEN):
        assert round_values(x, mode).tolist() == [0, 0]


def test_large_and_special_values() -> None:
    odd = np.float32(2**23 + 1)  # an odd integer where x + 0.5 is not representable
    x = np.array([odd, -odd, np.inf, -np.inf], np.float32)
    for mode in RoundMode:
        assert round_values(x, mode).tolist() == [odd, -odd, np.inf, -np.inf]
    assert np.isnan(round_values(np.array([np.nan]), RoundMode.HALF_UP)).all()


def test_integers_pass_through_and_other_dtypes_fail() -> None:
    assert round_values(np.array([3, -4], np.int8), RoundMode.UP).tolist() == [3, -4]
    with pytest.raises(UsageError):
        round_values(np.array(["a"]), RoundMode.UP)


finite = st.floats(-1e6, 1e6, allow_nan=False, width=32)
NEAREST = [m for m in RoundMode if m.name.startswith("HALF_")]


@FAST
@given(st.lists(finite, min_size=1, max_size=20))
def test_nearest_modes_are_within_half(values: list[float]) -> None:
    x = np.array(values, np.float64)
    for mode in NEAREST:
        result = round_values(x, mode)
        assert (np.abs(result - x) <= 0.5).all()
        off_tie = np.abs(x - np.trunc(x)) != 0.5
        assert (result[off_tie] == np.rint(x[off_tie])).all()


@FAST
@given(st.lists(finite, min_size=1, max_size=20))
def test_directed_modes(values: list[float]) -> None:
    x = np.array(values, np.float64)
    assert (round_values(x, RoundMode.UP) == np.ceil(x)).all()
    assert (round_values(x, RoundMode.DOWN) == np.floor(x)).all()
    assert (round_values(x, RoundMode.TOWARD_ZERO) == np.trunc(x)).all()
    away = round_values(x, RoundMode.AWAY_FROM_ZERO)
    assert (np.abs(away) == np.ceil(np.abs(x))).all()
    assert (np.sign(away) * np.sign(x) >= 0).all()


@FAST
@given(st.integers(-10_000, 10_000))
def test_ties(k: int) -> None:
    tie = np.array([k + 0.5])
    expected = {
        RoundMode.HALF_AWAY_FROM_ZERO: k + 1 if k >= 0 else k,
        RoundMode.HALF_TOWARD_ZERO: k if k >= 0 else k + 1,
        RoundMode.HALF_UP: k + 1,
        RoundMode.HALF_DOWN: k,
        RoundMode.HALF_TO_EVEN: k if k % 2 == 0 else k + 1,
    }
    for mode, value in expected.items():
        assert round_values(tie, mode)[0] == value
