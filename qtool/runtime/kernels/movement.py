"""Helpers of the data-movement kernels (layout, joins, slicing, padding, generators).

Batch rules. These kernels run on arrays whose leading axis holds the samples in place of the
model's declared leading 1. An operator is batch-safe when its shape arguments are constants
(known at plan time) and leave that axis alone: it stays the leading axis, is neither sliced,
reversed, padded, tiled nor moved. Shape arguments that mention the leading 1 (a reshape target
[1, 36], a slice size [1, ...], a broadcast shape) go through `ctx.batched_shape`, and constants
declared with a leading 1 next to batched activations (a concatenated constant, the indices of a
batched gather) are broadcast over the samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from qtool.runtime.registry import OpContext


def option_or_default(ctx: OpContext, name: str, default: Any) -> Any:
    """An option, or its schema default when the operator carries no options table at all."""
    try:
        value = ctx.option(name)
    except KeyError:
        return default
    return default if value is None else value


def ints(value: Any) -> list[int]:
    """A constant (array or scalar) as a flat list of Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def positive_axis(axis: int, rank: int) -> int:
    """`axis` counted from 0 (a negative axis counts from the end of `rank`)."""
    return axis + rank if axis < 0 else axis


def input_rank(ctx: OpContext, i: int) -> int:
    """The declared rank of input i (0 when absent)."""
    return len(ctx.input_shape(i) or [])


def leading_one(ctx: OpContext, i: int) -> bool:
    """Whether input i is declared with a leading 1 (the axis samples take)."""
    shape = ctx.input_shape(i)
    return bool(shape) and shape[0] == 1


def is_static(ctx: OpContext, *indices: int) -> bool:
    """Whether the given inputs are constants (at plan time activations read as None)."""
    return all(ctx.input(i) is not None for i in indices)


def per_sample(ctx: OpContext, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Give arrays declared with a leading 1 (constants next to batched activations) the batch.

    Only called where the leading axis is the sample axis of every operand, so that a constant
    stands for the same value in every sample.
    """
    if ctx.batch == 1:
        return list(arrays)
    return [
        np.broadcast_to(a, (ctx.batch, *a.shape[1:])) if a.ndim and a.shape[0] == 1 else a
        for a in arrays
    ]


def keeps_leading_axis(
    ctx: OpContext, value_input: int, axis_input: int, rank_offset: int = 0
) -> bool:
    """Batch rule of ops with a constant axis input: safe unless that axis is the sample axis."""
    if not is_static(ctx, axis_input):
        return False
    axes = [
        positive_axis(a, input_rank(ctx, value_input) + rank_offset)
        for a in ints(ctx.input(axis_input))
    ]
    return 0 not in axes


def option_axis_not_leading(rank_offset: int = 0) -> Callable[[OpContext], bool]:
    """Batch rule of ops whose `axis` option must not be the sample axis."""

    def rule(ctx: OpContext) -> bool:
        return (
            positive_axis(option_or_default(ctx, "axis", 0), input_rank(ctx, 0) + rank_offset) != 0
        )

    return rule
