"""`--calibration auto`: per model, the calibration method (and, unless bias correction is
forced on or off, whether to correct biases) whose plan scores best on samples it was not
fitted on.

Each candidate's plan is built from the statistics of the fitting fold only, run on the
evaluation fold (its int8 model in LiteRT, or simulated: `Planner.accuracy`), and scored by the
mean SQNR of its outputs (`evaluation.score`; the worst over subgraphs). All candidates read
the same histograms: choosing costs runs of candidate models, not calibration passes.
Without an evaluation fold (too few samples, or a model the numpy engine cannot run) the
fallback is used: `mse` ranges with bias correction.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from qtool.calibrate.collect import Collected
from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.quantize.evaluation import score
from qtool.quantize.planner import Planner, Recipe

AUTO = "auto"
CANDIDATES = (Method("minmax"), Method("percentile", 99.99), Method("mse"))
FALLBACK = Method("mse")


def _label(recipe: Recipe, both: bool) -> str:
    if not both:
        return str(recipe.method)
    return f"{recipe.method}, bias correction {'on' if recipe.bias_correction else 'off'}"


def choose_recipe(
    model: Model,
    collected: Mapping[int, Collected],
    planners: Mapping[int, Planner],
    bias_correction: bool | None,
) -> tuple[Recipe, dict[str, float]]:
    """The best candidate recipe and each candidate's score (mean output SQNR in dB)."""
    corrections = _corrections(bias_correction)
    folds = {s: c for s, c in collected.items() if c.evaluation is not None}
    if not folds:
        return Recipe(FALLBACK, corrections[0]), {}
    both = len(corrections) > 1
    scores: dict[str, float] = {}

    def scored(recipe: Recipe) -> float:
        scores[_label(recipe, both)] = min(
            score(planners[s].accuracy(c.fit, recipe, c.evaluation)) for s, c in folds.items()
        )
        return scores[_label(recipe, both)]

    # The method first (with the first correction choice), then the correction for it.
    best = max((Recipe(m, corrections[0]) for m in CANDIDATES), key=scored)
    for correction in corrections[1:]:
        other = best.with_changes(bias_correction=correction)
        if scored(other) > scores[_label(best, both)]:
            best = other
    return best, scores


def _corrections(bias_correction: bool | None) -> tuple[bool, ...]:
    """The bias-correction settings to try, the first one with every method."""
    return (True, False) if bias_correction is None else (bias_correction,)


def start_candidates(
    planner: Planner,
    fit: SubgraphStatistics,
    inputs: list[np.ndarray],
    bias_correction: bool | None,
) -> None:
    """Start running every method candidate's integer model on the evaluation inputs as soon
    as the fitting fold's statistics exist: LiteRT's children then compute while the
    evaluation fold is still being calibrated (`choose_recipe` picks their outputs up)."""
    correction = _corrections(bias_correction)[0]
    for method in CANDIDATES:
        planner.start_measuring(fit, Recipe(method, correction), inputs)
