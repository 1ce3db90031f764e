"""Symmetric weight quantization to few bits: per tensor, per axis or in blocks, with the scale of
each group chosen for the least squared error.

At 8 bits the largest magnitude sets the scale (what TensorFlow's converter does: the rounding
error dominates and clipping gains nothing). At 4 bits a scale that clips the largest values a
little halves the rounding step of all the others: each group's scale is the best of a grid of
candidates between half and all of its largest magnitude, judged by the group's squared error,
and the group may use the type's most negative value (-8) when its extreme is negative. Block
scales are stored float16 with only the mantissa bits bfloat16 has (XNNPACK reads them as
bfloat16): the candidates are rounded so before they are judged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qtool.errors import DataError, UsageError
from qtool.numerics.dtypes import int_type

# Clipping ratios tried at few bits, from no clipping down to half the largest magnitude.
CLIP_RATIOS = np.linspace(1.0, 0.5, 21)
MSE_BELOW_BITS = 8  # the scale search runs below this many bits
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


def _candidates(groups: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """Candidate scales per group: clipped fractions of the largest magnitude over qmax, and,
    for a group whose extreme is negative, of that magnitude over -qmin."""
    top = np.abs(groups).max(axis=1)
    low = -groups.min(axis=1)
    positive = top[:, None] * CLIP_RATIOS[None, :] / qmax
    if qmin == -qmax:
        return positive
    # The negative extreme on qmin (where it is the group's largest magnitude, else the
    # positive candidates again).
    negative = np.where(low >= top, low / -qmin, top / qmax)[:, None] * CLIP_RATIOS[None, :]
    return np.concatenate([positive, negative], axis=1)


def best_scales(
    groups: np.ndarray, bits: int, mantissa_bits: int | None = None, search: bool = True
) -> np.ndarray:
    """One scale per row of `groups`: the candidate with the least squared error (or the largest
    magnitude over qmax without `search`), rounded to `mantissa_bits` when given, never below
    the smallest normal float16 when rounded so. An all-zero group gets scale 1."""
    kind = int_type(f"int{bits}") if bits in (4, 8) else None
    if kind is None:
        raise UsageError(f"weights are quantized to 8 or 4 bits, not {bits}")
    qmin, qmax = (kind.qmin + 1, kind.qmax) if bits == 8 else (kind.qmin, kind.qmax)
    groups = np.asarray(groups, np.float64)
    if not np.isfinite(groups).all():
        raise DataError("weights contain inf or NaN, which have no scale")
    top = np.abs(groups).max(axis=1) if groups.shape[1] else np.zeros(groups.shape[0])
    scales = np.empty(groups.shape[0], np.float64)
    rows = max(1, _CHUNK_VALUES // max(1, groups.shape[1] * 2 * CLIP_RATIOS.size))
    for start in range(0, groups.shape[0], rows):
        part = groups[start : start + rows]
        if search:
            candidates = _candidates(part, qmin, qmax)
        else:
            candidates = (np.abs(part).max(axis=1) / qmax)[:, None]
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
) -> LowBitWeights:
    """Symmetric (zero point 0) weights of `bits` bits: per tensor (axis None), per slice of
    `axis`, or in blocks of `block_size` along the last dimension of 2-D weights (scales
    rounded to `mantissa_bits`). 8-bit weights use [-127, 127] and the largest magnitude; 4-bit
    weights [-8, 7] and the scale search."""
    w = np.asarray(weights, np.float32)
    if w.size == 0:
        raise DataError(f"cannot quantize empty weights of shape {list(w.shape)}")
    search = bits < MSE_BELOW_BITS
    kind = int_type(f"int{bits}")
    qmin, qmax = (kind.qmin + 1, kind.qmax) if bits == 8 else (kind.qmin, kind.qmax)
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
