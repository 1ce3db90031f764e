"""Convolutions and matrix products: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED,
BATCH_MATMUL.

The spatial helpers (TFLite's padding arithmetic, receptive-field views, blocking, fused-activation
clamps) are shared with the pooling kernels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product

import numpy as np

from qtool.errors import ModelError
from qtool.model.types import Padding
from qtool.runtime.kernels import native
from qtool.runtime.registry import (
    OpContext,
    fused,
    fused_float_range,
    is_clamp_activation,
    kernel,
)

# Temporaries (im2col columns, accumulators) are built a block of samples or rows at a time so
# that a 64-sample chunk of a large feature map neither exhausts memory nor thrashes the caches.
_MATMUL_BLOCK_BYTES = 1 << 23
_TAP_BLOCK_BYTES = 1 << 21


def out_size_and_padding(
    padding: int, size: int, kernel: int, stride: int, dilation: int = 1
) -> tuple[int, int]:
    """Output size and leading padding of one spatial axis (TFLite's ComputePaddingHeightWidth).

    Odd total padding puts the extra element at the end.
    """
    effective = (kernel - 1) * dilation + 1
    if padding == Padding.SAME:
        out = (size + stride - 1) // stride
    elif padding == Padding.VALID:
        out = (size + stride - effective) // stride
    else:
        raise ModelError(f"unknown padding {padding}")
    return out, max((out - 1) * stride + effective - size, 0) // 2


@dataclass(frozen=True)
class Block:
    """A piece of a sliding-window op's output and the padded input it reads."""

    samples: slice
    rows: range  # output rows
    slab: np.ndarray  # the padded input rows they read: [n, rows, phases, columns / phases, C]


class TapGrid:
    """The input of a sliding-window op, cut into blocks of padded input rows.

    Tap (i, j) of every window reads input pixel (oy * stride_h + i * dilation_h - top,
    ox * stride_w + j * dilation_w - left). With `split_phases` a block's slab stores its padded
    input rows column phase by column phase (column = phase + stride_w * q), which makes each
    tap a [samples, rows, OW, C] view whose OW x C elements are contiguous: numpy then runs
    every pass over a tap as one long inner loop, strided windows included. Slabs are built one
    block at a time, so that they stay in cache and no padded copy of the whole batch is made.
    """

    def __init__(
        self,
        x: np.ndarray,
        kernel: tuple[int, int],
        stride: tuple[int, int],
        dilation: tuple[int, int],
        padding: int,
        fill: float = 0.0,
        split_phases: bool = True,
    ) -> None:
        n, height, width, _ = x.shape
        (oh, self.top), (ow, self.left) = (
            out_size_and_padding(padding, size, k, s, d)
            for size, k, s, d in zip((height, width), kernel, stride, dilation, strict=True)
        )
        self.x, self.fill = x, fill
        self.kernel, self.stride, self.dilation = kernel, stride, dilation
        self.out_shape = (n, oh, ow)
        self.phases = stride[1] if split_phases else 1
        cols = max((ow - 1) * stride[1] + (kernel[1] - 1) * dilation[1] + 1, self.left + width)
        self.padded_width = -(-cols // self.phases) * self.phases
        rows = (oh - 1) * stride[0] + (kernel[0] - 1) * dilation[0] + 1
        # Without padding or column phases, slabs are plain views of the input.
        self.copy_free = self.phases == 1 and self.top == 0 and rows <= height and cols == width

    def blocks(self, row_bytes: int, budget: int) -> Iterator[Block]:
        """Cut the output into blocks whose temporaries take about `budget` bytes, given what
        one output row costs the caller: whole samples when they fit, else row ranges of one
        sample."""
        n, oh, _ = self.out_shape
        row_bytes += self.stride[0] * self.padded_width * self.x.shape[3] * self.x.itemsize
        sample_bytes = oh * row_bytes
        if sample_bytes <= budget:
            step = budget // sample_bytes
            for start in range(0, n, step):
                samples = slice(start, min(start + step, n))
                yield Block(samples, range(oh), self._slab(samples, range(oh)))
            return
        step = max(1, budget // row_bytes)
        for sample, start in product(range(n), range(0, oh, step)):
            samples, rows = slice(sample, sample + 1), range(start, min(start + step, oh))
            yield Block(samples, rows, self._slab(samples, rows))

    def geometry(self) -> tuple[int, ...]:
        """The grid as the C kernels take it (native.py): (n, height, width, channels, kh, kw,
        stride_h, stride_w, dilation_h, dilation_w, top, left, oh, ow)."""
        return (
            *self.x.shape,
            *self.kernel,
            *self.stride,
            *self.dilation,
            self.top,
            self.left,
            *self.out_shape[1:],
        )

    def _slab(self, samples: slice, rows: range) -> np.ndarray:
        first = rows.start * self.stride[0]
        stop = (rows.stop - 1) * self.stride[0] + (self.kernel[0] - 1) * self.dilation[0] + 1
        x = self.x[samples]
        if self.copy_free:
            return x[:, first:stop, None]
        phases = self.phases
        slab = np.empty(
            (x.shape[0], stop - first, phases, self.padded_width // phases, x.shape[3]), x.dtype
        )
        # Input rows [y0, y1) land at slab rows [r0, r1); everything else is padding.
        y0, y1 = max(first - self.top, 0), min(stop - self.top, x.shape[1])
        r0 = y0 + self.top - first
        r1 = r0 + max(y1 - y0, 0)
        slab[:, :r0] = self.fill
        slab[:, r1:] = self.fill
        for phase in range(phases):
            column = (phase - self.left) % phases  # the first input column of this phase
            source = x[:, y0:y1, column::phases]
            start = (self.left + column) // phases
            target = slab[:, r0:r1, phase]
            target[:, :, :start] = self.fill
            target[:, :, start : start + source.shape[2]] = source
            target[:, :, start + source.shape[2] :] = self.fill
        return slab

    def row_tap(self, block: Block, i: int) -> np.ndarray:
        """Window row i of a block, every padded column: [n, rows, phases, columns / phases, C]."""
        first, sh = i * self.dilation[0], self.stride[0]
        return block.slab[:, first : first + (len(block.rows) - 1) * sh + 1 : sh]

    def col_tap(self, j: int, row: np.ndarray) -> np.ndarray:
        """Window column j of a `row_tap` (or of a reduction of row taps): [n, rows, OW, C]."""
        start, phase = divmod(j * self.dilation[1], self.phases)
        step = self.stride[1] // self.phases
        return row[:, :, phase, start : start + (self.out_shape[2] - 1) * step + 1 : step]

    def tap(self, block: Block, i: int, j: int) -> np.ndarray:
        """Tap (i, j) of a block's windows: [n, rows, OW, C]."""
        return self.col_tap(j, self.row_tap(block, i))

    def taps(self) -> Iterator[tuple[int, int]]:
        """Every (i, j) of the window, row by row."""
        return product(range(self.kernel[0]), range(self.kernel[1]))

    def column_groups(self) -> list[list[int]]:
        """The window columns j grouped by the column phase their taps read; within a group
        the taps start at evenly spaced slab columns, so one strided view holds them all."""
        groups: dict[int, list[int]] = {}
        for j in range(self.kernel[1]):
            groups.setdefault(j * self.dilation[1] % self.phases, []).append(j)
        return list(groups.values())

    def tap_stack(self, block: Block, columns: list[int]) -> np.ndarray:
        """Taps (i, j) for every window row i and the `columns` of one group, as a read-only
        view [KH, len(columns), n, rows, OW * C] whose last axis is contiguous.

        Needs column phases (a column stride of 1 within a phase) and a contiguous input."""
        slab = block.slab
        s_n, s_row, _, s_col, s_ch = slab.strides
        first, phase = divmod(columns[0] * self.dilation[1], self.phases)
        step = (columns[1] - columns[0]) * self.dilation[1] // self.phases if columns[1:] else 0
        n, ow, channels = slab.shape[0], self.out_shape[2], slab.shape[4]
        return np.lib.stride_tricks.as_strided(
            slab[:, :, phase, first:],
            (self.kernel[0], len(columns), n, len(block.rows), ow * channels),
            (self.dilation[0] * s_row, step * s_col, s_n, self.stride[0] * s_row, s_ch),
            writeable=False,
        )


def _window_options(ctx: OpContext) -> tuple[tuple[int, int], tuple[int, int]]:
    return (
        (ctx.option("stride_h"), ctx.option("stride_w")),
        (ctx.option("dilation_h_factor"), ctx.option("dilation_w_factor")),
    )


def _finish(ctx: OpContext, out: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """Add the optional bias and apply the fused activation, in place: in one pass by the C
    kernel (native.py) where it is built and the layout allows, else by numpy's two."""
    channels = out.shape[-1] if out.ndim else 0
    if (
        native.kernels is not None
        and out.dtype == np.float32
        and out.flags.c_contiguous
        and (bias is None or (bias.dtype == np.float32 and bias.shape == (channels,)))
    ):
        rows = out.size // channels if channels else 0
        native.kernels.bias_clamp(out, bias, rows, channels, *fused_float_range(ctx))
        return out
    if bias is not None:
        out += bias
    return fused(ctx, out)


def _constant(ctx: OpContext, *indices: int) -> bool:
    """True when each of these inputs is either absent or a constant (known at plan time)."""
    return all(ctx.input_tensor(i) is None or ctx.inputs[i] is not None for i in indices)


def _constant_filter_and_bias(ctx: OpContext) -> bool:
    # Weights computed from the samples would differ per sample: run such ops sample by sample.
    return _constant(ctx, 1, 2)


@kernel("CONV_2D", batch=_constant_filter_and_bias)
def conv_2d(ctx: OpContext) -> np.ndarray:
    """CONV_2D on NHWC input with [O, KH, KW, I] filters, bias and fused activation; a filter
    with fewer input channels than the input is a grouped convolution."""
    x, filters, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    out_c, kh, kw, group_c = filters.shape
    # A filter narrower than the input is a grouped convolution (TFLite's reference kernel).
    groups = x.shape[3] // group_c
    stride, dilation = _window_options(ctx)
    if (kh, kw, *stride, groups) == (1, 1, 1, 1, 1):
        return _pointwise(ctx, x, filters.reshape(out_c, -1), bias)
    grid = TapGrid(x, (kh, kw), stride, dilation, ctx.option("padding"), split_phases=False)
    n, oh, ow = grid.out_shape
    # [groups, KH*KW*group_c, out_c/groups], rows in the (kh, kw, c) order of the im2col columns.
    weights = filters.reshape(groups, out_c // groups, -1).transpose(0, 2, 1)
    out = np.empty((n * oh * ow, out_c), np.float32)
    row_bytes = ow * (kh * kw * x.shape[3] + out_c) * 4
    for block in grid.blocks(row_bytes, _MATMUL_BLOCK_BYTES):
        cols = _im2col(grid, block)
        m = cols.shape[0]
        first = (block.samples.start * oh + block.rows.start) * ow  # blocks are whole rows
        result = out[first : first + m]
        if groups == 1:
            np.matmul(cols, weights[0], out=result)
        else:
            np.matmul(
                cols.reshape(m, kh * kw, groups, group_c)
                .transpose(2, 0, 1, 3)
                .reshape(groups, m, -1),
                weights,
                out=result.reshape(m, groups, -1).transpose(1, 0, 2),
            )
        _finish(ctx, result, bias)  # while the block is in cache
    return out.reshape(n, oh, ow, out_c)


def _pointwise(
    ctx: OpContext, x: np.ndarray, weights: np.ndarray, bias: np.ndarray | None
) -> np.ndarray:
    """A 1x1 unstrided convolution: one matrix product over the pixels, cut into row blocks
    whose bias and activation are applied while they are in cache."""
    channels, out_c = x.shape[3], weights.shape[0]
    pixels = x.reshape(-1, channels)
    out = np.empty((pixels.shape[0], out_c), np.float32)
    step = max(1, _MATMUL_BLOCK_BYTES // ((channels + out_c) * 4))
    for start in range(0, pixels.shape[0], step):
        result = out[start : start + step]
        np.matmul(pixels[start : start + step], weights.T, out=result)
        _finish(ctx, result, bias)
    return out.reshape(*x.shape[:3], out_c)


def _im2col(grid: TapGrid, block: Block) -> np.ndarray:
    """The receptive fields of a block of output pixels as [pixels, KH*KW*C], in one copy.

    A strided view lays the windows out pixel by pixel; with undilated columns a window row's
    KW pixels are adjacent in memory, so the copy moves runs of KW*C values, not of C.
    """
    slab = block.slab[:, :, 0]  # [n, padded rows, padded columns, C]
    n, _, _, channels = slab.shape
    (kh, kw), (sh, sw), (dh, dw) = grid.kernel, grid.stride, grid.dilation
    s_n, s_row, s_col, s_ch = slab.strides
    rows, ow = len(block.rows), grid.out_shape[2]
    if dw == 1 and s_col == channels * s_ch:
        window_row = ((kw * channels,), (s_ch,))
    else:
        window_row = ((kw, channels), (dw * s_col, s_ch))
    view = np.lib.stride_tricks.as_strided(
        slab,
        (n, rows, ow, kh, *window_row[0]),
        (s_n, sh * s_row, sw * s_col, dh * s_row, *window_row[1]),
        writeable=False,
    )
    return np.ascontiguousarray(view).reshape(n * rows * ow, -1)


@kernel("DEPTHWISE_CONV_2D", batch=_constant_filter_and_bias)
def depthwise_conv_2d(ctx: OpContext) -> np.ndarray:
    """DEPTHWISE_CONV_2D with [1, KH, KW, C * multiplier] filters (the multiplier comes from the
    shapes, not the option), bias and fused activation."""
    x, filters, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    _, kh, kw, out_c = filters.shape
    # LiteRT derives the multiplier from the shapes and never reads the depth_multiplier option.
    multiplier = out_c // x.shape[3]
    if multiplier > 1:
        x = np.repeat(x, multiplier, axis=3)  # output channel k reads input channel k // mult.
    stride, dilation = _window_options(ctx)
    x = np.ascontiguousarray(x)  # tap_stack's views need it
    grid = TapGrid(x, (kh, kw), stride, dilation, ctx.option("padding"))
    if (
        native.kernels is not None
        and out_c > 1  # one channel: einsum may sum a window's taps in another order
        and grid.phases < 256
        and all(a is None or a.dtype == np.float32 for a in (x, filters, bias))
        and (bias is None or bias.shape == (out_c,))
    ):
        return _native_depthwise(ctx, grid, filters, bias)
    n, oh, ow = grid.out_shape
    # Each tap's weights repeated along the output row, so that a tap's products run along
    # contiguous [OW * C] rows: per column group, [KH, len(group), OW * C].
    tiled = np.tile(filters.reshape(kh, kw, 1, out_c), (1, 1, ow, 1)).reshape(kh, kw, -1)
    groups = [
        (columns, np.ascontiguousarray(tiled[:, columns])) for columns in grid.column_groups()
    ]
    out = np.empty((n, oh, ow, out_c), np.float32)
    for block in grid.blocks(2 * ow * out_c * 4, _TAP_BLOCK_BYTES):
        acc = out[block.samples, block.rows.start : block.rows.stop]
        flat = acc.reshape(acc.shape[0], acc.shape[1], -1)
        # einsum multiplies and sums the taps in one loop, without a temporary per tap.
        for g, (columns, weights) in enumerate(groups):
            stack = grid.tap_stack(block, columns)
            if g == 0:
                np.einsum("ijnrk,ijk->nrk", stack, weights, out=flat)
            else:
                flat += np.einsum("ijnrk,ijk->nrk", stack, weights)
        _finish(ctx, acc, bias)
    return out


def _native_depthwise(
    ctx: OpContext, grid: TapGrid, filters: np.ndarray, bias: np.ndarray | None
) -> np.ndarray:
    """The numpy path's results from the C kernel (native.py): the same products summed in
    the same order (column group by column group), the bias added and the clamp applied as
    each output row is written, with no padded copy of the input."""
    n, oh, ow = grid.out_shape
    group_of = bytearray(grid.kernel[1])
    for number, columns in enumerate(grid.column_groups()):
        for j in columns:
            group_of[j] = number  # fewer than 256 groups: stride_w is checked in the caller
    out = np.empty((n, oh, ow, filters.shape[3]), np.float32)
    native.kernels.depthwise(
        grid.x,
        np.ascontiguousarray(filters),
        None if bias is None else np.ascontiguousarray(bias),
        out,
        grid.geometry(),
        bytes(group_of),
        *fused_float_range(ctx),
    )
    return out


def _transpose_conv_batches(ctx: OpContext) -> bool:
    return _constant(ctx, 1, 3)


@kernel("TRANSPOSE_CONV", batch=_transpose_conv_batches)
def transpose_conv(ctx: OpContext) -> np.ndarray:
    """TRANSPOSE_CONV: inputs (output shape, [O, KH, KW, I] filters, x, optional bias), padding
    as for the forward convolution from the output size to the input size."""
    output_shape, filters, x, bias = ctx.input(0), ctx.input(1), ctx.input(2), ctx.input(3)
    oh, ow = (int(d) for d in np.asarray(output_shape).reshape(-1)[1:3])
    _, kh, kw, _ = filters.shape
    sh, sw = ctx.option("stride_h"), ctx.option("stride_w")
    # TFLite computes the padding as for a forward convolution from the output to the input size.
    top = out_size_and_padding(ctx.option("padding"), oh, kh, sh)[1]
    left = out_size_and_padding(ctx.option("padding"), ow, kw, sw)[1]
    out = scatter_windows(x, filters, (sh, sw), (top, left), (oh, ow))
    return _finish(ctx, out, bias)


def scatter_windows(
    x: np.ndarray,
    filters: np.ndarray,
    stride: tuple[int, int],
    padding: tuple[int, int],
    out_hw: tuple[int, int],
) -> np.ndarray:
    """A transposed convolution without bias: every input pixel times the [OC, KH, KW, IC]
    filters added to its KH x KW output window, whose origin is (y * stride_h - top,
    x * stride_w - left); contributions outside the [OH, OW] output are dropped."""
    out_c, kh, kw, in_c = filters.shape
    n, height, width, _ = x.shape
    (sh, sw), (top, left), (oh, ow) = stride, padding, out_hw
    weights = filters.transpose(3, 1, 2, 0).reshape(in_c, -1)  # [IC, KH*KW*OC]
    span_h, span_w = (height - 1) * sh + 1, (width - 1) * sw + 1
    full_shape = (max(span_h + kh - 1, top + oh), max(span_w + kw - 1, left + ow), out_c)
    out = np.empty((n, oh, ow, out_c), np.float32)
    sample_bytes = (height * width * kh * kw * out_c + int(np.prod(full_shape))) * 4
    step = max(1, _MATMUL_BLOCK_BYTES // sample_bytes)
    for start in range(0, n, step):
        block = x[start : start + step]
        # What every input pixel adds to its KH x KW output neighbourhood: [n, H, W, KH, KW, OC].
        spread = (block.reshape(-1, in_c) @ weights).reshape(*block.shape[:3], kh, kw, out_c)
        full = np.zeros((block.shape[0], *full_shape), np.float32)
        for i, j in product(range(kh), range(kw)):
            full[:, i : i + span_h : sh, j : j + span_w : sw] += spread[:, :, :, i, j]
        out[start : start + step] = full[:, top : top + oh, left : left + ow]
    return out


def _fully_connected_batches(ctx: OpContext) -> bool:
    if not _constant_filter_and_bias(ctx):
        return False
    if ctx.option("keep_num_dims"):
        return True  # the output keeps the input's leading axis
    # Otherwise the output is [rows, units] with rows = elements / in_features: per-sample only
    # when each sample is a single row (an input like [1, 4, 16] against 64 in_features counts).
    return int(np.prod(ctx.input_shape(0))) == ctx.input_shape(1)[1]


@kernel("FULLY_CONNECTED", batch=_fully_connected_batches)
def fully_connected(ctx: OpContext) -> np.ndarray:
    """FULLY_CONNECTED: x (flattened to [-1, in]) times weights[out, in] transposed, bias and a
    clamp activation; keep_num_dims keeps x's leading dimensions. ModelError for shuffled weight
    formats and other activations, which LiteRT rejects."""
    x, weights, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    if ctx.option("weights_format") != 0:
        raise ModelError("FULLY_CONNECTED: only the DEFAULT weights format has float semantics")
    activation = ctx.option("fused_activation_function")
    if not is_clamp_activation(activation):
        # LiteRT rejects these at prepare time instead of ignoring them as convolutions do.
        raise ModelError(f"FULLY_CONNECTED: unsupported fused activation function {activation}")
    units, in_features = weights.shape
    out = x.reshape(-1, in_features) @ weights.T
    out = _finish(ctx, out, bias)
    return out.reshape(*x.shape[:-1], units) if ctx.option("keep_num_dims") else out


def _batch_matmul_batches(ctx: OpContext) -> bool:
    shapes = [ctx.input_shape(0), ctx.input_shape(1)]
    out_rank = max(len(s) for s in shapes)
    for i, shape in enumerate(shapes):
        live = ctx.inputs[i] is None
        if len(shape) == out_rank >= 3:
            # A leading batch axis: a sample axis for a live operand, a broadcast for a constant.
            if shape[0] != 1:
                return False
        elif live and not (i == 0 and out_rank == 2 and not ctx.option("adj_x")):
            # Only a plain 2-D lhs has its leading axis (rows) map to the output's leading axis.
            return False
    return True


@kernel("BATCH_MATMUL", batch=_batch_matmul_batches)
def batch_matmul(ctx: OpContext) -> np.ndarray:
    """BATCH_MATMUL: lhs @ rhs with broadcast batch dimensions, each side transposed first when
    adj_x / adj_y is set."""
    lhs, rhs = ctx.input(0), ctx.input(1)
    if ctx.option("adj_x"):
        lhs = np.swapaxes(lhs, -1, -2)
    if ctx.option("adj_y"):
        rhs = np.swapaxes(rhs, -1, -2)
    return np.matmul(lhs, rhs)
