"""Accuracy of a plan on held-out samples: its integer model run by LiteRT, or simulated."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.collect import EvaluationSet
from qtool.model import Model
from qtool.quantize.accuracy import (
    LITERT,
    SIMULATION,
    OutputAccuracy,
    measure_outputs,
    plan_output_steps,
)
from qtool.quantize.litert_worker import Pending, submit_model
from qtool.quantize.plan import Plan
from qtool.quantize.rewrite import rewritten
from qtool.quantize.simulate import Simulator
from qtool.quantize.user_metric import UserMetric
from qtool.runtime.litert import litert_available
from qtool.spec import QuantSpec

CAP_DB = 60.0  # beyond this an output is as good as exact for scoring


@dataclass(frozen=True)
class PlanAccuracy:
    """A plan's outputs against the float model's on some samples: each output's record and,
    when the user gave one, their metric (`--metric`) on all outputs."""

    outputs: list[OutputAccuracy]
    metric: float | None = None

    @property
    def measured_in(self) -> str:
        """LITERT when every output was measured in LiteRT, else SIMULATION."""
        return LITERT if all(o.measured_in == LITERT for o in self.outputs) else SIMULATION

    @property
    def worst_db(self) -> float:
        """The lowest fitting SQNR (dB) of the outputs; inf when there are none."""
        return min((o.fitting_db for o in self.outputs), default=math.inf)

    @property
    def fitting_db(self) -> list[float]:
        """Each output's fitting SQNR (dB), in output order."""
        return [o.fitting_db for o in self.outputs]

    def score(self) -> tuple[float, float]:
        """What choices maximise: the user's metric first (when given), then the worst output's
        fitting SQNR (capped at CAP_DB: beyond it, outputs are as good as exact)."""
        return (
            self.metric if self.metric is not None else 0.0,
            min(self.worst_db, CAP_DB),
        )


def simulated_outputs(model: Model, plan: Plan, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The simulated integer model's outputs on `inputs` (simulate.py)."""
    return Simulator(model, plan).run(inputs)


def simulated_accuracy(
    model: Model, plan: Plan, evaluation: EvaluationSet, metric: UserMetric | None = None
) -> PlanAccuracy:
    """Each output against the float model on the evaluation samples, simulated."""
    outputs = simulated_outputs(model, plan, evaluation.inputs)
    return plan_accuracy(model, plan, evaluation, outputs, SIMULATION, metric)


def candidate_outputs(
    model: Model, plan: Plan, specs: Mapping[str, QuantSpec], inputs: Sequence[np.ndarray]
) -> Pending | None:
    """Start running the plan's integer model in LiteRT on `inputs` (in child processes, in
    the background: `litert_worker`); None where LiteRT is not installed or the plan is not of
    the first subgraph."""
    if plan.subgraph_index != 0 or not litert_available():
        return None
    return submit_model(rewritten(model, {0: plan}, specs)[0], inputs)


def litert_plan_outputs(
    model: Model,
    plan: Plan,
    specs: Mapping[str, QuantSpec],
    inputs: Sequence[np.ndarray],
    started: Pending | None = None,
) -> list[np.ndarray] | None:
    """The planned integer model's outputs on `inputs`, run by LiteRT on its integer kernels
    (in a child process, `litert_worker`): exact where the simulation approximates, and several
    times faster than it (rewriting a model takes milliseconds). `started`: the run
    `candidate_outputs` began on these inputs. None where LiteRT is not installed or cannot
    run it."""
    pending = started or candidate_outputs(model, plan, specs, inputs)
    return None if pending is None else pending.result()


def plan_accuracy(
    model: Model,
    plan: Plan,
    evaluation: EvaluationSet,
    outputs: Sequence[np.ndarray],
    measured_in: str,
    metric: UserMetric | None = None,
) -> PlanAccuracy:
    """The records of a plan's `outputs` on the evaluation samples (and the user's metric)."""
    shaped = [
        np.reshape(got, ref.shape) for ref, got in zip(evaluation.reference, outputs, strict=True)
    ]
    records = measure_outputs(
        model,
        plan.subgraph_index,
        evaluation.reference,
        shaped,
        measured_in,
        plan_output_steps(model, plan),
    )
    value = None if metric is None else metric(evaluation.reference, shaped)
    return PlanAccuracy(records, value)
