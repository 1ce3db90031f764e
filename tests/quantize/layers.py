"""Single-layer float models with weights, for tests of weight quantization refinements."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qtool.model import Model, model_to_bytes, parse_model
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType, Padding


@dataclass(frozen=True)
class Layer:
    """One layer's geometry: the shapes of a sample, its weights and the operator options."""

    op_type: str
    input_shape: tuple[int, ...]  # one sample
    weight_shape: tuple[int, ...]
    output_shape: tuple[int, ...]  # one sample
    options_type: str
    options: dict = field(default_factory=dict)
    axis: int = 0  # the per-channel axis of the weights (the output channels)

    @property
    def positions(self) -> tuple[int, int, int]:
        """(activation, weights, bias) input positions."""
        return (2, 1, 3) if self.op_type == "TRANSPOSE_CONV" else (0, 1, 2)

    def model(self, weights: np.ndarray, bias: np.ndarray | None, activation: int = 0) -> Model:
        builder = GraphBuilder()
        x = builder.input("x", [1, *self.input_shape])
        w = builder.constant("weights", np.asarray(weights, np.float32))
        b = -1 if bias is None else builder.constant("bias", np.asarray(bias, np.float32))
        inputs, version = [x, w, b], 1
        if self.op_type == "TRANSPOSE_CONV":  # version 3 reads the bias
            shape = builder.constant("shape", np.array([1, *self.output_shape], np.int32))
            inputs, version = [shape, w, x, b], 3
        y = builder.op(
            self.op_type,
            inputs,
            output_shape=[1, *self.output_shape],
            options_type=self.options_type,
            options={**self.options, "fused_activation_function": activation},
            version=version,
            name="layer",
        )
        return parse_model(model_to_bytes(builder.finish([y])))

    def random_weights(self, rng: np.random.Generator) -> np.ndarray:
        return rng.standard_normal(self.weight_shape).astype(np.float32)


def _conv_options(stride: int, padding: int) -> dict:
    return {
        "padding": padding,
        "stride_h": stride,
        "stride_w": stride,
        "dilation_h_factor": 1,
        "dilation_w_factor": 1,
    }


LAYERS = {
    "CONV_2D": Layer(
        "CONV_2D",
        (7, 9, 3),
        (4, 3, 3, 3),
        (4, 5, 4),
        "Conv2DOptions",
        _conv_options(2, Padding.SAME),
    ),
    # A matrix product per pixel: bias correction takes the product with the mean pixel.
    "CONV_2D 1x1": Layer(
        "CONV_2D",
        (5, 6, 3),
        (4, 1, 1, 3),
        (5, 6, 4),
        "Conv2DOptions",
        _conv_options(1, Padding.SAME),
    ),
    "DEPTHWISE_CONV_2D": Layer(
        "DEPTHWISE_CONV_2D",
        (6, 5, 2),
        (1, 3, 3, 4),  # depth multiplier 2
        (6, 5, 4),
        "DepthwiseConv2DOptions",
        {**_conv_options(1, Padding.SAME), "depth_multiplier": 2},
        axis=3,
    ),
    "FULLY_CONNECTED": Layer("FULLY_CONNECTED", (6,), (4, 6), (4,), "FullyConnectedOptions"),
    "TRANSPOSE_CONV": Layer(
        "TRANSPOSE_CONV",
        (4, 5, 3),
        (2, 3, 3, 3),
        (8, 10, 2),
        "TransposeConvOptions",
        {"padding": Padding.SAME, "stride_h": 2, "stride_w": 2},
    ),
}
RELU = ActivationFunctionType.RELU
