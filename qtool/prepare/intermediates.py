"""Intermediate tensors of the integer LSTM, added before calibration.

LiteRT's integer UNIDIRECTIONAL_SEQUENCE_LSTM reads the scales of five intermediate tensors of
the operator (the spec file's `integer_lstm`: four gate sums, the hidden state). A float model
from TensorFlow's converter lists none; as the converter's calibration does, qtool adds them to
the float model, so that the engine reports their values (qtool.runtime.kernels.recurrent) and
calibration gives them ranges like any activation.
"""

from __future__ import annotations

from qtool.model import Model, Tensor, TensorType
from qtool.spec import integer_lstm

# What each intermediate holds, in the kernel's order (for the tensors' names).
_ROLES = ("input_gate_sum", "forget_gate_sum", "cell_gate_sum", "output_gate_sum", "hidden")


def add_intermediates(model: Model, subgraph_index: int) -> int:
    """Give every LSTM of the subgraph that lists no intermediates the ones its integer kernel
    reads (float, shape [0] as the converter writes them); returns how many operators changed."""
    facts = integer_lstm()
    subgraph = model.subgraphs[subgraph_index]
    changed = 0
    for op in subgraph.operators:
        if model.op_type(op) not in facts.ops or op.intermediates:
            continue
        base = subgraph.tensors[op.outputs[0]].name
        op.intermediates = [
            subgraph.add_tensor(Tensor(name=f"{base}/{role}", shape=[0], dtype=TensorType.FLOAT32))
            for role in _ROLES[: facts.intermediate_count]
        ]
        changed += 1
    return changed
