"""The auto choice's candidates start running in LiteRT as soon as the fitting fold is
calibrated, beside the other folds' calibration, and the choice picks their outputs up:
the same scores as measuring them one after the other, each candidate run once."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.calibrate import Dataset
from qtool.calibrate.collect import collect
from qtool.model import load_model
from qtool.quantize import QuantizeOptions, evaluation, litert_worker, planner
from qtool.quantize.quantizer import calibrate_loaded
from tests.conftest import DATA, MODELS

CNN = MODELS / "cnn.tflite"


def samples() -> np.ndarray:
    with np.load(DATA / "cnn_calib.npz") as data:
        return data[data.files[0]]


def test_a_background_run_gives_the_outputs_of_a_direct_one() -> None:
    blob = (MODELS / "cnn.tflite").read_bytes()
    inputs = [samples()[:6]]
    pending = litert_worker.submit(blob, inputs, leading_one=True)
    direct = litert_worker.litert_outputs(blob, inputs, leading_one=True)
    for got, expected in zip(pending.result(), direct, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_background_run_hands_its_exception_to_whoever_waits(monkeypatch) -> None:
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(litert_worker, "litert_outputs", interrupted)
    pending = litert_worker.submit(b"", [samples()[:1]], leading_one=True)
    with pytest.raises(KeyboardInterrupt):
        pending.result()


def test_on_fit_sees_the_fit_statistics_and_the_selection_inputs_before_they_run() -> None:
    model = load_model(CNN)
    seen = []
    collected = collect(
        model,
        Dataset.from_arrays([samples()]),
        on_fit=lambda fit, inputs: seen.append((fit, inputs, fit.samples)),
    )
    ((fit, inputs, fit_samples),) = seen
    assert fit is collected.fit and fit_samples == collected.fit.samples
    assert inputs is collected.selection.inputs  # the list the started runs are keyed by


def test_auto_runs_each_candidate_once_and_scores_as_without_early_runs(monkeypatch) -> None:
    submitted = []
    submit = litert_worker.submit_model

    def counted(model, inputs):
        submitted.append(model)
        return submit(model, inputs)

    monkeypatch.setattr(evaluation, "submit_model", counted)
    data = Dataset.from_arrays([samples()])
    early = calibrate_loaded(load_model(CNN), data, QuantizeOptions())
    # Started early or late, each once on the selection fold; on the cross fold only those
    # that could still win, each once.
    assert len(early.collected[0].judging) == 2
    assert len(early.method_scores) < len(submitted) <= 2 * len(early.method_scores)
    assert all(not planner._started for planner in early.planners.values())

    monkeypatch.setattr(planner.Planner, "start_measuring", lambda *args: None)
    late = calibrate_loaded(load_model(CNN), data, QuantizeOptions())
    assert early.method_scores == late.method_scores
    assert early.start == late.start
