"""The Planner keeps plans of the statistics objects themselves, never of a bare id(): a copy
plans alike, and an object that takes a freed object's id gets its own plan, not the old one."""

from __future__ import annotations

import copy
import gc

import numpy as np

import qtool
from qtool.calibrate import Dataset
from qtool.calibrate.statistics import SubgraphStatistics
from qtool.model import load_model
from qtool.quantize import QuantizeOptions
from qtool.quantize.plan import Plan
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.quantizer import calibrate_loaded
from tests.conftest import DATA, MODELS

MLP = MODELS / "mlp.tflite"


def samples() -> np.ndarray:
    with np.load(DATA / "mlp_calib.npz") as data:
        return data[data.files[0]]


def planned(plan: Plan) -> tuple:
    """What a plan decides, as comparable values: activation parameters and integer weights."""
    params = sorted(
        (slot, p.scale.tobytes(), p.zero_point.tobytes()) for slot, p in plan.params.items()
    )
    weights = sorted(
        (i, w.values.tobytes(), w.scale.tobytes(), None if w.bias is None else w.bias.tobytes())
        for i, w in plan.weights.items()
    )
    return tuple(params), tuple(weights)


def fresh_plan(planner: Planner, statistics: SubgraphStatistics, recipe: Recipe) -> tuple:
    alone = Planner(planner.model, planner.precision, (), planner.source_index, 0)
    return planned(alone.plan(statistics, recipe))


def test_copies_and_recycled_statistics_objects_get_their_own_plans() -> None:
    x = samples()
    calibrated = calibrate_loaded(
        load_model(MLP), Dataset.from_arrays([x]), QuantizeOptions(calibration="minmax")
    )
    planner, recipe = calibrated.planners[0], calibrated.start
    assert recipe.bias_correction  # the bias shifts are cached by statistics too
    few = qtool.calibrate_model(MLP, x[:2]).subgraphs[0]
    every = qtool.calibrate_model(MLP, x).subgraphs[0]
    want_few, want_every = fresh_plan(planner, few, recipe), fresh_plan(planner, every, recipe)
    assert want_few != want_every

    assert planned(planner.plan(copy.copy(every), recipe)) == want_every
    for _ in range(20):
        first = copy.copy(few)
        assert planned(planner.plan(first, recipe)) == want_few
        del first
        gc.collect()
        # CPython hands the freed block to the next object of the same size: with a bare id()
        # key, this copy of other statistics would be given the plan of `first`.
        second = copy.copy(every)
        assert planned(planner.plan(second, recipe)) == want_every
        del second
