"""The numpy engine's C kernels (qtool/runtime/kernels/_native.c) give the numpy code's results
bit for bit, so that nothing but speed depends on whether qtool was built with a C compiler:
DEPTHWISE_CONV_2D on every form the engine runs (strides, dilations, padding, multipliers,
channel counts on and off the kernel's eight-lane blocks, fused activations, no bias) with
infinities, NaN, signed zeros, denormals and overflowing sums; a convolution's bias and clamp;
PRELU; RESIZE_BILINEAR; MAX_POOL_2D (the same values: a tie of -0 and +0 may keep either sign,
as numpy's own vector and scalar loops differ there); and a whole model's calibration ranges.
Both paths are also checked against LiteRT op by op (the kernel tests of tests/runtime/ run
with either: `kernel_code`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtool.calibrate import calibrate, load_dataset, model_inputs
from qtool.model import load_model
from qtool.model.types import ActivationFunctionType as Fn
from qtool.model.types import Padding
from qtool.runtime import Engine
from qtool.runtime.kernels import native
from qtool.runtime.kernels.conv import out_size_and_padding
from tests.runtime.harness import Act, Const, build_single_op

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
KERNELS = native.kernels
HOSTILE = (0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3e38, -3e38)


def test_make_install_builds_the_native_kernels() -> None:
    # pyproject.toml builds them (optional only where no C compiler is): a broken build would
    # silently leave the engine on its numpy code.
    assert KERNELS is not None


@contextmanager
def numpy_code() -> Iterator[None]:
    """Within the block the engine runs its numpy code (as where no C compiler was found)."""
    native.kernels = None
    try:
        yield
    finally:
        native.kernels = KERNELS


def both_paths(model, feeds: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The model's first output from the C kernels and from the numpy code."""
    with np.errstate(all="ignore"):  # inf * 0 and overflow are part of the cases
        kernels = Engine(model, threads=1).run(feeds)[0]
        with numpy_code():
            numpy = Engine(model, threads=1).run(feeds)[0]
    return kernels, numpy


def assert_same_bits(got: np.ndarray, expected: np.ndarray) -> None:
    """Bit for bit, signs of zeros included; any NaN matches any NaN (which payload an
    operation on two NaNs keeps is the compiler's choice of operand order, in numpy too)."""
    assert got.shape == expected.shape and got.dtype == expected.dtype == np.float32
    both_nan = np.isnan(got) & np.isnan(expected)
    differ = (got.view(np.uint32) != expected.view(np.uint32)) & ~both_nan
    assert not differ.any(), (
        f"{differ.sum()} of {differ.size} values differ: {got[differ][:4]} != {expected[differ][:4]}"
    )


def hostile(rng: np.random.Generator, shape: tuple[int, ...], share: float) -> np.ndarray:
    """Normal values with a share of them replaced by the values kernels treat apart."""
    values = (rng.standard_normal(shape) * 2).astype(np.float32)
    flat = values.reshape(-1)
    picks = rng.random(flat.size) < share
    flat[picks] = rng.choice(np.array(HOSTILE, np.float32), picks.sum())
    return values


ACTIVATIONS = [Fn.NONE, Fn.RELU, Fn.RELU6, Fn.RELU_N1_TO_1, Fn.TANH]


