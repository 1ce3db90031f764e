"""Models built to sit on the edges of target constraints, quantized by qtool (int8 I/O).

Each builder makes a small float graph around one op whose kernel size, stride, rank, options or
version a target limits; `int8_model(name)` returns its int8 version as bytes (cached).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from qtool.calibrate import Dataset
from qtool.model import Model, model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.quantize import QuantizeOptions, quantize_loaded

RNG_SEED = 7


def _conv(b: GraphBuilder, x: int, shape, kernel, stride, padding, out_ch=4, depthwise=False):
    rng = np.random.default_rng(RNG_SEED)
    in_ch = shape[-1]
    if depthwise:
        w = b.constant("w", rng.normal(0, 0.3, (1, *kernel, in_ch)).astype(np.float32))
        out_ch = in_ch
    else:
        w = b.constant("w", rng.normal(0, 0.3, (out_ch, *kernel, in_ch)).astype(np.float32))
    bias = b.constant("b", rng.normal(0, 0.1, out_ch).astype(np.float32))

    def size(n, k, s):
        return -(-n // s) if padding == 0 else (n - k) // s + 1

    out = [1, size(shape[1], kernel[0], stride), size(shape[2], kernel[1], stride), out_ch]
    options = {
        "padding": padding,
        "stride_w": stride,
        "stride_h": stride,
        "fused_activation_function": 1,
        "dilation_w_factor": 1,
        "dilation_h_factor": 1,
    }
    if depthwise:
        options["depth_multiplier"] = 1
    return b.op(
        "DEPTHWISE_CONV_2D" if depthwise else "CONV_2D",
        [x, w, bias],
        output_shape=out,
        options_type="DepthwiseConv2DOptions" if depthwise else "Conv2DOptions",
        options=options,
    )


def conv_stride4_same() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 16, 16, 3])
    return b.finish([_conv(b, x, [1, 16, 16, 3], (3, 3), 4, padding=0)])


def conv_stride4_valid() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 16, 16, 3])
    return b.finish([_conv(b, x, [1, 16, 16, 3], (4, 4), 4, padding=1)])


def depthwise_stride4() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 16, 16, 4])
    return b.finish([_conv(b, x, [1, 16, 16, 4], (3, 3), 4, padding=1, depthwise=True)])


def conv_kernel_9x9() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 12, 12, 2])
    return b.finish([_conv(b, x, [1, 12, 12, 2], (9, 9), 1, padding=0)])


def _pool(op_type: str, shape, kernel, stride, padding) -> Model:
    b = GraphBuilder()
    x = b.input("x", shape)

    def size(n, k):
        return -(-n // stride) if padding == 0 else (n - k) // stride + 1

    y = b.op(
        op_type,
        [x],
        output_shape=[1, size(shape[1], kernel[0]), size(shape[2], kernel[1]), shape[3]],
        options_type="Pool2DOptions",
        options={
            "padding": padding,
            "stride_w": stride,
            "stride_h": stride,
            "filter_width": kernel[1],
            "filter_height": kernel[0],
            "fused_activation_function": 0,
        },
    )
    return b.finish([y])


def avgpool_10x10_same() -> Model:
    return _pool("AVERAGE_POOL_2D", [1, 20, 20, 2], (10, 10), 1, padding=0)


def avgpool_10x10_valid() -> Model:
    return _pool("AVERAGE_POOL_2D", [1, 20, 20, 2], (10, 10), 1, padding=1)


def maxpool_kernel_300() -> Model:
    return _pool("MAX_POOL_2D", [1, 300, 2, 2], (300, 1), 1, padding=1)


def maxpool_stride4_same() -> Model:
    return _pool("MAX_POOL_2D", [1, 16, 16, 2], (2, 2), 4, padding=0)


def add_rank5() -> Model:
    b = GraphBuilder()
    shape = [1, 2, 3, 4, 5]
    x = b.input("x", shape)
    y = b.input("y", shape)
    return b.finish([b.op("ADD", [x, y], output_shape=shape, options_type="AddOptions")])


def resize_bilinear_3x() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 4, 2])
    size = b.constant("size", np.array([12, 12], np.int32))
    y = b.op(
        "RESIZE_BILINEAR",
        [x, size],
        output_shape=[1, 12, 12, 2],
        options_type="ResizeBilinearOptions",
        options={"align_corners": False, "half_pixel_centers": False},
    )
    return b.finish([y])


def resize_bilinear_2x() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 4, 2])
    size = b.constant("size", np.array([8, 8], np.int32))
    y = b.op(
        "RESIZE_BILINEAR",
        [x, size],
        output_shape=[1, 8, 8, 2],
        options_type="ResizeBilinearOptions",
        options={"align_corners": False, "half_pixel_centers": False},
    )
    return b.finish([y])


def mean_over_depth() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 4, 4, 8])
    axes = b.constant("axes", np.array([3], np.int32))
    y = b.op(
        "MEAN",
        [x, axes],
        output_shape=[1, 4, 4, 1],
        options_type="ReducerOptions",
        options={"keep_dims": True},
    )
    return b.finish([y])


def softmax_large() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 256, 256, 2])
    y = b.op(
        "SOFTMAX",
        [x],
        output_shape=[1, 256, 256, 2],
        options_type="SoftmaxOptions",
        options={"beta": 1.0},
    )
    return b.finish([y])


def select_op() -> Model:
    b = GraphBuilder()
    x = b.input("x", [1, 8])
    zero = b.constant("zero", np.zeros([1, 8], np.float32))
    mask = b.op("GREATER", [x, zero], output_shape=[1, 8], output_dtype=np.bool_)
    y = b.op("SELECT", [mask, x, zero], output_shape=[1, 8])
    return b.finish([y])


def negate_after_conv() -> Model:
    """NEG between int8 ops: TFLite Micro's NEG kernel computes float32 only."""
    b = GraphBuilder()
    x = b.input("x", [1, 6, 6, 4])
    y = b.op("NEG", [_conv(b, x, [1, 6, 6, 4], (3, 3), 1, padding=0)], output_shape=[1, 6, 6, 4])
    return b.finish([b.op("ADD", [y, x], output_shape=[1, 6, 6, 4], options_type="AddOptions")])


