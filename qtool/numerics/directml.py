"""DirectML's ``DEQUANTIZE_LINEAR``: ``(input - zero_point) * scale``."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from qtool.errors import DataError, UsageError
from qtool.numerics._common import positive_scale

DML_INPUT_TYPES = tuple(
    np.dtype(n) for n in ("int32", "int16", "int8", "uint32", "uint16", "uint8")
)
DML_SCALE_TYPES = (np.dtype(np.float32), np.dtype(np.float16))


def _broadcastable(param: np.ndarray, name: str, shape: tuple[int, ...]) -> np.ndarray:
    try:
        ok = np.broadcast_shapes(param.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise UsageError(
            f"{name} of shape {param.shape} does not broadcast to the input shape {shape}"
        )
    return param


def _scale(scale: ArrayLike, shape: tuple[int, ...]) -> np.ndarray:
    s = np.asarray(scale, np.float32) if isinstance(scale, (int, float)) else np.asarray(scale)
    if s.dtype not in DML_SCALE_TYPES:
        raise UsageError(f"DirectML scales are float32 or float16, got {s.dtype}")
    # DirectML leaves a zero scale undefined; qtool refuses it (and any non-finite one).
    checked = positive_scale(s.ravel(), s.dtype).reshape(s.shape)
    return _broadcastable(checked, "scale", shape)


def _zero_point(
    zero_point: ArrayLike | None, dtype: np.dtype, shape: tuple[int, ...]
) -> np.ndarray:
    if zero_point is None:
        return np.zeros((), dtype)
    if isinstance(zero_point, int):
        info = np.iinfo(dtype)
        if not info.min <= zero_point <= info.max:
            raise UsageError(f"zero point {zero_point} does not fit the input type {dtype}")
        return np.asarray(zero_point, dtype)
    zp = np.asarray(zero_point)
    if zp.dtype != dtype:
        raise UsageError(f"the zero point must have the input's type {dtype}, got {zp.dtype}")
    return _broadcastable(zp, "zero_point", shape)


def dml_dequantize_linear(
    x: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None
) -> np.ndarray:
    """Dequantize like DirectML: the output has the scale's type (float32 or float16).

    ``x`` is INT32/INT16/INT8/UINT32/UINT16/UINT8; ``zero_point`` has the same type (a Python int
    is converted) or is absent (0); ``scale``/``zero_point`` broadcast to ``x``'s shape. The
    difference is exact in int64 and the product is taken in float64, then rounded once to the
    output type (exact for 8/16-bit inputs).
    """
    q = np.asarray(x)
    if q.dtype not in DML_INPUT_TYPES:
        names = ", ".join(d.name for d in DML_INPUT_TYPES)
        raise DataError(f"DirectML dequantizes {names}, not {q.dtype}")
    s = _scale(scale, q.shape)
    zp = _zero_point(zero_point, q.dtype, q.shape)
    offset = q.astype(np.int64) - zp.astype(np.int64)
    with np.errstate(over="ignore"):
        return (offset * s.astype(np.float64)).astype(s.dtype)
