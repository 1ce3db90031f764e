"""Structured mutants: one to three structured edits of a decoded model, encoded again."""

from __future__ import annotations

import random
from collections.abc import Callable

from qtool.model import Model, model_to_bytes, parse_model
from tests.fuzz.mutate import interface, operators, tensors

Mutator = Callable[[Model, random.Random], bool]  # False when the mutant would equal its base

STRUCTURED: dict[str, Mutator] = {
    f.__name__: f
    for f in (
        operators.op_input,
        operators.op_output,
        operators.op_arity,
        operators.op_type,
        operators.opcode,
        operators.options_table,
        operators.option_value,
        operators.cycle,
        operators.op_order,
        operators.intermediates,
        tensors.tensor_type,
        tensors.tensor_shape,
        tensors.shape_signature,
        tensors.tensor_buffer,
        tensors.buffer_data,
        tensors.constant_values,
        tensors.int_constant_values,
        tensors.quantization,
        tensors.sparsity,
        interface.subgraph_io,
        interface.names,
        interface.signatures,
    )
}


def structured_mutant(base: bytes, rng: random.Random, edits: int = 0) -> tuple[bytes, str] | None:
    """One to three structured edits of a model; None when none applied or it cannot be encoded."""
    model = parse_model(base)
    applied = []
    for _ in range(edits or rng.choice((1, 1, 1, 2, 3))):
        name = rng.choice(sorted(STRUCTURED))
        if STRUCTURED[name](model, rng):
            applied.append(name)
    if not applied:
        return None
    try:
        return model_to_bytes(model), "+".join(applied)
    except Exception:  # a value the encoder cannot write (struct.error...): bytes cover those
        return None
