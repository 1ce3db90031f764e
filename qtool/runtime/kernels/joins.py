"""Joins and splits: concatenations, packs, unpacks and splits.

Batch rules: see `movement`.
"""

from __future__ import annotations

import numpy as np

from qtool.runtime.kernels.movement import (
    ints,
    is_static,
    keeps_leading_axis,
    option_axis_not_leading,
    option_or_default,
    per_sample,
    positive_axis,
)
from qtool.runtime.registry import OpContext, fused, kernel


@kernel("CONCATENATION", batch=option_axis_not_leading())
def concatenation(ctx: OpContext) -> np.ndarray:
    """CONCATENATION along `axis`, then the fused activation; scalars concatenate into a vector."""
    arrays = per_sample(ctx, ctx.inputs)
    if arrays[0].ndim == 0:  # TFLite concatenates scalars into a vector
        return fused(ctx, np.stack(arrays))
    axis = positive_axis(option_or_default(ctx, "axis", 0), arrays[0].ndim)
    return fused(ctx, np.concatenate(arrays, axis=axis))


@kernel("PACK", batch=option_axis_not_leading(rank_offset=1))
def pack(ctx: OpContext) -> np.ndarray:
    """PACK: the inputs stacked along a new axis `axis`."""
    arrays = per_sample(ctx, ctx.inputs)
    return np.stack(
        arrays, axis=positive_axis(option_or_default(ctx, "axis", 0), arrays[0].ndim + 1)
    )


@kernel("UNPACK", batch=option_axis_not_leading())
def unpack(ctx: OpContext) -> list[np.ndarray]:
    """UNPACK: one output for each index along `axis`, that axis removed."""
    x = ctx.inputs[0]
    axis = positive_axis(option_or_default(ctx, "axis", 0), x.ndim)
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


@kernel("SPLIT", batch=lambda ctx: keeps_leading_axis(ctx, 1, 0))
def split(ctx: OpContext) -> list[np.ndarray]:
    """SPLIT: the input (input 1) cut into as many equal parts as the op has outputs along the
    axis of input 0."""
    x = ctx.inputs[1]
    axis = positive_axis(ints(ctx.inputs[0])[0], x.ndim)
    return np.split(x, len(ctx.op.outputs), axis=axis)


@kernel("SPLIT_V", batch=lambda ctx: is_static(ctx, 1) and keeps_leading_axis(ctx, 0, 2))
def split_v(ctx: OpContext) -> list[np.ndarray]:
    """SPLIT_V: the input cut along an axis into parts of the given sizes, at most one of them -1
    (the rest)."""
    x = ctx.inputs[0]
    axis = positive_axis(ints(ctx.inputs[2])[0], x.ndim)
    sizes = ints(ctx.inputs[1])
    if -1 in sizes:  # at most one size is inferred from the others
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)
