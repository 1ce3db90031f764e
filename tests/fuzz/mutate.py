"""Mutants of real models: structured edits of the decoded graph and byte-level edits of the file.

Structured mutators break one property a reader, engine, planner or rule might rely on (operand
indices, op arity, option tables, tensor types and shapes, constant buffers, graph order, names,
signatures, quantization parameters); byte-level mutators corrupt the flatbuffer itself, mostly
outside the weight buffers where a flip would only change a number. Everything is drawn from a
`random.Random`, so a (seed, base model) pair always gives the same mutant.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from qtool.model import (
    Model,
    Operator,
    QuantParams,
    Subgraph,
    Tensor,
    model_to_bytes,
    parse_model,
)
from qtool.model.reflect import union_members
from qtool.model.types import BuiltinOperator, dtype_name, numpy_dtype

Mutator = Callable[[Model, random.Random], bool]  # False when the mutant would equal its base

INT32_EDGES = (-(2**31), -2, -1, 0, 1, 2, 3, 7, 255, 2**16, 2**31 - 1)
DIMS = (0, 1, 2, 3, 5, 64, 1000, 2**20, 2**24, 2**31 - 1, -1, -2, -7)
FLOATS = (0.0, -1.0, 1e-45, 1e38, float("inf"), float("nan"), 3.5)
INT_CONSTANTS = ("INT32", "INT64", "INT16", "INT8", "UINT8")
NON_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80abc", b"name\xfe\xff")
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


# --------------------------------------------------------------------------- picking


def _subgraph(model: Model, rng: random.Random, with_ops: bool = True) -> Subgraph | None:
    candidates = [s for s in model.subgraphs if s.operators or not with_ops]
    return rng.choice(candidates) if candidates else None


def _operator(model: Model, rng: random.Random) -> tuple[Subgraph, Operator] | None:
    subgraph = _subgraph(model, rng)
    return None if subgraph is None else (subgraph, rng.choice(subgraph.operators))


def _tensor_index(subgraph: Subgraph, rng: random.Random) -> int:
    """A tensor index: mostly valid, sometimes -1 or past the end."""
    roll = rng.random()
    if roll < 0.75 and subgraph.tensors:
        return rng.randrange(len(subgraph.tensors))
    if roll < 0.85:
        return -1
    return len(subgraph.tensors) + rng.randrange(4)


def _constant_tensors(model: Model, subgraph: Subgraph) -> list[Tensor]:
    return [t for t in subgraph.tensors if model.is_constant(t)]


def _int_like(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


# --------------------------------------------------------------------------- structured


def op_input(model: Model, rng: random.Random) -> bool:
    picked = _operator(model, rng)
    if picked is None:
        return False
    subgraph, op = picked
    if not op.inputs:
        op.inputs = [_tensor_index(subgraph, rng)]
        return True
    op.inputs[rng.randrange(len(op.inputs))] = _tensor_index(subgraph, rng)
    return True


def op_output(model: Model, rng: random.Random) -> bool:
    picked = _operator(model, rng)
    if picked is None:
        return False
    subgraph, op = picked
    choices = [_tensor_index(subgraph, rng)]
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
    picked = _operator(model, rng)
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
            operands.append(_tensor_index(subgraph, rng))
    return True


def op_type(model: Model, rng: random.Random) -> bool:
    """Another operator code: the op's operands no longer fit what it computes."""
    picked = _operator(model, rng)
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
    picked = _operator(model, rng)
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
    elif _int_like(value):
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


def tensor_type(model: Model, rng: random.Random) -> bool:
    subgraph = _subgraph(model, rng, with_ops=False)
    if subgraph is None or not subgraph.tensors:
        return False
    tensor = rng.choice(subgraph.tensors)
    tensor.dtype = rng.choice((*range(19), 19, 42, 127, -1))
    return True


