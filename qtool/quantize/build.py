"""A complete plan for one subgraph: decisions, activation parameters and integer weights."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from qtool.calibrate.ranges import Method
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.quantize.bias_correction import mean_output_error
from qtool.quantize.plan import QUANTIZED, OpDecision, Plan, Precision, make_plan
from qtool.quantize.weights import Rounder, nearest, quantize_layer


@dataclass(frozen=True)
class WeightOptions:
    bias_correction: bool = True
    rounders: Mapping[int, Rounder] = field(default_factory=dict)  # op index -> rounding


def build_plan(
    model: Model,
    statistics: SubgraphStatistics,
    method: Method,
    precision: Precision,
    keep_float: tuple[str, ...],
    source_index: list[int],
    subgraph_index: int = 0,
    weights: WeightOptions = WeightOptions(),
    decisions: list[OpDecision] | None = None,
) -> Plan:
    """Decide, take ranges with `method`, and quantize every weight of the subgraph."""
    ranges = statistics.ranges(method)
    plan = make_plan(model, precision, ranges, keep_float, source_index, subgraph_index, decisions)
    quantize_weights(model, plan, precision, statistics, weights)
    return plan


def quantize_weights(
    model: Model,
    plan: Plan,
    precision: Precision,
    statistics: SubgraphStatistics,
    options: WeightOptions = WeightOptions(),
) -> None:
    """Fill `plan.weights` for every integer operator with a constant weight operand."""
    subgraph = model.subgraphs[plan.subgraph_index]
    plan.weights = {}
    for i, op in enumerate(subgraph.operators):
        mode = plan.decisions[i].mode
        if mode not in QUANTIZED:
            continue
        rule = precision.specs[mode].rule(model.op_type(op))
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
        mean = statistics.means.mean(op.inputs[activation]) if options.bias_correction else None
        if mean is not None:
            corrector = partial(
                _weight_error_shift, model, subgraph, i, activation, mean, position, bias_position
            )
        plan.weights[i] = quantize_layer(
            model,
            subgraph,
            op,
            rule,
            input_params,
            rounder=options.rounders.get(i, nearest),
            corrector=corrector,
        )


def _weight_error_shift(
    model: Model,
    subgraph,
    op_index: int,
    activation: int,
    mean_input,
    weight_position: int,
    bias_position: int | None,
    real_weights,
    rounded_weights,
):
    return mean_output_error(
        model,
        subgraph,
        op_index,
        activation,
        mean_input,
        weight_position,
        real_weights - rounded_weights,
        bias_position,
    )
