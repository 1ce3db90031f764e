"""`--target-sqnr` in the weight modes: each op on the narrowest form that keeps every output at
the target (int4 where it holds it, int8 elsewhere, float with `allow_float`).

Every op starts on the first rung of its ladder (`weight_plan.py`). Each rung's noise is
measured alone: the model with only that op narrow, run in LiteRT on the fitting samples. The
noises of different ops add up (nearly: they are independent), so the search steps up the op
that removes the most noise of the failing outputs per byte it adds, until the sum fits the
target's noise budget; the model is then measured whole, the budget tightened by what the sum
missed, and so on. Steps that turn out unneeded are undone (latest first) while the target
holds. The search aims `MARGIN_DB` above the target on the fitting samples, as the full mode's
does (`search.py`): the reported SQNR comes from other samples, which rounding fitted on the data
did not see either.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from qtool.quantize.search import MARGIN_DB
from qtool.quantize.weight_modes import WeightModel, model_outputs, output_sqnr, written_outputs
from qtool.quantize.weight_plan import OpWeights
from qtool.quantize.weight_store import WeightForm
from qtool.weight_spec import BLOCKWISE, PER_AXIS

MAX_ROUNDS = 8
MAX_UNDO_TRIES = 8


@dataclass(frozen=True)
class WeightChange:
    """An op the search moved up its ladder: the form it was asked for, the one it got, and
    the worst output's SQNR with only that op narrow (its first rung)."""

    subgraph: int
    op_index: int  # in the input model
    op_type: str
    tensor: str  # its (first) weight tensor's name
    asked: str  # the first rung's label
    chosen: str  # the final form's label, or "float"
    alone_sqnr_db: float

    @property
    def kind(self) -> str:
        """What the search gave the op: "float", or the type of its wider weights."""
        return self.chosen.split()[0]


@dataclass
class WeightSearchResult:
    """The outcome of a target search in a weight mode (the ops are left on their rungs)."""

    reached: bool
    output_sqnr: list[float]  # on the fitting samples, of the final rungs
    changes: list[WeightChange] = field(default_factory=list)
    noisiest: list[WeightChange] = field(default_factory=list)  # when not reached
    candidates: int = 0  # models written and run in LiteRT
    seconds: float = 0.0
    # What the full pipeline's SearchResult also says: a weight search has no time budget to
    # stop it and no user metric.
    stopped: str | None = None
    budget: float | None = None
    metric: float | None = None

    @property
    def remedies(self) -> list[WeightChange]:
        """The changes, under the name the report gives remedies."""
        return self.changes


def _noise(sqnr: Sequence[float]) -> np.ndarray:
    """Noise power relative to each output's signal."""
    return np.array([10 ** (-v / 10) if np.isfinite(v) else 0.0 for v in sqnr])


def form_bytes(form: WeightForm | None, elements: int, channels: int) -> float:
    """The bytes `elements` weights of `channels` output channels take in `form` (None: float32),
    scales included."""
    if form is None:
        return 4.0 * elements
    if form.bits is None:
        return 2.0 * elements
    values = elements * form.bits / 8
    if form.granularity == BLOCKWISE:
        return values + 2.0 * elements / form.block_size
    return values + (12.0 * channels if form.granularity == PER_AXIS else 12.0)


