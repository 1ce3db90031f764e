"""Slicing operators: slices, strided slices, gathers and reversals.

Batch rules: see `movement`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qtool.runtime.kernels.movement import (
    input_rank,
    ints,
    is_static,
    keeps_leading_axis,
    leading_one,
    option_or_default,
    per_sample,
    positive_axis,
)
from qtool.runtime.registry import OpContext, kernel

# --------------------------------------------------------------------------- slices


def _slice_batch(ctx: OpContext) -> bool:
    if not (is_static(ctx, 1, 2) and leading_one(ctx, 0)):
        return False
    return ints(ctx.input(1))[0] == 0 and ints(ctx.input(2))[0] in (1, -1)


@kernel("SLICE", batch=_slice_batch)
def slice_(ctx: OpContext) -> np.ndarray:
    """SLICE from `begin` (input 1) with `size` (input 2; -1: to the end)."""
    begin = ints(ctx.inputs[1])
    size = ctx.batched_shape(ctx.inputs[2])  # a size of 1 on the sample axis takes every sample
    index = tuple(slice(b, None if s < 0 else b + s) for b, s in zip(begin, size, strict=True))
    return ctx.inputs[0][index]


@dataclass(frozen=True)
class _SliceAxis:
    """One axis of STRIDED_SLICE's effective input (the input with its new axes inserted)."""

    begin: int = 0
    end: int = 0
    stride: int = 1
    begin_mask: bool = True
    end_mask: bool = True
    shrink: bool = False
    new_axis: bool = False


_WHOLE = _SliceAxis()


def _strided_slice_axes(ctx: OpContext, rank: int) -> list[_SliceAxis]:
    """TFLite's expansion of the sparse slice spec (ellipsis, new axes) to one entry per axis."""
    begin, end, strides = (ints(ctx.input(i)) for i in (1, 2, 3))
    masks = {
        name: int(option_or_default(ctx, name, 0))
        for name in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
    }

    def bit(name: str, i: int) -> bool:
        return i >= 0 and bool(masks[name] >> i & 1)

    count = len(begin)
    added = sum(bit("new_axis_mask", i) and not bit("ellipsis_mask", i) for i in range(count))
    dims = rank + added
    # An ellipsis stands for as many whole axes as the spec leaves unmentioned; a new-axis bit
    # set together with the ellipsis bit is ignored. Spec entry `i` maps to effective axis
    # `i + expanded` once the ellipsis is passed.
    axes: list[_SliceAxis] = []
    expanded = 0
    i = 0
    while i < dims:
        if bit("ellipsis_mask", i):
            stop = max(i + 1, min(i + 1 + added + rank - count, dims))
            axes.extend([_WHOLE] * (stop - i))
            expanded = stop - i - 1
            i = stop
            continue
        spec = i - expanded
        if bit("new_axis_mask", spec):
            axes.append(_SliceAxis(0, 1, 1, False, False, new_axis=True))
        elif spec >= count:
            axes.append(_WHOLE)
        else:
            axes.append(
                _SliceAxis(
                    begin[spec],
                    end[spec],
                    strides[spec],
                    bit("begin_mask", spec),
                    bit("end_mask", spec),
                    bit("shrink_axis_mask", spec),
                )
            )
        i += 1
    return axes


def _strided_index(axis: _SliceAxis, size: int, offset: bool) -> int | slice:
    """TFLite's start/stop clamping for one axis, as a numpy index."""
    forward = axis.stride > 0
    low, high = (0, size) if forward else (-1, size - 1)
    start = axis.begin + size if axis.begin < 0 else axis.begin
    start = min(max(start, low), high)
    if axis.begin_mask:
        start = 0 if forward else size - 1
    if axis.shrink:
        return start
    stop = axis.end + start if offset else axis.end
    stop = stop + size if stop < 0 else stop
    stop = min(max(stop, low), high)
    if axis.end_mask:
        stop = size if forward else -1
    if start < 0:  # a backward slice starting before the first element is empty
        return slice(0, 0)
    # -1 is TFLite's "before the first element" for backward slices; numpy spells it None.
    return slice(start, None if stop < 0 else stop, axis.stride)


