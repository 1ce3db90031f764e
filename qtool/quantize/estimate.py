"""The accuracy a quantization reports: the plan fitted without the estimate's samples, with
every choice made, run in LiteRT on them (collect.py says which samples those are), and the
simulation of that plan checked against LiteRT (agreement.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from qtool.calibrate.collect import HELD_OUT, MIN_SAMPLES_FOR_HOLDOUT, Collected
from qtool.quantize.accuracy import LITERT, OutputAccuracy
from qtool.quantize.agreement import SimulationCheck, simulated_for_check, simulation_check
from qtool.quantize.evaluation import PlanAccuracy
from qtool.quantize.planner import Planner, Recipe
from qtool.quantize.search import SearchResult, Target
from qtool.spec import QuantSpec


@dataclass
class Estimate:
    """Per subgraph, the estimated plan's accuracy; how it was measured, in words; whether no
    choice saw its samples; the simulation checks."""

    accuracy: dict[int, PlanAccuracy] = field(default_factory=dict)
    source: str = ""
    independent: bool | None = None  # None: nothing estimated
    checks: list[SimulationCheck] = field(default_factory=list)

    @property
    def outputs(self) -> list[OutputAccuracy]:
        """Every output's record, subgraph by subgraph."""
        return [row for found in self.accuracy.values() for row in found.outputs]

    @property
    def metric(self) -> dict[int, float]:
        """The user's metric, per subgraph that has one."""
        return {s: a.metric for s, a in self.accuracy.items() if a.metric is not None}

    def confirms(
        self, target: Target | None, searches: Mapping[int, SearchResult]
    ) -> dict[int, bool]:
        """Per subgraph with a target: whether the search reached it and the estimate meets it
        too. A subgraph without an estimate confirms nothing."""
        if target is None:
            return {}
        return {
            s: search.reached and s in self.accuracy and target.met(self.accuracy[s])
            for s, search in searches.items()
        }

    def warnings(self) -> list[str]:
        """A warning per output whose simulation strays from LiteRT."""
        return [check.warning() for check in self.checks if check.disagrees]


def start_estimate(
    collected: Mapping[int, Collected],
    planners: Mapping[int, Planner],
    recipes: Mapping[int, Recipe],
) -> set[int]:
    """Build every estimated plan and start its LiteRT run as soon as the recipes are final:
    LiteRT's children run it while this process plans and rewrites the final model and
    simulates the plan for the check (`estimate_accuracy` picks the run up). The subgraphs
    whose plan LiteRT runs."""
    return {
        s
        for s, c in collected.items()
        if c.estimate is not None
        and planners[s].start_measuring(c.estimate_fit, recipes[s], c.estimate.inputs)
    }


def estimate_accuracy(
    collected: Mapping[int, Collected],
    planners: Mapping[int, Planner],
    recipes: Mapping[int, Recipe],
    specs: Mapping[str, QuantSpec],
    running: Collection[int] = (),
) -> Estimate:
    """The estimate of every subgraph that has samples for one; `running`: the subgraphs
    whose LiteRT run `start_estimate` started."""
    found = Estimate()
    for s, c in collected.items():
        if c.estimate is None:
            continue
        plan = planners[s].plan(c.estimate_fit, recipes[s])
        simulated = None
        if s in running:  # simulated while LiteRT runs the plan, not after
            simulated = simulated_for_check(planners[s].model, plan, c.estimate)
        found.accuracy[s] = planners[s].accuracy(c.estimate_fit, recipes[s], c.estimate)
        if found.accuracy[s].measured_in == LITERT:
            # The estimate's own LiteRT outputs: the same plan on the same samples, not run again.
            measured = planners[s].litert_outputs(c.estimate_fit, recipes[s], c.estimate)
            found.checks += simulation_check(
                planners[s].model, plan, specs, c.estimate, measured=measured, simulated=simulated
            )
    if found.accuracy:
        estimated = [collected[s] for s in found.accuracy]
        found.independent = not any(c.shared for c in estimated)
        found.source = _source(estimated, found.accuracy.values())
    return found


def _source(collected: list[Collected], accuracy) -> str:
    """How and on which samples the estimate was measured, in words."""
    samples = sum(c.estimate.samples for c in collected)
    litert = all(a.measured_in == LITERT for a in accuracy)
    how = "measured in LiteRT" if litert else "simulated (LiteRT cannot run it)"
    if any(c.shared for c in collected):
        return (
            f"{how} on {samples} held-out samples, which the choices were also judged on "
            f"(fewer than {MIN_SAMPLES_FOR_HOLDOUT} calibration samples): optimistic"
        )
    if collected[0].estimate.source == HELD_OUT:
        return f"{how} on {samples} held-out samples that no choice saw"
    return f"{how} on {samples} calibration samples that no choice saw, calibrating on the others"
