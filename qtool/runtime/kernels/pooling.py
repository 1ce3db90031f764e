"""Spatial pooling: AVERAGE_POOL_2D, MAX_POOL_2D, L2_POOL_2D.

TFLite pools only over the in-bounds part of each window: padding never enters a max, and an
average (or L2 mean) divides by the number of in-bounds elements, not by the filter size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from qtool.runtime.kernels import native
from qtool.runtime.kernels.conv import TapGrid, out_size_and_padding
from qtool.runtime.registry import OpContext, fused, fused_float_range, kernel

_BLOCK_BYTES = 1 << 20  # the partial results of a block stay in the L2 cache across the taps


def _geometry(ctx: OpContext) -> tuple[tuple[int, int], tuple[int, int]]:
    return (
        (ctx.option("filter_height"), ctx.option("filter_width")),
        (ctx.option("stride_h"), ctx.option("stride_w")),
    )


def _fold(
    combine: Callable[..., np.ndarray], views: list[np.ndarray], out: np.ndarray | None = None
) -> np.ndarray:
    """combine(...combine(views[0], views[1])..., views[-1]), into `out` if given."""
    if len(views) == 1:
        if out is None:
            return views[0]
        np.copyto(out, views[0])
        return out
    out = combine(views[0], views[1], out=out)
    for view in views[2:]:
        combine(out, view, out=out)
    return out


def _reduce_windows(
    ctx: OpContext, x: np.ndarray, combine: Callable[..., np.ndarray], fill: float
) -> np.ndarray:
    """Fold every window of `x` (padded with `fill`) with the binary ufunc `combine`.

    Max and sum are separable: folding the window rows first, then the columns, takes
    KH + KW passes instead of KH * KW.
    """
    kernel_size, stride = _geometry(ctx)
    grid = TapGrid(x, kernel_size, stride, (1, 1), ctx.option("padding"), fill)
    n, oh, ow = grid.out_shape
    out = np.empty((n, oh, ow, x.shape[3]), x.dtype)
    row_bytes = (grid.padded_width + ow) * x.shape[3] * x.itemsize
    for block in grid.blocks(row_bytes, _BLOCK_BYTES):
        folded_rows = _fold(combine, [grid.row_tap(block, i) for i in range(kernel_size[0])])
        _fold(
            combine,
            [grid.col_tap(j, folded_rows) for j in range(kernel_size[1])],
            out=out[block.samples, block.rows.start : block.rows.stop],
        )
    return out


def _valid_counts(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    """How many in-bounds elements each output position's window covers, as [OH, OW, 1]."""
    kernel_size, stride = _geometry(ctx)
    counts = []
    for size, k, s in zip(x.shape[1:3], kernel_size, stride, strict=True):
        out, before = out_size_and_padding(ctx.option("padding"), size, k, s)
        origin = np.arange(out) * s - before
        counts.append(np.minimum(k, size - origin) - np.maximum(0, -origin))
    return np.multiply.outer(*counts)[..., None].astype(np.float32)


def _mean_of_windows(ctx: OpContext, x: np.ndarray) -> np.ndarray:
    total = _reduce_windows(ctx, x, np.add, 0.0)
    total /= _valid_counts(ctx, x)
    return total


@kernel("AVERAGE_POOL_2D")
def average_pool_2d(ctx: OpContext) -> np.ndarray:
    """AVERAGE_POOL_2D: window means over the elements inside the input (padding not counted),
    then the fused activation."""
    out = _mean_of_windows(ctx, ctx.input(0))
    return fused(ctx, out)


@kernel("MAX_POOL_2D")
def max_pool_2d(ctx: OpContext) -> np.ndarray:
    """MAX_POOL_2D: window maxima (padding never wins), then the fused activation."""
    x = ctx.input(0)
    if native.kernels is not None and x.dtype == np.float32:
        # The C kernel (native.py): the window's maximum and the clamp in one pass.
        kernel_size, stride = _geometry(ctx)
        grid = TapGrid(np.ascontiguousarray(x), kernel_size, stride, (1, 1), ctx.option("padding"))
        out = np.empty((*grid.out_shape, x.shape[3]), np.float32)
        native.kernels.max_pool(grid.x, out, grid.geometry(), *fused_float_range(ctx))
        return out
    out = _reduce_windows(ctx, x, np.maximum, -np.inf)
    return fused(ctx, out)


@kernel("L2_POOL_2D")
def l2_pool_2d(ctx: OpContext) -> np.ndarray:
    """L2_POOL_2D: the square root of each window's mean square (padding not counted), then the
    fused activation."""
    out = np.sqrt(_mean_of_windows(ctx, np.square(ctx.input(0))))
    return fused(ctx, out)
