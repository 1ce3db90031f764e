"""Bias correction: the bias absorbs the mean output error of the rounded weights."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.calibrate.observers import MeanObserver
from qtool.model import Model, TensorType, model_to_bytes
from qtool.numerics import symmetric_params
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.bias_correction import mean_output_error
from qtool.quantize.simulate import Parts, Simulator
from qtool.quantize.weights import LayerWeights, nearest
from qtool.runtime import Engine
from tests.litert import run_litert_samples
from tests.quantize.layers import LAYERS, RELU, Layer

LAYER_TYPES = sorted(LAYERS)


def rounded(layer: Layer, weights: np.ndarray) -> np.ndarray:
    """The real values of the per-channel int8 weights, rounded to nearest."""
    scale = symmetric_params(weights, axis=layer.axis).scale
    return LayerWeights(1, nearest(weights, scale, layer.axis), scale, layer.axis).real_weights()


def channel_means(values: np.ndarray) -> np.ndarray:
    return values.reshape(-1, values.shape[-1]).astype(np.float64).mean(axis=0)


@pytest.mark.parametrize("op_type", LAYER_TYPES)
def test_mean_output_error_is_the_mean_error_of_the_layer_outputs(op_type: str) -> None:
    layer = LAYERS[op_type]
    rng = np.random.default_rng(0)
    weights = layer.random_weights(rng)
    approximate = rounded(layer, weights)
    x = rng.uniform(-0.5, 1.5, (16, *layer.input_shape)).astype(np.float32)
    # Directly: the layer's kernel with the real and the rounded weights, no bias, no activation.
    real = Engine(layer.model(weights, None)).run([x])[0]
    empirical = channel_means(real - Engine(layer.model(approximate, None)).run([x])[0])
    assert np.abs(empirical).max() > 1e-3  # an error worth correcting
    # From statistics: the mean input, through the layer as it is in the model (bias, RELU).
    channels = real.shape[-1]
    model = layer.model(weights, rng.standard_normal(channels), activation=RELU)
    activation, weight_position, bias_position = layer.positions
    subgraph = model.subgraphs[0]
    t = subgraph.operators[0].inputs[activation]
    means = MeanObserver([t], {t: layer.input_shape})
    Engine(model).run([x], observers=[means])
    got = mean_output_error(
        model,
        subgraph,
        0,
        activation,
        means.mean(t),
        weight_position,
        weights - approximate,
        bias_position,
    )
    assert got.shape == (channels,)
    np.testing.assert_allclose(got, empirical, rtol=1e-4, atol=1e-6 * np.abs(real).max())


def quantize_layer_model(model: Model, samples: np.ndarray, correct: bool):
    options = QuantizeOptions(calibration="minmax", bias_correction=correct)
    return quantize_loaded(model, Dataset.from_arrays([samples], "positive"), options)


@pytest.mark.parametrize("op_type", LAYER_TYPES)
def test_correction_removes_the_mean_error_of_rounded_weights(op_type: str) -> None:
    """Positive inputs make rounded weights shift every output channel; the corrected bias
    takes the shift back, on samples calibration never saw."""
    layer = LAYERS[op_type]
    rng = np.random.default_rng(1)
    model = layer.model(layer.random_weights(rng), None)  # no bias: correction adds one
    calibration = rng.uniform(0, 1, (256, *layer.input_shape)).astype(np.float32)
    holdout = rng.uniform(0, 1, (256, *layer.input_shape)).astype(np.float32)
    reference = Engine(model).run([holdout])[0]
    errors = {}
    for correct in (False, True):
        result = quantize_layer_model(model, calibration, correct)
        (layer_weights,) = result.plans[0].weights.values()
        assert (layer_weights.bias is not None) == correct
        weights_only = Simulator(result.float_model, result.plans[0], Parts(slots=()))
        errors[correct] = np.abs(channel_means(weights_only.run([holdout])[0] - reference))
    assert errors[False].max() > 1e-3
    assert np.sqrt(np.mean(errors[True] ** 2)) < 0.2 * np.sqrt(np.mean(errors[False] ** 2))


@pytest.mark.parametrize("op_type", LAYER_TYPES)
def test_a_layer_without_bias_gets_one_when_corrected(op_type: str) -> None:
    layer = LAYERS[op_type]
    rng = np.random.default_rng(2)
    model = layer.model(layer.random_weights(rng), None)
    samples = rng.uniform(0, 1, (64, *layer.input_shape)).astype(np.float32)
    result = quantize_layer_model(model, samples, correct=True)
    (layer_weights,) = result.plans[0].weights.values()
    shift = layer_weights.bias_shift
    assert shift is not None and np.abs(shift).max() > 0
    # The stored bias is the shift, at the bias scale (input scale x weight scale).
    np.testing.assert_allclose(
        layer_weights.real_bias(), shift, rtol=0, atol=float(layer_weights.bias_scale.max())
    )
    quantized = result.model
    subgraph = quantized.subgraphs[0]
    (op,) = [op for op in subgraph.operators if quantized.op_type(op) == layer.op_type]
    bias = subgraph.tensors[op.inputs[layer.positions[2]]]
    assert bias.dtype == TensorType.INT32
    np.testing.assert_array_equal(quantized.tensor_data(bias), layer_weights.bias)
    # LiteRT runs it, and it is as close to the float layer as int8 gets.
    reference = Engine(model).run([samples])[0]
    got = run_litert_samples(model_to_bytes(quantized), [samples], reference=False)[0]
    assert np.abs(got - reference).max() < 0.1 * np.abs(reference).max()
