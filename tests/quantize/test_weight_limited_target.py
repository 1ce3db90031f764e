"""A layer whose output is a small difference of large terms (the world-landmark head of
MediaPipe's hand_landmark_full, the high-pass depthwise kernels of pose_landmark_full: docs/
accuracy.md, "The hard models") loses its output to the rounding of its weights, which int16
activations do not touch: the error of each tap multiplies the level the terms share. A target
search remedies it with rounding optimisation (fitted to the inputs' second moment, it makes the
taps' errors cancel on that level) and int16 for the input (whose variation is a few int8
steps): neither alone reaches the target, the search's combination does, measured in LiteRT on
samples no choice saw. `qtool analyze` tells the two parts apart: the outputs' SQNR with the
weights alone quantized, which is what int16 activations leave."""

from __future__ import annotations

import numpy as np

from qtool.calibrate import Dataset
from qtool.model import Model, model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.quantizer import analyze_loaded
from qtool.quantize.remedies import INT16, ROUNDING
from tests.litert import run_litert_samples

DEPTH, OUTPUTS = 64, 16
TARGET_DB = 20.0


def cancelling_model() -> Model:
    """One FULLY_CONNECTED whose rows sum to zero: a level shared by all inputs cancels."""
    rng = np.random.default_rng(5)
    weights = rng.standard_normal((OUTPUTS, DEPTH))
    weights -= weights.mean(axis=1, keepdims=True)
    b = GraphBuilder()
    x = b.input("x", [1, DEPTH])
    return b.finish([b.fully_connected(x, weights, None, "high_pass")])


def level_plus_detail(count: int, seed: int) -> np.ndarray:
    """Inputs on a level from 0 to 6 (one per sample) with a detail of 1% of it."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(0.0, 6.0, (count, 1))
    return (level + 0.05 * rng.standard_normal((count, DEPTH))).astype(np.float32)


def held_out_sqnr(model: Model, options: QuantizeOptions) -> tuple[float, object]:
    """The quantized model's SQNR (dB) on held-out samples in LiteRT, and the result."""
    result = quantize_loaded(model, Dataset.from_arrays([level_plus_detail(64, 1)]), options)
    held_out = level_plus_detail(32, 2)
    [reference] = run_litert_samples(model_to_bytes(model), [held_out])
    [quantized] = run_litert_samples(model_to_bytes(result.model), [held_out])
    return sqnr_db(reference, quantized), result


def test_int16_alone_leaves_the_weights_error() -> None:
    model = cancelling_model()
    default_db, _ = held_out_sqnr(model, QuantizeOptions())
    int16_db, _ = held_out_sqnr(model, QuantizeOptions(activations="int16"))
    rounding_db, _ = held_out_sqnr(model, QuantizeOptions(optimize_rounding=True))
    assert max(default_db, int16_db, rounding_db) < TARGET_DB - 3, (
        default_db,
        int16_db,
        rounding_db,
    )


def test_the_target_search_combines_rounding_and_int16() -> None:
    reached_db, result = held_out_sqnr(cancelling_model(), QuantizeOptions(target_sqnr=TARGET_DB))
    kinds = {remedy.kind for remedy in result.searches[0].remedies}
    assert {ROUNDING, INT16} <= kinds, kinds
    assert result.target_confirmed[0]
    assert reached_db >= TARGET_DB, reached_db


def test_analyze_says_the_weights_alone_leave_what_int16_leaves() -> None:
    model = cancelling_model()
    data = Dataset.from_arrays([level_plus_detail(64, 1)])
    holdout = Dataset.from_arrays([level_plus_detail(32, 2)])
    [analysed] = analyze_loaded(model, data, QuantizeOptions(), holdout=holdout).subgraphs
    int16_db, _ = held_out_sqnr(model, QuantizeOptions(activations="int16"))
    [weights_db], [activations_db] = analysed.weights_alone, analysed.activations_alone
    assert abs(weights_db - int16_db) < 2.0, (weights_db, int16_db)
    # Both parts matter here: neither alone reaches the target, as the search found.
    assert max(weights_db, activations_db) < TARGET_DB, (weights_db, activations_db)
    assert analysed.output_sqnr[0] < min(weights_db, activations_db)
