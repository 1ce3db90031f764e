"""`--calibration auto`: per model, the calibration method (and, unless bias correction is
forced on or off, whether to correct biases) whose plan scores best on samples it was not
fitted on.

Each candidate's plan is built from the statistics of the fitting fold only, simulated on the
evaluation fold, and scored by its worst output's SQNR (the worst over subgraphs). All
candidates read the same histograms: choosing costs simulations, not calibration passes.
Without an evaluation fold (too few samples, or a model the numpy engine cannot run) the
fallback is used: `mse` ranges with bias correction.
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
    """The best candidate recipe and each candidate's score (worst output SQNR in dB)."""
    corrections = (True, False) if bias_correction is None else (bias_correction,)
    candidates = [Recipe(m, c) for m in CANDIDATES for c in corrections]
    folds = {s: c for s, c in collected.items() if c.evaluation is not None}
    if not folds:
        return Recipe(FALLBACK, corrections[0]), {}
    scores: dict[str, float] = {}
    for recipe in candidates:
        scores[_label(recipe, len(corrections) > 1)] = min(
            worst(simulated_accuracy(model, planners[s].plan(c.fit, recipe), c.evaluation))
            for s, c in folds.items()
        )
    best = max(candidates, key=lambda r: scores[_label(r, len(corrections) > 1)])
    return best, scores
