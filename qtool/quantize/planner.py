"""A complete plan for one subgraph from a recipe: decisions, activation parameters and integer
weights."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

import numpy as np

from qtool.calibrate.collect import EvaluationSet
from qtool.calibrate.datasets import Dataset
from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model, Subgraph
from qtool.quantize.accuracy import LITERT, SIMULATION
from qtool.quantize.adaround import gather_moments, layer_layout, optimise_rounding
from qtool.quantize.bias_correction import mean_output_error
from qtool.quantize.control_flow import (
    FLOAT_LOOP,
    NO_BOUNDARY,
    RECURRENT_LOOP,
    Boundary,
    boundaries,
    call_pins,
    loop_recurrence,
    planned_sites,
    refusal,
)
from qtool.quantize.decisions import FLOAT, INT8, INT16, OpDecision, Precision, decide
from qtool.quantize.evaluation import (
    PlanAccuracy,
    candidate_outputs,
    litert_plan_outputs,
    plan_accuracy,
    simulated_outputs,
)
from qtool.quantize.litert_worker import Pending
from qtool.quantize.plan import QUANTIZED, Plan, make_plan
from qtool.quantize.recurrent import quantize_lstm
from qtool.quantize.relative import keep_relative_float
from qtool.quantize.user_metric import UserMetric
from qtool.quantize.variables import recurrences, settle, variable_slots
from qtool.quantize.weights import (
    INT4_MAX,
    LayerWeights,
    Rounder,
    RoundingCache,
    nearest,
    nearest_int4,
    quantize_layer,
)
from qtool.spec import integer_lstm

FOR_TARGET = "kept in float to reach the target SQNR"
RECURRENT_BODY = "int16x8: the body of a recurrent loop (its state's error compounds over steps)"
RECURRENT_STATE = "int16x8: on the recurrence of variable {!r} (its error compounds over steps)"
MOMENT_CHUNK = 32
KEPT_PLANS = 8


class _Same:
    """A cache key matching only the very object it holds. Holding it keeps the object alive, so
    no other object can take its id() while the entry lasts (a bare id() key could, and hand
    the new object a plan made from the old one)."""

    __slots__ = ("held",)

    def __init__(self, held: object) -> None:
        self.held = held

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.held is self.held

    def __hash__(self) -> int:
        return id(self.held)


@dataclass(frozen=True)
class Recipe:
    """Every choice that turns statistics into a plan for one subgraph."""

    method: Method
    bias_correction: bool = True
    int16_tensors: frozenset[int] = frozenset()  # activations whose producer and readers run 16x8
    float_ops: frozenset[int] = frozenset()  # operators kept in float on purpose
    rounding_ops: frozenset[int] = frozenset()  # operators whose weight rounding is optimised
    # (operator, why): float because the target device cannot run its integer form (targeting.py)
    device_float: frozenset[tuple[int, str]] = frozenset()
    recurrent_body: bool = False  # a loop body carrying a recurrent state: int16x8 throughout

    def with_changes(self, **changes) -> Recipe:
        """A copy of the recipe with the given fields replaced."""
        return replace(self, **changes)


@dataclass
class Planner:
    """Builds plans of one subgraph for recipes (statistics and second moments given)."""

    model: Model
    precision: Precision
    keep_float: tuple[str, ...]
    source_index: list[int]
    subgraph_index: int = 0
    calibration: Dataset | None = None  # samples for the second moments of rounding
    input_types: list[str] | None = None  # each op's type in the input model (for patterns)
    # Planners of the subgraphs control flow runs (from any subgraph: shared by all planners),
    # and the engine that observed them ("litert" observes none).
    callees: dict[int, Planner] = field(default_factory=dict)
    engine: str = "numpy"
    metric: UserMetric | None = None  # the user's own measure, computed with every accuracy
    _moments: dict[int, np.ndarray | None] = field(default_factory=dict, repr=False)
    _rounded: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)
    _shifts: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False)
    _weights: RoundingCache = field(default_factory=RoundingCache, repr=False)
    _plans: OrderedDict = field(default_factory=OrderedDict, repr=False)
    _accuracy: dict[tuple, list] = field(default_factory=dict, repr=False)
    _started: dict[tuple, Pending | None] = field(default_factory=dict, repr=False)
    _measured: dict[tuple, list[np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def subgraph(self) -> Subgraph:
        """The subgraph this planner plans."""
        return self.model.subgraphs[self.subgraph_index]

    def decisions(
        self, recipe: Recipe, ranges, statistics: SubgraphStatistics | None = None
    ) -> list[OpDecision]:
        """The precision's decisions, with the recipe's int16 regions and float operators (and,
        given the statistics, the producers a float op needs in float: relative.py)."""
        subgraph = self.subgraph
        types = self.input_types or [None] * len(subgraph.operators)
        decisions = [
            decide(self.model, subgraph, op, self.precision, ranges, self.keep_float, input_type)
            for op, input_type in zip(subgraph.operators, types, strict=True)
        ]
        if INT16 in self.precision.specs:
            region = _region(subgraph, recipe.int16_tensors) if recipe.int16_tensors else ()
            for i in region:
                if decisions[i].mode in QUANTIZED and self._int16_form(i, ranges).mode == INT16:
                    decisions[i] = OpDecision(INT16, "int16 to reach the target SQNR")
            for i, why in self._recurrent(recipe).items():
                if decisions[i].mode == INT8 and self._int16_form(i, ranges).mode == INT16:
                    decisions[i] = OpDecision(INT16, why)
        for i in recipe.float_ops:
            if decisions[i].mode in QUANTIZED:
                decisions[i] = OpDecision(FLOAT, FOR_TARGET)
        for i, why in recipe.device_float:
            if decisions[i].mode in QUANTIZED:
                decisions[i] = OpDecision(FLOAT, why)
        if statistics is not None:
            keep_relative_float(self.model, subgraph, decisions, ranges, statistics.histogram)
        settle(self.model, self.subgraph_index, decisions)
        return decisions

    def _int16_form(self, i: int, ranges) -> OpDecision:
        """How operator i runs when every operator is asked to run in int16x8."""
        everything = Precision(self.precision.specs, ("*",))
        return decide(self.model, self.subgraph, self.subgraph.operators[i], everything, ranges, ())

    @cached_property
    def _recurrences(self) -> dict[int, str]:
        """The operators on a variable's recurrence, with the variable (fixed for the
        subgraph: found once)."""
        return recurrences(self.model, self.subgraph_index, self.precision.specs[INT8])

    def _recurrent(self, recipe: Recipe) -> dict[int, str]:
        """The operators the recurrence rules ask to run in int16x8, with the reason: every one
        of a loop body carrying a recurrent state, else those on a variable's recurrence."""
        if recipe.recurrent_body:
            return dict.fromkeys(range(len(self.subgraph.operators)), RECURRENT_BODY)
        return {i: RECURRENT_STATE.format(name) for i, name in self._recurrences.items()}

    def plan(self, statistics: SubgraphStatistics, recipe: Recipe) -> Plan:
        """The plan of `recipe` on `statistics` (the last few are kept: auto calibration, the
        estimate and the target search ask for the same ones again)."""
        key = (_Same(statistics), recipe)
        if key in self._plans:
            self._plans.move_to_end(key)
            return self._plans[key]
        plan = self._build(statistics, recipe)
        self._plans[key] = plan
        if len(self._plans) > KEPT_PLANS:
            self._plans.popitem(last=False)
        return plan

    def accuracy(
        self, statistics: SubgraphStatistics, recipe: Recipe, evaluation: EvaluationSet
    ) -> PlanAccuracy:
        """Each output against the float model on the evaluation samples (and the user's
        metric), once per recipe: measured with the integer model in LiteRT where it runs,
        simulated otherwise (each record says which)."""
        key = (_Same(statistics), recipe, _Same(evaluation))
        if key not in self._accuracy:
            plan = self.plan(statistics, recipe)
            started = self._started.pop((_Same(statistics), recipe, _Same(evaluation.inputs)), None)
            outputs = litert_plan_outputs(
                self.model, plan, self.precision.specs, evaluation.inputs, started
            )
            measured_in = LITERT
            if outputs is None:
                outputs, measured_in = (
                    simulated_outputs(self.model, plan, evaluation.inputs),
                    SIMULATION,
                )
            else:
                self._measured[key] = outputs
            self._accuracy[key] = plan_accuracy(
                self.model, plan, evaluation, outputs, measured_in, self.metric
            )
        return self._accuracy[key]

    def litert_outputs(
        self, statistics: SubgraphStatistics, recipe: Recipe, evaluation: EvaluationSet
    ) -> list[np.ndarray] | None:
        """The integer model's outputs LiteRT gave `accuracy` for these arguments (samples
        stacked); None where it was simulated or not asked."""
        return self._measured.get((_Same(statistics), recipe, _Same(evaluation)))

    def start_measuring(
        self, statistics: SubgraphStatistics, recipe: Recipe, inputs: list[np.ndarray]
    ) -> bool:
        """Build the plan of `recipe` and start running its integer model on the evaluation
        `inputs` in the background, before their float reference exists; `accuracy` on an
        evaluation set of these very inputs picks the run up. Whether LiteRT runs it."""
        key = (_Same(statistics), recipe, _Same(inputs))
        if key not in self._started:
            plan = self.plan(statistics, recipe)
            self._started[key] = candidate_outputs(self.model, plan, self.precision.specs, inputs)
        return self._started[key] is not None

    def body_plan(
        self,
        statistics: SubgraphStatistics,
        calls: Mapping[int, SubgraphStatistics],
        recipe: Recipe,
        boundary: Boundary,
    ) -> Plan:
        """The plan of a subgraph control flow runs, around the caller's parameters at its
        boundary; `calls`: the statistics of every subgraph the calling entry point ran."""
        key = (_Same(statistics), recipe, boundary.key())
        if key not in self._plans:
            self._plans[key] = self._build(statistics, recipe, boundary, calls)
            if len(self._plans) > KEPT_PLANS:
                self._plans.popitem(last=False)
        return self._plans[key]

    def _call_decisions(
        self,
        decisions: list[OpDecision],
        calls: Mapping[int, SubgraphStatistics],
        ranges: Mapping[int, tuple[float, float]],
    ) -> None:
        """Control-flow operators whose subgraphs cannot be planned around them stay float; a
        loop carrying a recurrent state runs in int16x8 (its loop variables 16-bit), or keeps
        them float where it cannot."""
        for site in planned_sites(self.model, self.subgraph_index, self.precision.specs[INT8]):
            if decisions[site.op_index].mode not in QUANTIZED:
                continue
            why = refusal(self.model, site, calls, self.engine)
            state = loop_recurrence(self.model, site) if INT16 in self.precision.specs else None
            if why is not None:
                decisions[site.op_index] = OpDecision(FLOAT, why)
            elif state is not None:
                widened = self._int16_form(site.op_index, ranges)
                decisions[site.op_index] = (
                    OpDecision(INT16, RECURRENT_LOOP.format(state))
                    if widened.mode == INT16
                    else OpDecision(FLOAT, FLOAT_LOOP.format(state, widened.reason))
                )

    def _body_plans(
        self, plan: Plan, calls: Mapping[int, SubgraphStatistics], recipe: Recipe
    ) -> dict[int, Plan]:
        """Plans of the subgraphs this plan's control flow runs: around the caller's int8
        parameters, or with a float boundary where the caller stays float (those that ran),
        none where the recipe keeps the caller float (a target SQNR's remedy)."""
        inner = Recipe(recipe.method, recipe.bias_correction)
        found = {}
        for site in planned_sites(self.model, self.subgraph_index, self.precision.specs[INT8]):
            if site.op_index in recipe.float_ops:
                continue  # kept float for a target SQNR: what it runs stays float too
            mode = plan.decisions[site.op_index].mode
            around = (
                boundaries(self.model, plan, site)
                if mode in QUANTIZED
                else dict.fromkeys(site.bodies, NO_BOUNDARY)
            )
            recurrent = loop_recurrence(self.model, site) is not None
            for body, boundary in around.items():
                statistics = calls.get(body)
                planner = self.callees.get(body)
                if planner is None or statistics is None or not statistics.samples:
                    continue
                wanted = inner.with_changes(recurrent_body=recurrent and mode in (FLOAT, INT16))
                found[body] = planner.body_plan(statistics, calls, wanted, boundary)
        return found

    def _build(
        self,
        statistics: SubgraphStatistics,
        recipe: Recipe,
        boundary: Boundary = NO_BOUNDARY,
        calls: Mapping[int, SubgraphStatistics] | None = None,
    ) -> Plan:
        calls = statistics.calls if calls is None else calls
        ranges = statistics.ranges(recipe.method)
        decisions = self.decisions(recipe, ranges, statistics)
        self._call_decisions(decisions, calls, ranges)
        specs = self.precision.specs
        plan = make_plan(
            self.model,
            self.precision,
            ranges,
            self.keep_float,
            self.source_index,
            self.subgraph_index,
            decisions,
            lambda planned: variable_slots(self.model, planned).values(),
            pins=call_pins(
                self.model, self.subgraph_index, decisions, specs, ranges, calls, recipe.method
            ),
            boundary_inputs=boundary.inputs,
            boundary_outputs=boundary.outputs,
            boundary_dtype=boundary.dtype,
        )
        quantize_weights(
            self.model,
            plan,
            self.precision,
            statistics,
            recipe,
            self._rounders(recipe),
            self._shifts,
            self._weights,
        )
        plan.bodies = self._body_plans(plan, calls, recipe)
        return plan

    def prepare_rounding(self, ops, samples: int | None = None) -> None:
        """Gather the second moments rounding optimisation needs, for all `ops` in one pass
        (over the first `samples` calibration samples when given, else all of them)."""
        missing = [i for i in ops if i not in self._moments]
        if missing and self.calibration is not None:
            chunks = self.calibration.iter_chunks(MOMENT_CHUNK)
            if samples is not None:
                chunks = _first_samples(chunks, samples)
            gathered = gather_moments(self.model, self.subgraph_index, missing, chunks)
            self._moments.update({i: gathered.moment(i) for i in missing})

    def _rounders(self, recipe: Recipe) -> dict[int, Rounder]:
        self.prepare_rounding(recipe.rounding_ops)
        found = {}
        for i in recipe.rounding_ops:
            moment = self._moments.get(i)
            if moment is not None:
                layout = layer_layout(self.model, self.subgraph.operators[i])
                found[i] = partial(self._optimised, i, moment=moment, layout=layout)
        return found

    def _optimised(
        self, op_index, weights, scale, axis, *, moment, layout, qmax: int = 127
    ) -> np.ndarray:
        """Optimised rounding (in [-qmax, qmax]), computed once per layer and weight scale
        (plans are rebuilt many times during a search)."""
        key = (op_index, np.asarray(scale).tobytes(), qmax)
        if key not in self._rounded:
            self._rounded[key] = optimise_rounding(weights, scale, moment, layout, qmax)
        return self._rounded[key]