def tensor_shape(model: Model, rng: random.Random) -> bool:
    """A changed dim, a changed rank, or an absurd element count."""
    subgraph = _subgraph(model, rng, with_ops=False)
    if subgraph is None or not subgraph.tensors:
        return False
    if rng.random() < 0.4 and subgraph.inputs:  # inputs and outputs are where shapes matter most
        tensor = subgraph.tensors[
            rng.choice(subgraph.inputs + subgraph.outputs) % len(subgraph.tensors)
        ]
    else:
        tensor = rng.choice(subgraph.tensors)
    shape = list(tensor.shape)
    roll = rng.random()
    if roll < 0.5 and shape:
        shape[rng.randrange(len(shape))] = rng.choice(DIMS)
    elif roll < 0.7:
        shape.insert(rng.randint(0, len(shape)), rng.choice((1, 2, 3)))
    elif roll < 0.85 and shape:
        del shape[rng.randrange(len(shape))]
    else:
        shape = [rng.choice(DIMS) for _ in range(rng.choice((0, 1, 4, 9, 40)))]
    tensor.shape = shape
    if rng.random() < 0.5:
        tensor.shape_signature = list(shape)
    return True


def shape_signature(model: Model, rng: random.Random) -> bool:
    subgraph = _subgraph(model, rng, with_ops=False)
    if subgraph is None or not subgraph.tensors:
        return False
    tensor = rng.choice(subgraph.tensors)
    tensor.shape_signature = [rng.choice(DIMS) for _ in range(rng.randint(0, 5))]
    return True


def tensor_buffer(model: Model, rng: random.Random) -> bool:
    """A constant made an activation, an activation made a constant, buffers shared or missing."""
    subgraph = _subgraph(model, rng, with_ops=False)
    if subgraph is None or not subgraph.tensors:
        return False
    tensor = rng.choice(subgraph.tensors)
    tensor.buffer = rng.choice(
        (0, rng.randrange(len(model.buffers)), len(model.buffers), len(model.buffers) + 9, -1)
    )
    return True


def buffer_data(model: Model, rng: random.Random) -> bool:
    """An empty, truncated or padded weight buffer."""
    full = [b for b in model.buffers if b.nbytes]
    if not full:
        return False
    buffer = rng.choice(full)
    roll = rng.random()
    if roll < 0.4:
        buffer.data = None
    elif roll < 0.8:
        buffer.data = buffer.data[: rng.randrange(buffer.nbytes)]
    else:
        buffer.data = np.concatenate([buffer.data, np.zeros(rng.randint(1, 8), np.uint8)])
    return True


def constant_values(model: Model, rng: random.Random) -> bool:
    """Float weights that are NaN, infinite, huge or all zero."""
    subgraph = _subgraph(model, rng, with_ops=False)
    constants = [
        i
        for i, t in enumerate(subgraph.tensors if subgraph else [])
        if model.is_constant(t) and t.dtype == 0 and t.sparsity is None
    ]
    if not constants:
        return False
    index = rng.choice(constants)
    raw = model.buffers[subgraph.tensors[index].buffer].data
    if raw.size % 4:  # an earlier edit broke the buffer: nothing to read values from
        return False
    values = np.array(raw.view(np.float32), dtype=np.float32)  # flat: shapes may be edited
    flat = values
    if flat.size:
        chosen = rng.choice(FLOATS)
        if rng.random() < 0.5:
            flat[rng.randrange(flat.size)] = chosen
        else:
            flat[:] = chosen
    tensor = subgraph.tensors[index]
    shape, signature = tensor.shape, tensor.shape_signature
    model.set_tensor_data(subgraph, index, values)
    tensor.shape, tensor.shape_signature = shape, signature
    return True


def int_constant_values(model: Model, rng: random.Random) -> bool:
    """Integer constants (shapes, axes, indices, paddings, permutations, slice specs) holding
    edge values: negative, past the end, huge."""
    subgraph = _subgraph(model, rng, with_ops=False)
    constants = [
        i
        for i, t in enumerate(subgraph.tensors if subgraph else [])
        if model.is_constant(t) and t.sparsity is None and dtype_name(t.dtype) in INT_CONSTANTS
    ]
    if not constants:
        return False
    index = rng.choice(constants)
    tensor = subgraph.tensors[index]
    raw = model.buffers[tensor.buffer].data
    dtype = numpy_dtype(tensor.dtype)
    if raw is None or raw.size == 0 or raw.size % dtype.itemsize:
        return False  # an earlier edit broke the buffer: nothing to read values from
    values = np.array(raw.view(dtype))  # flat: shapes may be edited
    limits = np.iinfo(values.dtype)
    pool = [v for v in (*INT32_EDGES, -3, 4, 5, 6) if limits.min <= v <= limits.max]
    if rng.random() < 0.7:
        values[rng.randrange(values.size)] = rng.choice(pool)
    else:
        values[:] = [rng.choice(pool) for _ in range(values.size)]
    shape, signature = tensor.shape, tensor.shape_signature
    model.set_tensor_data(subgraph, index, values)
    tensor.shape, tensor.shape_signature = shape, signature
    return True


