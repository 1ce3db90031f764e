"""Layout operators: reshapes, squeezes, transposes and the space/depth/batch rearrangements.

Batch rules: see `movement`.
"""

from __future__ import annotations

import math

import numpy as np

from qtool.model.types import TensorType
from qtool.runtime.kernels.movement import (
    input_rank,
    ints,
    is_static,
    keeps_leading_axis,
    leading_one,
    option_or_default,
    positive_axis,
)
from qtool.runtime.registry import OpContext, always, kernel, never

# --------------------------------------------------------------------------- reshapes


def _reshape_target(ctx: OpContext) -> list[int] | None:
    """The RESHAPE target as TFLite picks it; None when it is a run-time (non-constant) tensor.

    TFLite reads the second input only when it is an int32 vector; otherwise (or when absent)
    it falls back to the `new_shape` option, where the legacy value [0] means a scalar.
    """
    shape_tensor = ctx.input_tensor(1)
    if (
        shape_tensor is not None
        and len(shape_tensor.shape) == 1
        and shape_tensor.dtype == TensorType.INT32
    ):
        value = ctx.input(1)
        return None if value is None else ints(value)
    target = ints(option_or_default(ctx, "new_shape", []))
    return [] if target == [0] else target


def _reshape_batch(ctx: OpContext) -> bool:
    target = _reshape_target(ctx)
    if not target or not leading_one(ctx, 0):
        return False
    if target[0] == 1:
        return True
    # [-1, rest...] keeps the sample axis when `rest` covers exactly one sample.
    rest = target[1:]
    return (
        target[0] == -1
        and -1 not in rest
        and math.prod(rest) == math.prod(ctx.input_shape(0)[1:]) > 0
    )


