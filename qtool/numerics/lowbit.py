"""Symmetric weight quantization to few bits: per tensor, per axis or in blocks.

The largest magnitude of each group sets its scale (what TensorFlow's converter and
ai-edge-quantizer do), the values are symmetric and narrow: [-127, 127] at 8 bits, [-7, 7] at 4
(LiteRT's optimized 4-bit FULLY_CONNECTED misreads -8). Block scales are stored float16 with only
the mantissa bits bfloat16 has (XNNPACK reads them as bfloat16). Where the weights themselves are
the output (an embedding table), `search` picks each group's scale among clipped candidates for
the least squared error; elsewhere clipping the largest weights costs more at the layer's output
than it saves (measured: 10 dB on a token MLP) and the rounding of each weight is what to
optimise (`qtool.quantize.adaround`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.errors import DataError, UsageError
from qtool.numerics.dtypes import int_type

# Clipping ratios tried at few bits, from no clipping down to half the largest magnitude.
CLIP_RATIOS = np.linspace(1.0, 0.5, 21)
FLOAT16_TINY = float(np.finfo(np.float16).tiny)  # the smallest normal float16
FLOAT16_MAX = float(np.finfo(np.float16).max)
_CHUNK_VALUES = 1 << 22  # groups are searched in chunks of about this many values


@dataclass(frozen=True)
class LowBitWeights:
    """Quantized weights: the integer values (int8 storage, the weights' shape) and their scales
    (one per tensor, per slice of `axis`, or per block: [channels, blocks])."""

    values: np.ndarray
    scale: np.ndarray  # float32
    axis: int | None  # per-axis dimension (None: per tensor or blockwise)
    block_size: int | None = None  # blocks along the last dimension

    def real(self) -> np.ndarray:
        """The weights the integers stand for (float32)."""
        if self.block_size is not None:
            rows = self.values.shape[0]
            blocks = self.values.reshape(rows, -1, self.block_size).astype(np.float32)
            return (blocks * self.scale[:, :, None]).reshape(self.values.shape)
        if self.axis is None:
            return self.values.astype(np.float32) * self.scale[0]
        shape = [1] * self.values.ndim
        shape[self.axis] = -1
        return self.values.astype(np.float32) * self.scale.reshape(shape)


def round_to_mantissa(values: np.ndarray, bits: int) -> np.ndarray:
    """float32 values rounded (to nearest, ties to even) to `bits` mantissa bits."""
    raw = np.ascontiguousarray(values, np.float32).view(np.uint32)
    drop = 23 - bits
    half = np.uint32(1 << (drop - 1)) - np.uint32(1) + ((raw >> np.uint32(drop)) & np.uint32(1))
    rounded = (raw + half) & ~np.uint32((1 << drop) - 1)
    return rounded.view(np.float32)


def round_half_away(values: np.ndarray) -> np.ndarray:
    """Round to nearest, halves away from zero (TFLite's rounding of weights)."""
    return np.trunc(values + np.copysign(0.5, values))


def _groups_error(groups: np.ndarray, scales: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """Squared error of each group (rows of `groups`) at each candidate scale (columns)."""
    scales = scales.astype(np.float32)[:, :, None]
    values = groups.astype(np.float32)[:, None, :]
    q = np.clip(round_half_away(values / scales), qmin, qmax)
    return np.sum(np.square(q * scales - values), axis=2, dtype=np.float64)


def _candidates(groups: np.ndarray, qmax: int) -> np.ndarray:
    """Candidate scales per group: clipped fractions of the largest magnitude over qmax."""
    top = np.abs(groups).max(axis=1)
    return top[:, None] * CLIP_RATIOS[None, :] / qmax


def qrange_of(bits: int) -> tuple[int, int]:
    """The symmetric, narrow range of `bits`-bit weights: [-127, 127] or [-7, 7]."""
    if bits not in (4, 8):
        raise UsageError(f"weights are quantized to 8 or 4 bits, not {bits}")
    kind = int_type(f"int{bits}")
    return kind.qmin + 1, kind.qmax


def best_scales(
    groups: np.ndarray, bits: int, mantissa_bits: int | None = None, search: bool = False
) -> np.ndarray:
    """One scale per row of `groups`: the largest magnitude over qmax, or with `search` the
    clipped candidate of least squared error; rounded to `mantissa_bits` when given, never below
    the smallest normal float16 when rounded so. An all-zero group gets scale 1."""
    qmin, qmax = qrange_of(bits)
    groups = np.asarray(groups, np.float64)
    if not np.isfinite(groups).all():
        raise DataError("weights contain inf or NaN, which have no scale")
    top = np.abs(groups).max(axis=1) if groups.shape[1] else np.zeros(groups.shape[0])
    scales = np.empty(groups.shape[0], np.float64)
    rows = max(1, _CHUNK_VALUES // max(1, groups.shape[1] * CLIP_RATIOS.size))
    for start in range(0, groups.shape[0], rows):
        part = groups[start : start + rows]
        candidates = (
            _candidates(part, qmax) if search else (np.abs(part).max(axis=1) / qmax)[:, None]
        )
        if mantissa_bits is not None:
            candidates = _storable(candidates, mantissa_bits)
        candidates = np.where(candidates > 0, candidates, 1.0)  # an all-zero group
        if candidates.shape[1] > 1:
            errors = _groups_error(part, candidates, qmin, qmax)
            chosen = candidates[np.arange(part.shape[0]), np.argmin(errors, axis=1)]
        else:
            chosen = candidates[:, 0]
        scales[start : start + rows] = chosen
    scales = np.where(top > 0, scales, 1.0)
    return scales.astype(np.float32)


def _storable(scales: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """Scales as float16 constants of `mantissa_bits` mantissa bits hold them: normal numbers
    within float16's range."""
    rounded = round_to_mantissa(np.asarray(scales, np.float32), mantissa_bits).astype(np.float64)
    clipped = np.clip(rounded, FLOAT16_TINY, FLOAT16_MAX)
    return np.where(scales > 0, clipped, 0.0)


def quantize_weights(
    weights: np.ndarray,
    bits: int,
    axis: int | None = None,
    block_size: int | None = None,
    mantissa_bits: int | None = None,
    search: bool = False,
) -> LowBitWeights:
    """Symmetric (zero point 0) weights of `bits` bits: per tensor (axis None), per slice of
    `axis`, or in blocks of `block_size` along the last dimension of 2-D weights (scales
    rounded to `mantissa_bits`); `search`: scales of least squared error (see the module)."""
    w = np.asarray(weights, np.float32)
    if w.size == 0:
        raise DataError(f"cannot quantize empty weights of shape {list(w.shape)}")
    qmin, qmax = qrange_of(bits)
    if block_size is not None:
        if w.ndim != 2 or w.shape[1] % block_size:
            raise UsageError(f"blocks of {block_size} do not tile weights of shape {list(w.shape)}")
        groups = w.reshape(-1, block_size)
        scale = best_scales(groups, bits, mantissa_bits, search)
        values = np.clip(round_half_away(groups / scale[:, None]), qmin, qmax)
        return LowBitWeights(
            values.astype(np.int8).reshape(w.shape),
            scale.reshape(w.shape[0], -1),
            None,
            block_size,
        )
    if axis is None:
        groups = w.reshape(1, -1)
    else:
        groups = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
    scale = best_scales(groups, bits, mantissa_bits, search)
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    values = np.clip(round_half_away(w / scale.reshape(shape)), qmin, qmax)
    return LowBitWeights(values.astype(np.int8), scale, axis)


def element_scales(weights: LowBitWeights) -> np.ndarray:
    """The scale of every weight (the weights' shape): what rounding optimisation needs for
    blockwise weights."""
    if weights.block_size is not None:
        return np.repeat(weights.scale, weights.block_size, axis=1)
    if weights.axis is None:
        return np.full(weights.values.shape, weights.scale[0], np.float32)
    shape = [1] * weights.values.ndim
    shape[weights.axis] = -1
    return np.broadcast_to(weights.scale.reshape(shape), weights.values.shape)
