"""Accuracy of a plan on held-out samples: its integer model run by LiteRT, or simulated."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.collect import EvaluationSet
from qtool.model import Model
from qtool.numerics import sqnr_db
from qtool.quantize.litert_worker import Pending, submit_model
from qtool.quantize.plan import Plan
from qtool.quantize.rewrite import rewritten
from qtool.quantize.simulate import Simulator
from qtool.runtime.litert import litert_available
from qtool.spec import QuantSpec

LITERT = "LiteRT"  # the integer model run by LiteRT's kernels
SIMULATION = "simulation"  # the float simulation of the plan (simulate.py)


@dataclass(frozen=True)
class OutputAccuracy:
    """One output's SQNR (dB) against the float model on held-out samples; inf when exact."""

    subgraph: int
    name: str
    sqnr_db: float
    measured_in: str  # LITERT or SIMULATION


def simulated_accuracy(model: Model, plan: Plan, evaluation: EvaluationSet) -> list[OutputAccuracy]:
    """Each output's SQNR (dB) against the float model on the evaluation samples."""
    outputs = Simulator(model, plan).run(evaluation.inputs)
    return _accuracy(model, plan, evaluation, outputs, SIMULATION)


def candidate_outputs(
    model: Model, plan: Plan, specs: Mapping[str, QuantSpec], inputs: Sequence[np.ndarray]
) -> Pending | None:
    """Start running the plan's integer model in LiteRT on `inputs` (in child processes, in
    the background: `litert_worker`); None where LiteRT is not installed or the plan is not of
    the first subgraph."""
    if plan.subgraph_index != 0 or not litert_available():
        return None
    return submit_model(rewritten(model, {0: plan}, specs)[0], inputs)


def measured_accuracy(
    model: Model,
    plan: Plan,
    specs: Mapping[str, QuantSpec],
    evaluation: EvaluationSet,
    started: Pending | None = None,
) -> list[OutputAccuracy] | None:
    """Each output's SQNR (dB) with the planned integer model itself running in LiteRT, on
    its integer kernels (in a child process, `litert_worker`): exact where the simulation
    approximates, and several times faster than it (rewriting a model takes milliseconds).
    `started`: the run `candidate_outputs` began on the evaluation inputs. None where LiteRT
    is not installed or cannot run it (the caller simulates then)."""
    pending = started or candidate_outputs(model, plan, specs, evaluation.inputs)
    outputs = None if pending is None else pending.result()
    if outputs is None:
        return None
    return _accuracy(model, plan, evaluation, outputs, LITERT)


def _accuracy(
    model: Model,
    plan: Plan,
    evaluation: EvaluationSet,
    outputs: Sequence[np.ndarray],
    measured_in: str,
) -> list[OutputAccuracy]:
    subgraph = model.subgraphs[plan.subgraph_index]
    return [
        OutputAccuracy(
            plan.subgraph_index,
            subgraph.tensors[t].name,
            sqnr_db(reference, np.reshape(got, reference.shape)),
            measured_in,
        )
        for t, reference, got in zip(subgraph.outputs, evaluation.reference, outputs, strict=True)
    ]


CAP_DB = 60.0  # beyond this an output is as good as exact for scoring


def score(accuracy: list[OutputAccuracy]) -> float:
    """One number per plan: the mean over outputs of their SQNR (capped), so that a change
    that helps one output a lot and costs another a little wins, and the noise of a single
    output on a few held-out samples does not decide alone."""
    values = [min(a.sqnr_db, CAP_DB) for a in accuracy]
    return sum(values) / len(values) if values else CAP_DB


def worst(accuracy: list[OutputAccuracy]) -> float:
    """The lowest SQNR (dB) of a plan's outputs; inf when there are none."""
    return min((a.sqnr_db for a in accuracy), default=float("inf"))
