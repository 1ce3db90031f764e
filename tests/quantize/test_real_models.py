"""Real trained models (fixtures/real/, from the mediapipe wheel) through the whole pipeline.

They are fed procedural images, so these tests check what the pipeline does with real graphs
(float16 weights, custom ops, HARD_SWISH, squeeze-excite blocks), not the accuracy reached on
photographs (`make bench` measures that).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.check.audit import audit_model
from qtool.model import load_model, model_to_bytes
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, QuantizeResult, quantize_loaded
from qtool.quantize.simulate import Simulator
from tests.conftest import FIXTURES
from tests.litert import run_litert_samples

REAL = FIXTURES / "real"
RANGES = {"face_detection_short_range": (-1.0, 1.0), "selfie_segmentation": (0.0, 1.0)}


def images(name: str, count: int, seed: int) -> np.ndarray:
    """Smooth colour fields with a few bright and dark discs: image-like statistics."""
    model = load_model(REAL / f"{name}.tflite")
    _, height, width, _ = model.subgraphs[0].tensors[model.subgraphs[0].inputs[0]].shape
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    out = np.empty((count, height, width, 3), np.float32)
    for i in range(count):
        image = np.zeros((height, width, 3))
        for _ in range(3):
            fy, fx, phase = rng.uniform(0.3, 2.0), rng.uniform(0.3, 2.0), rng.uniform(0, 6.3)
            image += (
                rng.uniform(0.1, 0.3, 3)
                * np.cos(2 * np.pi * (fy * yy + fx * xx) + phase)[..., None]
            )
        for _ in range(rng.integers(1, 4)):
            cy, cx, r = rng.uniform(0.2, 0.8), rng.uniform(0.2, 0.8), rng.uniform(0.05, 0.25)
            image[(yy - cy) ** 2 + (xx - cx) ** 2 < r**2] += rng.uniform(-0.5, 0.5, 3)
        out[i] = np.clip(0.5 + image, 0, 1)
    low, high = RANGES[name]
    return (low + out * (high - low)).astype(np.float32)


@functools.cache
def quantized(name: str, activations: str = "int8") -> QuantizeResult:
    model = load_model(REAL / f"{name}.tflite")
    data = Dataset.from_arrays([images(name, 24, 1)], name)
    return quantize_loaded(model, data, QuantizeOptions(engine="numpy", activations=activations))


@pytest.mark.parametrize("name", sorted(RANGES))
def test_real_model_is_fully_int8_clean_and_runs(name: str) -> None:
    result = quantized(name)
    assert result.float_ops == []
    assert [f for f in audit_model(result.model) if f.severity != "info"] == []
    run_litert_samples(model_to_bytes(result.model), [images(name, 2, 2)], reference=False)


@pytest.mark.parametrize("name", sorted(RANGES))
def test_simulation_tracks_litert_on_real_models(name: str) -> None:
    """The simulation that drives auto calibration and the analysis agrees with LiteRT's
    integer kernels on real graphs, output by output."""
    result = quantized(name)
    held_out = images(name, 8, 3)
    reference = run_litert_samples(
        (REAL / f"{name}.tflite").read_bytes(), [held_out], reference=False
    )
    litert = run_litert_samples(model_to_bytes(result.model), [held_out], reference=False)
    simulated = Simulator(result.float_model, result.plans[0]).run([held_out])
    for want, got, sim in zip(reference, litert, simulated, strict=True):
        assert abs(sqnr_db(want, got) - sqnr_db(want, sim)) < 1.0


def test_mediapipe_transpose_conv_becomes_an_int8_transpose_conv() -> None:
    result = quantized("selfie_segmentation")
    assert [r.into for r in result.rewritten.values()] == ["TRANSPOSE_CONV"]
    types = {result.model.op_type(op) for op in result.model.subgraphs[0].operators}
    assert "TRANSPOSE_CONV" in types and "Convolution2DTransposeBias" not in types


def test_int16_activations_beat_int8_on_a_real_model() -> None:
    name = "face_detection_short_range"
    held_out = images(name, 8, 3)
    reference = run_litert_samples(
        (REAL / f"{name}.tflite").read_bytes(), [held_out], reference=False
    )

    def worst(result: QuantizeResult) -> float:
        got = run_litert_samples(model_to_bytes(result.model), [held_out], reference=False)
        return min(sqnr_db(r, g) for r, g in zip(reference, got, strict=True))

    wide = quantized(name, "int16")
    assert [f for f in audit_model(wide.model) if f.severity == "error"] == []
    assert worst(wide) > worst(quantized(name)) + 6
