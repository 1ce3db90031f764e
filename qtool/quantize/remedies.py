"""The remedies a target search applies to one place (`search.py`), cheapest first: rounding
optimisation for weights, int16 for an activation, float for an operator; each as the recipe it
makes and, for float, what it costs in bytes (ranking only: the written size is measured)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qtool.model import Model
from qtool.quantize.adaround import supported as rounding_supported
from qtool.quantize.planner import Recipe
from qtool.quantize.sensitivity import Place, Sensitivity
from qtool.spec import Mode

ROUNDING, INT16, FLOAT = "rounding", Mode.INT16, Mode.FLOAT  # the remedies, cheapest first
# What keeping an op in float costs beyond its weights, in int8 weight elements: the DEQUANTIZE
# and QUANTIZE around it and their tensors (measured: 150-400 bytes per float op).
OP_COST_ELEMENTS = 256
INT16_GAIN_DB = 20 * math.log10(256)  # an activation's noise in int16 instead of int8


@dataclass(frozen=True)
class Remedy:
    """A remedy the target search applied to one place (rounding, int16 or float)."""

    kind: str  # ROUNDING, INT16 or FLOAT
    place: Place
    name: str  # the tensor's name
    op_type: str
    share_db: float  # the place's share of the failing output's noise, in dB of the signal


def integer_remedy(place: Place, recipe: Recipe, model: Model, subgraph) -> tuple | None:
    """The integer remedy for `place` (ROUNDING or INT16) and the recipe it makes, or None."""
    if place.kind == "calls":  # what control flow runs keeps its caller's recipe
        return None
    if place.kind == "weights":
        op = subgraph.operators[place.op_index]
        if rounding_supported(model, subgraph, op):
            return ROUNDING, recipe.with_changes(
                rounding_ops=recipe.rounding_ops | {place.op_index}
            )
        return None
    return INT16, recipe.with_changes(int16_tensors=recipe.int16_tensors | {place.tensor})


def _float_ops(place: Place, subgraph) -> set[int]:
    """The operators that go float when `place` does: its producer and, for an activation,
    the operators reading it."""
    ops = {place.op_index} if place.op_index >= 0 else set()
    if place.kind == "activation":
        ops |= {i for i, op in enumerate(subgraph.operators) if place.tensor in op.inputs}
    return ops


def float_remedy(place: Place, recipe: Recipe, subgraph) -> tuple:
    """FLOAT and the recipe that keeps `place` float."""
    # A control-flow operator kept float keeps the subgraphs it runs float too (planner.py).
    return FLOAT, recipe.with_changes(float_ops=recipe.float_ops | _float_ops(place, subgraph))


def float_cost(place: Place, model: Model, subgraph) -> int:
    """What keeping `place` in float costs, in int8 weight elements (ranking only: the written
    size is measured): the constant inputs of the ops that go float, and OP_COST_ELEMENTS each."""
    cost = 0
    for index in _float_ops(place, subgraph):
        cost += OP_COST_ELEMENTS
        for t in subgraph.operators[index].inputs:
            if t >= 0 and model.is_constant(subgraph.tensors[t]):
                cost += int(np.prod(subgraph.tensors[t].shape or [1]))
    return cost


def remedies_of(recipe: Recipe, start: Recipe, measured: list[Sensitivity]) -> list[Remedy]:
    """The remedies `recipe` holds beyond `start`, each place as the analysis measured it."""
    chosen = []
    for found in measured:
        place = found.place
        if place.kind == "weights" and place.op_index in recipe.rounding_ops - start.rounding_ops:
            chosen.append((found, ROUNDING))
        if (
            place.kind == "activation"
            and place.tensor in recipe.int16_tensors - start.int16_tensors
        ):
            chosen.append((found, INT16))
        if place.op_index in recipe.float_ops - start.float_ops:
            chosen.append((found, FLOAT))
    return as_remedies(chosen)


def after_int16(found: Sensitivity, recipe: Recipe) -> Sensitivity:
    """`found` with its noise as it is once `recipe` stores its activation in int16."""
    if found.place.kind != "activation" or found.place.tensor not in recipe.int16_tensors:
        return found
    finer = [v + INT16_GAIN_DB for v in found.output_sqnr]
    return Sensitivity(found.place, found.name, found.op_type, finer)


def as_remedies(chosen: list) -> list[Remedy]:
    """The remedies of `(sensitivity, kind)` pairs, each with its place's share of the noise."""
    return [
        Remedy(kind, s.place, s.name, s.op_type, float(min(s.output_sqnr, default=np.inf)))
        for s, kind in chosen
    ]
