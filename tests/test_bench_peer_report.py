"""The ONNX Runtime peer's verdicts (bench/peer_report.py): ORT's best is chosen per model and per
figure, each output is compared by the measure that fits its kind, and the medians are those of
the per-model figures. Records are made by qtool's own meter from arrays, as the bench makes
them from the models' outputs (the bench itself needs TensorFlow and ONNX Runtime: `make peer`)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.peer_report import MethodResult, ModelResult, compare_measure, summary
from qtool.numerics.measures import LOGITS, PROBABILITY, REGRESSION
from qtool.quantize.accuracy import LITERT, OutputsMeter

RNG = np.random.default_rng(0)
# Landmarks, and a presence probability near 0 (its plain SQNR is low, far from its threshold).
REFERENCE = [RNG.normal(size=(32, 8)), RNG.uniform(0.0, 0.02, size=(32, 1))]


def method(regression_noise: float, probability_noise: float) -> MethodResult:
    """Records of a model whose regression and probability outputs carry this much noise."""
    noise = [regression_noise, probability_noise]
    got = [r + RNG.normal(scale=n, size=r.shape) for r, n in zip(REFERENCE, noise, strict=True)]
    meter = OutputsMeter(["landmarks", "presence"], [REGRESSION, PROBABILITY], [[8], [1]])
    meter.add(REFERENCE, got)
    return MethodResult([record.to_dict() for record in meter.results(LITERT)])


def test_best_is_chosen_per_figure_and_the_measures_compare_with_the_best_by_fitting() -> None:
    # One ORT setting keeps the landmarks better: the worst fitting SQNR (the presence is far
    # from its threshold either way). The other keeps the presence's plain SQNR better, the
    # worst output by plain SQNR.
    result = ModelResult(
        "hand_landmark_lite",
        qtool=method(0.02, 0.02),
        methods={"landmarks": method(0.01, 0.01), "presence": method(0.05, 0.001)},
    )
    assert (result.best_by("worst"), result.best_by("worst_fitting")) == ("presence", "landmarks")
    row = summary([result])["models"][0]
    for figure in ("worst", "worst_fitting"):
        best = result.methods[row[figure]["ort_method"]]
        assert row[figure]["ort"] == max(getattr(m, figure) for m in result.methods.values())
        assert row[figure]["difference"] == pytest.approx(
            getattr(result.qtool, figure) - getattr(best, figure)
        )
    # Against "landmarks": qtool's landmarks have twice the error, its decisions all agree.
    assert row["measures"] == {"wins": 0, "ties": 1, "losses": 1}


def test_a_model_result_survives_json() -> None:
    result = ModelResult(
        "iris_landmark", qtool=method(0.01, 0.01), methods={"MinMax": method(0.1, 0.1)}
    )
    again = ModelResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result
    assert again.to_json()["best"] == "MinMax"


@pytest.mark.parametrize(
    ("kind", "ours", "theirs", "verdict"),
    [
        (REGRESSION, {"relative_error": 0.10}, {"relative_error": 0.20}, 1),
        (REGRESSION, {"relative_error": 0.100}, {"relative_error": 0.1005}, 0),
        (LOGITS, {"decision_agreement": 0.993}, {"decision_agreement": 0.994}, -1),
        (PROBABILITY, {"decision_agreement": 1.0}, {"decision_agreement": 1.0}, 0),
        (REGRESSION, {"relative_error": 0.5}, {"relative_error": None}, 1),
    ],
)
def test_main_measure_verdicts(kind: str, ours: dict, theirs: dict, verdict: int) -> None:
    # 99.3% against 99.4% agreement is 0.7% against 0.6% of decisions flipped: a loss, not a tie.
    assert compare_measure(kind, {"measures": ours}, {"measures": theirs}) == verdict


def test_medians_are_over_the_per_model_figures() -> None:
    results = [
        ModelResult(name, qtool=method(q, 0.01), methods={"MinMax": method(o, 0.01)})
        for name, q, o in (
            ("face_landmark", 0.01, 0.02),
            ("hand_recrop", 0.02, 0.01),
            ("iris_landmark", 0.01, 0.04),
        )
    ]
    found = summary(results)
    differences = [row["worst"]["difference"] for row in found["models"]]
    assert found["all"]["count"] == 3
    assert found["all"]["worst"]["difference"] == pytest.approx(np.median(differences))
    assert "development" in found and found["development"]["count"] == 1  # iris_landmark
