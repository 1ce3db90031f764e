"""A target SQNR: the fewest, cheapest per-place remedies until every output reaches it.

The sensitivity analysis (`sensitivity.py`) splits each output's noise into the shares of the
places it comes from (an operator's weights, an activation tensor). Places are ranked by the
largest fraction they hold of a failing output's noise, and the top of the ranking gets
remedies, cheapest first:

1. integer remedies: rounding optimisation for weights (no size cost), int16 for an
   activation (its producer and readers run 16x8 kernels where they exist);
2. with `allow_float` only, after the integer remedies fall short: float for the places that
   still hold the most noise (measured again on the improved plan).

Each stage grows the remedied prefix of its ranking until the plan reaches the target on the
selection fold, measured with its integer model in LiteRT (simulated only where LiteRT cannot
run it), then drops the remedies it can do without (smallest shares first), so the result
changes few places. The ranking itself is simulated (on a few of the fold's samples: only the
simulation can quantize one place alone). When no remedy is left, the search fails and names
the places that would need float. Whether the target holds for the written model is decided
afterwards, on samples the search never saw (the estimate: quantizer.py).

The target is every output's fitting SQNR (`qtool.numerics.measures`: the plain SQNR, or about
the decision threshold for probabilities) and, when given, the user's metric (`--metric`,
`--target-metric`).

A target run stays small and fast (`Limits`): float places are ranked by their share of the
noise per byte they add in float (weights stored float instead of int8, and a fixed cost per op
for the conversions around it), a float stage never grows past the float model's bytes (the
search stops there, not reached, and says so), and every candidate is measured within a time
budget (past it, the search stops with the best candidate it measured, not reached).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from qtool.calibrate.collect import EvaluationSet
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.quantize.adaround import supported as rounding_supported
from qtool.quantize.diagnosis import layer_sqnr
from qtool.quantize.evaluation import PlanAccuracy
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.remedies import (
    ROUNDING,
    Remedy,
    after_int16,
    as_remedies,
    float_cost,
    float_remedy,
    integer_remedy,
    remedies_of,
)
from qtool.quantize.search_limits import Limits
from qtool.quantize.sensitivity import Analyzer, Place, Sensitivity, places

# The largest fold-to-other-photographs gap measured (4.9 dB) and 1 dB of estimate noise.
MARGIN_DB = 6.0
GROWTH = 1.5  # how much the remedied prefix grows after a miss
MAX_PRUNE_TRIES = 8
WORST_SLACK_DB = 0.25
ROUNDING_SAMPLES = 8  # calibration samples for rounding's second moments under a budget
ANALYSIS_SHARE = 0.4  # of a search's budget, at most, for measuring places one at a time
BUDGET = "time budget"  # why a search stopped short
SIZE = "float model's size"


@dataclass(frozen=True)
class Target:
    """What every output must reach: a fitting SQNR (dB) and/or a value of the user's metric
    (None: no such requirement)."""

    sqnr_db: float | None = None
    metric: float | None = None

    def met(self, accuracy: PlanAccuracy, margin_db: float = 0.0) -> bool:
        """Whether `accuracy` meets the target (the SQNR with `margin_db` to spare)."""
        if self.sqnr_db is not None and accuracy.worst_db < self.sqnr_db + margin_db:
            return False
        return self.metric is None or (
            accuracy.metric is not None and accuracy.metric >= self.metric
        )


class _Stopped(Exception):
    """The search ran out of its time budget or of bytes (`args[0]`: BUDGET or SIZE)."""


@dataclass
class SearchResult:
    """The outcome of a target search for one subgraph: the recipe chosen, whether it reaches
    the target on the selection fold, and the remedies it holds."""

    recipe: Recipe
    reached: bool
    output_sqnr: list[float]  # fitting SQNR of the final recipe on the selection fold
    remedies: list[Remedy] = field(default_factory=list)
    needs_float: list[Sensitivity] = field(default_factory=list)  # when not reached
    metric: float | None = None  # the user's metric on the selection fold
    stopped: str | None = None  # BUDGET or SIZE: why the search stopped short of the target
    candidates: int = 0  # recipes measured in LiteRT (or simulated where it cannot run them)
    seconds: float = 0.0
    budget: float | None = None  # the seconds it had (None: no limit)


def _noise(sqnr_db: Sequence[float]) -> np.ndarray:
    """Noise power relative to the signal, per output."""
    return np.array([10 ** (-v / 10) if np.isfinite(v) else 0.0 for v in sqnr_db])


def _ranked(
    found: list[Sensitivity],
    current: list[float],
    target_db: float | None,
    cost: Callable[[Sensitivity], float] | None = None,
) -> list[Sensitivity]:
    """Places by the largest fraction they hold of the noise of a failing output (every output
    when none fails the SQNR: the metric does), divided by `cost` when given."""
    failing = [o for o, v in enumerate(current) if target_db is not None and v < target_db]
    failing = failing or list(range(len(current)))
    totals = np.sum([_noise(s.output_sqnr) for s in found], axis=0) if found else None

    def weight(s: Sensitivity) -> float:
        shares = _noise(s.output_sqnr)
        return max(shares[o] / totals[o] if totals[o] else 0.0 for o in failing)

    kept = [s for s in found if weight(s) > 0]
    return sorted(kept, key=lambda s: weight(s) / (cost(s) if cost else 1.0), reverse=True)


class _Search:
    def __init__(
        self,
        planner: Planner,
        statistics,
        selection: EvaluationSet,
        target: Target,
        margin_db,
        limits: Limits | None = None,
    ) -> None:
        self.planner, self.statistics, self.selection = planner, statistics, selection
        self.model = planner.model
        self.target, self.margin_db = target, margin_db
        self.subgraph = planner.subgraph
        self.limits = limits or Limits()
        self.began = time.monotonic()
        self.candidates = 0
        self.seen: set[Recipe] = set()
        self.best: tuple[Recipe, PlanAccuracy] | None = None
        self.measured: list[Sensitivity] = []  # the places, measured alone
        # The fewest float, then int16 places that met the target with half the margin.
        self.cheapest: tuple[tuple[int, int], Recipe, PlanAccuracy] | None = None

    def evaluate(self, recipe: Recipe) -> PlanAccuracy:
        """The recipe's plan on the whole selection fold, its integer model run in LiteRT;
        _Stopped once the time budget is spent (the best candidate so far is kept)."""
        if time.monotonic() > self.limits.deadline:
            raise _Stopped(BUDGET)
        accuracy = self.planner.accuracy(self.statistics, recipe, self.selection)
        if recipe in self.seen:
            return accuracy  # measured before (the planner keeps it)
        self.seen.add(recipe)
        self.candidates += 1
        if self.best is None or accuracy.score() > self.best[1].score():
            self.best = (recipe, accuracy)
        cheap = (len(recipe.float_ops), len(recipe.int16_tensors))
        met = self.target.met(accuracy, self.margin_db / 2)
        if met and (self.cheapest is None or cheap < self.cheapest[0]):
            self.cheapest = (cheap, recipe, accuracy)
        if self.limits.progress is not None:
            left = self.limits.deadline - time.monotonic()
            self.limits.progress(
                f"target search: {self.candidates} candidates, this one "
                f"{len(recipe.int16_tensors)} int16 and {len(recipe.float_ops)} float places, "
                f"worst output {accuracy.worst_db:.1f} dB"
                + ("" if math.isinf(left) else f", {max(left, 0):.0f} s of the budget left")
            )
        return accuracy

    def measure_places(self, analyzer: Analyzer) -> list[Sensitivity]:
        """Every place of the analyzer's plan measured alone (simulated). With a budget, the
        places whose own tensor is noisiest along the simulated plan come first, and those the
        budget's ANALYSIS_SHARE leaves unmeasured keep that tensor's SQNR as their estimate
        (on palm_detection_lite, measuring every place alone took over 79 s)."""
        every = places(self.model, analyzer.plan)
        now, deadline = time.monotonic(), self.limits.deadline
        found: list[Sensitivity] = []
        if math.isinf(deadline):
            found = [analyzer.measure(place) for place in every]
        else:
            along = layer_sqnr(self.model, analyzer.plan, analyzer.inputs)
            outputs = len(self.subgraph.outputs)

            def own_db(place: Place) -> float:
                if place.kind == "activation":
                    return along.get(place.tensor, math.inf)
                produced = self.subgraph.operators[place.op_index].outputs
                return min((along.get(t, math.inf) for t in produced), default=math.inf)

            every.sort(key=own_db)
            stop_at = now + ANALYSIS_SHARE * (deadline - now)
            for place in every:
                if time.monotonic() < stop_at:
                    found.append(analyzer.measure(place))
                else:
                    name = self.subgraph.tensors[place.tensor].name
                    op = place.op_index
                    op_type = (
                        self.model.op_type(self.subgraph.operators[op]) if op >= 0 else "input"
                    )
                    found.append(Sensitivity(place, name, op_type, [own_db(place)] * outputs))
        self.measured = found
        return found

    def analyzer(self, recipe: Recipe) -> Analyzer:
        """The simulation of the recipe's plan, to measure places one at a time."""
        plan = self.planner.plan(self.statistics, recipe)
        return Analyzer(self.model, plan, self.selection.inputs)

    def reached(self, accuracy: PlanAccuracy) -> bool:
        return self.target.met(accuracy, self.margin_db)

    def aim_db(self) -> float | None:
        """The fitting SQNR the search aims at: the target's with the margin."""
        return None if self.target.sqnr_db is None else self.target.sqnr_db + self.margin_db

    def stage(
        self, base: Recipe, ranking: list[Sensitivity], remedy, whole_first: bool = False
    ) -> tuple:
        """Grow the remedied prefix of `ranking` until the target is reached; then prune.
        With `whole_first`, the whole ranking is measured first: when even it misses, no
        prefix reaches the target and the stage ends there (one candidate, not a dozen)."""
        options = []
        for sensitivity in ranking:
            found = remedy(sensitivity.place)
            if found is not None:
                options.append((sensitivity, found[0]))
        if whole_first and options:
            recipe = self._apply(base, options, remedy)
            sqnr = self.evaluate(recipe)
            if not self.reached(sqnr):
                return recipe, options, sqnr
        missed, count, sqnr, recipe = 0, 0, None, base
        while count < len(options):
            missed, count = count, min(len(options), max(count + 1, int(count * GROWTH)))
            recipe = self._apply(base, options[:count], remedy)
            if not self.limits.fits(recipe):
                raise _Stopped(SIZE)  # a longer prefix only adds float places: no smaller one
            sqnr = self.evaluate(recipe)
            if self.reached(sqnr):
                count, sqnr = self._shortest(base, options, remedy, missed, count, sqnr)
                return self._prune(base, options[:count], remedy, sqnr)
        return recipe, options[:count], sqnr

    def _shortest(self, base: Recipe, options: list, remedy, missed: int, count: int, sqnr):
        """Bisect between a prefix that misses and one that reaches the target."""
        while count - missed > 1:
            middle = (missed + count) // 2
            trial = self.evaluate(self._apply(base, options[:middle], remedy))
            if self.reached(trial):
                count, sqnr = middle, trial
            else:
                missed = middle
        return count, sqnr

    def _apply(self, base: Recipe, chosen, remedy) -> Recipe:
        recipe = base
        for sensitivity, _ in chosen:
            recipe = remedy(sensitivity.place, recipe)[1]
        return recipe

    def _prune(self, base: Recipe, chosen: list, remedy, sqnr) -> tuple:
        """Drop remedies, smallest shares first, while the target still holds."""
        kept = list(chosen)
        for candidate in list(reversed(chosen))[:MAX_PRUNE_TRIES]:
            trial = [c for c in kept if c is not candidate]
            trial_sqnr = self.evaluate(self._apply(base, trial, remedy))
            if self.reached(trial_sqnr):
                kept, sqnr = trial, trial_sqnr
        return self._apply(base, kept, remedy), kept, sqnr


