"""Where the error of a quantized model comes from: per layer and per tensor sensitivities.

For every operator with integer weights, the model-output SQNR when only its weights are
quantized; for every quantized activation tensor, the output SQNR when only that tensor is
(on every slot it is stored in). Both are measured by simulation on held-out samples. Perturbing
one place leaves everything before it exact, so only the part of the graph downstream of it is
run again, from the float model's cached tensors: an analysis costs about half a model run per
place instead of a whole one.

Noise from independent places adds up in power at the outputs, so each place's share of the
output noise tells which remedies a target SQNR needs and in what order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from qtool.model import Model, Subgraph
from qtool.model.calls import call_sites
from qtool.model.edit import clone_model
from qtool.numerics import SqnrAccumulator
from qtool.quantize.plan import Plan, Slot
from qtool.quantize.simulate import Parts, Simulator, simulation_model
from qtool.runtime import Engine
from qtool.runtime.engine import OPAQUE_TYPES, join_chunks
from qtool.runtime.state import keeps_state

MAX_SAMPLES = 16  # a ranking of places needs a few samples, not the whole fold
# Every weight and no activation quantized, and the reverse (the subgraphs control flow runs
# stay as their plans quantize them in both).
WEIGHTS = Parts(slots=())
ACTIVATIONS = Parts(weights=())


@dataclass(frozen=True)
class Place:
    """A place where quantization adds noise: an operator's weights or an activation tensor."""

    kind: str  # "weights" | "activation" | "calls"
    # the operator (weights), the producer of the tensor (activation), or the control-flow
    # operator whose subgraphs are quantized (calls)
    op_index: int
    tensor: int  # the weight tensor, the activation tensor, or the call's first output
    slots: tuple[Slot, ...] = ()  # activation: every slot the tensor is stored in

    def parts(self) -> Parts:
        """The part of the quantization that is this place alone, for the simulation."""
        if self.kind == "weights":
            return Parts(weights={self.op_index}, slots=(), bodies=False)
        if self.kind == "calls":
            return Parts(weights=(), slots=(), bodies=True)
        return Parts(weights=(), slots=set(self.slots), bodies=False)


@dataclass
class Sensitivity:
    """Each output's SQNR (dB) when only one place is quantized."""

    place: Place
    name: str  # tensor name
    op_type: str
    output_sqnr: list[float]  # per model output, only this place quantized

    @property
    def worst_db(self) -> float:
        """The lowest output SQNR (dB); inf when there are no outputs."""
        return min(self.output_sqnr, default=float("inf"))


def places(model: Model, plan: Plan) -> list[Place]:
    """Every operator with planned weights, every activation stored in some slot, and every
    control-flow operator whose subgraphs are quantized (their noise, as one place)."""
    subgraph = model.subgraphs[plan.subgraph_index]
    found = [
        Place("weights", i, subgraph.operators[i].inputs[layer.weight_position])
        for i, layer in sorted(plan.weights.items())
    ]
    slots: dict[int, list[Slot]] = {}
    for slot in list(plan.writes.values()) + list(plan.reads.values()):
        if not model.is_constant(subgraph.tensors[slot[0]]):
            slots.setdefault(slot[0], []).append(slot)
    producers = subgraph.producers()
    for t, tensor_slots in sorted(slots.items()):
        producer = producers.get(t, -1)
        found.append(Place("activation", producer, t, tuple(dict.fromkeys(tensor_slots))))
    for site in call_sites(model, plan.subgraph_index):
        if plan.bodies.keys() & set(site.bodies):
            op = subgraph.operators[site.op_index]
            found.append(Place("calls", site.op_index, op.outputs[0] if op.outputs else -1))
    return found


def _descendants(subgraph: Subgraph, start: Iterable[int]) -> set[int]:
    """Operators reachable from `start` (included) through the tensors they produce."""
    consumers = subgraph.consumers()
    seen, stack = set(), list(start)
    while stack:
        i = stack.pop()
        if i in seen or i < 0:
            continue
        seen.add(i)
        for t in subgraph.operators[i].outputs:
            stack.extend(consumers.get(t, []))
    return seen


def _suffix_model(model: Model, subgraph_index: int, keep: set[int]) -> Model:
    """`model` reduced to the operators `keep` (in order); their other inputs become inputs."""
    sub = clone_model(model)
    subgraph = sub.subgraphs[subgraph_index]
    ops = [op for i, op in enumerate(subgraph.operators) if i in keep]
    produced = {t for op in ops for t in op.outputs}
    frontier = []
    for op in ops:
        for t in op.inputs:
            tensor = subgraph.tensors[t] if t >= 0 else None
            # A variable tensor is the operator's state, which the suffix keeps itself.
            if tensor and t not in produced and not (sub.is_constant(tensor) or tensor.is_variable):
                frontier.append(t)
    subgraph.operators = ops
    subgraph.inputs = list(dict.fromkeys(frontier))
    subgraph.outputs = [t for t in subgraph.outputs if t in produced]
    sub.signature_defs = []
    return sub


