"""`qtool analyze`: where a model's quantization error comes from, and what would help.

On the selection fold (or held-out samples), the plan fitted on the other calibration samples:

- each output's SQNR with everything quantized, its integer model run in LiteRT (simulated
  where LiteRT cannot run it); everything below is simulated, on a few of those samples (only
  the simulation can quantize one place alone):
- per place (an operator's weights, an activation tensor): each output's SQNR when only that
  place is quantized (sensitivity.py);
- per quantized tensor: its own SQNR along the simulated integer model against the float one
  (where error builds up layer after layer);
- for the most damaging places, the SQNR each remedy gives that place alone: clipping the range
  (another calibration method), bias correction on/off, rounding optimisation, int16; float
  makes it exact. The recommended remedy is the cheapest that brings the place within
  `GOOD_ENOUGH_DB` of its best.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from qtool.calibrate.collect import HELD_OUT, Collected, EvaluationSet
from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.errors import UsageError
from qtool.model import Model
from qtool.numerics import SqnrAccumulator
from qtool.quantize.adaround import supported as rounding_supported
from qtool.quantize.plan import Plan
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.sensitivity import Analyzer, Place, Sensitivity, places
from qtool.quantize.simulate import Simulator
from qtool.runtime import Engine
from qtool.runtime.engine import join_chunks

REMEDIED = 10  # the most damaging places get their remedies evaluated
GOOD_ENOUGH_DB = 1.0
MATTERS_DB = 10.0  # places whose noise alone is this far below the model's do not matter
LAYER_CHUNK = 4  # samples per pass when measuring every layer (their activations are held)
CLIP_METHODS = (Method("mse"), Method("percentile", 99.99), Method("percentile", 99.9))


@dataclass
class RemedyEffect:
    """What one remedy does for one place: each output's SQNR (dB) with only that place
    quantized, so remedied."""

    remedy: str  # "clip (mse)", "bias correction off", "rounding", "int16", "float"
    output_sqnr: list[float]  # each output's SQNR with only the place quantized, so remedied

    @property
    def worst_db(self) -> float:
        """The lowest output SQNR (dB); inf when there are no outputs."""
        return min(self.output_sqnr, default=float("inf"))


@dataclass
class PlaceReport:
    """One place (an operator's weights or an activation) in an analysis: its sensitivity, and
    for the most damaging places the remedies tried and the one recommended (None when the place
    does not matter or was not remedied)."""

    sensitivity: Sensitivity
    layer_sqnr_db: float | None  # the tensor's own SQNR along the simulated model
    op_index: int | None = None  # the operator in the input model (None: a model input)
    remedies: list[RemedyEffect] = field(default_factory=list)
    recommended: str | None = None


@dataclass
class SubgraphDiagnosis:
    """The analysis of one subgraph's plan on held-out samples (SQNR values in dB).

    Attributes:
        outputs: the names of the subgraph's outputs, in the order of `output_sqnr`.
        samples: the number of held-out samples the places were measured on.
    """

    subgraph: int
    outputs: list[str]
    output_sqnr: list[float]  # everything quantized
    places: list[PlaceReport]  # most damaging first
    layer_sqnr: dict[str, float]  # every quantized activation, along the simulated model
    samples: int
    plan: Plan  # the plan analysed
    statistics: SubgraphStatistics  # what the plan was fitted on (its ranges' histograms)
    measured_in: str = ""  # how output_sqnr was measured: LiteRT or simulation
    output_samples: int = 0  # the samples output_sqnr was measured on
    # Simulated on the places' samples: every weight quantized and no activation (what int16
    # activations cannot remove), and every activation and no weight.
    weights_alone: list[float] = field(default_factory=list)
    activations_alone: list[float] = field(default_factory=list)


@dataclass
class Diagnosis:
    """What `qtool analyze` reports: the calibration method of the plan analysed, where the
    held-out samples came from (`source`), and each calibrated subgraph's analysis."""

    method: str
    source: str
    subgraphs: list[SubgraphDiagnosis]


def _observed(run, feeds: Sequence[np.ndarray], wanted: set[int]) -> dict[int, np.ndarray]:
    """The `wanted` tensors of one run of `run(feeds, observers=...)`, whole."""
    found: dict[int, list[np.ndarray]] = {}

    def keep(t: int, value: np.ndarray) -> None:
        if t in wanted:
            found.setdefault(t, []).append(np.array(value))

    run(feeds, observers=[keep])
    return {t: join_chunks(parts) for t, parts in found.items()}


def layer_sqnr(model: Model, plan: Plan, inputs: Sequence[np.ndarray]) -> dict[int, float]:
    """Each fake-quantized activation's SQNR against the float tensor along the simulated model,
    in the order it computes them (graph order). The samples go through both models
    `LAYER_CHUNK` at a time, so only that many samples' activations are ever held."""
    wanted = {slot[0] for slot in plan.writes.values()}
    reference = Engine(model, plan.subgraph_index)
    simulated = Simulator(model, plan)
    sums: dict[int, SqnrAccumulator] = {}
    for start in range(0, int(inputs[0].shape[0]), LAYER_CHUNK):
        feeds = [np.asarray(x)[start : start + LAYER_CHUNK] for x in inputs]
        expected = _observed(reference.run, feeds, wanted)
        for t, value in _observed(simulated.run, feeds, wanted).items():
            if t in expected:
                sums.setdefault(t, SqnrAccumulator()).add(expected[t], value)
    return {t: total.db for t, total in sums.items()}


class _Remedies:
    """The SQNR of one place alone under each applicable remedy."""

    def __init__(self, planner: Planner, fit, recipe: Recipe, inputs) -> None:
        self.planner, self.fit, self.recipe, self.inputs = planner, fit, recipe, inputs
        self.analyzers: dict[Recipe, Analyzer] = {}

    def _measure(self, recipe: Recipe, place: Place) -> list[float] | None:
        if recipe not in self.analyzers:
            self.analyzers[recipe] = Analyzer(
                self.planner.model, self.planner.plan(self.fit, recipe), self.inputs
            )
        analyzer = self.analyzers[recipe]
        same = [p for p in places(analyzer.model, analyzer.plan) if _same(p, place)]
        return analyzer.measure(same[0]).output_sqnr if same else None

    def effects(self, place: Place) -> list[RemedyEffect]:
        options: list[tuple[str, Recipe]] = []
        model, subgraph = self.planner.model, self.planner.subgraph
        if place.kind == "activation":
            options += [
                (f"clip ({method})", self.recipe.with_changes(method=method))
                for method in CLIP_METHODS
                if method != self.recipe.method
            ]
            options.append(
                ("int16", self.recipe.with_changes(int16_tensors=frozenset({place.tensor})))
            )
        else:
            flipped = not self.recipe.bias_correction
            options.append(
                (
                    f"bias correction {'on' if flipped else 'off'}",
                    self.recipe.with_changes(bias_correction=flipped),
                )
            )
            if rounding_supported(model, subgraph, subgraph.operators[place.op_index]):
                options.append(
                    ("rounding", self.recipe.with_changes(rounding_ops=frozenset({place.op_index})))
                )
        effects = []
        for name, recipe in options:
            measured = self._measure(recipe, place)
            if measured is not None:
                effects.append(RemedyEffect(name, measured))
        effects.append(
            RemedyEffect("float", [float("inf")] * len(self.analyzers[self.recipe].float.outputs))
        )
        return effects


def _same(a: Place, b: Place) -> bool:
    return (a.kind, a.op_index, a.tensor) == (b.kind, b.op_index, b.tensor)


def _recommend(current: float, model_db: float, effects: list[RemedyEffect]) -> str | None:
    """For a place that matters (alone within MATTERS_DB of the whole model's SQNR): the first
    (cheapest) remedy within GOOD_ENOUGH_DB of the best integer one, or float when none helps."""
    if current >= model_db + MATTERS_DB:
        return None
    finite = [e for e in effects if np.isfinite(e.worst_db)]
    best = max((e.worst_db for e in finite), default=current)
    if best <= current + GOOD_ENOUGH_DB:
        return "float"
    return next(e.remedy for e in finite if e.worst_db >= best - GOOD_ENOUGH_DB)


def diagnose_calibrated(calibrated, remedied: int = REMEDIED) -> Diagnosis:
    """Analyse the plan a calibrated model (`quantizer.Calibrated`) gets without a target."""
    subgraphs = []
    for s, found in calibrated.collected.items():
        if found.selection is None:
            raise UsageError(
                "the analysis needs held-out samples: give more calibration samples or a "
                "held-out dataset"
            )
        planner = calibrated.planners[s]
        fit, samples = analysed(found)
        plan = planner.plan(fit, calibrated.start)
        analyzer = Analyzer(planner.model, plan, samples.inputs)
        subgraphs.append(
            _diagnose_subgraph(planner, plan, analyzer, calibrated.start, fit, samples, remedied)
        )
    source = next((analysed(c)[1].source for c in calibrated.collected.values() if c.selection), "")
    return Diagnosis(str(calibrated.start.method), source, subgraphs)


def analysed(found: Collected) -> tuple[SubgraphStatistics, EvaluationSet]:
    """What an analysis looks at: with a held-out dataset, the plan quantize writes (every
    calibration sample) on it; else the plan fitted on the fitting fold, on the selection fold
    (the estimate fold stays unseen, as in quantize)."""
    if found.estimate is not None and found.estimate.source == HELD_OUT:
        return found.estimate_fit, found.estimate
    return found.fit, found.selection


def _diagnose_subgraph(
    planner: Planner,
    plan: Plan,
    analyzer: Analyzer,
    recipe: Recipe,
    fit: SubgraphStatistics,
    samples: EvaluationSet,
    remedied: int,
) -> SubgraphDiagnosis:
    subgraph = planner.subgraph
    found_places = [analyzer.measure(p) for p in places(planner.model, plan)]
    found_places.sort(key=lambda s: s.worst_db)
    layers = layer_sqnr(analyzer.model, analyzer.plan, analyzer.inputs)
    remedies = _Remedies(planner, fit, recipe, samples.inputs)
    remedies.analyzers[recipe] = analyzer
    reports = []
    model_db = min(analyzer.full(), default=float("inf"))
    for rank, sensitivity in enumerate(found_places):
        place = sensitivity.place
        layer = layers.get(place.tensor) if place.kind == "activation" else None
        source = plan.decisions[place.op_index].source_index if place.op_index >= 0 else None
        report = PlaceReport(sensitivity, layer, source)
        if rank < remedied and np.isfinite(sensitivity.worst_db):
            report.remedies = remedies.effects(place)
            report.recommended = _recommend(sensitivity.worst_db, model_db, report.remedies)
        reports.append(report)
    measured = planner.accuracy(fit, recipe, samples)
    return SubgraphDiagnosis(
        plan.subgraph_index,
        [subgraph.tensors[t].name for t in subgraph.outputs],
        [o.sqnr_db for o in measured.outputs],
        reports,
        {subgraph.tensors[t].name: v for t, v in layers.items()},
        analyzer.float.samples,
        plan,
        fit,
        measured.measured_in,
        samples.samples,
        analyzer.weights_alone(),
        analyzer.activations_alone(),
    )
