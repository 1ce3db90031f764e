"""MediaPipe's custom ops against LiteRT, whose XNNPACK delegate runs them."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.errors import ModelError
from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.model.graph import Operator
from qtool.model.types import Padding
from qtool.runtime import Engine
from tests.litert import run_litert_samples
from tests.runtime.harness import Act, build_single_op

N = 3
SAME, VALID = 1, 2  # TfLitePadding, as the ops' raw option structs store it
NONE, RELU, RELU6 = 0, 1, 3


def _options(*values: int) -> bytes:
    return np.array(values, "<i4").tobytes()


def _custom(builder: GraphBuilder, name: str, inputs: list[int], outputs: list[int], raw: bytes):
    builder.subgraph.operators.append(
        Operator(
            opcode_index=builder.model.custom_opcode_for(name),
            inputs=inputs,
            outputs=outputs,
            custom_options=raw,
        )
    )


def _compare(model, feeds: list[np.ndarray], rtol: float = 1e-5) -> list[np.ndarray]:
    expected = run_litert_samples(model_to_bytes(model), feeds, reference=False)
    got = Engine(model).run(feeds)
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=0, atol=rtol * max(float(np.abs(e).max()), 1e-30))
    return got


def _rng_data(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _transpose_conv_model(in_shape, kernel, out_c, stride, padding, out_hw):
    builder = GraphBuilder()
    x = builder.input("x", [1, *in_shape])
    w = builder.constant("w", _rng_data(1, out_c, *kernel, in_shape[2]))
    b = builder.constant("b", _rng_data(2, out_c))
    out = builder.tensor("out", [1, *out_hw, out_c])
    _custom(
        builder, "Convolution2DTransposeBias", [x, w, b], [out], _options(padding, *stride[::-1])
    )
    return builder.finish([out])


# (input HxWxC, kernel, output channels, stride (h, w), padding, output HxW)
TRANSPOSE_CASES = [
    ((8, 8, 3), (2, 2), 1, (2, 2), SAME, (16, 16)),  # selfie_segmentation's last op
    ((5, 7, 4), (2, 2), 3, (2, 2), VALID, (10, 14)),
    ((5, 6, 2), (3, 3), 4, (2, 2), SAME, (10, 12)),
    ((5, 6, 2), (3, 3), 4, (2, 2), VALID, (11, 13)),
    ((4, 4, 3), (4, 4), 2, (2, 2), SAME, (8, 8)),
    ((4, 5, 3), (3, 3), 2, (1, 1), SAME, (4, 5)),
]


@pytest.mark.parametrize(
    ("in_shape", "kernel", "out_c", "stride", "padding", "out_hw"), TRANSPOSE_CASES
)
def test_convolution_2d_transpose_bias(in_shape, kernel, out_c, stride, padding, out_hw):
    model = _transpose_conv_model(in_shape, kernel, out_c, stride, padding, out_hw)
    _compare(model, [_rng_data(3, N, *in_shape)])


def _pool_unpool_model(in_shape, window, stride, padding, activation, pooled_hw):
    """x -> MaxPoolingWithArgmax2D -> (values, indices) -> MaxUnpooling2D; all three out."""
    builder = GraphBuilder()
    x = builder.input("x", [1, *in_shape])
    channels = in_shape[2]
    pooled = builder.tensor("pooled", [1, *pooled_hw, channels])
    indices = builder.tensor("indices", [1, *pooled_hw, channels])
    unpooled_hw = [pooled_hw[0] * window[0], pooled_hw[1] * window[1]]
    unpooled = builder.tensor("unpooled", [1, *unpooled_hw, channels])
    geometry = (stride[1], stride[0], window[1], window[0], activation, 0, 0, 0, 0)
    _custom(builder, "MaxPoolingWithArgmax2D", [x], [pooled, indices], _options(padding, *geometry))
    # XNNPACK unpools only with VALID padding (the padding there places nothing anyway).
    _custom(builder, "MaxUnpooling2D", [pooled, indices], [unpooled], _options(VALID, *geometry))
    return builder.finish([pooled, indices, unpooled])


# (input HxWxC, window, stride, padding, pooled HxW)
POOL_CASES = [
    ((8, 6, 3), (2, 2), (2, 2), VALID, (4, 3)),
    ((8, 6, 3), (2, 2), (2, 2), SAME, (4, 3)),
    ((7, 9, 2), (2, 2), (2, 2), SAME, (4, 5)),
    ((9, 9, 4), (3, 3), (3, 3), VALID, (3, 3)),
]


def _pool_input(in_shape) -> np.ndarray:
    x = (_rng_data(4, N, *in_shape) * 4).astype(np.float32)  # so that RELU6 bites
    x[0, :2, :2] = 1.5  # ties: the first maximum in the window wins
    return x


@pytest.mark.parametrize(("in_shape", "window", "stride", "padding", "pooled_hw"), POOL_CASES)
def test_max_pooling_with_argmax_and_unpooling(in_shape, window, stride, padding, pooled_hw):
    model = _pool_unpool_model(in_shape, window, stride, padding, NONE, pooled_hw)
    x = _pool_input(in_shape)
    pooled, indices, unpooled = Engine(model).run([x])
    reference = run_litert_samples(model_to_bytes(model), [x], reference=False)
    np.testing.assert_array_equal(pooled, reference[0])
    np.testing.assert_array_equal(unpooled, reference[2])
    # MediaPipe's reference kernel (and the engine) gives row * filter_w + column + 0.1 as a
    # float; XNNPACK stores column * filter_h + row as integer bits in the float tensor. Both
    # name the same window positions.
    ours = indices.astype(np.int64)
    np.testing.assert_array_equal(indices, ours.astype(np.float32) + np.float32(0.1))
    column, row = np.divmod(reference[1].view(np.uint32).astype(np.int64), window[0])
    np.testing.assert_array_equal(ours, row * window[1] + column)


@pytest.mark.parametrize("activation", [RELU, RELU6])
def test_max_pooling_with_argmax_applies_the_activation_to_values(activation):
    # XNNPACK refuses fused activations here: the values are checked against MAX_POOL_2D.
    in_shape, window, pooled_hw = (8, 6, 3), (2, 2), (4, 3)
    x = _pool_input(in_shape)
    pooled, indices, _ = Engine(
        _pool_unpool_model(in_shape, window, window, VALID, activation, pooled_hw)
    ).run([x])
    builtin = build_single_op(
        "MAX_POOL_2D",
        [Act(x)],
        options_type="Pool2DOptions",
        options={
            "padding": Padding.VALID,
            "filter_height": 2,
            "filter_width": 2,
            "stride_h": 2,
            "stride_w": 2,
            "fused_activation_function": activation,
        },
        output_shapes=[[1, *pooled_hw, 3]],
    )
    np.testing.assert_array_equal(pooled, run_litert_samples(model_to_bytes(builtin), [x])[0])
    plain = _pool_unpool_model(in_shape, window, window, VALID, NONE, pooled_hw)
    np.testing.assert_array_equal(indices, Engine(plain).run([x])[1])


def test_unpooling_keeps_the_last_write_and_drops_out_of_window_indices():
    # Overlapping windows (stride 1, window 2): inputs (0, 0) at index 3 and (0, 1) at index 2
    # both land on output (1, 1); the later input wins. Input (1, 0)'s index 7 points outside
    # the output; input (1, 1)'s index 1 is its window's top right, output (1, 2).
    builder = GraphBuilder()
    x = builder.input("x", [1, 2, 2, 1])
    indices = builder.constant("i", np.array([3.1, 2.1, 7.1, 1.1], np.float32).reshape(1, 2, 2, 1))
    out = builder.tensor("out", [1, 4, 4, 1])
    _custom(builder, "MaxUnpooling2D", [x, indices], [out], _options(VALID, 1, 1, 2, 2, NONE))
    model = builder.finish([out])
    values = np.array([1, 2, 3, 4], np.float32).reshape(1, 2, 2, 1)
    got = Engine(model).run([values])[0][0, :, :, 0]
    expected = np.zeros((4, 4), np.float32)
    expected[1, 1] = 2
    expected[1, 2] = 4
    np.testing.assert_array_equal(got, expected)


def test_options_too_short_are_a_model_error():
    builder = GraphBuilder()
    x = builder.input("x", [1, 4, 4, 1])
    out = builder.tensor("out", [1, 8, 8, 1])
    w, b = builder.constant("w", np.ones((1, 2, 2, 1), np.float32)), builder.constant("b", [0.0])
    _custom(builder, "Convolution2DTransposeBias", [x, w, b], [out], _options(SAME, 2))
    with pytest.raises(ModelError, match="custom options hold 8 bytes"):
        Engine(builder.finish([out])).run([np.ones((1, 4, 4, 1), np.float32)])
