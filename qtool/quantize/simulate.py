"""Simulated quantization: a float graph that computes what the planned integer model computes.

The simulation graph is the float model with the planned weights and biases replaced by their
dequantized values and a fake-quantization node (`QtoolFakeQuant`, a custom op of simulation
graphs only: round to the tensor's grid, clamp, map back to real values) wherever the integer
model stores a value: after every operator output written in a slot and before every input read
in a slot other than the one its producer wrote (a requantized copy, an int8 <-> int16 region
boundary, the quantized model input). It runs on qtool's numpy engine, batched, in a fraction
of the time two LiteRT runs take, and differs from LiteRT's integer kernels only by the rounding
inside kernels (fixed-point multipliers, lookup tables), well below the quantization noise
itself: tests compare both. One kernel rounding is simulated because it flips decisions rather
than adding noise: LiteRT's int8 comparisons rescale both operands to multiples of 2^-8 before
comparing (comparisons.cc, `left_shift = 8`), so values closer than that can compare equal.
Another is LiteRT's integer AVERAGE_POOL_2D, which rounds the mean of the raw codes with ties
away from zero: means of codes tie often (a 2x2 window's are quarters), and rounding them as
any other value put a tenth of its outputs one step off.

Parts of the quantization can be left out (only some layers' weights, only some activations)
to see which part of the error comes from where.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from qtool.model import Model, Operator, QuantParams, Tensor, TensorType
from qtool.model.edit import NameAllocator, clone_model
from qtool.numerics import fake_quantize, fake_quantize_mean, qrange
from qtool.quantize.plan import INT8, INT16, Plan, Slot
from qtool.quantize.recurrent import RecurrentOperands
from qtool.runtime import Engine, OpContext, register_custom_op
from qtool.runtime.registry import always

FAKE_QUANT = "QtoolFakeQuant"
_GRIDS = {INT8: np.int8, INT16: np.int16, "int32": np.int32}
COMPARISONS = frozenset(("EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"))
_COMPARISON_STEP = 2.0**-8
# Integer kernels that output the mean of their input codes, rounded their own way.
INTEGER_MEANS = frozenset(("AVERAGE_POOL_2D",))


def _fake_quant_kernel(ctx: OpContext) -> np.ndarray:
    q = ctx.output_tensor().quantization
    low, high = qrange(_GRIDS[q.extra["grid"]])
    snap = fake_quantize_mean if q.extra.get("mean") else fake_quantize
    return snap(ctx.inputs[0], q.scale[0], int(q.zero_point[0]), low, high)


register_custom_op(FAKE_QUANT, _fake_quant_kernel, batch=always)


@dataclass(frozen=True)
class Parts:
    """Which parts of the quantization a simulation applies (None: all of them)."""

    weights: Collection[int] | None = None  # operator indices whose weights are quantized
    slots: Collection[Slot] | None = None  # activation slots that are fake-quantized
    bodies: bool = True  # the subgraphs control flow runs, as their plans quantize them


ALL = Parts()


class _Builder:
    def __init__(self, model: Model, plan: Plan, parts: Parts) -> None:
        self.model = model  # a copy of the float model, edited in place
        self.plan = plan
        self.parts = parts
        self.subgraph = self.model.subgraphs[plan.subgraph_index]
        self.names = NameAllocator(self.subgraph)
        self.operators: list[Operator] = []
        self.holding: dict[int, Slot] = {}  # activation -> slot its current value is on
        self.copies: dict[Slot, int] = {}  # slot -> tensor holding the activation on it

    def _wanted(self, slot: Slot) -> bool:
        return self.parts.slots is None or slot in self.parts.slots

    def _new_tensor(self, like: int, name: str) -> int:
        original = self.subgraph.tensors[like]
        return self.subgraph.add_tensor(
            Tensor(
                name=self.names(name),
                shape=list(original.shape),
                dtype=TensorType.FLOAT32,
                shape_signature=original.shape_signature,
            )
        )

    def _fake_quant(self, source: int, slot: Slot, target: int, mean: bool = False) -> None:
        """Append `target = fake_quant(source)` on the grid of `slot`; `mean`: the value is
        the mean of integer codes, rounded as LiteRT's integer average does."""
        params = self.plan.params[slot]
        quantization = QuantParams.of(params.scale, params.zero_point)
        quantization.extra["grid"] = slot[1]
        quantization.extra["mean"] = mean
        self._append_fake_quant(source, quantization, target)

    def _append_fake_quant(self, source: int, quantization: QuantParams, target: int) -> None:
        self.subgraph.tensors[target].quantization = quantization
        self.operators.append(
            Operator(
                opcode_index=self.model.custom_opcode_for(FAKE_QUANT),
                inputs=[source],
                outputs=[target],
            )
        )

    def _set_weights(self, op_index: int, op: Operator) -> None:
        layer = self.plan.weights.get(op_index)
        if layer is None or not (self.parts.weights is None or op_index in self.parts.weights):
            return
        if isinstance(layer, RecurrentOperands):  # an LSTM: every constant operand
            for position, values in layer.real_constants().items():
                self.model.set_tensor_data(self.subgraph, op.inputs[position], values)
            return
        self.model.set_tensor_data(
            self.subgraph, op.inputs[layer.weight_position], layer.real_weights()
        )
        real_bias = layer.real_bias()
        if real_bias is None:
            return
        while len(op.inputs) <= layer.bias_position:
            op.inputs.append(-1)
        if op.inputs[layer.bias_position] < 0:
            op.inputs[layer.bias_position] = self.subgraph.add_tensor(
                Tensor(name=self.names("bias"), shape=[real_bias.size], dtype=TensorType.FLOAT32)
            )
        self.model.set_tensor_data(self.subgraph, op.inputs[layer.bias_position], real_bias)

    def _read(self, op_index: int, op: Operator) -> None:
        """Point each slot-read input of `op` at the activation's value on that slot."""
        for (i, position), slot in self.plan.reads.items():
            if i != op_index or not self._wanted(slot):
                continue
            t = op.inputs[position]
            tensor = self.subgraph.tensors[t]
            if self.model.is_constant(tensor):
                values = np.asarray(self.model.tensor_data(tensor), np.float32)
                params = self.plan.params[slot]
                low, high = qrange(_GRIDS[slot[1]])
                grid = fake_quantize(values, params.scale[0], int(params.zero_point[0]), low, high)
                op.inputs[position] = self.subgraph.add_tensor(
                    Tensor(
                        name=self.names(f"{tensor.name}/fq"),
                        shape=list(values.shape),
                        dtype=TensorType.FLOAT32,
                        buffer=self.model.add_buffer(grid),
                    )
                )
            elif self.holding.get(t) == slot:
                continue
            else:
                if slot not in self.copies:
                    self.copies[slot] = self._new_tensor(t, f"{tensor.name}/fq")
                    self._fake_quant(t, slot, self.copies[slot])
                op.inputs[position] = self.copies[slot]
        if self.plan.decisions[op_index].mode == INT8 and self.model.op_type(op) in COMPARISONS:
            self._compare_as_litert(op_index, op)

    def _compare_as_litert(self, op_index: int, op: Operator) -> None:
        """Snap the quantized operands of an int8 comparison to LiteRT's 2^-8 resolution."""
        for (i, position), slot in self.plan.reads.items():
            if i == op_index and self._wanted(slot):
                t = op.inputs[position]
                snapped = self._new_tensor(t, f"{self.subgraph.tensors[t].name}/compared")
                grid = QuantParams.of(np.array([_COMPARISON_STEP], np.float32), np.array([0]))
                grid.extra["grid"] = "int32"
                self._append_fake_quant(t, grid, snapped)
                op.inputs[position] = snapped

    def _integer_mean(self, op_index: int, op: Operator) -> bool:
        """Whether the op's integer kernel averages codes of its input's grid (AVERAGE_POOL_2D:
        same scale in and out, its input read on that grid)."""
        if self.model.op_type(op) not in INTEGER_MEANS:
            return False
        return self.plan.decisions[op_index].mode in (INT8, INT16) and self._wanted(
            self.plan.reads.get((op_index, 0), ())
        )

    def build(self) -> Model:
        writes = {}
        for (i, position), slot in self.plan.writes.items():
            writes.setdefault(i, []).append((position, slot))
        for i, op in enumerate(list(self.subgraph.operators)):
            self._set_weights(i, op)
            self._read(i, op)
            self.operators.append(op)
            for position, slot in writes.get(i, []):
                if not self._wanted(slot):
                    continue
                # The op writes a fresh tensor; the fake-quantized value keeps the original
                # index, which readers, graph outputs and observers refer to.
                t = op.outputs[position]
                raw = self._new_tensor(t, f"{self.subgraph.tensors[t].name}/float")
                op.outputs[position] = raw
                self._fake_quant(raw, slot, t, mean=self._integer_mean(i, op))
                self.holding[t] = slot
        self.subgraph.operators = self.operators
        return self.model


def simulation_model(model: Model, plan: Plan, parts: Parts = ALL) -> Model:
    """The float graph simulating `plan` (the `parts` of it) on `model`, which stays
    unchanged; with `parts.bodies`, the subgraphs its control flow runs too, as their plans
    (`Plan.bodies`) quantize them."""
    simulated = clone_model(model)
    _Builder(simulated, plan, parts).build()
    for body in plan.with_bodies()[1:] if parts.bodies else ():
        _Builder(simulated, body, ALL).build()
    return simulated


class Simulator:
    """Runs the simulation of a plan (or part of it) on batches of samples."""

    def __init__(self, model: Model, plan: Plan, parts: Parts = ALL) -> None:
        self.model = simulation_model(model, plan, parts)
        self.engine = Engine(self.model, plan.subgraph_index)

    def run(self, feeds: Sequence[np.ndarray], observers=()) -> list[np.ndarray]:
        """The simulated outputs for a batch of inputs (samples along axis 0; a sequence from
        the initial state, for a model that keeps state); observers see every tensor as the
        engine computes it."""
        self.engine.reset()
        return self.engine.run(feeds, observers=observers)
