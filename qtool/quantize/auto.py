"""`--calibration auto`: per model, the calibration method (and, unless bias correction is
forced on or off, whether to correct biases) whose plan scores best on samples it was not
fitted on.

Each candidate's plan is built from the statistics of the fitting fold only, run on the
selection fold (its int8 model in LiteRT, or simulated: `Planner.accuracy`), and scored by its
worst output's fitting SQNR, or first by the user's metric when one is given
(`PlanAccuracy.score`; the worst over subgraphs): a choice that helps one output and costs the
worst one loses. With a cross fold (`Collected.judging`) each candidate is also fitted without
it and judged on it, and scores the worse of its two folds: a method that clips what one fold's
samples need loses, where one fold of 16 samples can hide it (on other crops of the
calibration photographs, with min/max among the candidates, the worse of two folds picked
better than the selection fold alone or the two folds' mean: `bench/choice_rules.py`). All candidates read the same histograms: choosing costs runs of candidate models, not
calibration passes. The estimate fold never takes part. Without a selection fold (too few
samples, or a model the numpy engine cannot run) the fallback is used: `mse` ranges with bias
correction.

The candidates: two percentiles (99.99 keeps the tails a detector's rare strong responses need;
99.95 clips the long tails of the wide feature maps of segmentation models) and the
expected-error optimum (`mse`, which keeps a tensor's whole range where clipping would cost
more than it saves). min/max is not one: each candidate costs a run of its model, and on the 13
MediaPipe models' development crops min/max won 2 (hand_landmark_lite, where mse then scores
0.2 dB more, and hand_landmark_full, 0.3 dB less fitting SQNR) without moving the medians
against ONNX Runtime (`--calibration minmax` remains).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.collect import Collected
from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.quantize.planner import Planner, Recipe

AUTO = "auto"
CANDIDATES = (Method("percentile", 99.99), Method("mse"), Method("percentile", 99.95))
FALLBACK = Method("mse")


def _label(recipe: Recipe, both: bool) -> str:
    if not both:
        return str(recipe.method)
    return f"{recipe.method}, bias correction {'on' if recipe.bias_correction else 'off'}"


@dataclass(frozen=True)
class CandidateScore:
    """One candidate's score on the judging folds: its worst output's fitting SQNR (dB) and
    the user's metric (None without one), the worst over folds and subgraphs (over the
    selection fold alone for a candidate that could not win there, whose cross run was
    saved)."""

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
    folds = {s: c for s, c in collected.items() if c.judging}
    if not folds:
        return Recipe(FALLBACK, corrections[0]), {}
    both = len(corrections) > 1
    scores: dict[str, CandidateScore] = {}

    def rank(recipe: Recipe, every_fold: bool) -> tuple[float, float]:
        """The recipe's score over the selection folds, or over every judging fold (the worst
        over folds and subgraphs); its CandidateScore records the folds it was judged on."""
        found = [
            planners[s].accuracy(fit, recipe, judged)
            for s, c in folds.items()
            for fit, judged in (c.judging if every_fold else c.judging[:1])
        ]
        metrics = [a.metric for a in found if a.metric is not None]
        scores[_label(recipe, both)] = CandidateScore(
            min(a.worst_db for a in found), min(metrics) if metrics else None
        )
        return min(a.score() for a in found)

    best, best_rank = None, (-math.inf, -math.inf)

    def consider(recipe: Recipe) -> None:
        # A recipe whose selection-fold score is no better than the best's worst fold cannot win
        # (its worst over more folds is lower still): its cross-fold run is saved.
        nonlocal best, best_rank
        if rank(recipe, False) > best_rank:
            found = rank(recipe, True)
            if found > best_rank:
                best, best_rank = recipe, found

    # The methods (with the first correction choice), best on the selection fold first, then
    # the correction for the best.
    methods = [Recipe(m, corrections[0]) for m in CANDIDATES]
    selection_rank = {m: rank(m, False) for m in methods}
    for recipe in sorted(methods, key=selection_rank.__getitem__, reverse=True):
        consider(recipe)
    for correction in corrections[1:]:
        consider(best.with_changes(bias_correction=correction))
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
    """Start running every method candidate's integer model on a judging fold's inputs as soon
    as what its candidates are fitted on exists: LiteRT's children then compute while the
    other folds are still being calibrated (`choose_recipe` picks their outputs up)."""
    correction = _corrections(bias_correction)[0]
    for method in CANDIDATES:
        planner.start_measuring(fit, Recipe(method, correction), inputs)
