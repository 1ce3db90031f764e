"""TensorFlow's ``Quantize`` op (QuantizeV2), reproduced bit for bit on CPU.

What TensorFlow's reference CPU kernel really does, beyond the op documentation (checked against
``tf.raw_ops.QuantizeV2`` of TensorFlow 2.21 with ``TF_ENABLE_ONEDNN_OPTS=0``; the oneDNN kernel
that Intel builds substitute for some attribute combinations rounds differently):

* All arithmetic is float32, step by step, except the MIN_COMBINED and MIN_FIRST scale factors,
  which are a double division rounded to float32.
* Kernels run with flush-to-zero / denormals-are-zero: subnormal inputs, ranges and intermediate
  results count as zero.
* The range is first adjusted: ``min = min(0, min_range)``, ``max = max(0, max_range, min +
  epsilon)`` with ``epsilon = max(1, |min_range|, |max_range|) * ensure_minimum_range``.
* MIN_COMBINED: signed types round half away from zero after subtracting ``(range(T) + 1) / 2``;
  unsigned types add 0.5 and truncate (same result, but computed that way, in float32).
* MIN_FIRST: ``round(x * s) - (round(min * s) - lowest(T))`` with ``s = (2^bits - 1) / (max -
  min)``, clamped to T (qint32 to [-2^31, 2147483520], the largest float32 below 2^31).
* SCALED: ``HALF_TO_EVEN`` rounds exactly (rint); ``narrow_range`` only matters here.
* The float result is converted to T modulo 2^bits. It only matters for qint32, where the top of
  the range computes to exactly 2^31 in float32 and comes out as -2^31 (the x86 conversion).

NaN inputs and parameter combinations for which TensorFlow itself computes NaN or infinity before
the integer conversion (e.g. MIN_COMBINED on the zero-width range [0, 0] with
ensure_minimum_range 0) have no defined output and are refused.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from qtool.errors import UsageError
from qtool.numerics._common import along_axes, float_data, normalize_axis
from qtool.numerics.dtypes import INT_TYPES, IntType
from qtool.numerics.rounding import RoundMode, round_values

TF_TYPES: dict[str, IntType] = {
    "qint8": INT_TYPES["int8"],
    "quint8": INT_TYPES["uint8"],
    "qint16": INT_TYPES["int16"],
    "quint16": INT_TYPES["uint16"],
    "qint32": INT_TYPES["int32"],
}
TF_MODES = ("MIN_COMBINED", "MIN_FIRST", "SCALED")
TF_ROUND_MODES = (RoundMode.HALF_AWAY_FROM_ZERO, RoundMode.HALF_TO_EVEN)

_FLT_MAX = np.finfo(np.float32).max
_FLT_MIN = np.finfo(np.float32).tiny
_HALF_AWAY = RoundMode.HALF_AWAY_FROM_ZERO


class TFQuantizeResult(NamedTuple):
    """The op's three outputs; the ranges are float32, shape () or (C,) with an axis."""

    output: np.ndarray
    output_min: np.ndarray
    output_max: np.ndarray


def _f32(a: ArrayLike) -> np.ndarray:
    """A float32 result as TensorFlow's kernels see it: subnormals flushed to signed zero."""
    v = np.asarray(a, dtype=np.float32)
    return np.where(np.abs(v) < _FLT_MIN, np.copysign(np.float32(0), v), v).astype(np.float32)


