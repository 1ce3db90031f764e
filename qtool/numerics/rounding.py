"""Rounding modes: the nine of the nGraph table, with the names users type for them."""

from __future__ import annotations

import enum
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from qtool.errors import UsageError


class RoundMode(enum.Enum):
    """How a real value becomes an integer.

    The ``HALF_*`` modes round to the nearest integer and differ only on exact ties; the other four
    are directed roundings (not "nearest" at all).
    """

    HALF_AWAY_FROM_ZERO = "half-away-from-zero"
    HALF_TOWARD_ZERO = "half-toward-zero"
    HALF_UP = "half-up"
    HALF_DOWN = "half-down"
    HALF_TO_EVEN = "half-to-even"
    AWAY_FROM_ZERO = "away-from-zero"
    TOWARD_ZERO = "toward-zero"
    UP = "up"
    DOWN = "down"

    @property
    def cli_name(self) -> str:
        """The name the command line uses ("half-to-even")."""
        return self.value

    @classmethod
    def parse(cls, text: str | RoundMode) -> RoundMode:
        """Accept a CLI name, an enum name, an nGraph ``ROUND_*`` name or a TensorFlow name."""
        if isinstance(text, RoundMode):
            return text
        key = str(text).strip().upper().replace("-", "_")
        if key in _ALIASES:
            return _ALIASES[key]
        if key in cls.__members__:
            return cls[key]
        choices = ", ".join(mode.cli_name for mode in cls)
        raise UsageError(f"unknown round mode {text!r} (choose from {choices})")


# nGraph's names; TensorFlow's two (HALF_AWAY_FROM_ZERO, HALF_TO_EVEN) are already member names.
_ALIASES = {
    "ROUND_NEAREST_TOWARD_INFINITY": RoundMode.HALF_AWAY_FROM_ZERO,
    "ROUND_NEAREST_TOWARD_ZERO": RoundMode.HALF_TOWARD_ZERO,
    "ROUND_NEAREST_UPWARD": RoundMode.HALF_UP,
    "ROUND_NEAREST_DOWNWARD": RoundMode.HALF_DOWN,
    "ROUND_NEAREST_TOWARD_EVEN": RoundMode.HALF_TO_EVEN,
    "ROUND_TOWARD_INFINITY": RoundMode.AWAY_FROM_ZERO,
    "ROUND_TOWARD_ZERO": RoundMode.TOWARD_ZERO,
    "ROUND_UP": RoundMode.UP,
    "ROUND_DOWN": RoundMode.DOWN,
}


def _away_from_zero(a: np.ndarray) -> np.ndarray:
    return np.copysign(np.ceil(np.abs(a)), a)


_DIRECTED: dict[RoundMode, Callable[[np.ndarray], np.ndarray]] = {
    RoundMode.AWAY_FROM_ZERO: _away_from_zero,
    RoundMode.TOWARD_ZERO: np.trunc,
    RoundMode.UP: np.ceil,
    RoundMode.DOWN: np.floor,
}

# For the nearest modes: what an exact tie becomes. Off ties every nearest mode agrees with rint.
_TIE: dict[RoundMode, Callable[[np.ndarray], np.ndarray]] = {
    RoundMode.HALF_AWAY_FROM_ZERO: _away_from_zero,
    RoundMode.HALF_TOWARD_ZERO: np.trunc,
    RoundMode.HALF_UP: np.ceil,
    RoundMode.HALF_DOWN: np.floor,
    RoundMode.HALF_TO_EVEN: np.rint,
}


def round_values(x: ArrayLike, mode: RoundMode | str) -> np.ndarray:
    """Round every element with ``mode``, exactly, keeping the floating dtype of ``x``.

    Ties are detected on the exact fractional part (``x - trunc(x)`` has no rounding error), not by
    adding 0.5, which misrounds values such as 0.49999997 in float32.
    """
    mode = RoundMode.parse(mode)
    a = np.asarray(x)
    if a.dtype.kind in "biu":
        return a.copy()
    if a.dtype.kind != "f":
        raise UsageError(f"cannot round values of dtype {a.dtype}")
    if mode in _DIRECTED:
        return _DIRECTED[mode](a)
    with np.errstate(invalid="ignore"):
        is_tie = np.abs(a - np.trunc(a)) == 0.5
    return np.where(is_tie, _TIE[mode](a), np.rint(a))
