"""`--calibration auto`: per model, the calibration method whose plan scores best on samples it
was not fitted on.

Each candidate's plan is built from the statistics of the fitting fold only, simulated on the
evaluation fold, and scored by its worst output's SQNR (summed over subgraphs by their worst).
All candidates read the same histograms: choosing costs simulations, not calibration passes.
Without an evaluation fold (too few samples, or a model the numpy engine cannot run) the
fallback method is used.
"""

from __future__ import annotations

from collections.abc import Mapping

from qtool.calibrate.collect import Collected
from qtool.calibrate.ranges import Method
from qtool.model import Model
from qtool.quantize.build import Planner, Recipe
from qtool.quantize.evaluation import simulated_accuracy, worst

AUTO = "auto"
CANDIDATES = (Method("minmax"), Method("percentile", 99.99), Method("mse"))
FALLBACK = Method("mse")


def choose_method(
    model: Model,
    collected: Mapping[int, Collected],
    planners: Mapping[int, Planner],
    start: Recipe,
) -> tuple[Method, dict[str, float]]:
    """The best candidate and each candidate's score (worst output SQNR in dB)."""
    folds = {s: c for s, c in collected.items() if c.evaluation is not None}
    if not folds:
        return FALLBACK, {}
    scores: dict[str, float] = {}
    for method in CANDIDATES:
        recipe = start.with_changes(method=method)
        scores[str(method)] = min(
            worst(simulated_accuracy(model, planners[s].plan(c.fit, recipe), c.evaluation))
            for s, c in folds.items()
        )
    best = max(CANDIDATES, key=lambda m: scores[str(m)])
    return best, scores
