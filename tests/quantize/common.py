"""Helpers for quantization tests: quantize fixtures once, run models in LiteRT, measure SQNR."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from qtool.calibrate import load_dataset, model_inputs
from qtool.model import Model, load_model, model_to_bytes, parse_model
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, QuantizeResult, quantize_loaded
from tests.conftest import DATA, MODELS
from tests.litert import run_litert_samples


def fixture_path(name: str) -> Path:
    return MODELS / f"{name}.tflite"


def holdout_feeds(name: str, model: Model) -> list[np.ndarray]:
    holdout = np.load(DATA / f"{name}_holdout.npz")
    return [holdout[spec.name] for spec in model_inputs(model)]


# TensorFlow's converter calibrates with min/max and rounds weights to nearest: the options
# under which qtool's planning is compared with TensorFlow's, rule for rule.
# TensorFlow's converter: min/max ranges, nearest rounding, no bias correction, no equalization.
TENSORFLOW_ALGORITHM = (("calibration", "minmax"), ("bias_correction", False), ("equalize", False))


@functools.cache
def quantized(
    name: str,
    io: str = "float",
    per_tensor_fc: bool = False,
    keep_float: tuple[str, ...] = (),
    algorithm: tuple[tuple[str, object], ...] = (),
) -> QuantizeResult:
    """A fixture quantized with qtool's defaults, or with `algorithm`'s options replacing them."""
    model = load_model(fixture_path(name))
    dataset = load_dataset([str(DATA / f"{name}_calib.npz")], model_inputs(model))
    options = QuantizeOptions(
        io=io, per_tensor_fc=per_tensor_fc, keep_float=keep_float, **dict(algorithm)
    )
    return quantize_loaded(model, dataset, options)


def reparsed(result: QuantizeResult) -> Model:
    """The quantized model as it is written to disk and read back."""
    return parse_model(model_to_bytes(result.model))


def output_sqnr(name: str, quantized_bytes: bytes) -> list[float]:
    """SQNR (dB) of each output of a float-I/O quantized model vs the float model.

    Both run in LiteRT with its default kernels, as a deployed model does (the reference kernels
    differ in int8 rounding details).
    """
    model = load_model(fixture_path(name))
    feeds = holdout_feeds(name, model)
    reference = run_litert_samples(fixture_path(name).read_bytes(), feeds, reference=False)
    got = run_litert_samples(quantized_bytes, feeds, reference=False)
    return [sqnr_db(r, g) for r, g in zip(reference, got, strict=True)]


def tf_int8_sqnr(name: str) -> list[float] | None:
    path = MODELS / "tf_int8" / f"{name}_int8.tflite"
    return output_sqnr(name, path.read_bytes()) if path.exists() else None


def manifest_entry(name: str) -> dict:
    return json.loads((MODELS.parent / "manifest.json").read_text())[name]
