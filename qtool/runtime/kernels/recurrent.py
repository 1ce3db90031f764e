"""Recurrent layers: UNIDIRECTIONAL_SEQUENCE_LSTM (a whole sequence per invocation) and LSTM (one
step), with TFLite's float semantics (lstm_eval.cc: LstmStepFloat and the functions it calls).

Every variant TFLite's full kernel has: CIFG (no input gate: 1 - forget), peephole weights,
projection (with optional bias and clip), layer normalisation of the gates, cell clip, time-major
or batch-major inputs, diagonal recurrent weights. The output and cell states are variable
tensors: each invocation starts from the states the last one left (`ModelState`), and leaves its
final states there.

For calibration the kernel reports what the integer kernel needs to know the range of
(`ModelState.observe`): the output state and the cell state at every step, and, when the operator
lists intermediate tensors (the converter's five, qtool's prepare adds them), each gate's
pre-activation sum before layer normalisation (intermediates 0-3, in gate order input, forget,
cell, output) and the hidden state before projection (intermediate 4).
"""

from __future__ import annotations

import numpy as np

from qtool.errors import ModelError
from qtool.model.types import ActivationFunctionType
from qtool.runtime.kernels.activations import sigmoid
from qtool.runtime.registry import OpContext, kernel, never

# Operand positions of the full LSTM kernels (TFLite's lstm_shared.h), gates in the order
# input, forget, cell, output.
INPUT = 0
INPUT_WEIGHTS = (1, 2, 3, 4)
RECURRENT_WEIGHTS = (5, 6, 7, 8)
PEEPHOLE_WEIGHTS = (9, 10, None, 11)  # the cell gate has none
GATE_BIASES = (12, 13, 14, 15)
PROJECTION_WEIGHTS = 16
PROJECTION_BIAS = 17
OUTPUT_STATE = 18
CELL_STATE = 19
LAYER_NORM_WEIGHTS = (20, 21, 22, 23)
GATES = 4
HIDDEN_INTERMEDIATE = 4  # the intermediate holding output gate * activation(cell state)

_LAYER_NORM_EPSILON = np.float32(1e-8)  # kNormalizationConstant of MeanStddevNormalization


def _activation(code: int, x: np.ndarray) -> np.ndarray:
    """ApplyActivationToVector: the LSTM's `activation` option (TANH for Keras's LSTM)."""
    if code == ActivationFunctionType.TANH:
        return np.tanh(x)
    if code == ActivationFunctionType.RELU:
        return np.maximum(x, 0)
    if code == ActivationFunctionType.RELU6:
        return np.clip(x, 0, 6)
    if code == ActivationFunctionType.RELU_N1_TO_1:
        return np.clip(x, -1, 1)
    if code == ActivationFunctionType.SIGN_BIT:
        return np.signbit(x).astype(x.dtype)
    if code == ActivationFunctionType.NONE:
        return x
    raise ModelError(f"LSTM activation {code} is not one TFLite's kernels apply")


def _normalised(x: np.ndarray) -> np.ndarray:
    """MeanStddevNormalization: each row to zero mean and unit variance."""
    mean = x.mean(axis=-1, keepdims=True)
    variance = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + _LAYER_NORM_EPSILON)


