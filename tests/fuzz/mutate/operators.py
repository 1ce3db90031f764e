"""Structured mutators of operators: operands, arity, operator codes, options, graph order."""

from __future__ import annotations

import random

import numpy as np

from qtool.model import Model
from qtool.model.reflect import union_members
from qtool.model.types import BuiltinOperator
from tests.fuzz.mutate.picking import (
    FLOATS,
    INT32_EDGES,
    int_like,
    pick_operator,
    pick_subgraph,
    pick_tensor_index,
)

# Builtins the numpy engine has kernels for: swapping an op to one of these reaches a kernel.
SWAP_TYPES = (
    "ADD",
    "AVERAGE_POOL_2D",
    "CONCATENATION",
    "CONV_2D",
    "DEPTHWISE_CONV_2D",
    "FULLY_CONNECTED",
    "GATHER",
    "MAX_POOL_2D",
    "MEAN",
    "MUL",
    "PACK",
    "PAD",
    "RESHAPE",
    "RESIZE_BILINEAR",
    "SLICE",
    "SOFTMAX",
    "SPLIT",
    "STRIDED_SLICE",
    "SUM",
    "TRANSPOSE",
    "TRANSPOSE_CONV",
    "BATCH_MATMUL",
    "SQUEEZE",
    "TILE",
    "LOGISTIC",
    "ARG_MAX",
    "DEQUANTIZE",
    "QUANTIZE",
)


def op_input(model: Model, rng: random.Random) -> bool:
    picked = pick_operator(model, rng)
    if picked is None:
        return False
    subgraph, op = picked
    if not op.inputs:
        op.inputs = [pick_tensor_index(subgraph, rng)]
        return True
    op.inputs[rng.randrange(len(op.inputs))] = pick_tensor_index(subgraph, rng)
    return True


def op_output(model: Model, rng: random.Random) -> bool:
    picked = pick_operator(model, rng)
    if picked is None:
        return False
    subgraph, op = picked
    choices = [pick_tensor_index(subgraph, rng)]
    choices += subgraph.inputs[:1]  # an op writing a model input
    others = [t for o in subgraph.operators if o is not op for t in o.outputs]
    choices += others[:1] + ([rng.choice(others)] if others else [])  # produced twice
    constant = [i for i, t in enumerate(subgraph.tensors) if model.is_constant(t)]
    choices += [rng.choice(constant)] if constant else []  # an op overwriting a constant
    if not op.outputs:
        op.outputs = [rng.choice(choices)]
    else:
        op.outputs[rng.randrange(len(op.outputs))] = rng.choice(choices)
    return True


def op_arity(model: Model, rng: random.Random) -> bool:
    picked = pick_operator(model, rng)
    if picked is None:
        return False
    subgraph, op = picked
    operands = op.inputs if rng.random() < 0.7 else op.outputs
    if operands and rng.random() < 0.5:
        del operands[rng.randrange(len(operands))]
    elif operands and rng.random() < 0.3:
        operands.clear()
    else:
        for _ in range(rng.randint(1, 3)):
            operands.append(pick_tensor_index(subgraph, rng))
    return True


def op_type(model: Model, rng: random.Random) -> bool:
    """Another operator code: the op's operands no longer fit what it computes."""
    picked = pick_operator(model, rng)
    if picked is None:
        return False
    _, op = picked
    if rng.random() < 0.5 and len(model.operator_codes) > 1:
        op.opcode_index = rng.randrange(len(model.operator_codes))
    else:
        op.opcode_index = model.opcode_for(rng.choice(SWAP_TYPES))
    return True


def opcode(model: Model, rng: random.Random) -> bool:
    """An operator code with an unknown builtin, a custom op without a code, or a bad version."""
    if not model.operator_codes:
        return False
    code = rng.choice(model.operator_codes)
    roll = rng.random()
    if roll < 0.4:
        code.builtin_code = rng.choice((-5, 206, 255, 1000, rng.randrange(210)))
    elif roll < 0.6:
        code.builtin_code, code.custom_code = BuiltinOperator.CUSTOM, rng.choice((None, "", "X"))
    else:
        code.version = rng.choice(INT32_EDGES)
    return True


def options_table(model: Model, rng: random.Random) -> bool:
    """A different (or no) options table for an op."""
    picked = pick_operator(model, rng)
    if picked is None:
        return False
    _, op = picked
    if rng.random() < 0.3:
        op.options_type, op.options = None, {}
    else:
        op.options_type, op.options = (
            rng.choice(sorted(union_members("BuiltinOptions").values())),
            {},
        )
    return True


def option_value(model: Model, rng: random.Random) -> bool:
    """An out-of-domain option value: padding 7, stride 0, axis 99, NaN alpha..."""
    ops = [op for s in model.subgraphs for op in s.operators if op.options]
    if not ops:
        return False
    op = rng.choice(ops)
    key = rng.choice(sorted(op.options))
    value = op.options[key]
    if isinstance(value, bool):
        op.options[key] = not value
    elif int_like(value):
        op.options[key] = rng.choice((-128, -1, 0, 2, 3, 7, 99, 127))
    elif isinstance(value, float):
        op.options[key] = rng.choice(FLOATS)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "iu":
        op.options[key] = np.array(
            [rng.choice(INT32_EDGES) for _ in range(rng.randint(0, 6))], np.int32
        )
    else:
        return False
    return True


def cycle(model: Model, rng: random.Random) -> bool:
    """An op reads what a later op writes (a cycle, or a read before the write)."""
    subgraph = pick_subgraph(model, rng)
    if subgraph is None or len(subgraph.operators) < 2:
        return False
    i = rng.randrange(len(subgraph.operators) - 1)
    j = rng.randrange(i + 1, len(subgraph.operators))
    early, late = subgraph.operators[i], subgraph.operators[j]
    if not (early.inputs and late.outputs):
        return False
    early.inputs[rng.randrange(len(early.inputs))] = rng.choice(late.outputs)
    return True


def op_order(model: Model, rng: random.Random) -> bool:
    """Operators removed, duplicated or swapped."""
    subgraph = pick_subgraph(model, rng)
    if subgraph is None:
        return False
    ops = subgraph.operators
    roll = rng.random()
    if roll < 0.4:
        del ops[rng.randrange(len(ops))]
    elif roll < 0.7:
        ops.insert(rng.randrange(len(ops) + 1), rng.choice(ops))
    elif len(ops) > 1:
        i, j = rng.sample(range(len(ops)), 2)
        ops[i], ops[j] = ops[j], ops[i]
    else:
        return False
    return True


def intermediates(model: Model, rng: random.Random) -> bool:
    subgraph = pick_subgraph(model, rng)
    if subgraph is None:
        return False
    rng.choice(subgraph.operators).intermediates = [
        pick_tensor_index(subgraph, rng) for _ in range(rng.randint(1, 3))
    ]
    return True
