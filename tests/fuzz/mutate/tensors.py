"""Structured mutators of tensors and their buffers: types, shapes, buffers, constant values,
quantization parameters, sparsity."""

from __future__ import annotations

import random

import numpy as np

from qtool.model import Model, QuantParams
from qtool.model.types import dtype_name, numpy_dtype
from tests.fuzz.mutate.picking import (
    FLOATS,
    INT32_EDGES,
    constant_tensors,
    pick_subgraph,
    pick_tensor,
)

DIMS = (0, 1, 2, 3, 5, 64, 1000, 2**20, 2**24, 2**31 - 1, -1, -2, -7)
INT_CONSTANTS = ("INT32", "INT64", "INT16", "INT8", "UINT8")


def tensor_type(model: Model, rng: random.Random) -> bool:
    tensor = pick_tensor(model, rng)
    if tensor is None:
        return False
    tensor.dtype = rng.choice((*range(19), 19, 42, 127, -1))
    return True


def tensor_shape(model: Model, rng: random.Random) -> bool:
    """A changed dim, a changed rank, or an absurd element count."""
    subgraph = pick_subgraph(model, rng, with_ops=False)
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
    tensor = pick_tensor(model, rng)
    if tensor is None:
        return False
    tensor.shape_signature = [rng.choice(DIMS) for _ in range(rng.randint(0, 5))]
    return True


def tensor_buffer(model: Model, rng: random.Random) -> bool:
    """A constant made an activation, an activation made a constant, buffers shared or missing."""
    tensor = pick_tensor(model, rng)
    if tensor is None:
        return False
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
    subgraph = pick_subgraph(model, rng, with_ops=False)
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
    subgraph = pick_subgraph(model, rng, with_ops=False)
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


def quantization(model: Model, rng: random.Random) -> bool:
    """Quantization parameters on a float tensor, or broken ones: counts, axis, values."""
    tensor = pick_tensor(model, rng)
    if tensor is None:
        return False
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


def sparsity(model: Model, rng: random.Random) -> bool:
    """A sparsity table on a dense constant, or an empty one."""
    subgraph = pick_subgraph(model, rng, with_ops=False)
    constants = constant_tensors(model, subgraph) if subgraph else []
    if not constants:
        return False
    tensor = rng.choice(constants)
    tensor.sparsity = {
        "traversal_order": np.array(rng.sample(range(4), rng.randint(0, 4)), np.int32),
        "block_map": None,
        "dim_metadata": None,
    }
    return True
