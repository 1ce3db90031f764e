"""Shape rules of the spatial and matrix operators: convolutions, pools, FULLY_CONNECTED,
BATCH_MATMUL, resizes and the space/depth/batch rearrangements (see `shape_rules.py`)."""

from __future__ import annotations

import math

from qtool.model.reflect import enum_values
from qtool.model.shape_rules import (
    Dim,
    Inferred,
    OpView,
    Shape,
    ShapeError,
    broadcast,
    need_rank,
    pairs,
    rule,
    same_dim,
)
from qtool.model.types import ActivationFunctionType, Padding

# What FULLY_CONNECTED accepts as a fused activation (it refuses TANH and SIGN_BIT).
CLAMP_ACTIVATIONS = (
    ActivationFunctionType.NONE,
    ActivationFunctionType.RELU,
    ActivationFunctionType.RELU_N1_TO_1,
    ActivationFunctionType.RELU6,
)


def _positive(view: OpView, *names: str) -> list[int]:
    values = [view.option(name) for name in names]
    if any(not isinstance(v, int) or v < 1 for v in values):
        raise ShapeError(
            ", ".join(f"{n} {v}" for n, v in zip(names, values, strict=True)) + " must be >= 1"
        )
    return values


def _out_size(padding: int, size: Dim, kernel: int, stride: int, dilation: int = 1) -> Dim:
    """One spatial output size (TFLite's ComputeOutSize); None for a dynamic input size."""
    if size is None:
        return None
    effective = (kernel - 1) * dilation + 1
    out = (
        (size + stride - 1) // stride
        if padding == Padding.SAME
        else (size + stride - effective) // stride
    )
    if out < 1:
        raise ShapeError(f"a window of {effective} does not fit an input of {size}")
    return out


def _bias(view: OpView, position: int, channels: Dim) -> None:
    if view.present(position):
        bias = view.shape(position)
        if len(bias) != 1 or not same_dim(bias[0], channels):
            raise ShapeError(
                f"bias {list(bias)} must have one value per output channel ({channels})"
            )


def _window(view: OpView, x: Shape, kernel: tuple[int, int], dilated: bool) -> tuple[Dim, Dim]:
    if any(d is not None and d < 1 for d in x):
        raise ShapeError(f"input shape {list(x)} has an empty dimension")
    padding = view.option("padding")
    strides = _positive(view, "stride_h", "stride_w")
    dilations = _positive(view, "dilation_h_factor", "dilation_w_factor") if dilated else [1, 1]
    return tuple(  # type: ignore[return-value]
        _out_size(padding, size, k, s, d)
        for size, k, s, d in zip(x[1:3], kernel, strides, dilations, strict=True)
    )


def _convolved(view: OpView, x: Shape, kernel: tuple[int, int], out_c: int) -> Inferred:
    """The output of a forward convolution with `out_c` channels (and a matching bias)."""
    _bias(view, 2, out_c)
    oh, ow = _window(view, x, kernel, dilated=True)
    return [(x[0], oh, ow, out_c)]


def _static_filter(view: OpView, position: int) -> tuple[int, int, int, int]:
    """A convolution filter [out_c, KH, KW, in_c] whose every size is known and positive."""
    dims = need_rank(view, position, (4,), "filter")
    if None in dims or min(dims) < 1:
        raise ShapeError(f"filter shape {list(dims)} must be static and positive")
    return dims  # type: ignore[return-value]


def _transposed_filter(view: OpView, position: int, x: Shape) -> tuple[int, int, int, int]:
    """The static filter of a transposed convolution, whose last dimension reads the input's
    channels."""
    filter_shape = _static_filter(view, position)
    if not same_dim(x[3], filter_shape[3]):
        raise ShapeError(f"filter of {filter_shape[3]} input channels for an input of {x[3]}")
    return filter_shape