class _Search:
    def __init__(self, weights: WeightModel, inputs, target_db: float, allow_float: bool):
        self.weights = weights
        self.inputs = list(inputs)
        self.target = target_db + MARGIN_DB
        self.required = target_db
        self.ops = [op for op in weights.ops if op.kept_float is None and len(op.ladder) > 1]
        self.top = {id(op): len(op.ladder) - (1 if allow_float else 2) for op in self.ops}
        self.reference, _ = model_outputs(weights.prepared.model, self.inputs)
        self.alone: dict[tuple[int, int], np.ndarray] = {}  # (op, rung) -> noise
        self.candidates = 0
        self.began = time.monotonic()

    def measure(self) -> list[float]:
        self.candidates += 1
        written, _ = self.weights.write()
        found, _ = written_outputs(self.weights, written, self.inputs)
        return output_sqnr(self.reference, found)

    def result(self, reached: bool, sqnr: list[float], changes=(), noisiest=()):
        """The search's outcome, with the candidates it ran and the time it took."""
        seconds = time.monotonic() - self.began
        return WeightSearchResult(
            reached, sqnr, list(changes), list(noisiest), self.candidates, seconds
        )

    def measure_alone(self) -> None:
        """Each rung's noise with only its op narrow."""
        for op in self.ops:
            op.rung = len(op.ladder) - 1
        for op in self.ops:
            for rung in range(self.top[id(op)] + 1):
                if op.ladder[rung] is None:
                    continue
                op.rung = rung
                self.alone[(id(op), rung)] = _noise(self.measure())
            op.rung = len(op.ladder) - 1
        for op in self.ops:
            op.rung = 0

    def noise(self, op: OpWeights, rung: int) -> np.ndarray:
        if op.ladder[rung] is None:
            return np.zeros(len(self.reference))
        return self.alone[(id(op), rung)]

    def size(self, op: OpWeights, rung: int) -> float:
        subgraph = self.weights.prepared.model.subgraphs[op.subgraph]
        operator = subgraph.operators[op.index]
        total = 0.0
        for p in op.positions:
            tensor = subgraph.tensors[operator.inputs[p]]
            channels = tensor.shape[0] if tensor.shape else 1
            total += form_bytes(op.ladder[rung], tensor.num_elements, channels)
        return total

    def step_up(self, budget: np.ndarray) -> list[OpWeights]:
        """Step ops up until the summed noise fits `budget` (per output); the ops stepped."""
        stepped = []
        while True:
            total = sum((self.noise(op, op.rung) for op in self.ops), np.zeros(len(budget)))
            failing = total > budget
            if not failing.any():
                return stepped
            best, best_gain = None, 0.0
            for op in self.ops:
                if op.rung >= self.top[id(op)]:
                    continue
                removed = self.noise(op, op.rung) - self.noise(op, op.rung + 1)
                gain = float(np.max(removed[failing] / budget[failing]))
                cost = max(self.size(op, op.rung + 1) - self.size(op, op.rung), 1.0)
                if gain / cost > best_gain:
                    best, best_gain = op, gain / cost
            if best is None:
                return stepped
            best.rung += 1
            stepped.append(best)

    def undo(self, stepped: list[OpWeights], sqnr: list[float]) -> list[float]:
        """Step back down, latest steps first, while the target still holds."""
        for op in list(reversed(stepped))[:MAX_UNDO_TRIES]:
            op.rung -= 1
            trial = self.measure()
            if min(trial) >= self.target:
                sqnr = trial
            else:
                op.rung += 1
        return sqnr


def search_weights(
    weights: WeightModel, inputs: Sequence[np.ndarray], target_db: float, allow_float: bool
) -> WeightSearchResult:
    """Move ops up their ladders until every output's SQNR on `inputs` (LiteRT, against the
    float model) reaches `target_db` plus `MARGIN_DB`; the ops are left on the rungs found."""
    run = _Search(weights, inputs, target_db, allow_float)
    sqnr = run.measure()
    if min(sqnr) >= run.target or not run.ops:
        return run.result(min(sqnr) >= target_db, sqnr)
    run.measure_alone()
    budget = np.full(len(sqnr), 10 ** (-run.target / 10))
    stepped: list[OpWeights] = []
    for _ in range(MAX_ROUNDS):
        stepped += run.step_up(budget)
        sqnr = run.measure()
        if min(sqnr) >= run.target:
            sqnr = run.undo(stepped, sqnr)
            break
        if all(op.rung >= run.top[id(op)] for op in run.ops):
            break
        # The sum missed the whole: tighten the budget of each failing output by as much.
        estimated = sum((run.noise(op, op.rung) for op in run.ops), np.zeros(len(sqnr)))
        measured = _noise(sqnr)
        budget = budget * np.minimum(1.0, estimated / np.maximum(measured, 1e-30))
        budget = np.minimum(budget, 10 ** (-run.target / 10))
    reached = min(sqnr) >= run.required
    changes = [_change(run, op) for op in run.ops if op.rung > 0]
    noisiest = []
    if not reached:
        ranked = sorted(run.ops, key=lambda op: -float(np.max(run.noise(op, op.rung))))
        noisiest = [_change(run, op) for op in ranked[:5] if np.max(run.noise(op, op.rung)) > 0]
    return run.result(reached, sqnr, changes, noisiest)


def _change(run: _Search, op: OpWeights) -> WeightChange:
    model = run.weights.prepared.model
    subgraph = model.subgraphs[op.subgraph]
    tensor = subgraph.tensors[subgraph.operators[op.index].inputs[op.positions[0]]]
    alone = run.noise(op, 0)
    worst = float(10 * np.log10(1 / np.max(alone))) if np.max(alone) > 0 else float("inf")
    return WeightChange(
        op.subgraph,
        op.source_index,
        op.op_type,
        tensor.name,
        op.ladder[0].label(),
        "float" if op.form is None else op.form.label(),
        worst,
    )
