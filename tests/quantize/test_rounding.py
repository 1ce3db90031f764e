"""Rounding optimisation: never worse than nearest under the layer's input second moment."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtool.calibrate import Dataset
from qtool.model.types import Padding
from qtool.numerics import symmetric_params
from qtool.quantize import QuantizeOptions
from qtool.quantize.adaround import DAMPING, gather_moments, optimise_rounding
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.quantizer import calibrate_loaded
from qtool.quantize.simulate import Parts, Simulator
from qtool.quantize.weights import nearest
from qtool.runtime import Engine
from tests.quantize.layers import LAYERS, Layer


def quadratic_errors(w: np.ndarray, s: np.ndarray, q: np.ndarray, moment: np.ndarray) -> np.ndarray:
    """(w - s q)^T H (w - s q) per channel; w, q [C, K], s [C], H [K, K] or [C, K, K]."""
    e = w - s[:, None] * q
    h = moment if moment.ndim == 3 else np.broadcast_to(moment, (len(w), *moment.shape))
    return np.einsum("ck,ckl,cl->c", e, h, e)


def correlated_moment(rng: np.random.Generator, k: int, channels: int | None = None) -> np.ndarray:
    """A second moment E[x x^T] of inputs with strongly correlated components."""
    shape = (k, k) if channels is None else (channels, k, k)
    mixing = rng.standard_normal(shape) + 2.0  # a common component: neighbours move together
    inputs = rng.standard_normal((*shape[:-2], 4 * k, k)) @ mixing
    moment = np.swapaxes(inputs, -1, -2) @ inputs / (4 * k)
    diagonal = np.diagonal(moment, axis1=-2, axis2=-1).mean(axis=-1)
    return moment + DAMPING * diagonal[..., None, None] * np.eye(k)


def check_rounding(w: np.ndarray, s: np.ndarray, q: np.ndarray, moment: np.ndarray) -> float:
    """Assert the invariants of an optimised rounding; return its error relative to nearest."""
    ratio = w / s[:, None]
    assert np.all((q >= np.floor(ratio)) & (q <= np.ceil(ratio)))
    assert np.all(np.abs(q) <= 127)
    nearest_q = np.clip(np.round(ratio), -127, 127)
    optimised, plain = quadratic_errors(w, s, q, moment), quadratic_errors(w, s, nearest_q, moment)
    assert np.all(optimised <= plain * (1 + 1e-9) + 1e-18)
    return float(optimised.sum() / plain.sum())


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 6), st.integers(2, 24), st.integers(0, 2**32 - 1))
def test_rows_layout_never_increases_the_error(channels: int, k: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((channels, 1, 1, k)).astype(np.float32)  # [O, 1, 1, K]
    scale = symmetric_params(weights, axis=0).scale
    moment = correlated_moment(rng, k)
    q = optimise_rounding(weights, scale, moment, "rows")
    assert q.dtype == np.int8 and q.shape == weights.shape
    w = weights.reshape(channels, k).astype(np.float64)
    check_rounding(w, scale.astype(np.float64), q.reshape(channels, k).astype(np.float64), moment)


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 6), st.sampled_from([(1, 1), (2, 2), (3, 3)]), st.integers(0, 2**32 - 1))
def test_depthwise_layout_never_increases_the_error(channels: int, kernel, seed: int) -> None:
    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((1, *kernel, channels)).astype(np.float32)  # [1, KH, KW, C]
    scale = symmetric_params(weights, axis=3).scale
    k = kernel[0] * kernel[1]
    moment = correlated_moment(rng, k, channels)
    q = optimise_rounding(weights, scale, moment, "depthwise")
    assert q.dtype == np.int8 and q.shape == weights.shape
    w = weights.reshape(k, channels).T.astype(np.float64)
    check_rounding(w, scale.astype(np.float64), q.reshape(k, channels).T.astype(np.float64), moment)


def test_correlated_inputs_make_other_roundings_better() -> None:
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((16, 3, 3, 8)).astype(np.float32)
    scale = symmetric_params(weights, axis=0).scale
    moment = correlated_moment(rng, 72)
    q = optimise_rounding(weights, scale, moment, "rows").reshape(16, 72).astype(np.float64)
    w = weights.reshape(16, 72).astype(np.float64)
    assert check_rounding(w, scale.astype(np.float64), q, moment) < 0.7
    # The largest weight of each channel sits on +-127 and cannot round past it.
    assert np.array_equal(np.abs(q).max(axis=1), np.full(16, 127))
    # With uncorrelated inputs of equal power, nearest is already optimal.
    identity = optimise_rounding(weights, scale, np.eye(72), "rows")
    assert np.array_equal(identity, nearest(weights, scale, 0))


# ----------------------------------------------------------------------- second moments


def same_padded(x: np.ndarray, kernel: tuple[int, int], stride: int) -> np.ndarray:
    """x [N, H, W, C] zero-padded as TensorFlow's SAME padding does."""
    pads = []
    for size, k in zip(x.shape[1:3], kernel, strict=True):
        out = -(-size // stride)
        total = max((out - 1) * stride + k - size, 0)
        pads.append((total // 2, total - total // 2))
    return np.pad(x, [(0, 0), *pads, (0, 0)])


def im2col(layer: Layer, x: np.ndarray) -> np.ndarray:
    """Every input window of a convolution, [N * OH * OW, KH, KW, C]."""
    kh, kw = layer.weight_shape[1:3]
    stride = layer.options["stride_h"]
    assert layer.options["padding"] == Padding.SAME
    padded = same_padded(x, (kh, kw), stride)
    oh, ow = layer.output_shape[:2]
    windows = [
        padded[:, i * stride : i * stride + kh, j * stride : j * stride + kw]
        for i in range(oh)
        for j in range(ow)
    ]
    return np.stack(windows, axis=1).reshape(-1, kh, kw, x.shape[-1])


def direct_moment(layer: Layer, x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    if layer.op_type == "FULLY_CONNECTED":
        rows = x.reshape(len(x), -1)
        h = rows.T @ rows / len(rows)
    elif layer.op_type == "CONV_2D":
        rows = im2col(layer, x).reshape(-1, int(np.prod(layer.weight_shape[1:])))
        h = rows.T @ rows / len(rows)
    else:  # depthwise: output channel c reads input channel c // multiplier
        patches = im2col(layer, x)
        multiplier = layer.weight_shape[3] // x.shape[3]
        per_channel = np.repeat(patches, multiplier, axis=3)
        rows = per_channel.reshape(len(patches), -1, per_channel.shape[-1]).transpose(2, 0, 1)
        h = np.einsum("cpk,cpl->ckl", rows, rows) / len(patches)
    diagonal = np.diagonal(h, axis1=-2, axis2=-1).mean(axis=-1)
    return h + DAMPING * diagonal[..., None, None] * np.eye(h.shape[-1])


@pytest.mark.parametrize("op_type", ["FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D"])
def test_second_moments_match_im2col(op_type: str) -> None:
    layer = LAYERS[op_type]
    rng = np.random.default_rng(3)
    model = layer.model(layer.random_weights(rng), None)
    x = rng.standard_normal((10, *layer.input_shape)).astype(np.float32)
    chunks = [[x[:3]], [x[3:]]]  # statistics accumulate over chunks
    moments = gather_moments(model, 0, [0], chunks)
    np.testing.assert_allclose(moments.moment(0), direct_moment(layer, x), rtol=1e-9, atol=1e-12)


def test_optimised_rounding_lowers_the_output_error_on_calibration_data() -> None:
    layer = LAYERS["CONV_2D"]
    rng = np.random.default_rng(4)
    model = layer.model(layer.random_weights(rng), rng.standard_normal(4))
    # Smooth images: neighbouring pixels correlate, as in real inputs.
    noise = rng.standard_normal((64, 8, 10, 3)).astype(np.float32)
    samples = (noise[:, :-1, :-1] + noise[:, 1:, :-1] + noise[:, :-1, 1:] + noise[:, 1:, 1:]) / 2
    data = Dataset.from_arrays([samples], "smooth")
    calibrated = calibrate_loaded(model, data, QuantizeOptions(calibration="minmax"))
    planner: Planner = calibrated.planners[0]
    statistics = calibrated.collected[0].statistics
    reference = Engine(calibrated.prepared.model).run([samples])[0]
    errors = {}
    for ops in (frozenset(), frozenset({0})):
        recipe = Recipe(calibrated.start.method, bias_correction=False, rounding_ops=ops)
        plan = planner.plan(statistics, recipe)
        weights_only = Simulator(calibrated.prepared.model, plan, Parts(slots=()))
        errors[ops] = float(np.mean((weights_only.run([samples])[0] - reference) ** 2))
    assert errors[frozenset({0})] < 0.9 * errors[frozenset()]
