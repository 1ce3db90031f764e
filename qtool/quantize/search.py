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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from qtool.calibrate.collect import EvaluationSet
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.quantize.adaround import supported as rounding_supported
from qtool.quantize.evaluation import PlanAccuracy
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.sensitivity import Analyzer, Place, Sensitivity, places
from qtool.spec import Mode

ROUNDING, INT16, FLOAT = "rounding", Mode.INT16, Mode.FLOAT  # the remedies, cheapest first
# The largest fold-to-other-photographs gap measured (4.9 dB) and 1 dB of estimate noise.
MARGIN_DB = 6.0
GROWTH = 1.5  # how much the remedied prefix grows after a miss
MAX_PRUNE_TRIES = 8
WORST_SLACK_DB = 0.25


@dataclass(frozen=True)
class Remedy:
    """A remedy the target search applied to one place (rounding, int16 or float)."""

    kind: str  # ROUNDING, INT16 or FLOAT
    place: Place
    name: str  # the tensor's name
    op_type: str
    share_db: float  # the place's share of the failing output's noise, in dB of the signal


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


def _noise(sqnr_db: Sequence[float]) -> np.ndarray:
    """Noise power relative to the signal, per output."""
    return np.array([10 ** (-v / 10) if np.isfinite(v) else 0.0 for v in sqnr_db])


def _ranked(
    found: list[Sensitivity], current: list[float], target_db: float | None
) -> list[Sensitivity]:
    """Places by the largest fraction they hold of the noise of a failing output (every output
    when none fails the SQNR: the metric does)."""
    failing = [o for o, v in enumerate(current) if target_db is not None and v < target_db]
    failing = failing or list(range(len(current)))
    totals = np.sum([_noise(s.output_sqnr) for s in found], axis=0) if found else None

    def weight(s: Sensitivity) -> float:
        shares = _noise(s.output_sqnr)
        return max(shares[o] / totals[o] if totals[o] else 0.0 for o in failing)

    return sorted((s for s in found if weight(s) > 0), key=weight, reverse=True)


def _integer_remedy(place: Place, recipe: Recipe, model: Model, subgraph) -> tuple | None:
    if place.kind == "weights":
        op = subgraph.operators[place.op_index]
        if rounding_supported(model, subgraph, op):
            return ROUNDING, recipe.with_changes(
                rounding_ops=recipe.rounding_ops | {place.op_index}
            )
        return None
    return INT16, recipe.with_changes(int16_tensors=recipe.int16_tensors | {place.tensor})


def _float_remedy(place: Place, recipe: Recipe, subgraph) -> tuple:
    ops = {place.op_index} if place.op_index >= 0 else set()
    if place.kind == "activation":
        ops |= {i for i, op in enumerate(subgraph.operators) if place.tensor in op.inputs}
    return FLOAT, recipe.with_changes(float_ops=recipe.float_ops | ops)


class _Search:
    def __init__(
        self, planner: Planner, statistics, selection: EvaluationSet, target: Target, margin_db
    ) -> None:
        self.planner, self.statistics, self.selection = planner, statistics, selection
        self.model = planner.model
        self.target, self.margin_db = target, margin_db
        self.subgraph = planner.subgraph

    def evaluate(self, recipe: Recipe) -> PlanAccuracy:
        """The recipe's plan on the whole selection fold, its integer model run in LiteRT."""
        return self.planner.accuracy(self.statistics, recipe, self.selection)

    def analyzer(self, recipe: Recipe) -> Analyzer:
        """The simulation of the recipe's plan, to measure places one at a time."""
        plan = self.planner.plan(self.statistics, recipe)
        return Analyzer(self.model, plan, self.selection.inputs)

    def reached(self, accuracy: PlanAccuracy) -> bool:
        return self.target.met(accuracy, self.margin_db)

    def aim_db(self) -> float | None:
        """The fitting SQNR the search aims at: the target's with the margin."""
        return None if self.target.sqnr_db is None else self.target.sqnr_db + self.margin_db

    def stage(self, base: Recipe, ranking: list[Sensitivity], remedy) -> tuple:
        """Grow the remedied prefix of `ranking` until the target is reached; then prune."""
        options = []
        for sensitivity in ranking:
            found = remedy(sensitivity.place)
            if found is not None:
                options.append((sensitivity, found[0]))
        missed, count, sqnr, recipe = 0, 0, None, base
        while count < len(options):
            missed, count = count, min(len(options), max(count + 1, int(count * GROWTH)))
            recipe = self._apply(base, options[:count], remedy)
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
) -> SearchResult:
    """Remedies from `start` until every output's fitting SQNR on the selection fold is at least
    the target plus `margin_db` (a few dozen samples estimate SQNR to a dB or two, and the
    target is meant for the samples the model will see), and the user's metric at least its
    target."""
    model = planner.model
    run = _Search(planner, statistics, selection, target, margin_db)
    subgraph = run.subgraph
    current = run.evaluate(start)
    if run.reached(current):
        return _result(start, True, current)
    analyzer = run.analyzer(start)
    measured = [analyzer.measure(p) for p in places(model, analyzer.plan)]
    ranking = _ranked(measured, current.fitting_db, run.aim_db())
    planner.prepare_rounding(
        s.place.op_index for s in ranking if s.place.kind == "weights"
    )  # one pass over the calibration data for every layer the search may round

    def integer(place: Place, recipe: Recipe = start):
        return _integer_remedy(place, recipe, model, subgraph)

    recipe, chosen, sqnr = run.stage(start, ranking, integer)
    remedies = _remedies(chosen)
    if sqnr is not None and run.reached(sqnr):
        return _result(recipe, True, sqnr, remedies)
    # What still holds the noise once every integer remedy is in place.
    current, analyzer = run.evaluate(recipe), run.analyzer(recipe)
    remaining = _ranked(
        [analyzer.measure(p) for p in places(model, analyzer.plan)],
        current.fitting_db,
        run.aim_db(),
    )
    if not allow_float:
        met = target.met(current)  # short of the margin only: the target itself holds
        return _result(recipe, met, current, remedies, [] if met else remaining[:10])

    def floating(place: Place, base: Recipe = recipe):
        return _float_remedy(place, base, subgraph)

    final, floated, sqnr = run.stage(recipe, remaining, floating)
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
        _remedies(chosen) + _remedies(floated),
        [] if reached else remaining[:10],
    )


def _result(
    recipe: Recipe,
    reached: bool,
    accuracy: PlanAccuracy,
    remedies: list[Remedy] | None = None,
    needs_float: list[Sensitivity] | None = None,
) -> SearchResult:
    return SearchResult(
        recipe, reached, accuracy.fitting_db, remedies or [], needs_float or [], accuracy.metric
    )


def _remedies(chosen: list) -> list[Remedy]:
    return [
        Remedy(kind, s.place, s.name, s.op_type, float(min(s.output_sqnr, default=np.inf)))
        for s, kind in chosen
    ]


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
            return recipe, _remedies([(s, ROUNDING) for s in candidates])
        candidates = candidates[: len(candidates) // 2]
    return start, []


def _finite(sqnr: Sequence[float]) -> np.ndarray:
    return np.minimum(np.asarray(sqnr, np.float64), 200.0)  # an exact output counts as 200 dB