def _first_samples(chunks, samples: int):
    """The chunks of the first `samples` samples, the last one cut to fit."""
    for chunk in chunks:
        if samples <= 0:
            return
        yield [values[:samples] for values in chunk]
        samples -= chunk[0].shape[0]


def _region(subgraph: Subgraph, tensors: frozenset[int]) -> set[int]:
    """Operators producing or reading any of `tensors`."""
    ops = set()
    for i, op in enumerate(subgraph.operators):
        if tensors.intersection(op.outputs) or tensors.intersection(op.inputs):
            ops.add(i)
    return ops


def quantize_weights(
    model: Model,
    plan: Plan,
    precision: Precision,
    statistics: SubgraphStatistics,
    recipe: Recipe,
    rounders: dict[int, Rounder] | None = None,
    shifts: dict[tuple, np.ndarray] | None = None,
    weights: RoundingCache | None = None,
) -> None:
    """Fill `plan.weights` for every integer operator with a constant weight operand.

    `shifts` caches bias corrections across plans (they depend on the layer, the statistics and
    the rounded weights, not on the activation ranges), `weights` the round-to-nearest weights
    (optimised rounding caches its own).
    """
    subgraph = model.subgraphs[plan.subgraph_index]
    rounders = rounders or {}
    plan.weights = {}
    for i, op in enumerate(subgraph.operators):
        mode = plan.decisions[i].mode
        if mode not in QUANTIZED:
            continue
        rule = precision.specs[mode].rule(model.op_type(op))
        if rule.name in integer_lstm().ops:
            plan.weights[i] = quantize_lstm(
                model,
                subgraph,
                op,
                plan.params[plan.reads[(i, 0)]],
                plan.params[plan.writes[(i, 0)]],
                plan.ranges,
            )
            continue
        weight_rule = rule.weight_rule()
        if weight_rule is None or not isinstance(weight_rule.index, int):
            continue
        position = weight_rule.index
        if position >= len(op.inputs) or op.inputs[position] < 0:
            continue
        bias_rule = rule.bias_rule()
        bias_position = bias_rule.index if bias_rule is not None else None
        activation = (
            bias_rule.bias_scale_inputs[0]
            if bias_rule is not None and bias_rule.bias_scale_inputs
            else min(p for (o, p) in plan.reads if o == i)
        )
        input_params = plan.params[plan.reads[(i, activation)]]
        corrector = None
        mean = statistics.mean(op.inputs[activation]) if recipe.bias_correction else None
        if mean is not None:
            shift = partial(
                _weight_error_shift, model, subgraph, i, activation, mean, position, bias_position
            )
            corrector = (
                shift if shifts is None else partial(_cached, shifts, (i, _Same(statistics)), shift)
            )
        bits = precision.weight_bits_of(
            model.op_type(op), mode, weight_rule.granularity == "per-axis"
        )
        rounder = rounders.get(i)
        if rounder is None:
            rounder = nearest_int4 if bits == 4 else nearest
        elif bits == 4:
            rounder = partial(rounder, qmax=INT4_MAX)
        plan.weights[i] = quantize_layer(
            model,
            subgraph,
            op,
            rule,
            input_params,
            rounder=rounder,
            corrector=corrector,
            cache=weights if i not in rounders else None,
            bits=bits,
        )


def _cached(cache: dict, key: tuple, shift, real_weights, layer: LayerWeights) -> np.ndarray:
    full = (*key, hash(layer.values.tobytes()), layer.scale.tobytes())
    if full not in cache:
        cache[full] = shift(real_weights, layer)
    return cache[full]


def _weight_error_shift(
    model: Model,
    subgraph: Subgraph,
    op_index: int,
    activation: int,
    mean_input: np.ndarray,
    weight_position: int,
    bias_position: int | None,
    real_weights: np.ndarray,
    layer: LayerWeights,
) -> np.ndarray:
    return mean_output_error(
        model,
        subgraph,
        op_index,
        activation,
        mean_input,
        weight_position,
        real_weights - layer.real_weights(),
        bias_position,
    )