def search(
    planner: Planner,
    statistics: SubgraphStatistics,
    start: Recipe,
    selection: EvaluationSet,
    target: Target,
    allow_float: bool,
    margin_db: float = MARGIN_DB,
    limits: Limits | None = None,
) -> SearchResult:
    """Remedies from `start` until every output's fitting SQNR on the selection fold is at least
    the target plus `margin_db` (a few dozen samples estimate SQNR to a dB or two, and the
    target is meant for the samples the model will see), and the user's metric at least its
    target; within `limits` (time, bytes), else not reached with the best candidate measured."""
    run = _Search(planner, statistics, selection, target, margin_db, limits)
    try:
        result = _search(run, start, target, allow_float)
    except _Stopped as stop:
        if run.cheapest is not None:
            # Short of the margin only: the target holds with half of it on the selection fold
            # (face_detection_short_range with none: 30.7 dB on the estimate's samples, 29.5 on
            # held-out photographs), and the samples no choice saw decide (quantizer.py).
            _, recipe, accuracy = run.cheapest
            result = _result(recipe, True, accuracy, remedies_of(recipe, start, run.measured))
        else:
            best = run.best or (start, run.planner.accuracy(statistics, start, selection))
            result = _result(best[0], False, best[1], stopped=stop.args[0])
    result.candidates, result.seconds = run.candidates, time.monotonic() - run.began
    result.budget = run.limits.budget
    return result


