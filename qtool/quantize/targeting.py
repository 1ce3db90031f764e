"""Planning for a target device (`quantize --target`): where the device cannot run an op's
integer form at all, the op is kept in float if the device runs its float form.

The integer model the plans make is placed on the target (qtool.targets.placement). An op whose
int8 (or int16x8) form can run neither on the accelerator nor on its CPU fallback, e.g. an op
TFLite Micro has only a float kernel for, is planned again in float (QUANTIZE/DEQUANTIZE around
it), when the float model's placement says the float op runs somewhere on the device; the reason
names the target and the constraint. Only the profile's facts decide: an op whose float form
cannot run either stays integer, and the audit reports it.

An op that merely falls back to the CPU stays integer: every fallback runtime of the profiles
(TFLite Micro, TFLite's CPU kernels) runs the int8 kernel, and running it costs less than
converting to float and back around a float kernel (two extra ops, four times the activation
memory, and float arithmetic that Cortex-M class CPUs often emulate in software).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import Model
from qtool.model.edit import clone_model
from qtool.quantize.plan import QUANTIZED, Plan
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.rewrite import rewrite_plans
from qtool.spec import QuantSpec
from qtool.targets import Target
from qtool.targets.placement import (
    CANNOT_RUN,
    ON_TARGET,
    OpPlacement,
    checked_target,
    fallback_name,
    place_model,
)

# Each round only adds float ops, and new converters are the only new ops: one round moves the
# ops, the next confirms nothing else changed. The bound keeps a surprise from looping long.
MAX_ROUNDS = 4


def plan_for_target(
    model: Model,
    planners: Mapping[int, Planner],
    statistics: Mapping[int, SubgraphStatistics],
    recipes: Mapping[int, Recipe],
    specs: Mapping[str, QuantSpec],
    io: str,
    target_name: str,
) -> dict[int, Recipe]:
    """`recipes` with the ops `target_name` cannot run in integer form, but can in float, kept
    in float (`Recipe.device_float`, with the reason)."""
    target = checked_target(target_name)
    float_form = {(p.subgraph, p.index): p for p in place_model(model, target).ops}
    device = _Device(model, specs, io, target, float_form)
    recipes = dict(recipes)
    for _ in range(MAX_ROUNDS):
        plans = {s: planners[s].plan(statistics[s], recipe) for s, recipe in recipes.items()}
        moved = device.unrunnable(plans)
        if not moved:
            break
        for s, ops in moved.items():
            recipes[s] = recipes[s].with_changes(device_float=recipes[s].device_float | ops)
    return recipes


@dataclass(frozen=True)
class _Device:
    """The float model and where its float ops run on the target."""

    model: Model
    specs: Mapping[str, QuantSpec]
    io: str
    target: Target
    float_form: Mapping[tuple[int, int], OpPlacement]  # (subgraph, op) of the float model

    def unrunnable(self, plans: Mapping[int, Plan]) -> dict[int, set[tuple[int, str]]]:
        """Per subgraph, (op, reason) of the integer ops of `plans` that cannot run on the target
        but whose float form can."""
        work = clone_model(self.model)
        origins = rewrite_plans(work, plans, self.specs, self.io).origins
        moved: dict[int, set[tuple[int, str]]] = {}
        for placed in place_model(work, self.target).ops:
            s = placed.subgraph
            if placed.status != CANNOT_RUN or s not in plans:
                continue
            i = origins[s][placed.index]
            if i is None:  # a converter the rewrite added
                continue
            mode, floating = plans[s].decisions[i].mode, self.float_form[(s, i)]
            if mode in QUANTIZED and floating.status != CANNOT_RUN:
                why = _reason(self.target, mode.value, placed, floating)
                moved.setdefault(s, set()).add((i, why))
        return moved


def _reason(target: Target, mode: str, integer: OpPlacement, floating: OpPlacement) -> str:
    blocking = integer.fallback_reasons or integer.reasons  # what stops it on the last resort
    where = f"the {target.accelerator}" if floating.status == ON_TARGET else fallback_name(target)
    constraints = "; ".join(map(str, blocking))
    return (
        f"{target.name} cannot run its {mode} form ({constraints}); its float form runs on {where}"
    )