def cycle(model: Model, rng: random.Random) -> bool:
    """An op reads what a later op writes (a cycle, or a read before the write)."""
    subgraph = _subgraph(model, rng)
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
    subgraph = _subgraph(model, rng)
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


def subgraph_io(model: Model, rng: random.Random) -> bool:
    subgraph = _subgraph(model, rng, with_ops=False)
    if subgraph is None:
        return False
    ends = subgraph.inputs if rng.random() < 0.5 else subgraph.outputs
    roll = rng.random()
    if roll < 0.3 and ends:
        del ends[rng.randrange(len(ends))]
    elif roll < 0.5 and ends:
        ends.append(ends[0])
    elif roll < 0.6:
        ends.clear()
    else:
        ends.append(_tensor_index(subgraph, rng))
    return True


def names(model: Model, rng: random.Random) -> bool:
    """Names that are not UTF-8: tensors, signatures, subgraphs, metadata, custom codes."""
    raw = rng.choice(NON_UTF8)
    roll = rng.random()
    subgraph = rng.choice(model.subgraphs)
    if roll < 0.45 and subgraph.tensors:
        tensor = subgraph.tensors[
            rng.choice(subgraph.inputs + subgraph.outputs or [0]) % len(subgraph.tensors)
        ]
        if rng.random() < 0.5:
            tensor = rng.choice(subgraph.tensors)
        tensor.name = raw + tensor.name.encode() if isinstance(tensor.name, str) else raw
    elif roll < 0.65 and model.signature_defs:
        signature = rng.choice(model.signature_defs)
        if rng.random() < 0.5:
            signature["signature_key"] = raw
        else:
            entries = (signature["inputs"] or []) + (signature["outputs"] or [])
            if not entries:
                return False
            rng.choice(entries)["name"] = raw
    elif roll < 0.75:
        subgraph.name = raw
    elif roll < 0.85:
        model.description = raw
    elif roll < 0.93 and model.metadata:
        rng.choice(model.metadata)["name"] = raw
    else:
        model.operator_codes.append(
            model.operator_codes[0].__class__(builtin_code=BuiltinOperator.CUSTOM, custom_code=raw)
        )
        if subgraph.operators:
            rng.choice(subgraph.operators).opcode_index = len(model.operator_codes) - 1
    return True


def signatures(model: Model, rng: random.Random) -> bool:
    if not model.signature_defs:
        return False
    signature = rng.choice(model.signature_defs)
    roll = rng.random()
    entries = (signature["inputs"] or []) + (signature["outputs"] or [])
    if roll < 0.25:
        signature["subgraph_index"] = rng.choice((1, 2, -1, 7))
    elif roll < 0.5 and entries:
        rng.choice(entries)["tensor_index"] = rng.choice((0, 1, -1, 10**6, rng.randrange(50)))
    elif roll < 0.7:
        model.signature_defs.append(dict(signature))  # the same key twice
    elif roll < 0.85:
        signature[rng.choice(("inputs", "outputs"))] = []
    else:
        model.signature_defs.clear()
    return True