def _search(run: _Search, start: Recipe, target: Target, allow_float: bool) -> SearchResult:
    planner, model, subgraph = run.planner, run.model, run.subgraph
    current = run.evaluate(start)
    if run.reached(current):
        return _result(start, True, current)
    analyzer = run.analyzer(start)
    measured = run.measure_places(analyzer)
    ranking = _ranked(measured, current.fitting_db, run.aim_db())
    # One pass over the calibration data for every layer the search may round; under a time
    # budget, over its first ROUNDING_SAMPLES samples (thousands of input rows per layer: on
    # palm_detection_lite all 48 samples took 49 s of a 60 s budget).
    planner.prepare_rounding(
        (s.place.op_index for s in ranking if s.place.kind == "weights"),
        None if math.isinf(run.limits.deadline) else ROUNDING_SAMPLES,
    )

    def integer(place: Place, recipe: Recipe = start):
        return integer_remedy(place, recipe, model, subgraph)

    recipe, chosen, sqnr = run.stage(start, ranking, integer, whole_first=True)
    remedies = as_remedies(chosen)
    if sqnr is not None and run.reached(sqnr):
        return _result(recipe, True, sqnr, remedies)
    # What still holds the noise once every integer remedy is in place: the first analysis
    # with each int16 activation's noise 48 dB lower (a grid 256 times finer), not a second
    # analysis (it took half of a search's time, measured on face_detection_short_range).
    current = run.evaluate(recipe)
    measured_now = [after_int16(s, recipe) for s in measured]
    remaining = _ranked(measured_now, current.fitting_db, run.aim_db())
    if not allow_float:
        met = target.met(current)  # short of the margin only: the target itself holds
        return _result(recipe, met, current, remedies, [] if met else remaining[:10])

    def floating(place: Place, base: Recipe = recipe):
        return float_remedy(place, base, subgraph)

    # The most noise per byte first: a large layer goes float only when no small ones do.
    by_cost = _ranked(
        measured_now,
        current.fitting_db,
        run.aim_db(),
        lambda s: float_cost(s.place, model, subgraph),
    )
    final, floated, sqnr = run.stage(recipe, by_cost, floating)
    if sqnr is not None and run.reached(sqnr):
        # With the float places in, fewer integer remedies may do: the shortest prefix of them.
        floats_only = start.with_changes(float_ops=final.float_ops)
        count, sqnr = run._shortest(floats_only, chosen, integer, 0, len(chosen), sqnr)
        chosen = chosen[:count]
        final = run._apply(floats_only, chosen, integer)
    last = sqnr or current
    reached = target.met(last)
    return _result(
        final,
        reached,
        last,
        as_remedies(chosen) + as_remedies(floated),
        [] if reached else remaining[:10],
    )