def _std_min(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    # std::min keeps the first argument unless the second is smaller (matters for -0.0).
    return np.where(np.less(b, a), b, a).astype(np.float32)


def _std_max(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    return np.where(np.less(a, b), b, a).astype(np.float32)


def _clamp(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.maximum(np.minimum(x, hi), lo)


def _min_combined(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: IntType, round_mode: RoundMode, narrow: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    span = _f32(hi - lo).astype(np.float64)
    scale_factor = _f32((np.float64(t.qmax) - np.float64(t.qmin)) / span)
    scaled = _f32(_f32(_clamp(x, lo, hi) - lo) * scale_factor)
    if t.signed:
        half_range = np.float32((t.qmax - t.qmin + 1) / 2)
        values = round_values(_f32(scaled - half_range), _HALF_AWAY)
    else:
        values = np.trunc(_f32(scaled + np.float32(0.5)))
    return values, lo, hi


def _min_first(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: IntType, round_mode: RoundMode, narrow: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    steps_minus_one = float((1 << t.bits) - 1)
    range_scale = np.where(
        hi == lo, np.float32(0), _f32(steps_minus_one / _f32(hi - lo).astype(np.float64))
    )
    offset = _f32(round_values(_f32(lo * range_scale), _HALF_AWAY) - np.float32(t.qmin))
    values = _f32(round_values(_f32(x * range_scale), _HALF_AWAY) - offset)
    # int32 bounds that survive the float32 round trip, as TensorFlow's FloatToQuantizedStruct.
    lower = max(np.float32(t.qmin), np.float32(-2.147483648e9))
    upper = min(np.float32(t.qmax), np.float32(2.147483520e9))
    return _clamp(values, lower, upper), lo, hi


def _scaled(
    x: np.ndarray, lo: np.ndarray, hi: np.ndarray, t: IntType, round_mode: RoundMode, narrow: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    min_out = np.float32(t.qmin + int(narrow))
    max_out = np.float32(t.qmax)
    from_min = np.where(_f32(min_out * lo) > 0, _f32(min_out / lo), _FLT_MAX)
    from_max = np.where(_f32(max_out * hi) > 0, _f32(max_out / hi), _FLT_MAX)
    scale_factor = _std_min(from_min, from_max)
    new_lo = _f32(min_out / scale_factor)
    new_hi = _f32(max_out / scale_factor)
    values = round_values(_f32(_clamp(x, new_lo, new_hi) * scale_factor), round_mode)
    return values, new_lo, new_hi


_KERNELS = {"MIN_COMBINED": _min_combined, "MIN_FIRST": _min_first, "SCALED": _scaled}


def _parse_choice(text: str, choices: tuple[str, ...] | dict[str, IntType], what: str) -> str:
    key = str(text).strip().upper().replace("-", "_")
    names = {c.upper(): c for c in choices}
    if key not in names:
        raise UsageError(f"unknown {what} {text!r} (choose from {', '.join(choices)})")
    return names[key]


def _range_param(value: ArrayLike, name: str) -> np.ndarray:
    with np.errstate(over="ignore"):
        v = np.atleast_1d(np.asarray(value, dtype=np.float64)).astype(np.float32)
    if v.ndim != 1 or v.size == 0:
        raise UsageError(f"{name} must be a number or a 1-D list, got shape {v.shape}")
    if not np.isfinite(v).all():
        raise UsageError(f"{name} must be finite in float32, got {np.asarray(value).tolist()}")
    return _f32(v)


def tf_quantize(
    x: ArrayLike,
    min_range: ArrayLike,
    max_range: ArrayLike,
    T: str,
    mode: str = "MIN_COMBINED",
    round_mode: RoundMode | str = RoundMode.HALF_AWAY_FROM_ZERO,
    narrow_range: bool = False,
    axis: int | None = None,
    ensure_minimum_range: float = 0.01,
) -> TFQuantizeResult:
    """Quantize float data like ``tf.raw_ops.QuantizeV2``.

    ``T`` is qint8, quint8, qint16, quint16 or qint32; ``mode`` MIN_COMBINED, MIN_FIRST or SCALED.
    ``axis`` (numpy-style, negative allowed; TensorFlow's -1 "no axis" is None here) makes
    ``min_range``/``max_range`` 1-D with one entry per slice; MIN_FIRST has no per-axis form in
    TensorFlow. As in TensorFlow, ``narrow_range`` is accepted but has no effect outside SCALED,
    and HALF_TO_EVEN is only allowed in SCALED. ``x`` is converted to float32 first.
    """
    t = TF_TYPES[_parse_choice(T, TF_TYPES, "TensorFlow quantized type")]
    mode = _parse_choice(mode, TF_MODES, "TensorFlow quantize mode")
    round_mode = RoundMode.parse(round_mode)
    if round_mode not in TF_ROUND_MODES:
        raise UsageError(f"TensorFlow's Quantize has no round mode {round_mode.cli_name}")
    if round_mode is RoundMode.HALF_TO_EVEN and mode != "SCALED":
        raise UsageError(f"round mode half-to-even is only supported in SCALED mode, not {mode}")
    emr = np.float32(ensure_minimum_range)
    if not (np.isfinite(emr) and emr >= 0):
        raise UsageError(
            f"ensure_minimum_range must be finite and >= 0, got {ensure_minimum_range}"
        )
    data = _f32(float_data(x, np.float32))
    lo, hi = _range_param(min_range, "min_range"), _range_param(max_range, "max_range")
    if axis is None:
        if lo.size != 1 or hi.size != 1:
            raise UsageError("without an axis, min_range and max_range must be single numbers")
        lo, hi = lo.reshape(()), hi.reshape(())
    else:
        if mode == "MIN_FIRST":
            raise UsageError("MIN_FIRST mode has no per-axis form (TensorFlow: unimplemented)")
        axis = normalize_axis(axis, data.ndim)
        slices = data.shape[axis]
        if lo.size != slices or hi.size != slices:
            raise UsageError(
                f"axis {axis} has {slices} slices: min_range and max_range need {slices} values "
                f"each, got {lo.size} and {hi.size}"
            )
        lo, hi = along_axes(lo, data.ndim, (axis,)), along_axes(hi, data.ndim, (axis,))
    if (hi < lo).any():
        raise UsageError(
            f"min_range must be <= max_range, got {lo.ravel().tolist()} and {hi.ravel().tolist()}"
        )
    with np.errstate(all="ignore"):
        emr = _f32(emr)
        adjusted_lo = _std_min(np.float32(0), lo)
        epsilon = _f32(_std_max(np.float32(1), _std_max(np.abs(lo), np.abs(hi))) * emr)
        adjusted_hi = _std_max(np.float32(0), _std_max(hi, _f32(adjusted_lo + epsilon)))
        values, out_lo, out_hi = _KERNELS[mode](
            data, adjusted_lo, adjusted_hi, t, round_mode, narrow_range
        )
    if not np.isfinite(values).all():
        raise UsageError(
            f"TensorFlow computes NaN or infinity for this range in {mode} mode (e.g. a zero-width "
            "range); its output is undefined"
        )
    wrapped = (values.astype(np.int64) - t.qmin) % (1 << t.bits) + t.qmin
    range_shape = () if axis is None else (-1,)
    return TFQuantizeResult(
        wrapped.astype(t.storage), out_lo.reshape(range_shape), out_hi.reshape(range_shape)
    )
