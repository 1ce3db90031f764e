"""MediaPipe's custom ops: Convolution2DTransposeBias, MaxPoolingWithArgmax2D, MaxUnpooling2D.

Their options are C structs stored raw as custom options: TfLiteTransposeConvParams (padding,
stride_w, stride_h) and TfLitePoolParams (padding, stride_w, stride_h, filter_w, filter_h,
activation, ...), as int32 in native (little-endian) order, read by
`qtool.model.custom_options` with the field names of `schemas/ops.json`.

They follow MediaPipe's reference kernels (mediapipe/util/tflite/operations) and are checked
against LiteRT, which runs them only through its XNNPACK delegate: a transposed convolution with
bias; a max pool that also returns where each maximum was, as a float index
`row * filter_w + column + 0.1` within the window; and the unpooling that writes each value back
to that place in a zeroed output of `filter` times the input size. XNNPACK differs in three
ways: its index tensor holds `column * filter_h + row` as integer bits (values and unpooling
agree; ties between a row and a column neighbour may pick another position); it refuses fused
activations on the pool and SAME padding on the unpooling; and the size of a SAME transposed
convolution follows TensorFlow (output = input x stride), which these kernels do too, where the
reference kernel differs when the kernel overhangs the stride unevenly (3x3 stride 2 on an odd
size).
"""

from __future__ import annotations

import numpy as np

from qtool.model.custom_options import struct_options
from qtool.model.types import Padding
from qtool.op_facts import load_op_facts
from qtool.runtime.kernels.conv import TapGrid, scatter_windows
from qtool.runtime.registry import OpContext, activation_clamp, always, custom_op


def _options(ctx: OpContext) -> dict[str, int]:
    """The op's raw C-struct options, their fields named in `schemas/ops.json`."""
    return struct_options(ctx.op, load_op_facts().custom(ctx.op_type).custom_options)


class _PoolOptions:
    """TfLitePoolParams: window, stride, padding and fused activation code."""

    def __init__(self, ctx: OpContext) -> None:
        values = _options(ctx)
        self.padding = values["padding"]
        self.stride = (values["stride_h"], values["stride_w"])
        self.filter = (values["filter_height"], values["filter_width"])
        self.activation = values["fused_activation_function"]


def _constant_weights(ctx: OpContext) -> bool:
    # Weights computed from the samples would differ per sample: run such ops sample by sample.
    return ctx.inputs[1] is not None and ctx.inputs[2] is not None


@custom_op("Convolution2DTransposeBias", batch=_constant_weights)
def convolution_2d_transpose_bias(ctx: OpContext) -> np.ndarray:
    """MediaPipe's Convolution2DTransposeBias: a transposed convolution plus bias, sized as
    TensorFlow does (SAME: input x stride)."""
    x, filters, bias = ctx.inputs
    options = _options(ctx)
    stride = (options["stride_h"], options["stride_w"])
    _, kh, kw, _ = filters.shape
    sizes, padding = [], []
    for size, k, s in zip(x.shape[1:3], (kh, kw), stride, strict=True):
        # TensorFlow's transposed-convolution sizes, as LiteRT's XNNPACK delegate computes them:
        # SAME makes the output `stride` times the input and crops the overhang evenly (the
        # extra one at the end), VALID keeps it all.
        full = (size - 1) * s + k
        out = size * s if options["padding"] == Padding.SAME else full
        sizes.append(out)
        padding.append(max(0, full - out) // 2)
    out = scatter_windows(x, filters, stride, tuple(padding), tuple(sizes))
    out += bias
    return out


@custom_op("MaxPoolingWithArgmax2D", batch=always)
def max_pooling_with_argmax_2d(ctx: OpContext) -> list[np.ndarray]:
    """MediaPipe's MaxPoolingWithArgmax2D: the window maxima (fused activation applied) and where
    each was in its window, as the float row * filter_w + column + 0.1; ties keep the first."""
    x = ctx.inputs[0]
    options = _PoolOptions(ctx)
    fill = np.float32(-np.inf)  # never above the running maximum: padding is never picked
    grid = TapGrid(x, options.filter, options.stride, (1, 1), options.padding, fill)
    n, oh, ow = grid.out_shape
    # The reference scans the window row by row, keeping an element only when it is strictly
    # greater than the maximum so far, which starts at the lowest float: ties keep the first,
    # NaN and -inf never win, and a window of only those gives lowest at index 0.
    best = np.full((n, oh, ow, x.shape[3]), np.finfo(np.float32).min, np.float32)
    where = np.zeros(best.shape, np.int32)
    (block,) = grid.blocks(0, 1 << 62)  # the whole input as one block
    for i, j in grid.taps():
        value = grid.tap(block, i, j)
        greater = value > best
        np.copyto(best, value, where=greater)
        np.copyto(where, i * options.filter[1] + j, where=greater)
    index = where.astype(np.float32)
    index += np.float32(0.1)
    return [activation_clamp(options.activation, best), index]


@custom_op("MaxUnpooling2D", batch=always)
def max_unpooling_2d(ctx: OpContext) -> np.ndarray:
    """MediaPipe's MaxUnpooling2D: each value written at the window position its index names, in
    a zeroed output of filter times the input size."""
    x, indices = ctx.inputs
    options = _PoolOptions(ctx)
    (sh, sw), (fh, fw) = options.stride, options.filter
    n, height, width, channels = x.shape
    oh, ow = height * fh, width * fw
    top = max(0, ((height - 1) * sh + fh - oh) // 2)
    left = max(0, ((width - 1) * sw + fw - ow) // 2)
    # C++ conversions: the float index truncates toward zero, / and % truncate too.
    index = np.trunc(indices).astype(np.int64)
    row = np.sign(index) * (np.abs(index) // fw)
    column = index - row * fw
    out_y = np.arange(height).reshape(1, -1, 1, 1) * sh - top + row
    out_x = np.arange(width).reshape(1, 1, -1, 1) * sw - left + column
    inside = (out_y >= 0) & (out_y < oh) & (out_x >= 0) & (out_x < ow)
    sample = np.arange(n).reshape(-1, 1, 1, 1)
    channel = np.arange(channels).reshape(1, 1, 1, -1)
    target = ((sample * oh + out_y) * ow + out_x) * channels + channel
    target, values = target[inside], x[inside]
    # Where two inputs land on one output the reference's last write (in input order) stays.
    last = target.size - 1 - np.unique(target[::-1], return_index=True)[1]
    out = np.zeros((n, oh, ow, channels), x.dtype)
    out.reshape(-1)[target[last]] = values[last]
    return out
