"""Accuracy of a plan, measured by simulation on held-out samples."""

from __future__ import annotations

from dataclasses import dataclass

from qtool.calibrate.collect import EvaluationSet
from qtool.model import Model
from qtool.numerics import sqnr_db
from qtool.quantize.plan import Plan
from qtool.quantize.simulate import Simulator


@dataclass(frozen=True)
class OutputAccuracy:
    subgraph: int
    name: str
    sqnr_db: float


def simulated_accuracy(model: Model, plan: Plan, evaluation: EvaluationSet) -> list[OutputAccuracy]:
    """Each output's SQNR (dB) against the float model on the evaluation samples."""
    outputs = Simulator(model, plan).run(evaluation.inputs)
    subgraph = model.subgraphs[plan.subgraph_index]
    return [
        OutputAccuracy(plan.subgraph_index, subgraph.tensors[t].name, sqnr_db(reference, got))
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
    return min((a.sqnr_db for a in accuracy), default=float("inf"))