@kernel("RESHAPE", batch=_reshape_batch)
def reshape(ctx: OpContext) -> np.ndarray:
    """RESHAPE to the target shape (input 1 when it is an int32 vector, else the new_shape
    option), a -1 inferred; the declared leading 1 stands for the run's samples."""
    x = ctx.inputs[0]
    target = ctx.batched_shape(_reshape_target(ctx))
    if -1 in target and x.size == 0:
        # numpy cannot infer a dimension of an empty array; TFLite makes it 0 unless the other
        # target dimensions hold a 0 too, then it divides the non-zero sizes.
        known = [d for d in target if d != -1]
        stretch = (
            0
            if math.prod(known)
            else (math.prod(d for d in x.shape if d) // math.prod(d for d in known if d))
        )
        target = [stretch if d == -1 else d for d in target]
    return x.reshape(target)


def _squeeze_dims(ctx: OpContext, rank: int) -> list[int]:
    return [positive_axis(d, rank) for d in ints(option_or_default(ctx, "squeeze_dims", []))]


def _squeeze_batch(ctx: OpContext) -> bool:
    # Without explicit dims every size-1 axis goes, the declared batch axis included.
    dims = _squeeze_dims(ctx, input_rank(ctx, 0))
    return bool(dims) and 0 not in dims


@kernel("SQUEEZE", batch=_squeeze_batch)
def squeeze(ctx: OpContext) -> np.ndarray:
    """SQUEEZE: the size-1 dimensions listed in squeeze_dims removed, or every size-1 dimension
    when none is listed."""
    x = ctx.inputs[0]
    dims = _squeeze_dims(ctx, x.ndim)
    return np.squeeze(x, axis=tuple(dims)) if dims else np.squeeze(x)


@kernel("EXPAND_DIMS", batch=lambda ctx: keeps_leading_axis(ctx, 0, 1, rank_offset=1))
def expand_dims(ctx: OpContext) -> np.ndarray:
    """EXPAND_DIMS: a size-1 dimension inserted at the axis of input 1."""
    x = ctx.inputs[0]
    return np.expand_dims(x, positive_axis(ints(ctx.inputs[1])[0], x.ndim + 1))


def _transpose_batch(ctx: OpContext) -> bool:
    return is_static(ctx, 1) and ints(ctx.input(1))[:1] == [0]


@kernel("TRANSPOSE", batch=_transpose_batch)
def transpose(ctx: OpContext) -> np.ndarray:
    """TRANSPOSE by the permutation of input 1."""
    return np.transpose(ctx.inputs[0], ints(ctx.inputs[1]))


# --------------------------------------------------------------------------- space/depth/batch


@kernel("SPACE_TO_DEPTH", batch=always)
def space_to_depth(ctx: OpContext) -> np.ndarray:
    """SPACE_TO_DEPTH: each block_size x block_size spatial block of NHWC input moved into
    channels."""
    x = ctx.inputs[0]
    k = int(ctx.option("block_size"))
    n, h, w, c = x.shape
    blocks = x.reshape(n, h // k, k, w // k, k, c).transpose(0, 1, 3, 2, 4, 5)
    return blocks.reshape(n, h // k, w // k, k * k * c)


@kernel("DEPTH_TO_SPACE", batch=always)
def depth_to_space(ctx: OpContext) -> np.ndarray:
    """DEPTH_TO_SPACE: channels moved into block_size x block_size spatial blocks (the inverse of
    SPACE_TO_DEPTH)."""
    x = ctx.inputs[0]
    k = int(ctx.option("block_size"))
    n, h, w, c = x.shape
    blocks = x.reshape(n, h, w, k, k, c // (k * k)).transpose(0, 1, 3, 2, 4, 5)
    return blocks.reshape(n, h * k, w * k, c // (k * k))


@kernel("SPACE_TO_BATCH_ND", batch=never)
def space_to_batch_nd(ctx: OpContext) -> np.ndarray:
    """SPACE_TO_BATCH_ND: spatial dimensions padded, then cut into blocks moved to the batch (the
    block offset the major part of the batch index)."""
    x = ctx.inputs[0]
    block = ints(ctx.inputs[1])
    m = len(block)
    widths = [(0, 0), *np.asarray(ctx.inputs[2]).reshape(m, 2).tolist()]
    x = np.pad(x, widths + [(0, 0)] * (x.ndim - 1 - m))
    n, spatial, rest = x.shape[0], x.shape[1 : 1 + m], x.shape[1 + m :]
    split_shape = [n]
    for size, k in zip(spatial, block, strict=True):
        split_shape += [size // k, k]
    # [n, s1, k1, s2, k2, ..., rest] -> [k1, k2, ..., n, s1, s2, ..., rest]: the block offset is
    # the major part of the output batch index.
    x = x.reshape(*split_shape, *rest)
    x = x.transpose(*range(2, 2 * m + 1, 2), 0, *range(1, 2 * m, 2), *range(2 * m + 1, x.ndim))
    return x.reshape(
        n * math.prod(block), *(s // k for s, k in zip(spatial, block, strict=True)), *rest
    )


@kernel("BATCH_TO_SPACE_ND", batch=never)
def batch_to_space_nd(ctx: OpContext) -> np.ndarray:
    """BATCH_TO_SPACE_ND: the inverse of SPACE_TO_BATCH_ND, cropping the spatial dimensions
    after."""
    x = ctx.inputs[0]
    block = ints(ctx.inputs[1])
    m = len(block)
    crops = np.asarray(ctx.inputs[2]).reshape(m, 2)
    n = x.shape[0] // math.prod(block)
    spatial, rest = x.shape[1 : 1 + m], x.shape[1 + m :]
    # [k1, ..., km, n, s1, ..., sm, rest] -> [n, s1, k1, s2, k2, ..., rest]
    x = x.reshape(*block, n, *spatial, *rest)
    interleaved = [a for i in range(m) for a in (m + 1 + i, i)]
    x = x.transpose(m, *interleaved, *range(2 * m + 1, x.ndim))
    x = x.reshape(n, *(s * k for s, k in zip(spatial, block, strict=True)), *rest)
    index = [slice(None)] + [slice(lo, x.shape[1 + i] - hi) for i, (lo, hi) in enumerate(crops)]
    return x[tuple(index)]
