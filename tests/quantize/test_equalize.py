"""Cross-layer equalization (`equalize=True`): a near-dead channel of a conv -> RELU6 ->
depthwise pair is scaled up; the float model computes the same, the int8 model is closer to it
in LiteRT (builtin kernels and XNNPACK), and the audit passes."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtool.calibrate import Dataset
from qtool.check.audit import audit_model
from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.model.types import ActivationFunctionType, Padding
from qtool.numerics import sqnr_db
from qtool.prepare.bounds import activation_bounds
from qtool.prepare.equalize import channel_extremes, channel_ranges, find_pairs
from qtool.quantize import QuantizeOptions, quantize_loaded
from tests.conftest import ROOT
from tests.litert import run_litert_samples
from tests.quantize.test_cli import qtool

_CONV = {"padding": Padding.SAME, "stride_h": 1, "stride_w": 1}
DEAD = 2  # the near-dead channel: weights 0.002, read with taps of ±150


def _model(activation: int = ActivationFunctionType.RELU6):
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", [1, 8, 8, 3])
    w1 = rng.uniform(-1.0, 1.0, (4, 3, 3, 3)).astype(np.float32)
    w1[DEAD] = rng.uniform(0.0, 0.002, (3, 3, 3))
    bias1 = np.array([0.5, 0.2, 0.0, 0.3], np.float32)
    h = b.op(
        "CONV_2D",
        [x, b.constant("w1", w1), b.constant("b1", bias1)],
        output_shape=[1, 8, 8, 4],
        options_type="Conv2DOptions",
        options={**_CONV, "fused_activation_function": activation},
        name="conv",
    )
    w2 = rng.uniform(-1.0, 1.0, (1, 3, 3, 4)).astype(np.float32)
    w2[..., DEAD] *= 150.0
    y = b.op(
        "DEPTHWISE_CONV_2D",
        [h, b.constant("w2", w2), b.constant("b2", np.zeros(4, np.float32))],
        output_shape=[1, 8, 8, 4],
        options_type="DepthwiseConv2DOptions",
        options={**_CONV, "depth_multiplier": 1},
        name="depthwise",
    )
    return b.finish(outputs=[y])


def _samples(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.0, 1.0, (n, 8, 8, 3)).astype(np.float32)


def _quantize(model, equalize: bool):
    data = Dataset.from_arrays([_samples(64, 1)])
    return quantize_loaded(model, data, QuantizeOptions(equalize=equalize))


def test_pairs_and_bounds():
    model = _model()
    (pair,) = find_pairs(model)
    assert (pair.producer, pair.consumer) == (0, 1)
    low, high = activation_bounds(model, 0, {0: (0.0, 1.0)})[pair.tensors[0]]
    assert np.all(low == 0) and high[DEAD] < 0.06 and np.all(high <= 6)


@pytest.mark.parametrize("activation", [ActivationFunctionType.RELU6, ActivationFunctionType.RELU])
def test_float_function_unchanged(activation):
    model = _model(activation)
    result = _quantize(model, equalize=True)
    (pair,) = result.equalized
    assert (pair.producer, pair.consumer, pair.channels, pair.of) == (0, 1, 1, 4)
    assert pair.max_gain > 50
    held_out = _samples(16, 2)
    reference = run_litert_samples(model_to_bytes(model), [held_out])[0]
    rescaled = run_litert_samples(model_to_bytes(result.float_model), [held_out])[0]
    assert sqnr_db(reference, rescaled) > 100


@pytest.mark.parametrize("reference_kernels", [True, False], ids=["builtin", "xnnpack"])
def test_int8_closer_and_audited(reference_kernels):
    model = _model()
    held_out = _samples(16, 2)
    expected = run_litert_samples(model_to_bytes(model), [held_out])[0]
    scores = {}
    for equalize in (False, True):
        result = _quantize(model, equalize)
        assert [f for f in audit_model(result.model) if f.severity != "info"] == []
        got = run_litert_samples(model_to_bytes(result.model), [held_out], reference_kernels)[0]
        scores[equalize] = sqnr_db(expected, got)
    assert scores[True] > scores[False] + 6, scores


def test_no_equalize_keeps_the_float_model():
    model = _model()
    result = _quantize(model, equalize=False)
    assert result.equalized == []
    assert model_to_bytes(result.float_model) == model_to_bytes(model)


def test_on_by_default():
    assert QuantizeOptions().equalize is True


def test_cli_reports_pairs_and_check_passes(tmp_path):
    model_path, data_path = tmp_path / "dead.tflite", tmp_path / "calib.npy"
    model_path.write_bytes(model_to_bytes(_model()))
    np.save(data_path, _samples(64, 1))
    out = tmp_path / "dead_int8.tflite"
    done = qtool(
        "quantize", str(model_path), "--data", str(data_path), "--equalize", "-o", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert "equalized: 1 channel(s) of 1 activation(s) scaled up" in done.stdout
    report = json.loads(out.with_suffix(".report.json").read_text())
    jsonschema.validate(report, json.loads((ROOT / "schemas" / "report.schema.json").read_text()))
    assert report["settings"]["equalize"] is True
    assert [(p["producer"], p["consumer"], p["channels"]) for p in report["equalized"]] == [
        (0, 1, 1)
    ]
    assert qtool("check", str(out)).returncode == 0


def test_channel_ranges_from_litert_where_numpy_lacks_a_kernel(monkeypatch):
    import qtool.prepare.equalize as equalize_module
    from qtool.errors import UnsupportedOpError

    model = _model()
    (pair,) = find_pairs(model)
    samples = [_samples(4, 5)]
    numpy_ranges = channel_ranges(model, 0, pair.tensors, samples)

    def no_kernel(*_: object) -> None:
        raise UnsupportedOpError("no numpy kernel")

    monkeypatch.setattr(equalize_module, "Engine", no_kernel)
    litert_ranges = channel_ranges(model, 0, pair.tensors, samples)
    for t in pair.tensors:
        np.testing.assert_allclose(litert_ranges[t][0], numpy_ranges[t][0], atol=1e-5)
        np.testing.assert_allclose(litert_ranges[t][1], numpy_ranges[t][1], rtol=1e-5, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 3000),
    channels=st.sampled_from([1, 3, 8, 24, 4095, 5000]),
    nan=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_channel_extremes_are_numpys_per_channel_min_and_max(rows, channels, nan, seed):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((min(rows, 40_000 // channels + 1), channels)).astype(np.float32)
    values[rng.random(values.shape) < 0.05] = np.inf
    if nan:
        values[rng.integers(values.shape[0]), rng.integers(channels)] = np.nan
    low, high = channel_extremes(values.reshape(1, -1, 1, channels))
    np.testing.assert_array_equal(low, values.min(axis=0))
    np.testing.assert_array_equal(high, values.max(axis=0))
    assert low.dtype == high.dtype == np.float32