@rule("conv_2d")
def _conv_2d(view: OpView) -> Inferred:
    x = need_rank(view, 0, (4,), "input")
    out_c, kh, kw, in_c = _static_filter(view, 1)
    if x[3] is not None and (x[3] < in_c or x[3] % in_c or out_c % (x[3] // in_c)):
        raise ShapeError(f"filter of {in_c} channels ({out_c} outputs) for {x[3]} input channels")
    return _convolved(view, x, (kh, kw), out_c)


@rule("depthwise_conv_2d")
def _depthwise_conv_2d(view: OpView) -> Inferred:
    x = need_rank(view, 0, (4,), "input")
    one, kh, kw, out_c = need_rank(view, 1, (4,), "filter")
    if one != 1 or None in (kh, kw, out_c) or min(kh, kw, out_c) < 1:
        raise ShapeError(f"filter shape {[one, kh, kw, out_c]} must be [1, KH, KW, C * multiplier]")
    if x[3] is not None and (x[3] < 1 or out_c % x[3]):
        raise ShapeError(f"{out_c} output channels are no multiple of {x[3]} input channels")
    return _convolved(view, x, (kh, kw), out_c)


@rule("transpose_conv")
def _transpose_conv(view: OpView) -> Inferred:
    x = need_rank(view, 2, (4,), "input")
    out_c = _transposed_filter(view, 1, x)[0]
    _bias(view, 3, out_c)
    _positive(view, "stride_h", "stride_w")
    target = view.ints(0, "output_shape")
    if target is None:
        return view.unknown()
    if len(target) != 4 or min(target) < 1 or target[3] != out_c or not same_dim(x[0], target[0]):
        raise ShapeError(f"output_shape {target} for {out_c} channels and batch {x[0]}")
    return [tuple(target)]


@rule("pool_2d")
def _pool_2d(view: OpView) -> Inferred:
    x = need_rank(view, 0, (4,), "input")
    kernel = _positive(view, "filter_height", "filter_width")
    oh, ow = _window(view, x, (kernel[0], kernel[1]), dilated=False)
    return [(x[0], oh, ow, x[3])]


@rule("pool_2d_argmax")
def _pool_2d_argmax(view: OpView) -> Inferred:
    """MediaPipe's MaxPoolingWithArgmax2D: the pool, and where each maximum was, alike."""
    (pooled,) = _pool_2d(view)
    _activation(view)
    return [pooled, pooled]


@rule("unpool_2d")
def _unpool_2d(view: OpView) -> Inferred:
    """MediaPipe's MaxUnpooling2D: each value back to its place in `filter` times the input."""
    x = need_rank(view, 0, (4,), "input")
    indices = need_rank(view, 1, (4,), "indices")
    if not all(same_dim(a, b) for a, b in zip(x, indices, strict=True)):
        raise ShapeError(f"indices {list(indices)} must have the input's shape {list(x)}")
    _positive(view, "stride_h", "stride_w")
    fh, fw = _positive(view, "filter_height", "filter_width")
    _activation(view)
    return [(x[0], None if x[1] is None else x[1] * fh, None if x[2] is None else x[2] * fw, x[3])]


@rule("transpose_conv_bias")
def _transpose_conv_bias(view: OpView) -> Inferred:
    """MediaPipe's Convolution2DTransposeBias: TensorFlow's sizes (SAME: input x stride)."""
    x = need_rank(view, 0, (4,), "input")
    out_c, kh, kw, _ = _transposed_filter(view, 1, x)
    _bias(view, 2, out_c)
    strides = _positive(view, "stride_h", "stride_w")
    same = view.option("padding") == Padding.SAME
    sizes = [
        None if size is None else (size * s if same else (size - 1) * s + k)
        for size, k, s in zip(x[1:3], (kh, kw), strides, strict=True)
    ]
    return [(x[0], sizes[0], sizes[1], out_c)]


def _activation(view: OpView) -> None:
    code = view.option("fused_activation_function")
    if code not in enum_values("ActivationFunctionType"):
        raise ShapeError(f"fused activation {code} is no ActivationFunctionType")


@rule("fully_connected")
def _fully_connected(view: OpView) -> Inferred:
    x = need_rank(view, 0, range(1, 17), "input")
    units, depth = need_rank(view, 1, (2,), "weights")
    if None in (units, depth) or min(units, depth) < 1:
        raise ShapeError(f"weights shape {[units, depth]} must be static and positive")
    _bias(view, 2, units)
    if view.op.options_type is not None:
        if view.option("weights_format") != 0:
            raise ShapeError("only the DEFAULT weights format is supported")
        if view.option("fused_activation_function") not in CLAMP_ACTIVATIONS:
            raise ShapeError(
                f"unsupported fused activation function {view.option('fused_activation_function')}"
            )
    if view.option("keep_num_dims"):
        if not same_dim(x[-1], depth):
            raise ShapeError(f"input {list(x)} does not end in the weights' depth {depth}")
        return [(*x[:-1], units)]
    count = None if None in x else math.prod(x)
    if count is not None and count % depth:
        raise ShapeError(f"input of {count} values is no whole number of rows of {depth}")
    return [(None if count is None else count // depth, units)]


@rule("batch_matmul")
def _batch_matmul(view: OpView) -> Inferred:
    lhs = list(need_rank(view, 0, range(2, 17), "x"))
    rhs = list(need_rank(view, 1, range(2, 17), "y"))
    if view.option("adj_x"):
        lhs[-2:] = lhs[-1], lhs[-2]
    if view.option("adj_y"):
        rhs[-2:] = rhs[-1], rhs[-2]
    if not same_dim(lhs[-1], rhs[-2]):
        raise ShapeError(f"x {lhs} and y {rhs} do not multiply")
    return [(*broadcast([tuple(lhs[:-2]), tuple(rhs[:-2])]), lhs[-2], rhs[-1])]


@rule("resize")
def _resize(view: OpView) -> Inferred:
    x = need_rank(view, 0, (4,), "input")
    bilinear = view.facts.options == "ResizeBilinearOptions"  # nearest neighbour takes both
    if bilinear and view.option("align_corners") and view.option("half_pixel_centers"):
        raise ShapeError("align_corners and half_pixel_centers cannot both be set")
    size = view.ints(1, "size")
    if size is None:
        return [(x[0], None, None, x[3])]
    if len(size) != 2 or min(size) < 1:
        raise ShapeError(f"size {size} must be two positive values")
    return [(x[0], size[0], size[1], x[3])]


def _block_size(view: OpView) -> int:
    return _positive(view, "block_size")[0]


@rule("space_to_depth")
def _space_to_depth(view: OpView) -> Inferred:
    n, h, w, c = need_rank(view, 0, (4,), "input")
    k = _block_size(view)
    if any(d is not None and d % k for d in (h, w)):
        raise ShapeError(f"block size {k} does not divide {h}x{w}")
    scale = None if c is None else c * k * k
    return [(n, None if h is None else h // k, None if w is None else w // k, scale)]


@rule("depth_to_space")
def _depth_to_space(view: OpView) -> Inferred:
    n, h, w, c = need_rank(view, 0, (4,), "input")
    k = _block_size(view)
    if c is not None and c % (k * k):
        raise ShapeError(f"{c} channels are no multiple of block size {k} squared")
    return [
        (
            n,
            None if h is None else h * k,
            None if w is None else w * k,
            None if c is None else c // (k * k),
        )
    ]


def _blocks(view: OpView, what: str) -> tuple[Shape, list[int], list[list[int]]] | None:
    x = need_rank(view, 0, range(2, 17), "input")
    block = view.ints(1, "block_shape")
    if block is None:
        return None
    if not 1 <= len(block) <= len(x) - 1 or min(block) < 1:
        raise ShapeError(f"block_shape {block} for an input of rank {len(x)}")
    widths = pairs(view, 2, len(block), what)
    return None if widths is None else (x, block, widths)


@rule("space_to_batch_nd")
def _space_to_batch_nd(view: OpView) -> Inferred:
    found = _blocks(view, "paddings")
    if found is None:
        return view.unknown()
    x, block, widths = found
    spatial: list[Dim] = []
    for d, k, (before, after) in zip(x[1:], block, widths, strict=False):
        if d is not None and (d + before + after) % k:
            raise ShapeError(f"block {k} does not divide the padded size {d + before + after}")
        spatial.append(None if d is None else (d + before + after) // k)
    n = None if x[0] is None else x[0] * math.prod(block)
    return [(n, *spatial, *x[1 + len(block) :])]


@rule("batch_to_space_nd")
def _batch_to_space_nd(view: OpView) -> Inferred:
    found = _blocks(view, "crops")
    if found is None:
        return view.unknown()
    x, block, crops = found
    product = math.prod(block)
    if x[0] is not None and x[0] % product:
        raise ShapeError(f"batch {x[0]} is no multiple of the block size {product}")
    spatial: list[Dim] = []
    for d, k, (before, after) in zip(x[1:], block, crops, strict=False):
        size = None if d is None else d * k - before - after
        if size is not None and size < 0:
            raise ShapeError(f"crops {crops} exceed the size {d * k}")
        spatial.append(size)
    n = None if x[0] is None else x[0] // product
    return [(n, *spatial, *x[1 + len(block) :])]
