"""Operators that grow an array along its axes: pads, tiles and broadcasts.

Batch rules: see `movement`.
"""

from __future__ import annotations

import numpy as np

from qtool.runtime.kernels.movement import (
    input_rank,
    ints,
    is_static,
    leading_one,
    option_or_default,
)
from qtool.runtime.registry import OpContext, kernel


def _first_pair_zero(ctx: OpContext) -> bool:
    """Batch rule of pads: constant paddings that leave the sample axis unpadded."""
    if not is_static(ctx, 1):
        return False
    paddings = np.asarray(ctx.input(1)).reshape(-1, 2)
    return len(paddings) > 0 and not paddings[0].any()


def _pad_widths(ctx: OpContext) -> np.ndarray:
    return np.asarray(ctx.inputs[1], dtype=np.int64).reshape(-1, 2)


@kernel("PAD", batch=_first_pair_zero)
def pad(ctx: OpContext) -> np.ndarray:
    """PAD with zeros by the [rank, 2] paddings of input 1."""
    return np.pad(ctx.inputs[0], _pad_widths(ctx))


@kernel(
    "PADV2",
    batch=lambda ctx: _first_pair_zero(ctx) and (ctx.input_tensor(2) is None or is_static(ctx, 2)),
)
def padv2(ctx: OpContext) -> np.ndarray:
    """PADV2: PAD with the constant of input 2 (zero when absent)."""
    x = ctx.inputs[0]
    value = ctx.input(2)
    fill = x.dtype.type(0) if value is None else np.asarray(value).reshape(-1)[0]
    return np.pad(x, _pad_widths(ctx), constant_values=fill)


_MIRROR_MODES = {0: "reflect", 1: "symmetric"}  # tflite.MirrorPadMode REFLECT, SYMMETRIC


@kernel("MIRROR_PAD", batch=_first_pair_zero)
def mirror_pad(ctx: OpContext) -> np.ndarray:
    """MIRROR_PAD, REFLECT (edge not repeated) or SYMMETRIC (edge repeated)."""
    return np.pad(
        ctx.inputs[0], _pad_widths(ctx), mode=_MIRROR_MODES[option_or_default(ctx, "mode", 0)]
    )


@kernel("TILE", batch=lambda ctx: is_static(ctx, 1) and ints(ctx.input(1))[:1] == [1])
def tile(ctx: OpContext) -> np.ndarray:
    """TILE: the input repeated along each axis by the multiples of input 1."""
    return np.tile(ctx.inputs[0], ints(ctx.inputs[1]))


def _broadcast_to_batch(ctx: OpContext) -> bool:
    # The input's leading 1 must line up with the target's (same rank) and stay a 1 there.
    return (
        is_static(ctx, 1)
        and leading_one(ctx, 0)
        and ints(ctx.input(1))[:1] == [1]
        and len(ints(ctx.input(1))) == input_rank(ctx, 0)
    )


@kernel("BROADCAST_TO", batch=_broadcast_to_batch)
def broadcast_to(ctx: OpContext) -> np.ndarray:
    """BROADCAST_TO the shape of input 1."""
    return np.array(np.broadcast_to(ctx.inputs[0], ctx.batched_shape(ctx.inputs[1])))