def quantization(model: Model, rng: random.Random) -> bool:
    """Quantization parameters on a float tensor, or broken ones: counts, axis, values."""
    subgraph = _subgraph(model, rng, with_ops=False)
    if subgraph is None or not subgraph.tensors:
        return False
    tensor = rng.choice(subgraph.tensors)
    count = rng.choice((0, 1, 1, 2, 3, 16))
    scale = [rng.choice((*FLOATS, 0.1, 0.5)) for _ in range(count)]
    zero_point = [
        rng.choice((0, 0, -128, 127, 300, -(2**40))) for _ in range(rng.choice((count, 1, 0)))
    ]
    params = QuantParams(
        scale=np.array(scale, np.float32),
        zero_point=np.array(zero_point, np.int64),
        quantized_dimension=rng.choice((0, 0, 1, 3, 7, -1)),
    )
    if rng.random() < 0.3:
        params.min = np.array([rng.choice(FLOATS)], np.float32)
        params.max = np.array([rng.choice(FLOATS)], np.float32)
    tensor.quantization = params
    return True


def intermediates(model: Model, rng: random.Random) -> bool:
    subgraph = _subgraph(model, rng)
    if subgraph is None:
        return False
    rng.choice(subgraph.operators).intermediates = [
        _tensor_index(subgraph, rng) for _ in range(rng.randint(1, 3))
    ]
    return True


def sparsity(model: Model, rng: random.Random) -> bool:
    """A sparsity table on a dense constant, or an empty one."""
    subgraph = _subgraph(model, rng, with_ops=False)
    constants = _constant_tensors(model, subgraph) if subgraph else []
    if not constants:
        return False
    tensor = rng.choice(constants)
    tensor.sparsity = {
        "traversal_order": np.array(rng.sample(range(4), rng.randint(0, 4)), np.int32),
        "block_map": None,
        "dim_metadata": None,
    }
    return True


STRUCTURED: dict[str, Mutator] = {
    f.__name__: f
    for f in (
        op_input,
        op_output,
        op_arity,
        op_type,
        opcode,
        options_table,
        option_value,
        tensor_type,
        tensor_shape,
        shape_signature,
        tensor_buffer,
        buffer_data,
        constant_values,
        int_constant_values,
        cycle,
        op_order,
        subgraph_io,
        names,
        signatures,
        quantization,
        intermediates,
        sparsity,
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


# --------------------------------------------------------------------------- byte level


def _weight_spans(base: bytes) -> list[tuple[int, int]]:
    """Where the weight buffers lie in the file (flips there only change numbers)."""
    model = parse_model(base)
    origin = np.frombuffer(base, np.uint8).__array_interface__["data"][0]
    spans = []
    for buffer in model.buffers:
        if buffer.nbytes:
            start = buffer.data.__array_interface__["data"][0] - origin
            if 0 <= start < len(base):
                spans.append((start, start + buffer.nbytes))
    return spans


def _structure_position(size: int, spans: list[tuple[int, int]], rng: random.Random) -> int:
    for _ in range(20):
        position = rng.randrange(size)
        if not any(a <= position < b for a, b in spans):
            return position
    return rng.randrange(size)


def byte_mutant(base: bytes, rng: random.Random, spans: list[tuple[int, int]]) -> tuple[bytes, str]:
    blob = bytearray(base)
    roll = rng.random()
    if roll < 0.35:
        for _ in range(rng.randint(1, 12)):
            position = _structure_position(len(blob), spans, rng)
            blob[position] ^= 1 << rng.randrange(8)
        return bytes(blob), "bitflip"
    if roll < 0.55:
        for _ in range(rng.randint(1, 4)):
            position = _structure_position(len(blob) - 4, spans, rng) & ~3
            value = rng.choice((0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(blob), len(blob) + 8))
            blob[position : position + 4] = value.to_bytes(4, "little")
        return bytes(blob), "word"
    if roll < 0.7:
        return bytes(blob[: rng.randrange(8, len(blob))]), "truncate"
    if roll < 0.8:
        start = _structure_position(len(blob), spans, rng)
        end = min(len(blob), start + rng.randint(1, 64))
        blob[start:end] = bytes(end - start)
        return bytes(blob), "zero"
    if roll < 0.9:
        start = rng.randrange(len(blob))
        chunk = blob[start : start + rng.randint(1, 256)]
        at = rng.randrange(len(blob))
        return bytes(blob[:at] + chunk + blob[at:]), "splice"
    position = _structure_position(len(blob), spans, rng)
    blob[position] = rng.randrange(256)
    return bytes(blob), "byte"
