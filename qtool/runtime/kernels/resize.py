"""Spatial resizing: RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR.

Source coordinates are computed in float32 with the exact expressions of TFLite's reference
kernels, so that ties and clamps at the borders land on the same pixels.
"""

from __future__ import annotations

import numpy as np

from qtool.errors import ModelError
from qtool.runtime.kernels import native
from qtool.runtime.registry import OpContext, kernel


def _target_size(ctx: OpContext) -> tuple[int, int]:
    height, width = (int(d) for d in np.asarray(ctx.input(1)).reshape(-1))
    return height, width


def _scale(in_size: int, out_size: int, align_corners: bool) -> np.float32:
    if align_corners and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def _bilinear_axis(
    in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lower and upper source indices and the weight of the upper one, per output position."""
    scale = _scale(in_size, out_size, align_corners)
    position = np.arange(out_size, dtype=np.float32)
    if half_pixel_centers:
        position = (position + np.float32(0.5)) * scale - np.float32(0.5)
    else:
        position = position * scale
    lower = np.maximum(np.floor(position).astype(np.int64), 0)
    upper = np.minimum(np.ceil(position).astype(np.int64), in_size - 1)
    # Relative to the clamped lower index: below 0 at the top border, where lower == upper and
    # the two weights still sum to 1.
    return lower, upper, position - lower.astype(np.float32)


@kernel("RESIZE_BILINEAR")
def resize_bilinear(ctx: OpContext) -> np.ndarray:
    """RESIZE_BILINEAR of NHWC input to the [height, width] of input 1, with TFLite's
    align_corners and half_pixel_centers (not both: ModelError)."""
    x = ctx.input(0)
    align_corners, half_pixel = ctx.option("align_corners"), ctx.option("half_pixel_centers")
    if align_corners and half_pixel:
        raise ModelError("RESIZE_BILINEAR: half_pixel_centers requires align_corners to be False")
    out_h, out_w = _target_size(ctx)
    y0, y1, dy = _bilinear_axis(x.shape[1], out_h, align_corners, half_pixel)
    x0, x1, dx = _bilinear_axis(x.shape[2], out_w, align_corners, half_pixel)
    if native.kernels is not None and x.dtype == np.float32 and x.ndim == 4:
        # The C kernel (native.py): the same two interpolations, a row of r at a time.
        out = np.empty((x.shape[0], out_h, out_w, x.shape[3]), np.float32)
        native.kernels.bilinear(np.ascontiguousarray(x), out, y0, y1, dy, x0, x1, dx)
        return out
    dy = dy[:, None, None]
    rows = x[:, y0] * (1 - dy) + x[:, y1] * dy
    dx = dx[:, None]
    return rows[:, :, x0] * (1 - dx) + rows[:, :, x1] * dx


def _nearest_axis(
    in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
) -> np.ndarray:
    scale = _scale(in_size, out_size, align_corners)
    offset = np.float32(0.5 if half_pixel_centers else 0.0)
    position = (np.arange(out_size, dtype=np.float32) + offset) * scale
    # With align_corners TFLite rounds with std::round, halves away from zero where np.round
    # would go to even; positions are >= 0, and adding 0.5 to a float32 is exact in float64.
    index = np.floor(position.astype(np.float64) + 0.5) if align_corners else np.floor(position)
    index = np.minimum(index.astype(np.int64), in_size - 1)
    return np.maximum(index, 0) if half_pixel_centers else index


@kernel("RESIZE_NEAREST_NEIGHBOR")
def resize_nearest_neighbor(ctx: OpContext) -> np.ndarray:
    """RESIZE_NEAREST_NEIGHBOR of NHWC input to the [height, width] of input 1, rounding source
    positions as TFLite does for align_corners and half_pixel_centers."""
    x = ctx.input(0)
    align_corners, half_pixel = ctx.option("align_corners"), ctx.option("half_pixel_centers")
    out_h, out_w = _target_size(ctx)
    rows = _nearest_axis(x.shape[1], out_h, align_corners, half_pixel)
    cols = _nearest_axis(x.shape[2], out_w, align_corners, half_pixel)
    return x[:, rows][:, :, cols]
