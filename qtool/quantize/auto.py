"""`--calibration auto`: per model, the calibration method (and, unless bias correction is
forced on or off, whether to correct biases) whose plan scores best on samples it was not
fitted on.

Each candidate's plan is built from the statistics of the fitting fold only, run on the
selection fold (its int8 model in LiteRT, or simulated: `Planner.accuracy`), and scored by its
worst output's fitting SQNR, or first by the user's metric when one is given
(`PlanAccuracy.score`; the worst over subgraphs): a choice that helps one output and costs the
worst one loses. All candidates read the same histograms: choosing costs runs of candidate
models, not calibration passes. The estimate fold never takes part. Without a selection fold
(too few samples, or a model the numpy engine cannot run) the fallback is used: `mse` ranges
with bias correction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.collect import Collected
from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.quantize.planner import Planner, Recipe

AUTO = "auto"
CANDIDATES = (Method("minmax"), Method("percentile", 99.99), Method("mse"))
FALLBACK = Method("mse")


def _label(recipe: Recipe, both: bool) -> str:
    if not both:
        return str(recipe.method)
    return f"{recipe.method}, bias correction {'on' if recipe.bias_correction else 'off'}"


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's score on the selection fold: its worst output's fitting SQNR (dB) and
    the user's metric (None without one), the worst over subgraphs."""

    worst_db: float
    metric: float | None


def choose_recipe(
    model: Model,
    collected: Mapping[int, Collected],
    planners: Mapping[int, Planner],
    bias_correction: bool | None,
) -> tuple[Recipe, dict[str, CandidateScore]]:
    """The best candidate recipe and each candidate's score."""
    corrections = _corrections(bias_correction)
    folds = {s: c for s, c in collected.items() if c.selection is not None}
    if not folds:
        return Recipe(FALLBACK, corrections[0]), {}
    both = len(corrections) > 1
    scores: dict[str, CandidateScore] = {}
    ranks: dict[str, tuple[float, float]] = {}

    def scored(recipe: Recipe) -> tuple[float, float]:
        found = [planners[s].accuracy(c.fit, recipe, c.selection) for s, c in folds.items()]
        label = _label(recipe, both)
        metrics = [a.metric for a in found if a.metric is not None]
        scores[label] = CandidateScore(
            min(a.worst_db for a in found), min(metrics) if metrics else None
        )
        ranks[label] = min(a.score() for a in found)
        return ranks[label]

    # The method first (with the first correction choice), then the correction for it.
    best = max((Recipe(m, corrections[0]) for m in CANDIDATES), key=scored)
    for correction in corrections[1:]:
        other = best.with_changes(bias_correction=correction)
        if scored(other) > ranks[_label(best, both)]:
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
    """Start running every method candidate's integer model on the selection fold's inputs as
    soon as the fitting fold's statistics exist: LiteRT's children then compute while the
    other folds are still being calibrated (`choose_recipe` picks their outputs up)."""
    correction = _corrections(bias_correction)[0]
    for method in CANDIDATES:
        planner.start_measuring(fit, Recipe(method, correction), inputs)
