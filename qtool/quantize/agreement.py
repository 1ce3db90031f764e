"""The simulation against LiteRT on the plan qtool reports: do they tell the same story?

The figures qtool reports and acts on come from the integer model run in LiteRT. The simulation
(simulate.py) still decides what only it can measure: which places hold the noise (`qtool
analyze`, the target search's ranking). Where it strays from LiteRT on the reported plan, those
rankings may mislead, so every quantization compares both on the same few estimate samples and
warns, with both numbers, when an output's fitting SQNR differs by more than `MARGIN_DB`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qtool.calibrate.collect import EvaluationSet
from qtool.model import Model
from qtool.quantize.accuracy import LITERT, SIMULATION, json_db
from qtool.quantize.evaluation import (
    CAP_DB,
    litert_plan_outputs,
    plan_accuracy,
    simulated_outputs,
)
from qtool.quantize.plan import Plan
from qtool.spec import QuantSpec

MARGIN_DB = 3.0  # twice what the simulation is held to on the real-model fixtures (tests)
SAMPLES = 8  # the simulation of a large model is slow: a few samples tell a disagreement


@dataclass(frozen=True)
class SimulationCheck:
    """One output's fitting SQNR (dB), simulated and in LiteRT, on the same samples."""

    subgraph: int
    name: str
    simulated_db: float
    litert_db: float
    samples: int

    @property
    def disagrees(self) -> bool:
        """Whether the two differ by more than MARGIN_DB (both capped at CAP_DB)."""
        return abs(min(self.simulated_db, CAP_DB) - min(self.litert_db, CAP_DB)) > MARGIN_DB

    def warning(self) -> str:
        """The report's warning for a disagreement, with both numbers."""
        return (
            f"the simulation and LiteRT disagree on output '{self.name}': simulated "
            f"{self.simulated_db:.1f} dB, LiteRT {self.litert_db:.1f} dB (fitting SQNR on the "
            f"same {self.samples} samples, margin {MARGIN_DB:g} dB): the reported figures are "
            "LiteRT's; `qtool analyze` and the target search's ranking of places, which simulate, "
            "may mislead on this model"
        )

    def to_dict(self) -> dict:
        """JSON-ready (dB None when exact)."""
        return {
            "subgraph": self.subgraph,
            "name": self.name,
            "simulated_db": json_db(self.simulated_db),
            "litert_db": json_db(self.litert_db),
            "samples": self.samples,
            "disagrees": self.disagrees,
        }


def simulated_for_check(
    model: Model, plan: Plan, evaluation: EvaluationSet, samples: int = SAMPLES
) -> list[np.ndarray]:
    """The simulation's outputs on the samples `simulation_check` compares, for a caller that
    computes them while LiteRT runs the plan."""
    return simulated_outputs(model, plan, [np.asarray(x)[:samples] for x in evaluation.inputs])


def simulation_check(
    model: Model,
    plan: Plan,
    specs: Mapping[str, QuantSpec],
    evaluation: EvaluationSet,
    samples: int = SAMPLES,
    measured: list[np.ndarray] | None = None,
    simulated: list[np.ndarray] | None = None,
) -> list[SimulationCheck]:
    """Each output's fitting SQNR on the first `samples` evaluation samples, simulated and run
    in LiteRT; empty where LiteRT cannot run the plan. `measured`: LiteRT's outputs of the plan
    on every evaluation sample (samples stacked), where the estimate has them already: LiteRT
    runs each sample alone, so their first samples are what a run on those alone gives.
    `simulated`: the simulation's outputs on those samples (`simulated_for_check`), where the
    caller has them already."""
    inputs = [np.asarray(x)[:samples] for x in evaluation.inputs]
    part = EvaluationSet(inputs, [np.asarray(r)[:samples] for r in evaluation.reference], "")
    if measured is not None:
        litert = [np.asarray(o)[:samples] for o in measured]
    else:
        litert = litert_plan_outputs(model, plan, specs, inputs)
    if litert is None:
        return []
    if simulated is None:
        simulated = simulated_outputs(model, plan, inputs)
    in_litert = plan_accuracy(model, plan, part, litert, LITERT).outputs
    in_simulation = plan_accuracy(model, plan, part, simulated, SIMULATION).outputs
    return [
        SimulationCheck(plan.subgraph_index, m.name, s.fitting_db, m.fitting_db, part.samples)
        for m, s in zip(in_litert, in_simulation, strict=True)
    ]
