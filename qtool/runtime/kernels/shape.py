"""Shape and data-movement operators: reshapes, slices, gathers, pads, concatenations, ...

Batch rules. These kernels run on arrays whose leading axis holds the samples in place of the
model's declared leading 1. An operator is batch-safe when its shape arguments are constants
(known at plan time) and leave that axis alone: it stays the leading axis, is neither sliced,
reversed, padded, tiled nor moved. Shape arguments that mention the leading 1 (a reshape target
[1, 36], a slice size [1, ...], a broadcast shape) go through `ctx.batched_shape`, and constants
declared with a leading 1 next to batched activations (a concatenated constant, the indices of a
batched gather) are broadcast over the samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from qtool.model.types import TensorType, numpy_dtype
from qtool.runtime.registry import OpContext, always, fused, kernel, never

# --------------------------------------------------------------------------- helpers


def _option(ctx: OpContext, name: str, default: Any) -> Any:
    """An option, or its schema default when the operator carries no options table at all."""
    try:
        value = ctx.option(name)
    except KeyError:
        return default
    return default if value is None else value


def _ints(value: Any) -> list[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _rank(ctx: OpContext, i: int) -> int:
    return len(ctx.input_shape(i) or [])


def _leading_one(ctx: OpContext, i: int) -> bool:
    shape = ctx.input_shape(i)
    return bool(shape) and shape[0] == 1


def _static(ctx: OpContext, *indices: int) -> bool:
    """Whether the given inputs are constants (at plan time activations read as None)."""
    return all(ctx.input(i) is not None for i in indices)


def _per_sample(ctx: OpContext, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
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


def _keeps_leading_axis(
    ctx: OpContext, value_input: int, axis_input: int, rank_offset: int = 0
) -> bool:
    """Batch rule of ops with a constant axis input: safe unless that axis is the sample axis."""
    if not _static(ctx, axis_input):
        return False
    axes = [_axis(a, _rank(ctx, value_input) + rank_offset) for a in _ints(ctx.input(axis_input))]
    return 0 not in axes


def _option_axis_not_leading(rank_offset: int = 0) -> Callable[[OpContext], bool]:
    """Batch rule of ops whose `axis` option must not be the sample axis."""

    def rule(ctx: OpContext) -> bool:
        return _axis(_option(ctx, "axis", 0), _rank(ctx, 0) + rank_offset) != 0

    return rule


def _first_pair_zero(ctx: OpContext) -> bool:
    """Batch rule of pads: constant paddings that leave the sample axis unpadded."""
    if not _static(ctx, 1):
        return False
    paddings = np.asarray(ctx.input(1)).reshape(-1, 2)
    return len(paddings) > 0 and not paddings[0].any()


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
        return None if value is None else _ints(value)
    target = _ints(_option(ctx, "new_shape", []))
    return [] if target == [0] else target


def _reshape_batch(ctx: OpContext) -> bool:
    target = _reshape_target(ctx)
    if not target or not _leading_one(ctx, 0):
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
    return [_axis(d, rank) for d in _ints(_option(ctx, "squeeze_dims", []))]


def _squeeze_batch(ctx: OpContext) -> bool:
    # Without explicit dims every size-1 axis goes, the declared batch axis included.
    dims = _squeeze_dims(ctx, _rank(ctx, 0))
    return bool(dims) and 0 not in dims


@kernel("SQUEEZE", batch=_squeeze_batch)
def squeeze(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    dims = _squeeze_dims(ctx, x.ndim)
    return np.squeeze(x, axis=tuple(dims)) if dims else np.squeeze(x)


@kernel("EXPAND_DIMS", batch=lambda ctx: _keeps_leading_axis(ctx, 0, 1, rank_offset=1))
def expand_dims(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    return np.expand_dims(x, _axis(_ints(ctx.inputs[1])[0], x.ndim + 1))


def _transpose_batch(ctx: OpContext) -> bool:
    return _static(ctx, 1) and _ints(ctx.input(1))[:1] == [0]


@kernel("TRANSPOSE", batch=_transpose_batch)
def transpose(ctx: OpContext) -> np.ndarray:
    return np.transpose(ctx.inputs[0], _ints(ctx.inputs[1]))


# --------------------------------------------------------------------------- joins and splits


@kernel("CONCATENATION", batch=_option_axis_not_leading())
def concatenation(ctx: OpContext) -> np.ndarray:
    arrays = _per_sample(ctx, ctx.inputs)
    if arrays[0].ndim == 0:  # TFLite concatenates scalars into a vector
        return fused(ctx, np.stack(arrays))
    axis = _axis(_option(ctx, "axis", 0), arrays[0].ndim)
    return fused(ctx, np.concatenate(arrays, axis=axis))


@kernel("PACK", batch=_option_axis_not_leading(rank_offset=1))
def pack(ctx: OpContext) -> np.ndarray:
    arrays = _per_sample(ctx, ctx.inputs)
    return np.stack(arrays, axis=_axis(_option(ctx, "axis", 0), arrays[0].ndim + 1))


@kernel("UNPACK", batch=_option_axis_not_leading())
def unpack(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    axis = _axis(_option(ctx, "axis", 0), x.ndim)
    return [np.take(x, i, axis=axis) for i in range(x.shape[axis])]


@kernel("SPLIT", batch=lambda ctx: _keeps_leading_axis(ctx, 1, 0))
def split(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.inputs[1]
    axis = _axis(_ints(ctx.inputs[0])[0], x.ndim)
    return np.split(x, len(ctx.op.outputs), axis=axis)


@kernel("SPLIT_V", batch=lambda ctx: _static(ctx, 1) and _keeps_leading_axis(ctx, 0, 2))
def split_v(ctx: OpContext) -> list[np.ndarray]:
    x = ctx.inputs[0]
    axis = _axis(_ints(ctx.inputs[2])[0], x.ndim)
    sizes = _ints(ctx.inputs[1])
    if -1 in sizes:  # at most one size is inferred from the others
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


# --------------------------------------------------------------------------- slices


def _slice_batch(ctx: OpContext) -> bool:
    if not (_static(ctx, 1, 2) and _leading_one(ctx, 0)):
        return False
    return _ints(ctx.input(1))[0] == 0 and _ints(ctx.input(2))[0] in (1, -1)


@kernel("SLICE", batch=_slice_batch)
def slice_(ctx: OpContext) -> np.ndarray:
    begin = _ints(ctx.inputs[1])
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
    begin, end, strides = (_ints(ctx.input(i)) for i in (1, 2, 3))
    masks = {
        name: int(_option(ctx, name, 0))
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
    if not (_static(ctx, 1, 2, 3) and _leading_one(ctx, 0)):
        return False
    first = _strided_slice_axes(ctx, _rank(ctx, 0))[0]
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
    x = ctx.inputs[0]
    offset = bool(_option(ctx, "offset", False))
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
    axis = _axis(_option(ctx, "axis", 0), params_rank)
    batch_dims = _axis(_option(ctx, "batch_dims", 0), indices_rank)
    return axis, batch_dims


def _gather_batch(ctx: OpContext) -> bool:
    axis, batch_dims = _gather_axes(ctx, _rank(ctx, 0), _rank(ctx, 1))
    if batch_dims > 0:  # both operands are indexed by the sample axis
        return True
    params_static, indices_static = _static(ctx, 0), _static(ctx, 1)
    if indices_static:  # batched params: the gathered axis must not be the sample axis
        return axis != 0
    # Batched indices: their axes lead the output only when gathering along axis 0.
    return params_static and axis == 0


@kernel("GATHER", batch=_gather_batch)
def gather(ctx: OpContext) -> np.ndarray:
    params, indices = ctx.inputs[0], np.asarray(ctx.inputs[1])
    axis, batch_dims = _gather_axes(ctx, params.ndim, indices.ndim)
    if batch_dims == 0:
        return np.take(params, indices, axis=axis)
    params, indices = _per_sample(ctx, [params, indices])
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
    return _static(ctx, 0) and _rank(ctx, 1) >= 2


@kernel("GATHER_ND", batch=_gather_nd_batch)
def gather_nd(ctx: OpContext) -> np.ndarray:
    params, indices = ctx.inputs[0], np.asarray(ctx.inputs[1])
    return params[tuple(np.moveaxis(indices, -1, 0))]


# --------------------------------------------------------------------------- pads and tiles


def _pad_widths(ctx: OpContext) -> np.ndarray:
    return np.asarray(ctx.inputs[1], dtype=np.int64).reshape(-1, 2)


@kernel("PAD", batch=_first_pair_zero)
def pad(ctx: OpContext) -> np.ndarray:
    return np.pad(ctx.inputs[0], _pad_widths(ctx))


@kernel(
    "PADV2",
    batch=lambda ctx: _first_pair_zero(ctx) and (ctx.input_tensor(2) is None or _static(ctx, 2)),
)
def padv2(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    value = ctx.input(2)
    fill = x.dtype.type(0) if value is None else np.asarray(value).reshape(-1)[0]
    return np.pad(x, _pad_widths(ctx), constant_values=fill)


_MIRROR_MODES = {0: "reflect", 1: "symmetric"}  # tflite.MirrorPadMode REFLECT, SYMMETRIC


@kernel("MIRROR_PAD", batch=_first_pair_zero)
def mirror_pad(ctx: OpContext) -> np.ndarray:
    return np.pad(ctx.inputs[0], _pad_widths(ctx), mode=_MIRROR_MODES[_option(ctx, "mode", 0)])


@kernel("TILE", batch=lambda ctx: _static(ctx, 1) and _ints(ctx.input(1))[:1] == [1])
def tile(ctx: OpContext) -> np.ndarray:
    return np.tile(ctx.inputs[0], _ints(ctx.inputs[1]))


def _broadcast_to_batch(ctx: OpContext) -> bool:
    # The input's leading 1 must line up with the target's (same rank) and stay a 1 there.
    return (
        _static(ctx, 1)
        and _leading_one(ctx, 0)
        and _ints(ctx.input(1))[:1] == [1]
        and len(_ints(ctx.input(1))) == _rank(ctx, 0)
    )


@kernel("BROADCAST_TO", batch=_broadcast_to_batch)
def broadcast_to(ctx: OpContext) -> np.ndarray:
    return np.array(np.broadcast_to(ctx.inputs[0], ctx.batched_shape(ctx.inputs[1])))


# --------------------------------------------------------------------------- space/depth/batch


@kernel("SPACE_TO_DEPTH", batch=always)
def space_to_depth(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    k = int(ctx.option("block_size"))
    n, h, w, c = x.shape
    blocks = x.reshape(n, h // k, k, w // k, k, c).transpose(0, 1, 3, 2, 4, 5)
    return blocks.reshape(n, h // k, w // k, k * k * c)


@kernel("DEPTH_TO_SPACE", batch=always)
def depth_to_space(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    k = int(ctx.option("block_size"))
    n, h, w, c = x.shape
    blocks = x.reshape(n, h, w, k, k, c // (k * k)).transpose(0, 1, 3, 2, 4, 5)
    return blocks.reshape(n, h * k, w * k, c // (k * k))


@kernel("SPACE_TO_BATCH_ND", batch=never)
def space_to_batch_nd(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    block = _ints(ctx.inputs[1])
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
    x = ctx.inputs[0]
    block = _ints(ctx.inputs[1])
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


# --------------------------------------------------------------------------- generators


@kernel("SHAPE", batch=never)
def shape(ctx: OpContext) -> np.ndarray:
    # Never batch-safe: the result describes one (declared batch-1) sample.
    return np.asarray(ctx.inputs[0].shape, dtype=numpy_dtype(ctx.option("out_type")))


@kernel("FILL", batch=never)
def fill(ctx: OpContext) -> np.ndarray:
    value = np.asarray(ctx.inputs[1])
    return np.full(_ints(ctx.inputs[0]), value.reshape(()), dtype=value.dtype)


@kernel("RANGE", batch=never)
def range_(ctx: OpContext) -> np.ndarray:
    start, limit, delta = (np.asarray(ctx.inputs[i]).reshape(()) for i in range(3))
    dtype = start.dtype
    if np.issubdtype(dtype, np.integer):
        count = (abs(int(limit) - int(start)) + abs(int(delta)) - 1) // abs(int(delta))
    else:
        count = int(np.ceil(np.abs((limit - start) / delta)))
    # TFLite accumulates `value += delta`; a sequential cumsum rounds the same way.
    steps = np.full(count, delta, dtype=dtype)
    if count:
        steps[0] = start
    return np.cumsum(steps, dtype=dtype)


@kernel("REVERSE_V2", batch=lambda ctx: _keeps_leading_axis(ctx, 0, 1))
def reverse_v2(ctx: OpContext) -> np.ndarray:
    x = ctx.inputs[0]
    return np.flip(x, axis=tuple(_axis(a, x.ndim) for a in _ints(ctx.inputs[1])))
