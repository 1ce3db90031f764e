"""Validation and broadcasting shared by the quantization definitions."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from qtool.errors import DataError, UsageError
from qtool.numerics.rounding import RoundMode, round_values


def normalize_axis(axis: int, ndim: int) -> int:
    """Numpy-style axis (negative counts from the end), checked against ``ndim``."""
    if not -ndim <= axis < ndim:
        raise UsageError(f"axis {axis} is out of range for an array with {ndim} dimensions")
    return axis % ndim


def normalize_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """Axes counted from 0 (negative ones from the end); UsageError when one is out of range or
    two name the same dimension."""
    normalized = tuple(normalize_axis(int(a), ndim) for a in axes)
    if len(set(normalized)) != len(normalized):
        raise UsageError(f"axes {list(axes)} name the same dimension twice")
    return normalized


def float_data(x: ArrayLike, dtype: np.dtype | type | None = None) -> np.ndarray:
    """Real-valued input as a floating array; NaN has no quantized value, so it is refused."""
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise DataError(f"expected real numbers, got an array of dtype {a.dtype}")
    with np.errstate(over="ignore"):  # values beyond the target type become +-inf: they saturate
        a = a.astype(dtype or (a.dtype if a.dtype.kind == "f" else np.float64), copy=False)
    if np.isnan(a).any():
        raise DataError("the data contains NaN, which has no quantized value")
    return a


def positive_scale(scale: ArrayLike, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """Scales as a 1-D array of ``dtype``; each must be finite and > 0 after the conversion."""
    try:
        s = np.atleast_1d(np.asarray(scale, dtype=np.float64))
    except (TypeError, ValueError):
        raise UsageError(f"scale must be a number or a list of numbers, got {scale!r}") from None
    if s.ndim != 1 or s.size == 0:
        raise UsageError(f"scale must be a number or a 1-D list of numbers, got shape {s.shape}")
    with np.errstate(over="ignore", under="ignore"):
        converted = s.astype(dtype)
    if not (np.isfinite(converted) & (converted > 0)).all():
        raise UsageError(
            f"scale must be finite and > 0 (as {np.dtype(dtype).name}), got {s.tolist()}"
        )
    return converted


def integer_param(values: ArrayLike, name: str, lo: int, hi: int) -> np.ndarray:
    """Zero points (or other integer parameters) as a 1-D int64 array within [lo, hi]."""
    v = np.atleast_1d(np.asarray(values))
    if v.ndim != 1 or v.size == 0:
        raise UsageError(
            f"{name} must be an integer or a 1-D list of integers, got shape {v.shape}"
        )
    if v.dtype.kind == "f" and (np.isfinite(v) & (v == np.round(v))).all():
        v = v.astype(np.int64)
    if v.dtype.kind not in "iu":
        raise UsageError(f"{name} must be integers, got {v.tolist()}")
    v = v.astype(np.int64)
    if (v < lo).any() or (v > hi).any():
        raise UsageError(f"{name} {v.tolist()} is outside [{lo}, {hi}]")
    return v


def along_axes(param: np.ndarray, ndim: int, axes: tuple[int, ...]) -> np.ndarray:
    """Reshape a parameter laid out over ``axes`` so that it broadcasts against an ndim array."""
    shape = [1] * ndim
    for axis, size in zip(axes, param.shape, strict=True):
        shape[axis] = size
    return param.reshape(shape)


def per_slice(
    param: np.ndarray, name: str, x_shape: tuple[int, ...], axis: int | None
) -> np.ndarray:
    """Broadcastable view of a 1-D per-tensor (size 1) or per-axis (size C or 1) parameter."""
    if axis is None:
        if param.size != 1:
            raise UsageError(f"{name} has {param.size} values but no axis was given (per-tensor)")
        return param.reshape(())
    channels = x_shape[axis]
    if param.size not in (1, channels):
        raise UsageError(
            f"{name} has {param.size} values but axis {axis} has {channels} slices "
            "(give 1 value or one per slice)"
        )
    return along_axes(param, len(x_shape), (axis,))


def saturating_round(
    real: np.ndarray, zero_point: np.ndarray, qmin: int, qmax: int, mode: RoundMode
) -> np.ndarray:
    """``clamp(round(real) + zero_point, qmin, qmax)`` as int64, without integer overflow.

    Clamping happens on the float before the zero point is added, so huge or infinite values
    saturate instead of wrapping.
    """
    rounded = np.clip(round_values(real, mode), qmin - zero_point, qmax - zero_point)
    return rounded.astype(np.int64) + zero_point