class _Cell:
    """The constant operands of one LSTM operator, read once per invocation."""

    def __init__(self, ctx: OpContext) -> None:
        def get(position: int | None) -> np.ndarray | None:
            if position is None:
                return None
            value = ctx.input(position)
            return None if value is None else np.asarray(value, np.float32)

        self.input_weights = [get(p) for p in INPUT_WEIGHTS]
        self.recurrent_weights = [get(p) for p in RECURRENT_WEIGHTS]
        self.peephole = [get(p) for p in PEEPHOLE_WEIGHTS]
        self.biases = [get(p) for p in GATE_BIASES]
        self.layer_norm = [get(p) for p in LAYER_NORM_WEIGHTS]
        self.projection = get(PROJECTION_WEIGHTS)
        self.projection_bias = get(PROJECTION_BIAS)
        self.cifg = self.input_weights[0] is None
        self.activation = int(ctx.option("fused_activation_function"))
        self.cell_clip = float(ctx.option("cell_clip") or 0.0)
        self.proj_clip = float(ctx.option("proj_clip") or 0.0)

    def project(self, steps: np.ndarray) -> None:
        """The input weights' products with every step of a [time, batch, features] sequence,
        as one matrix product per gate (they do not depend on the state), and the recurrent
        weights of all gates stacked for one product per step."""
        rows = steps.reshape(-1, steps.shape[-1])
        self.projected = [
            None if w is None else (rows @ w.T).reshape(*steps.shape[:2], -1)
            for w in self.input_weights
        ]
        full = [w for w in self.recurrent_weights if w is not None]
        self.stacked = np.concatenate(full) if full and all(w.ndim == 2 for w in full) else None
        ends = np.cumsum([0 if w is None else len(w) for w in self.recurrent_weights])
        self.columns = [
            None if w is None else slice(end - len(w), end)
            for w, end in zip(self.recurrent_weights, ends, strict=True)
        ]

    def _recurrent(self, h: np.ndarray) -> list[np.ndarray | None]:
        """Each gate's recurrent term for state h."""
        if self.stacked is None:
            return [
                None if w is None else (h * w if w.ndim == 1 else h @ w.T)
                for w in self.recurrent_weights
            ]
        product = h @ self.stacked.T
        return [None if part is None else product[:, part] for part in self.columns]

    def gate(self, k: int, t: int, recurrent: list, c: np.ndarray, pre: list) -> np.ndarray:
        """CalculateLstmGateFloat of gate k at step t, before its activation; the sum before
        layer normalisation goes to `pre[k]`."""
        acc = self.projected[k][t] + recurrent[k]
        if self.peephole[k] is not None:
            acc += self.peephole[k] * c
        pre[k] = acc
        bias = self.biases[k]
        if self.layer_norm[k] is not None:
            acc = _normalised(acc) * self.layer_norm[k]
        return acc if bias is None else acc + bias

    def step(
        self, t: int, h: np.ndarray, c: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """LstmStepFloat of step t of the projected sequence on [batch, ...] rows: the new
        output and cell states, and the intermediates (four gate sums, the hidden state
        before projection)."""
        pre: list = [None] * GATES
        recurrent = self._recurrent(h)
        input_gate = None if self.cifg else sigmoid(self.gate(0, t, recurrent, c, pre))
        forget = sigmoid(self.gate(1, t, recurrent, c, pre))
        if self.cifg:
            input_gate, pre[0] = 1 - forget, np.zeros_like(forget)
        candidate = _activation(self.activation, self.gate(2, t, recurrent, c, pre))
        c = forget * c + input_gate * candidate
        if self.cell_clip > 0:
            c = np.clip(c, -self.cell_clip, self.cell_clip)
        output_gate = sigmoid(self.gate(3, t, recurrent, c, pre))  # peephole: the new c
        hidden = output_gate * _activation(self.activation, c)
        h = hidden
        if self.projection is not None:
            h = hidden @ self.projection.T
            if self.projection_bias is not None:
                h = h + self.projection_bias
            if self.proj_clip > 0:
                h = np.clip(h, -self.proj_clip, self.proj_clip)
        return h.astype(np.float32), c.astype(np.float32), [*pre, hidden]


def _run(ctx: OpContext, sequence: np.ndarray, time_axis: int) -> np.ndarray:
    """The cell over `sequence` along `time_axis` (0 or 1 of a rank-3 input), states carried in
    and out of the run's state; every step of the states and intermediates observed."""
    cell = _Cell(ctx)
    op, state = ctx.op, ctx.state
    h = np.asarray(ctx.inputs[OUTPUT_STATE], np.float32)
    c = np.asarray(ctx.inputs[CELL_STATE], np.float32)
    state_shapes = h.shape, c.shape
    batch = sequence.shape[1 - time_axis]
    h, c = h.reshape(batch, -1), c.reshape(batch, -1)
    outputs, hs, cs = [], [h], [c]
    seen: list[list[np.ndarray]] = [[] for _ in op.intermediates]
    steps = np.asarray(sequence if time_axis == 0 else np.swapaxes(sequence, 0, 1), np.float32)
    cell.project(steps)
    for t in range(steps.shape[0]):
        h, c, intermediates = cell.step(t, h, c)
        outputs.append(h)
        hs.append(h)
        cs.append(c)
        for kept, value in zip(seen, intermediates, strict=False):
            kept.append(value)
    if state is not None:
        state.set_variable(ctx.subgraph, op.inputs[OUTPUT_STATE], h.reshape(state_shapes[0]))
        state.set_variable(ctx.subgraph, op.inputs[CELL_STATE], c.reshape(state_shapes[1]))
        state.observe(op.inputs[OUTPUT_STATE], np.stack(hs))
        state.observe(op.inputs[CELL_STATE], np.stack(cs))
        for t, values in zip(op.intermediates, seen, strict=True):
            if t >= 0:
                state.observe(t, np.stack(values))
    return np.stack(outputs, axis=time_axis)


@kernel("UNIDIRECTIONAL_SEQUENCE_LSTM", batch=never)
def unidirectional_sequence_lstm(ctx: OpContext) -> np.ndarray:
    """UNIDIRECTIONAL_SEQUENCE_LSTM: [batch, time, input] (or time-major [time, batch, input])
    to [batch, time, output]."""
    return _run(ctx, np.asarray(ctx.inputs[INPUT]), 0 if ctx.option("time_major") else 1)


@kernel("LSTM", batch=never)
def lstm(ctx: OpContext) -> np.ndarray:
    """LSTM (the full kernel): one step, [batch, input] to [batch, output]."""
    if len(ctx.op.inputs) < 20:
        raise ModelError(f"operator {ctx.index} (LSTM): the basic 5-input kernel is not supported")
    return _run(ctx, np.asarray(ctx.inputs[INPUT])[None], 0)[0]