@st.composite
def depthwise_cases(draw):
    """A DEPTHWISE_CONV_2D whose output is not empty: geometry, channels, values."""
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = draw(st.sampled_from([Padding.SAME, Padding.VALID]))
    height, width = draw(st.integers(1, 13)), draw(st.integers(1, 13))
    out_hw = [
        out_size_and_padding(padding, size, k, s, d)[0]
        for size, k, s, d in zip((height, width), (kh, kw), stride, dilation, strict=True)
    ]
    channels = draw(st.sampled_from([1, 2, 3, 8, 13, 16, 24, 40]))
    multiplier = draw(st.integers(1, 3))
    out_c = channels * multiplier
    if min(out_hw) <= 0 or out_c == 1:  # one channel stays on the numpy code (conv.py)
        multiplier, out_c = 2, 2 * channels
    if min(out_hw) <= 0:
        padding, out_hw = Padding.SAME, [-(-height // stride[0]), -(-width // stride[1])]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    share = draw(st.sampled_from([0.0, 0.05]))
    x = hostile(rng, (2, height, width, channels), share)
    filters = hostile(rng, (1, kh, kw, out_c), share / 4)
    bias = [Const(rng.standard_normal(out_c).astype(np.float32))] if draw(st.booleans()) else []
    options = {
        "padding": padding,
        "stride_h": stride[0],
        "stride_w": stride[1],
        "dilation_h_factor": dilation[0],
        "dilation_w_factor": dilation[1],
        "fused_activation_function": draw(st.sampled_from(ACTIVATIONS)),
        "depth_multiplier": multiplier,
    }
    model = build_single_op(
        "DEPTHWISE_CONV_2D",
        [Act(x), Const(filters), *bias],
        options_type="DepthwiseConv2DOptions",
        options=options,
        output_shapes=[[1, *out_hw, out_c]],
    )
    return model, x


@settings(deadline=None, max_examples=150)
@given(depthwise_cases())
def test_depthwise_is_the_numpy_path_bit_for_bit(case) -> None:
    model, x = case
    assert_same_bits(*both_paths(model, [x]))


@pytest.mark.parametrize(
    ("shape", "kernel", "stride"),
    [
        ((20, 23, 16), (3, 3), (1, 1)),  # four-pixel blocks and a remainder, padded borders
        ((17, 17, 24), (5, 5), (2, 2)),  # two column groups summed apart
        ((9, 9, 40), (3, 3), (1, 2)),  # channels off the row buffer's multiple
        ((6, 7, 4104), (3, 3), (1, 1)),  # a pixel wider than the row buffer (4096 floats)
    ],
)
def test_depthwise_on_wide_rows_and_channels(shape, kernel, stride) -> None:
    rng = np.random.default_rng(sum(shape))
    x = hostile(rng, (3, *shape), 0.01)
    channels = shape[2]
    model = build_single_op(
        "DEPTHWISE_CONV_2D",
        [Act(x), Const(hostile(rng, (1, *kernel, channels), 0.0)), Const(np.ones(channels, "f"))],
        options_type="DepthwiseConv2DOptions",
        options={"padding": Padding.SAME, "stride_h": stride[0], "stride_w": stride[1]},
        output_shapes=[[1, -(-shape[0] // stride[0]), -(-shape[1] // stride[1]), channels]],
    )
    assert_same_bits(*both_paths(model, [x]))


@pytest.mark.parametrize(
    ("x_shape", "alpha_shape"),
    [((3, 9, 9, 16), (1, 1, 16)), ((2, 5, 7, 3), (3,)), ((2, 5, 7, 3), (7, 3)), ((4, 6), (6,))],
)
def test_prelu_is_the_numpy_path_bit_for_bit(x_shape, alpha_shape) -> None:
    rng = np.random.default_rng(len(x_shape) + len(alpha_shape))
    x = hostile(rng, x_shape, 0.1)
    for low, high in ((-2.0, 3.0), (0.1, 1.0), (1.0, 4.0)):  # each of the numpy shortcuts
        alpha = rng.uniform(low, high, alpha_shape).astype(np.float32)
        model = build_single_op("PRELU", [Act(x), Const(alpha)], output_shapes=[[1, *x_shape[1:]]])
        got, expected = both_paths(model, [x])
        with np.errstate(all="ignore"):
            formula = np.where(x >= 0, x, x * alpha)
        assert_same_bits(got, formula)  # LiteRT's formula itself, zeros' signs and NaN's bits
        np.testing.assert_array_equal(got, expected)  # the shortcuts: same values


def test_a_model_s_ranges_are_the_same_with_either() -> None:
    # Every activation of the fixture CNN (its depthwise layers run by the C kernel) calibrated
    # through the numpy engine both ways.
    model = load_model(FIXTURES / "models" / "cnn.tflite")
    data = [str(FIXTURES / "data" / "cnn_calib.npz")]
    with_kernels = calibrate(model, load_dataset(data, model_inputs(model)), "numpy").ranges
    with numpy_code():
        without = calibrate(model, load_dataset(data, model_inputs(model)), "numpy").ranges
    assert with_kernels == without


@st.composite
def window_cases(draw):
    """A CONV_2D, MAX_POOL_2D or RESIZE_BILINEAR with hostile values."""
    op_type = draw(st.sampled_from(["CONV_2D", "MAX_POOL_2D", "RESIZE_BILINEAR"]))
    height, width = draw(st.integers(1, 12)), draw(st.integers(1, 12))
    channels = draw(st.sampled_from([1, 3, 8, 13, 16]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    x = hostile(rng, (2, height, width, channels), draw(st.sampled_from([0.0, 0.05])))
    activation = draw(st.sampled_from(ACTIVATIONS))
    if op_type == "RESIZE_BILINEAR":
        out_hw = [draw(st.integers(1, 20)), draw(st.integers(1, 20))]
        align_corners = draw(st.booleans())
        options = {
            "align_corners": align_corners,
            "half_pixel_centers": not align_corners and draw(st.booleans()),
        }
        inputs = [Act(x), Const(np.array(out_hw, np.int32))]
        return op_type, x, inputs, "ResizeBilinearOptions", options, [1, *out_hw, channels]
    kernel = (draw(st.integers(1, min(height, 4))), draw(st.integers(1, min(width, 4))))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    padding = draw(st.sampled_from([Padding.SAME, Padding.VALID]))
    out_hw = [
        out_size_and_padding(padding, size, k, s)[0]
        for size, k, s in zip((height, width), kernel, stride, strict=True)
    ]
    geometry = {"padding": padding, "stride_h": stride[0], "stride_w": stride[1]}
    geometry["fused_activation_function"] = activation
    if op_type == "MAX_POOL_2D":
        options = {**geometry, "filter_height": kernel[0], "filter_width": kernel[1]}
        return op_type, x, [Act(x)], "Pool2DOptions", options, [1, *out_hw, channels]
    out_c = draw(st.sampled_from([1, 4, 16]))
    filters = Const(hostile(rng, (out_c, *kernel, channels), 0.01))
    bias = [Const(rng.standard_normal(out_c).astype(np.float32))] if draw(st.booleans()) else []
    options = {**geometry, "dilation_h_factor": 1, "dilation_w_factor": 1}
    return op_type, x, [Act(x), filters, *bias], "Conv2DOptions", options, [1, *out_hw, out_c]


@settings(deadline=None, max_examples=150)
@given(window_cases())
def test_windows_and_finishing_are_the_numpy_path(case) -> None:
    op_type, x, inputs, options_type, options, out_shape = case
    model = build_single_op(
        op_type, inputs, options_type=options_type, options=options, output_shapes=[out_shape]
    )
    got, expected = both_paths(model, [x])
    if op_type == "MAX_POOL_2D":
        np.testing.assert_array_equal(got, expected)  # NaN where NaN, signs of zeros aside
    else:
        assert_same_bits(got, expected)