def flatten_by_shape(shape_is_output: bool = False) -> Model:
    """A convolution flattened the way Keras exports `Flatten` with a dynamic batch: RESHAPE to
    [SHAPE(x)[0], -1] (SHAPE -> STRIDED_SLICE -> PACK computing the RESHAPE's shape input),
    then a FULLY_CONNECTED layer; with `shape_is_output` the computed shape is also a model
    output (work the compiler cannot drop)."""
    rng = np.random.default_rng(RNG_SEED)
    b = GraphBuilder()
    x = b.input("x", [1, 6, 6, 3])
    features = _conv(b, x, [1, 6, 6, 3], (3, 3), 1, padding=0)
    shape = b.shape(features)
    ends = [b.constant(name, np.array([v], np.int32)) for name, v in (("b", 0), ("e", 1), ("s", 1))]
    batch = b.op(
        "STRIDED_SLICE",
        [shape, *ends],
        output_shape=[],
        output_dtype=np.int32,
        options_type="StridedSliceOptions",
        options={"shrink_axis_mask": 1},
    )
    rest = b.constant("rest", np.array(-1, np.int32))
    new_shape = b.op(
        "PACK",
        [batch, rest],
        output_shape=[2],
        output_dtype=np.int32,
        options_type="PackOptions",
        options={"values_count": 2, "axis": 0},
    )
    flat = b.op("RESHAPE", [features, new_shape], output_shape=[1, 144])
    weights = b.constant("fc_w", rng.normal(0, 0.1, (10, 144)).astype(np.float32))
    y = b.op(
        "FULLY_CONNECTED",
        [flat, weights, -1],
        output_shape=[1, 10],
        options_type="FullyConnectedOptions",
    )
    return b.finish([y, new_shape] if shape_is_output else [y])


def flatten_shape_as_output() -> Model:
    return flatten_by_shape(shape_is_output=True)


BUILDERS: dict[str, Callable[[], Model]] = {
    f.__name__: f
    for f in (
        conv_stride4_same,
        conv_stride4_valid,
        depthwise_stride4,
        conv_kernel_9x9,
        avgpool_10x10_same,
        avgpool_10x10_valid,
        maxpool_kernel_300,
        maxpool_stride4_same,
        add_rank5,
        resize_bilinear_3x,
        resize_bilinear_2x,
        mean_over_depth,
        softmax_large,
        select_op,
        negate_after_conv,
        flatten_by_shape,
        flatten_shape_as_output,
    )
}


@functools.cache
def int8_model(name: str) -> bytes:
    """The purpose-built model `name`, quantized by qtool with int8 inputs and outputs."""
    model = BUILDERS[name]()
    rng = np.random.default_rng(RNG_SEED)
    subgraph = model.subgraphs[0]
    arrays = [
        rng.uniform(-1, 1, (8, *subgraph.tensors[t].shape[1:])).astype(np.float32)
        for t in subgraph.inputs
    ]
    result = quantize_loaded(model, Dataset.from_arrays(arrays), QuantizeOptions(io="int8"))
    return model_to_bytes(result.model)


def with_version(data: bytes, op_type: str, version: int) -> bytes:
    """`data` with the operator code of `op_type` raised to `version`."""
    from qtool.model import parse_model

    model = parse_model(data)
    for code in model.operator_codes:
        if code.name == op_type:
            code.version = version
    return model_to_bytes(model)


FLOAT_FIXTURES = ("cnn", "mixed_ops", "mlp", "multi_io", "no_signature", "spec_ops")


@functools.cache
def qtool_int8(name: str) -> bytes:
    """qtool's own int8 conversion of the float fixture `name` (16 calibration samples)."""
    from qtool.calibrate import load_dataset, model_inputs
    from qtool.model import load_model
    from tests.conftest import DATA, MODELS

    model = load_model(MODELS / f"{name}.tflite")
    data = load_dataset([str(DATA / f"{name}_calib.npz")], model_inputs(model), limit=16)
    return model_to_bytes(quantize_loaded(model, data, QuantizeOptions()).model)
