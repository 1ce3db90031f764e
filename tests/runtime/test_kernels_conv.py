"""CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV, FULLY_CONNECTED and BATCH_MATMUL against LiteRT
(DEPTHWISE_CONV_2D with the engine's C kernel and with its numpy code: `kernel_code`)."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.errors import ModelError
from qtool.model import model_to_bytes
from qtool.model.types import ActivationFunctionType as Fn
from qtool.model.types import Padding
from qtool.runtime import Engine
from qtool.runtime.kernels import conv
from tests.litert import run_litert
from tests.runtime.harness import Act, Const, build_single_op, check_op

SAME, VALID = Padding.SAME, Padding.VALID
NONE, RELU, RELU_N1_TO_1, RELU6, TANH, SIGN_BIT = (
    Fn.NONE,
    Fn.RELU,
    Fn.RELU_N1_TO_1,
    Fn.RELU6,
    Fn.TANH,
    Fn.SIGN_BIT,
)
N = 3  # samples per case: LiteRT runs them one by one, the engine as one batch


def _data(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def _engine_output(op_type: str, inputs: list, like: np.ndarray, **kw) -> np.ndarray:
    """Run a single-op model in the engine alone (for forms LiteRT cannot run)."""
    model = build_single_op(op_type, inputs, output_shapes=[[1, *like.shape[1:]]], **kw)
    return Engine(model).run([i.value for i in inputs if isinstance(i, Act)])[0]


# (input HxWxC, filter OCxKHxKW, stride, dilation, padding, activation, groups)
CONV_CASES = [
    *[
        ((7, 9, 3), (4, 3, 3), s, d, p, NONE, 1)
        for p in (SAME, VALID)
        for s in ((1, 1), (2, 2), (2, 3))
        for d in ((1, 1), (2, 1))
    ],
    ((8, 8, 5), (6, 1, 1), (1, 1), (1, 1), VALID, NONE, 1),
    ((8, 8, 5), (6, 1, 1), (2, 2), (1, 1), SAME, NONE, 1),
    ((6, 10, 4), (3, 1, 3), (1, 2), (1, 1), SAME, RELU, 1),
    ((9, 9, 2), (5, 4, 4), (3, 3), (1, 1), SAME, RELU6, 1),
    ((11, 11, 3), (2, 5, 5), (1, 1), (2, 2), SAME, RELU_N1_TO_1, 1),
    # 16 channels or more: im2col copies whole pixels from column-phase slabs.
    ((12, 12, 16), (24, 3, 3), (1, 1), (1, 1), SAME, RELU, 1),
    ((11, 13, 16), (8, 3, 3), (2, 3), (1, 1), SAME, RELU6, 1),
    ((11, 13, 16), (8, 3, 3), (2, 2), (2, 2), VALID, NONE, 1),
    ((10, 10, 32), (8, 2, 2), (2, 2), (1, 1), SAME, NONE, 2),
    ((9, 9, 16), (8, 1, 1), (2, 2), (1, 1), VALID, NONE, 1),
    ((7, 7, 6), (6, 3, 3), (1, 1), (1, 1), SAME, NONE, 2),
    ((7, 7, 8), (12, 3, 3), (2, 2), (1, 1), VALID, RELU, 4),
    *[((6, 6, 3), (4, 3, 3), (1, 1), (1, 1), SAME, act, 1) for act in (TANH, SIGN_BIT)],
]


def _conv_options(stride, dilation, padding, activation) -> dict:
    return {
        "padding": padding,
        "stride_h": stride[0],
        "stride_w": stride[1],
        "dilation_h_factor": dilation[0],
        "dilation_w_factor": dilation[1],
        "fused_activation_function": activation,
    }


@pytest.mark.parametrize(
    ("in_shape", "filter_shape", "stride", "dilation", "padding", "activation", "groups"),
    CONV_CASES,
)
def test_conv_2d(in_shape, filter_shape, stride, dilation, padding, activation, groups):
    rng = np.random.default_rng(1)
    out_c, kh, kw = filter_shape
    x = _data(rng, N, *in_shape)
    w = _data(rng, out_c, kh, kw, in_shape[2] // groups)
    b = _data(rng, out_c)
    check_op(
        "CONV_2D",
        [Act(x), Const(w), Const(b)],
        "batch",
        options_type="Conv2DOptions",
        options=_conv_options(stride, dilation, padding, activation),
    )


@pytest.mark.parametrize("absent", ["omitted", "minus_one"])
def test_conv_2d_without_bias(absent):
    # LiteRT's CONV_2D insists on a bias: compare with a zero bias.
    rng = np.random.default_rng(2)
    x, w = _data(rng, N, 6, 7, 3), _data(rng, 5, 3, 3, 3)
    options = _conv_options((1, 2), (1, 1), SAME, RELU)
    expected = check_op(
        "CONV_2D",
        [Act(x), Const(w), Const(np.zeros(5, np.float32))],
        options_type="Conv2DOptions",
        options=options,
    )[0]
    inputs = [Act(x), Const(w)] + ([None] if absent == "minus_one" else [])
    got = _engine_output("CONV_2D", inputs, expected, options_type="Conv2DOptions", options=options)
    np.testing.assert_array_equal(got, expected)


def _blocking_case(op_type: str, rng: np.random.Generator, x: np.ndarray) -> dict:
    c = x.shape[3]
    if op_type == "CONV_2D":
        return {
            "inputs": [Act(x), Const(_data(rng, 8, 3, 3, c)), Const(_data(rng, 8))],
            "options_type": "Conv2DOptions",
            "options": _conv_options((1, 1), (1, 1), SAME, RELU),
        }
    if op_type == "DEPTHWISE_CONV_2D":
        return {
            "inputs": [Act(x), Const(_data(rng, 1, 3, 3, c)), Const(_data(rng, c))],
            "options_type": "DepthwiseConv2DOptions",
            "options": _depthwise_options(1, (1, 1), (1, 1), SAME, RELU),
        }
    return {
        "inputs": [
            Const(np.array([1, 20, 24, 4], np.int32)),
            Const(_data(rng, 4, 3, 3, c)),
            Act(x),
        ],
        "options_type": "TransposeConvOptions",
        "options": {"padding": SAME, "stride_h": 2, "stride_w": 2},
    }


# Budgets (bytes of temporaries) that cut the 3 samples into single rows, into ranges of 3 rows
# (10 = 3 + 3 + 3 + 1), or into blocks of 2 samples and 1.
@pytest.mark.parametrize(
    ("op_type", "budget"),
    [
        *[("CONV_2D", b) for b in (1, 25_000, 170_000)],
        *[("DEPTHWISE_CONV_2D", b) for b in (1, 7_500, 50_000)],
        *[("TRANSPOSE_CONV", b) for b in (1, 60_000)],
    ],
)
def test_blocks(op_type, budget, monkeypatch, kernel_code):
    monkeypatch.setattr(conv, "_MATMUL_BLOCK_BYTES", budget)
    monkeypatch.setattr(conv, "_TAP_BLOCK_BYTES", budget)
    rng = np.random.default_rng(13)
    check_op(op_type, **_blocking_case(op_type, rng, _data(rng, N, 10, 12, 16)))


def test_conv_2d_live_filter():
    # Weights that are model inputs differ per sample: the rule says no and the op is looped.
    rng = np.random.default_rng(3)
    x, w = _data(rng, N, 6, 6, 3), _data(rng, N, 3, 3, 3)
    check_op(
        "CONV_2D",
        [Act(x), Act(w), Const(_data(rng, 1))],
        "loop",
        options_type="Conv2DOptions",
        options=_conv_options((1, 1), (1, 1), SAME, NONE),
    )


# (input HxWxC, multiplier, KHxKW, stride, dilation, padding, activation)
DEPTHWISE_CASES = [
    *[
        ((9, 8, 4), 1, (3, 3), s, d, p, NONE)
        for p in (SAME, VALID)
        for s in ((1, 1), (2, 2), (1, 3))
        for d in ((1, 1), (1, 2))
    ],
    ((7, 7, 3), 2, (3, 3), (1, 1), (1, 1), SAME, RELU),
    ((7, 7, 2), 3, (5, 5), (2, 2), (1, 1), SAME, RELU6),
    ((10, 6, 8), 1, (2, 4), (2, 1), (1, 1), SAME, RELU_N1_TO_1),
    ((8, 8, 4), 2, (3, 3), (1, 1), (3, 3), VALID, RELU),
    ((12, 12, 32), 1, (3, 3), (2, 2), (1, 1), SAME, RELU6),
    ((5, 5, 3), 1, (1, 1), (1, 1), (1, 1), VALID, NONE),
    *[((6, 6, 3), 1, (3, 3), (1, 1), (1, 1), SAME, act) for act in (TANH, SIGN_BIT)],
]


def _depthwise_options(multiplier, stride, dilation, padding, activation) -> dict:
    return {**_conv_options(stride, dilation, padding, activation), "depth_multiplier": multiplier}


@pytest.mark.parametrize(
    ("in_shape", "multiplier", "kernel", "stride", "dilation", "padding", "activation"),
    DEPTHWISE_CASES,
)
def test_depthwise_conv_2d(
    in_shape, multiplier, kernel, stride, dilation, padding, activation, kernel_code
):
    rng = np.random.default_rng(4)
    x = _data(rng, N, *in_shape)
    out_c = in_shape[2] * multiplier
    w, b = _data(rng, 1, *kernel, out_c), _data(rng, out_c)
    check_op(
        "DEPTHWISE_CONV_2D",
        [Act(x), Const(w), Const(b)],
        "batch",
        options_type="DepthwiseConv2DOptions",
        options=_depthwise_options(multiplier, stride, dilation, padding, activation),
    )


@pytest.mark.parametrize("option", [0, 1, 3])
def test_depthwise_conv_2d_multiplier_from_shapes(option, kernel_code):
    # LiteRT never reads depth_multiplier (0 or a wrong value are common in converted models).
    rng = np.random.default_rng(5)
    x, w = _data(rng, N, 6, 6, 3), _data(rng, 1, 3, 3, 6)
    check_op(
        "DEPTHWISE_CONV_2D",
        [Act(x), Const(w)],
        "batch",
        options_type="DepthwiseConv2DOptions",
        options=_depthwise_options(option, (1, 1), (1, 1), SAME, NONE),
    )


def test_depthwise_conv_2d_live_filter():
    rng = np.random.default_rng(6)
    x, w = _data(rng, N, 6, 6, 4), _data(rng, N, 3, 3, 4)
    check_op(
        "DEPTHWISE_CONV_2D",
        [Act(x), Act(w), Const(_data(rng, 4))],
        "loop",
        options_type="DepthwiseConv2DOptions",
        options=_depthwise_options(1, (2, 2), (1, 1), SAME, RELU),
    )


# (input HxWxC, filter OCxKHxKW, stride, padding, output HxW, activation, bias)
TRANSPOSE_CASES = [
    ((4, 4, 3), (5, 3, 3), (2, 2), SAME, (8, 8), NONE, "const"),
    ((4, 4, 3), (5, 3, 3), (2, 2), SAME, (7, 7), NONE, "const"),
    ((4, 5, 3), (5, 3, 3), (2, 2), VALID, (9, 11), NONE, "const"),
    ((4, 5, 3), (5, 3, 3), (2, 2), VALID, (10, 12), RELU, "const"),
    ((5, 5, 2), (4, 2, 2), (2, 2), SAME, (10, 10), RELU6, "omitted"),
    ((3, 4, 4), (2, 4, 4), (3, 2), SAME, (9, 8), NONE, "minus_one"),
    ((3, 4, 4), (2, 4, 4), (3, 2), VALID, (10, 10), RELU_N1_TO_1, "const"),
    ((6, 6, 3), (3, 3, 3), (1, 1), SAME, (6, 6), TANH, "const"),
    ((6, 6, 3), (3, 3, 3), (1, 1), VALID, (8, 8), NONE, "const"),
    ((3, 3, 8), (16, 1, 1), (2, 2), VALID, (5, 5), RELU, "const"),
    ((3, 3, 2), (3, 5, 5), (1, 2), SAME, (3, 6), NONE, "const"),
]


@pytest.mark.parametrize(
    ("in_shape", "filter_shape", "stride", "padding", "out_hw", "activation", "bias"),
    TRANSPOSE_CASES,
)
def test_transpose_conv(in_shape, filter_shape, stride, padding, out_hw, activation, bias):
    rng = np.random.default_rng(7)
    out_c, kh, kw = filter_shape
    x, w = _data(rng, N, *in_shape), _data(rng, out_c, kh, kw, in_shape[2])
    bias_input = {"const": [Const(_data(rng, out_c))], "omitted": [], "minus_one": [None]}[bias]
    output_shape = Const(np.array([1, *out_hw, out_c], np.int32))
    check_op(
        "TRANSPOSE_CONV",
        [output_shape, Const(w), Act(x), *bias_input],
        "batch",
        options_type="TransposeConvOptions",
        options={
            "padding": padding,
            "stride_h": stride[0],
            "stride_w": stride[1],
            "fused_activation_function": activation,
        },
    )


def test_transpose_conv_live_filter():
    rng = np.random.default_rng(8)
    x, w = _data(rng, N, 4, 4, 3), _data(rng, N, 3, 3, 3)
    check_op(
        "TRANSPOSE_CONV",
        [Const(np.array([1, 8, 8, 1], np.int32)), Act(w), Act(x)],
        "loop",
        options_type="TransposeConvOptions",
        options={"padding": SAME, "stride_h": 2, "stride_w": 2},
    )


# (input sample shape, weights [units, in_features], keep_num_dims, bias, activation, mode)
FC_CASES = [
    ((16,), (8, 16), False, "const", NONE, "batch"),
    ((16,), (8, 16), True, "const", RELU, "batch"),
    ((16,), (8, 16), False, "omitted", RELU6, "batch"),
    ((16,), (8, 16), False, "minus_one", RELU_N1_TO_1, "batch"),
    ((3, 16), (8, 16), True, "const", RELU, "batch"),
    ((2, 3, 16), (5, 16), True, "minus_one", NONE, "batch"),
    # Without keep_num_dims a [1, 3, 16] input is 3 rows: the output [3, 8] has no sample axis.
    ((3, 16), (8, 16), False, "const", NONE, "loop"),
    ((4, 4), (6, 4), False, "const", NONE, "loop"),
    # A [1, 2, 2, 4] sample against 16 in_features is a single row.
    ((2, 2, 4), (6, 16), False, "const", RELU, "batch"),
    ((1, 1, 32), (10, 32), False, "const", NONE, "batch"),
]


@pytest.mark.parametrize(
    ("sample_shape", "weights_shape", "keep_num_dims", "bias", "activation", "mode"), FC_CASES
)
def test_fully_connected(sample_shape, weights_shape, keep_num_dims, bias, activation, mode):
    rng = np.random.default_rng(9)
    x, w = _data(rng, N, *sample_shape), _data(rng, *weights_shape)
    units = weights_shape[0]
    bias_input = {"const": [Const(_data(rng, units))], "omitted": [], "minus_one": [None]}[bias]
    check_op(
        "FULLY_CONNECTED",
        [Act(x), Const(w), *bias_input],
        mode,
        options_type="FullyConnectedOptions",
        options={"keep_num_dims": keep_num_dims, "fused_activation_function": activation},
    )


def test_fully_connected_live_weights():
    rng = np.random.default_rng(10)
    x, w = _data(rng, N, 6), _data(rng, N, 6)
    check_op(
        "FULLY_CONNECTED",
        [Act(x), Act(w)],
        "loop",
        options_type="FullyConnectedOptions",
        options={},
    )


@pytest.mark.parametrize(
    "options",
    [
        {"fused_activation_function": TANH},
        {"fused_activation_function": SIGN_BIT},
        {"weights_format": 1},  # SHUFFLED4x16INT8, for uint8 weights only
    ],
)
def test_fully_connected_rejects(options):
    # Where convolutions ignore TANH and SIGN_BIT, LiteRT's FULLY_CONNECTED refuses them.
    rng = np.random.default_rng(11)
    x = _data(rng, 1, 4)
    model = build_single_op(
        "FULLY_CONNECTED",
        [Act(x), Const(_data(rng, 3, 4))],
        options_type="FullyConnectedOptions",
        options=options,
        output_shapes=[[1, 3]],
    )
    with pytest.raises(RuntimeError):
        run_litert(model_to_bytes(model), [x])
    with pytest.raises(ModelError):
        Engine(model).run([x])


# (lhs, rhs, adj_x, adj_y, planned mode); operands are ("act", sample shape), declared with a
# leading 1, or ("const", shape).
BATCH_MATMUL_CASES = [
    *[
        (("act", (5, 4) if ax else (4, 5)), ("const", (6, 5) if ay else (5, 6)), ax, ay, "batch")
        for ax in (False, True)
        for ay in (False, True)
    ],
    (("act", (2, 4, 5)), ("const", (5, 3)), False, False, "batch"),
    (("act", (2, 4, 5)), ("const", (1, 2, 3, 5)), False, True, "batch"),
    (("act", (2, 4, 5)), ("const", (2, 5, 3)), False, False, "batch"),
    (("act", (3, 4, 5)), ("const", (1, 3, 5, 2)), False, False, "batch"),
    (("act", (4, 5)), ("act", (5, 3)), False, False, "batch"),
    (("act", (4, 5)), ("act", (3, 4)), True, True, "batch"),
    (("const", (4, 5)), ("act", (5, 3)), False, False, "batch"),
    # The constant's leading batch axis of 2 cannot broadcast against the samples.
    (("act", (4, 5)), ("const", (2, 5, 3)), False, False, "loop"),
    # A live operand of lower rank than the output has its sample axis broadcast, not kept.
    (("act", (4, 5)), ("const", (1, 1, 5, 3)), False, False, "loop"),
    (("act", (4, 5)), ("const", (2, 1, 5, 3)), False, False, "loop"),
    # A 2-D lhs: its [1, K] rows are the output rows...
    (("act", (5,)), ("const", (5, 3)), False, False, "batch"),
    # ...but not when it is transposed ([K=1, M]).
    (("act", (4,)), ("const", (1, 3)), True, False, "loop"),
]


@pytest.mark.parametrize(("lhs", "rhs", "adj_x", "adj_y", "mode"), BATCH_MATMUL_CASES)
def test_batch_matmul(lhs, rhs, adj_x, adj_y, mode):
    rng = np.random.default_rng(12)
    operands = [
        Act(_data(rng, N, *shape)) if kind == "act" else Const(_data(rng, *shape))
        for kind, shape in (lhs, rhs)
    ]
    check_op(
        "BATCH_MATMUL",
        operands,
        mode,
        options_type="BatchMatMulOptions",
        options={"adj_x": adj_x, "adj_y": adj_y},
    )
