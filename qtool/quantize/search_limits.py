"""What a target search may spend: time (`--budget`, or a default in proportion to what
quantizing took before the search) and bytes (never more than the float model's own)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from qtool.calibrate.collect import Collected
from qtool.model import Model, model_to_bytes
from qtool.prepare import FloatModel
from qtool.prepare.fold import StoredForm
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.rewrite import rewritten

# The default time budget of a target search: this many times what quantizing took before it
# (a target run within about ten times a default one), and never less than MIN_BUDGET_S.
BUDGET_FACTOR = 4.0
MIN_BUDGET_S = 10.0


@dataclass
class Limits:
    """What a search may spend: a `deadline` (time.monotonic()) for starting another candidate,
    the most bytes its model may take (`max_bytes`, `size_of(recipe)` measuring them), and where
    it says how far it is (`progress`, one line per candidate)."""

    deadline: float = math.inf
    max_bytes: int | None = None
    size_of: Callable[[Recipe], int] | None = None
    progress: Callable[[str], None] | None = None
    budget: float | None = None  # the seconds the deadline stands for (reported)

    def fits(self, recipe: Recipe) -> bool:
        """Whether the model written with `recipe` takes at most `max_bytes`."""
        if self.max_bytes is None or self.size_of is None or not recipe.float_ops:
            return True  # integer remedies keep weights in 8 bits: never above a float model
        return self.size_of(recipe) <= self.max_bytes


@dataclass(frozen=True)
class SearchSpace:
    """What writing a candidate takes: the source and prepared models, every subgraph's
    planner, statistics and recipe so far, and how weights are stored."""

    model: Model
    prepared: FloatModel
    planners: Mapping[int, Planner]
    collected: Mapping[int, Collected]
    recipes: Mapping[int, Recipe]
    forms: Mapping[int, Mapping[str, StoredForm]]
    sparsify: bool


def search_limits(
    space: SearchSpace,
    subgraph: int,
    options,
    began: float,
    progress: Callable[[str], None] | None,
) -> Limits:
    """What the target search of `subgraph` may spend: the budget from now (`options.budget`,
    else BUDGET_FACTOR times the time spent since `began`, at least MIN_BUDGET_S) and the float
    model's bytes (or the plain integer model's, when bigger), a candidate's measured by
    writing it (the other subgraphs as planned so far)."""
    budget = options.budget
    if budget is None:
        budget = max(MIN_BUDGET_S, BUDGET_FACTOR * (time.monotonic() - began))
    specs = options.precision().specs

    def size_of(recipe: Recipe) -> int:
        plans = {
            s: space.planners[s].plan(
                found.statistics, recipe if s == subgraph else space.recipes[s]
            )
            for s, found in space.collected.items()
        }
        written = rewritten(
            space.prepared.model, plans, specs, options.io, space.forms, space.sparsify
        )[0]
        return len(model_to_bytes(written))

    # The float model's bytes, or the integer model's without remedies where even that is
    # bigger (a tiny model: the conversions at its boundary outweigh its weights).
    source = len(space.model.source_data or model_to_bytes(space.model))
    most = max(source, size_of(space.recipes[subgraph]))
    return Limits(time.monotonic() + budget, most, size_of, progress, budget)
