"""What qtool says about accuracy is what it delivers: the estimate comes from samples no choice
saw, in LiteRT; a target is reached only when those samples confirm it; the auto choice judges
the worst output; the simulation is checked against LiteRT on the reported plan."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool.calibrate.collect import ESTIMATE, fold_of
from qtool.calibrate.ranges import Method
from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.quantize import agreement, auto
from qtool.quantize.accuracy import LITERT, OutputAccuracy
from qtool.quantize.evaluation import PlanAccuracy
from qtool.quantize.planner import Planner, Recipe
from tests.conftest import DATA, MODELS
from tests.litert import run_litert_samples
from tests.quantize.test_cli import assert_error
from tests.quantize.test_cli import qtool as run_qtool

CNN = MODELS / "cnn.tflite"


def cnn_samples(split: str) -> np.ndarray:
    with np.load(DATA / f"cnn_{split}.npz") as data:
        return data[data.files[0]]


def dense_model(path: Path) -> Path:
    """x [1, 4] -> FULLY_CONNECTED (a rotation) -> y [1, 4]."""
    rotation = np.linalg.qr(np.random.default_rng(5).normal(size=(4, 4)))[0]
    builder = GraphBuilder()
    x = builder.input("x", [1, 4])
    y = builder.fully_connected(x, rotation, np.zeros(4, np.float32), "y")
    path.write_bytes(model_to_bytes(builder.finish([y])))
    return path


def test_the_estimate_comes_from_samples_no_choice_saw() -> None:
    samples = cnn_samples("calib")
    result = qtool.quantize_model(CNN, samples)
    accuracy = result.report["accuracy"]
    estimate = int(np.count_nonzero(fold_of(np.arange(len(samples))) == ESTIMATE))
    assert accuracy["independent"] is True
    assert "no choice saw" in accuracy["source"] and str(estimate) in accuracy["source"]
    (output,) = accuracy["outputs"]
    assert output["samples"] == estimate and output["measured_in"] == LITERT
    assert output["sample_min_db"] <= output["sample_median_db"]


def test_a_holdout_never_judges_a_choice() -> None:
    """The choices are the same whatever the held-out data: only the estimate changes."""
    samples, holdout = cnn_samples("calib"), cnn_samples("holdout")
    first = qtool.quantize_model(CNN, samples, holdout=holdout[:16])
    second = qtool.quantize_model(CNN, samples, holdout=holdout[16:] * 0.5)
    for key in ("method", "method_scores_db"):
        assert first.report["accuracy"][key] == second.report["accuracy"][key]
    assert first.report["recipe"] == second.report["recipe"]
    assert first.model_bytes == second.model_bytes
    assert first.accuracy != second.accuracy
    assert "held-out samples that no choice saw" in first.report["accuracy"]["source"]


def test_a_target_the_unseen_samples_contradict_is_not_reached(tmp_path: Path) -> None:
    """The estimate fold's samples are four times larger than every other: a plan fitted
    without them clips them. The search reaches 30 dB on its selection fold; the estimate says
    otherwise, so nothing is written and both figures are named."""
    model = dense_model(tmp_path / "dense.tflite")
    samples = np.random.default_rng(0).uniform(-1, 1, (64, 4)).astype(np.float32)
    folds = fold_of(np.arange(64))
    samples[folds == ESTIMATE] *= 4
    np.save(tmp_path / "calib.npy", samples)
    out = tmp_path / "dense_int8.tflite"
    result = run_qtool(
        "quantize", str(model), "--data", str(tmp_path / "calib.npy"), "--calibration",
        "minmax", "--target-sqnr", "30", "-o", str(out),
    )  # fmt: skip
    assert_error(result, "target SQNR 30 dB not reached", code=1)
    assert "reached on the samples the search judged it on" in result.stderr
    assert "not on samples that no choice saw" in result.stderr
    assert not out.exists()
    # Without the outliers the same run reaches it, confirmed.
    samples[folds == ESTIMATE] /= 4
    np.save(tmp_path / "calib.npy", samples)
    fine = run_qtool(
        "quantize", str(model), "--data", str(tmp_path / "calib.npy"), "--calibration",
        "minmax", "--target-sqnr", "30", "-o", str(out), "--json",
    )  # fmt: skip
    assert fine.returncode == 0, fine.stderr
    target = json.loads(fine.stdout)["sqnr_target"]
    assert target["reached"] and target["subgraphs"][0]["confirmed"]
    assert target["subgraphs"][0]["search_reached"]


def _accuracy(*fitting_db: float) -> PlanAccuracy:
    return PlanAccuracy(
        [
            OutputAccuracy(0, f"out{k}", "regression", db, db, db, db, 16, LITERT)
            for k, db in enumerate(fitting_db)
        ]
    )


class _Planner:
    """Scores each method as given, whatever the statistics (the planner's accuracy); a method
    given a list of scores scores them fold by fold (`_Collected.judging`'s order)."""

    def __init__(self, scores: dict[str, PlanAccuracy | list[PlanAccuracy]]) -> None:
        self.scores = scores
        self.runs: set[tuple[str, bool, int]] = set()  # (method, bias correction, fold)

    def accuracy(self, statistics, recipe: Recipe, evaluation) -> PlanAccuracy:
        self.runs.add((str(recipe.method), recipe.bias_correction, evaluation))
        found = self.scores[recipe.method.name]
        return found[evaluation] if isinstance(found, list) else found


class _Collected:
    """One judging fold (the selection fold), or two with a cross fold; `evaluation` is the
    fold's number."""

    def __init__(self, folds: int = 1) -> None:
        self.judging = [(None, fold) for fold in range(folds)]


def test_the_auto_choice_judges_the_worst_output() -> None:
    """mse has the best mean (50 and 10 dB), percentile the best worst output (25 and 24)."""
    planner = _Planner({"percentile": _accuracy(25.0, 24.0), "mse": _accuracy(50.0, 10.0)})
    recipe, scores = auto.choose_recipe(None, {0: _Collected()}, {0: planner}, True)
    assert recipe.method == Method("percentile", 99.99)
    assert scores["mse"].worst_db == 10.0
    assert set(scores) == {str(method) for method in auto.CANDIDATES}
    # The user's metric comes first when there is one.
    planner.scores["percentile"] = PlanAccuracy(planner.scores["percentile"].outputs, metric=0.8)
    planner.scores["mse"] = PlanAccuracy(planner.scores["mse"].outputs, metric=0.9)
    recipe, _ = auto.choose_recipe(None, {0: _Collected()}, {0: planner}, True)
    assert recipe.method == Method("mse")


def test_the_auto_choice_takes_the_worse_of_the_selection_and_cross_folds() -> None:
    """The percentiles are best on the selection fold (30 dB) and worst on the cross fold (12):
    mse, 20 and 21 dB, is the method that holds on both."""
    planner = _Planner(
        {
            "percentile": [_accuracy(30.0), _accuracy(12.0)],
            "mse": [_accuracy(20.0), _accuracy(21.0)],
        }
    )
    recipe, scores = auto.choose_recipe(None, {0: _Collected(2)}, {0: planner}, None)
    assert recipe == Recipe(Method("mse"), True)
    assert scores["percentile:99.95, bias correction on"].worst_db == 12.0
    # Without bias correction mse scores 20 dB on the selection fold, no better than its worst
    # fold with it: its cross-fold run is saved.
    assert ("mse", False, 0) in planner.runs and ("mse", False, 1) not in planner.runs
    assert scores["mse, bias correction off"].worst_db == 20.0
    # Judged on the selection fold alone, the percentile would have won.
    recipe, _ = auto.choose_recipe(None, {0: _Collected(1)}, {0: planner}, True)
    assert recipe.method.name == "percentile"


def test_a_simulation_that_strays_from_litert_is_a_warning(monkeypatch) -> None:
    samples = cnn_samples("calib")
    quiet = qtool.quantize_model(CNN, samples)
    (check,) = quiet.report["accuracy"]["simulation_check"]
    assert not check["disagrees"] and check["samples"] == agreement.SAMPLES
    assert abs(check["simulated_db"] - check["litert_db"]) < 1.0
    assert not any("simulation and LiteRT disagree" in w for w in quiet.report["warnings"])

    original = agreement.simulated_outputs

    def astray(model, plan, inputs):  # a simulation about 10 dB noisier than it is
        return [
            c + np.std(c) * 0.3 * np.random.default_rng(0).normal(size=c.shape)
            for c in original(model, plan, inputs)
        ]

    monkeypatch.setattr(agreement, "simulated_outputs", astray)
    loud = qtool.quantize_model(CNN, samples)
    (check,) = loud.report["accuracy"]["simulation_check"]
    assert check["disagrees"]
    (warning,) = [w for w in loud.report["warnings"] if "simulation and LiteRT disagree" in w]
    assert f"LiteRT {check['litert_db']:.1f} dB" in warning
    assert f"simulated {check['simulated_db']:.1f} dB" in warning


def test_the_simulation_check_reads_the_estimate_s_own_litert_run(monkeypatch) -> None:
    # The check's LiteRT side is the estimate's run of the same plan on the same samples (their
    # first ones): the same figures as a run of its own, one LiteRT run fewer.
    samples = cnn_samples("calib")
    runs = []
    original = agreement.litert_plan_outputs

    def counted(*args, **kwargs):
        runs.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(agreement, "litert_plan_outputs", counted)
    reused = qtool.quantize_model(CNN, samples).report["accuracy"]["simulation_check"]
    assert not runs
    monkeypatch.setattr(Planner, "litert_outputs", lambda *args: None)
    again = qtool.quantize_model(CNN, samples).report["accuracy"]["simulation_check"]
    assert len(runs) == 1
    assert reused == again


def average_pool_model() -> bytes:
    builder = GraphBuilder()
    x = builder.input("x", [1, 8, 8, 4])
    y = builder.op(
        "AVERAGE_POOL_2D", [x], output_shape=[1, 4, 4, 4], name="pool",
        options_type="Pool2DOptions",
        options={"padding": 1, "stride_w": 2, "stride_h": 2, "filter_width": 2,
                 "filter_height": 2, "fused_activation_function": 0},
    )  # fmt: skip
    return model_to_bytes(builder.finish([y]))


@pytest.mark.parametrize("activations", ["int8", "int16"])
def test_the_simulation_averages_codes_as_litert_does(activations: str) -> None:
    """LiteRT's integer AVERAGE_POOL_2D rounds the mean of the raw codes with ties away from
    zero; a 2x2 window's means tie on a quarter of them."""
    from qtool.quantize.simulate import Simulator

    rng = np.random.default_rng(2)
    samples = rng.uniform(0, 1, (24, 8, 8, 4)).astype(np.float32)
    result = qtool.quantize_model(
        average_pool_model(), samples, calibration="minmax", activations=activations
    )
    feeds = [rng.uniform(0, 1, (8, 8, 8, 4)).astype(np.float32)]
    litert = run_litert_samples(result.model_bytes, feeds, reference=False)[0]
    simulated = Simulator(result.result.float_model, result.result.plans[0]).run(feeds)[0]
    np.testing.assert_array_equal(simulated.reshape(litert.shape), litert)


def test_analyze_looks_at_the_holdout_when_given_else_the_selection_fold() -> None:
    samples, holdout = cnn_samples("calib"), cnn_samples("holdout")
    alone = qtool.analyze_model(CNN, samples)
    assert alone["samples_from"] == "selection fold"
    held = qtool.analyze_model(CNN, samples, holdout=holdout)
    assert held["samples_from"] == "held-out data"
    (sub,) = held["subgraphs"]
    assert sub["output_samples"] == len(holdout) and sub["outputs_measured_in"] == LITERT
