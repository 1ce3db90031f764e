"""The custom ops qtool runs (MediaPipe's, `custom_ops` in schemas/ops.json) are validated like
builtins: operand counts and types, their raw C-struct options, and their output shapes.

Fuzzing found Convolution2DTransposeBias with its inputs removed reaching the numpy kernel
(ValueError: not enough values to unpack): custom ops had no facts, so nothing checked them.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model import model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.validate import model_problems
from tests.runtime.test_kernels_mediapipe import (
    NONE,
    POOL_CASES,
    SAME,
    TRANSPOSE_CASES,
    VALID,
    _custom,
    _options,
    _pool_unpool_model,
    _transpose_conv_model,
)


def _messages(model) -> list[str]:
    return [p.text("m") for p in model_problems(parse_model(model_to_bytes(model), validate=False))]


@pytest.mark.parametrize(
    ("in_shape", "kernel", "out_c", "stride", "padding", "out_hw"), TRANSPOSE_CASES
)
def test_transposed_convolution_sizes_are_litert_s(
    in_shape, kernel, out_c, stride, padding, out_hw
):
    """TRANSPOSE_CASES are the sizes LiteRT's XNNPACK delegate computes (test_kernels_mediapipe)."""
    assert _messages(_transpose_conv_model(in_shape, kernel, out_c, stride, padding, out_hw)) == []
    wrong = (out_hw[0] + 1, out_hw[1])
    (message,) = _messages(_transpose_conv_model(in_shape, kernel, out_c, stride, padding, wrong))
    assert "operator 0 (Convolution2DTransposeBias): computes output 0 of shape" in message


@pytest.mark.parametrize(("in_shape", "window", "stride", "padding", "pooled_hw"), POOL_CASES)
def test_pool_and_unpool_sizes_are_litert_s(in_shape, window, stride, padding, pooled_hw):
    assert _messages(_pool_unpool_model(in_shape, window, stride, padding, NONE, pooled_hw)) == []
    wrong = (pooled_hw[0], pooled_hw[1] + 1)
    messages = _messages(_pool_unpool_model(in_shape, window, stride, padding, NONE, wrong))
    assert any("operator 0 (MaxPoolingWithArgmax2D): computes output 0" in m for m in messages)


def _transpose(edit) -> list[str]:
    model = _transpose_conv_model((8, 8, 3), (2, 2), 1, (2, 2), SAME, (16, 16))
    edit(model.subgraphs[0].operators[0])
    return _messages(model)


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda op: op.inputs.clear(), "has 0 inputs, takes 3"),  # the fuzzing find
        (lambda op: op.inputs.pop(), "has 2 inputs, takes 3"),
        (lambda op: setattr(op, "custom_options", b""), "custom options hold 0 bytes"),
        (lambda op: setattr(op, "custom_options", _options(7, 2, 2)), "unknown padding 7"),
        (lambda op: setattr(op, "custom_options", _options(SAME, 0, 2)), "must be >= 1"),
        (lambda op: op.inputs.__setitem__(2, op.inputs[0]), "bias [1, 8, 8, 3] must have one"),
    ],
)
def test_a_broken_custom_op_is_refused_on_the_operator(edit, fragment) -> None:
    (message,) = _transpose(edit)
    assert message.startswith("m: operator 0 (Convolution2DTransposeBias): ")
    assert fragment in message


def test_an_unpooling_with_indices_of_another_shape_is_refused() -> None:
    builder = GraphBuilder()
    x = builder.input("x", [1, 2, 2, 1])
    indices = builder.constant("i", np.zeros((1, 2, 3, 1), np.float32))
    out = builder.tensor("out", [1, 4, 4, 1])
    _custom(builder, "MaxUnpooling2D", [x, indices], [out], _options(VALID, 1, 1, 2, 2, NONE))
    assert _messages(builder.finish([out])) == [
        "m: operator 0 (MaxUnpooling2D): indices [1, 2, 3, 1] must have the input's shape "
        "[1, 2, 2, 1]"
    ]