def _result(
    recipe: Recipe,
    reached: bool,
    accuracy: PlanAccuracy,
    remedies: list[Remedy] | None = None,
    needs_float: list[Sensitivity] | None = None,
    stopped: str | None = None,
) -> SearchResult:
    return SearchResult(
        recipe,
        reached,
        accuracy.fitting_db,
        remedies or [],
        needs_float or [],
        accuracy.metric,
        stopped,
    )


def weight_limited_rounding(
    planner: Planner,
    statistics: SubgraphStatistics,
    start: Recipe,
    selection: EvaluationSet,
    within_db: float = 10.0,
) -> tuple[Recipe, list[Remedy]]:
    """Rounding optimisation for the weight-limited layers: those whose weights alone bring
    an output within `within_db` of the whole plan's SQNR (simulated). Kept only if it helps on
    the selection fold, measured in LiteRT (outputs gain on average, the worst loses at most
    `WORST_SLACK_DB`, the user's metric does not drop), else the layers are tried by halves."""
    model = planner.model
    run = _Search(planner, statistics, selection, Target(), 0.0)
    analyzer = run.analyzer(start)
    simulated = analyzer.full()
    candidates = []
    for place in places(model, analyzer.plan):
        if place.kind != "weights":
            continue
        if not rounding_supported(model, run.subgraph, run.subgraph.operators[place.op_index]):
            continue
        found = analyzer.measure(place)
        if any(w < c + within_db for w, c in zip(found.output_sqnr, simulated, strict=True)):
            candidates.append(found)
    candidates.sort(key=lambda s: s.worst_db)
    planner.prepare_rounding(s.place.op_index for s in candidates)
    current = run.evaluate(start)
    while candidates:
        ops = frozenset(s.place.op_index for s in candidates)
        recipe = start.with_changes(rounding_ops=start.rounding_ops | ops)
        trial = run.evaluate(recipe)
        gains = np.subtract(_finite(trial.fitting_db), _finite(current.fitting_db))
        metric_kept = current.metric is None or trial.metric >= current.metric
        if gains.mean() > 0 and trial.worst_db >= current.worst_db - WORST_SLACK_DB and metric_kept:
            return recipe, as_remedies([(s, ROUNDING) for s in candidates])
        candidates = candidates[: len(candidates) // 2]
    return start, []


def _finite(sqnr: Sequence[float]) -> np.ndarray:
    return np.minimum(np.asarray(sqnr, np.float64), 200.0)  # an exact output counts as 200 dB