def _strided_slice_batch(ctx: OpContext) -> bool:
    if not (is_static(ctx, 1, 2, 3) and leading_one(ctx, 0)):
        return False
    first = _strided_slice_axes(ctx, input_rank(ctx, 0))[0]
    # The sample axis must be taken whole: begin 0, any end >= 1 (clamped to the one declared
    # sample), stride 1, not shrunk, and no new axis in front of it.
    return (
        not first.new_axis
        and not first.shrink
        and first.stride == 1
        and (first.begin_mask or first.begin == 0)
        and (first.end_mask or first.end >= 1)
    )


@kernel("STRIDED_SLICE", batch=_strided_slice_batch)
def strided_slice(ctx: OpContext) -> np.ndarray:
    """STRIDED_SLICE with its begin/end/ellipsis/new-axis/shrink masks and the `offset` option
    (end relative to begin)."""
    x = ctx.inputs[0]
    offset = bool(option_or_default(ctx, "offset", False))
    index: list[int | slice | None] = []
    dim = 0
    for axis in _strided_slice_axes(ctx, x.ndim):
        if axis.new_axis:
            index.append(None)
            continue
        index.append(_strided_index(axis, x.shape[dim], offset))
        dim += 1
    if ctx.batch > 1:
        # The batch rule proved that the per-sample slice takes the one sample whole.
        index[0] = slice(None)
    return x[tuple(index)]


# --------------------------------------------------------------------------- gathers


def _gather_axes(ctx: OpContext, params_rank: int, indices_rank: int) -> tuple[int, int]:
    axis = positive_axis(option_or_default(ctx, "axis", 0), params_rank)
    batch_dims = positive_axis(option_or_default(ctx, "batch_dims", 0), indices_rank)
    return axis, batch_dims


def _gather_batch(ctx: OpContext) -> bool:
    axis, batch_dims = _gather_axes(ctx, input_rank(ctx, 0), input_rank(ctx, 1))
    if batch_dims > 0:  # both operands are indexed by the sample axis
        return True
    params_static, indices_static = is_static(ctx, 0), is_static(ctx, 1)
    if indices_static:  # batched params: the gathered axis must not be the sample axis
        return axis != 0
    # Batched indices: their axes lead the output only when gathering along axis 0.
    return params_static and axis == 0


@kernel("GATHER", batch=_gather_batch)
def gather(ctx: OpContext) -> np.ndarray:
    """GATHER of the indices (input 1) along `axis`, with `batch_dims` leading dimensions shared
    by params and indices."""
    params, indices = ctx.inputs[0], np.asarray(ctx.inputs[1])
    axis, batch_dims = _gather_axes(ctx, params.ndim, indices.ndim)
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    params, indices = per_sample(ctx, [params, indices])
    lead = params.shape[:batch_dims]
    groups, outer = math.prod(lead), math.prod(params.shape[batch_dims:axis])
    inner = math.prod(params.shape[axis + 1 :])
    table = params.reshape(groups, outer, params.shape[axis], inner)
    picks = indices.reshape(groups, 1, -1)
    gathered = table[np.arange(groups)[:, None, None], np.arange(outer)[None, :, None], picks]
    return gathered.reshape(
        *lead,
        *params.shape[batch_dims:axis],
        *indices.shape[batch_dims:],
        *params.shape[axis + 1 :],
    )


def _gather_nd_batch(ctx: OpContext) -> bool:
    # Constant params indexed by batched indices: the output leads with the indices' axes.
    return is_static(ctx, 0) and input_rank(ctx, 1) >= 2


@kernel("GATHER_ND", batch=_gather_nd_batch)
def gather_nd(ctx: OpContext) -> np.ndarray:
    """GATHER_ND: the last axis of the indices indexes the leading dimensions of params."""
    params, indices = ctx.inputs[0], np.asarray(ctx.inputs[1])
    return params[tuple(np.moveaxis(indices, -1, 0))]


# --------------------------------------------------------------------------- reversals


@kernel("REVERSE_V2", batch=lambda ctx: keeps_leading_axis(ctx, 0, 1))
def reverse_v2(ctx: OpContext) -> np.ndarray:
    """REVERSE_V2 along the axes of input 1."""
    x = ctx.inputs[0]
    return np.flip(x, axis=tuple(positive_axis(a, x.ndim) for a in ints(ctx.inputs[1])))