class FloatTensors:
    """Every tensor of the float model on some samples, as the engine holds them."""

    def __init__(self, model: Model, subgraph_index: int, inputs: Sequence[np.ndarray]) -> None:
        self.samples = int(inputs[0].shape[0])
        chunks: dict[int, list[np.ndarray]] = {}

        subgraph = model.subgraphs[subgraph_index]

        def keep(t: int, value: np.ndarray) -> None:
            if subgraph.tensors[t].dtype not in OPAQUE_TYPES:  # a resource handle: no data
                chunks.setdefault(t, []).append(np.array(value))

        engine = Engine(model, subgraph_index)
        self.outputs = engine.run(inputs, observers=[keep])
        self.values = {t: join_chunks(parts) for t, parts in chunks.items()}
        # Computed from constants when the engine was built (a DEQUANTIZE of float16 weights
        # that a model output keeps): never observed, the same for every sample.
        self.constants = engine.constants
        self.subgraph = subgraph

    def feed(self, t: int, batched: bool) -> np.ndarray:
        """Tensor t as a model input with one row per sample: its declared leading 1 replaced
        by the rows when the model's inputs are `batched` (all declared with a leading 1, as
        the engine reads them), else a row axis in front."""
        declared = self.subgraph.tensors[t].shape
        rows = (
            self.values[t].reshape(self.samples, *declared)
            if t in self.values
            else np.broadcast_to(self.constants[t], (self.samples, *declared))
        )
        return rows.reshape(self.samples, *declared[1:]) if batched else rows


class Analyzer:
    """Measures places of one plan against the float model on held-out samples."""

    def __init__(self, model: Model, plan: Plan, inputs: Sequence[np.ndarray]) -> None:
        self.model = model
        self.plan = plan
        inputs = [np.asarray(x)[:MAX_SAMPLES] for x in inputs]
        self.inputs = inputs
        self.float = FloatTensors(model, plan.subgraph_index, inputs)
        self.subgraph = model.subgraphs[plan.subgraph_index]
        # A model that keeps state computes each step from the state the earlier steps left:
        # no suffix of its graph runs apart from the rest, so every place runs it whole.
        self.whole = keeps_state(model, plan.subgraph_index)

    def output_sqnr(self, outputs: Sequence[np.ndarray]) -> list[float]:
        """Each output's SQNR (dB) against the float model's outputs on the same samples."""
        results = []
        for reference, got in zip(self.float.outputs, outputs, strict=True):
            accumulator = SqnrAccumulator()
            accumulator.add(reference, got)
            results.append(accumulator.db)
        return results

    def measure(self, place: Place) -> Sensitivity:
        """The outputs' SQNR with only `place` quantized, running again only the part of the
        simulated graph downstream of it, fed from the float model's tensors."""
        simulated = simulation_model(self.model, self.plan, place.parts())
        sim_graph = simulated.subgraphs[self.plan.subgraph_index]
        start = [place.op_index] if place.op_index >= 0 else []
        if place.kind == "activation":
            # Fake-quantization nodes reading the tensor (or its raw producer output) start too.
            start += [
                i
                for i, op in enumerate(sim_graph.operators)
                if simulated.op_type(op) == "QtoolFakeQuant"
            ]
        keep = (
            set(range(len(sim_graph.operators))) if self.whole else _descendants(sim_graph, start)
        )
        sub = _suffix_model(simulated, self.plan.subgraph_index, keep)
        sub_graph = sub.subgraphs[self.plan.subgraph_index]
        batched = sub_graph.inputs_lead_with_one()
        feeds = [self.float.feed(t, batched) for t in sub_graph.inputs]
        outputs = Engine(sub, self.plan.subgraph_index).run(feeds) if sub_graph.outputs else []
        perturbed = dict(zip(sub_graph.outputs, outputs, strict=True))
        # A suffix whose inputs lost the leading 1 (a scalar among them) holds its samples
        # in front of the declared shape: the same values as the reference's rows.
        final = [
            np.reshape(perturbed.get(t, reference), reference.shape)
            for t, reference in zip(self.subgraph.outputs, self.float.outputs, strict=True)
        ]
        name = self.subgraph.tensors[place.tensor].name
        op_type = (
            self.model.op_type(self.subgraph.operators[place.op_index])
            if place.op_index >= 0
            else "input"
        )
        return Sensitivity(place, name, op_type, self.output_sqnr(final))

    def full(self) -> list[float]:
        """Output SQNR of the whole plan."""
        return self.output_sqnr(Simulator(self.model, self.plan).run(self.inputs))

    def weights_alone(self) -> list[float]:
        """Output SQNR with every weight quantized and the activations float: what int16
        activations (16x8 kernels keep int8 weights) cannot remove."""
        return self.output_sqnr(Simulator(self.model, self.plan, WEIGHTS).run(self.inputs))

    def activations_alone(self) -> list[float]:
        """Output SQNR with every activation quantized and the weights float."""
        return self.output_sqnr(Simulator(self.model, self.plan, ACTIVATIONS).run(self.inputs))
