"""DEQUANTIZE, QUANTIZE and DENSIFY against LiteRT.

These ops need quantization parameters and sparse constants, which the one-op harness does not
declare, so the models are built here and compared whole: LiteRT runs them sample by sample, the
engine as one batch (constant DEQUANTIZE/DENSIFY being folded when the engine is built).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.model.graph import Model, QuantParams
from qtool.model.sparsity import densify
from qtool.model.types import DimensionType, TensorType
from qtool.numerics import pack_int4
from qtool.runtime import Engine
from tests.litert import run_litert_samples

DENSE, CSR = DimensionType.DENSE, DimensionType.SPARSE_CSR
SAMPLES = 3
INT_TYPES = {"int8": np.int8, "uint8": np.uint8, "int16": np.int16}


def compare(model: Model, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """Assert the engine's outputs equal LiteRT's, bit for bit: these ops round exactly once."""
    expected = run_litert_samples(model_to_bytes(model), feeds)
    got = Engine(model).run(feeds)
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape, e.dtype)
        np.testing.assert_array_equal(g, e)
    return got


def random_ints(dtype: type, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def add_to_input(builder: GraphBuilder, value: int, shape: list[int]) -> Model:
    """Finish a model whose output is a model input plus the float32 tensor `value`."""
    x = builder.input("x", [1, *shape])
    y = builder.op(
        "ADD",
        [x, value],
        output_shape=[1, *shape],
        options_type="AddOptions",
        options={"fused_activation_function": 0},
    )
    return builder.finish([y])


# ---------------------------------------------------------------------------------- DEQUANTIZE

SHAPE = [4, 5, 6]  # per sample; activations are [1, 4, 5, 6]

# (dtype, scale, zero point, quantized dimension of [1, 4, 5, 6] or None for per-tensor)
DEQUANTIZE_CASES = [
    ("float16", None, None, None),
    ("int8", 0.05, -3, None),
    ("int8", 0.5, 0, None),
    ("uint8", 0.02, 128, None),
    ("uint8", 1.5, 7, None),
    ("int16", 0.001, 0, None),
    ("int8", None, None, 1),
    ("int8", None, None, 3),
    ("uint8", None, None, 2),
]
NO_INT16_AXIS = pytest.mark.skip(reason="LiteRT has no per-axis int16 DEQUANTIZE")


def quant_params(
    dtype: str,
    scale: float | None,
    zero_point: int | None,
    axis: int | None,
    shape: list[int],
    rng: np.random.Generator,
) -> QuantParams:
    if axis is None:
        return QuantParams.of(scale, zero_point)
    n = shape[axis]
    zero = rng.integers(-10, 10, n) + (128 if dtype == "uint8" else 0)
    if dtype in ("int16", "int4"):
        zero = np.zeros(n)
    return QuantParams.of(rng.uniform(0.001, 0.1, n), zero, quantized_dimension=axis)


def quantized_tensor(
    builder: GraphBuilder,
    dtype: str,
    quant: QuantParams | None,
    shape: list[int],
    rng: np.random.Generator,
    constant: bool,
) -> int:
    """A float16/integer model input, or a constant with random contents (int4: packed)."""
    if not constant:
        np_dtype = np.float16 if dtype == "float16" else INT_TYPES[dtype]
        return builder.input("x", shape, np_dtype, quantization=quant)
    if dtype == "float16":
        return builder.constant("w", rng.standard_normal(shape).astype(np.float16))
    if dtype == "int4":
        packed = pack_int4(rng.integers(-8, 8, shape))
        return builder.tensor(
            "w", shape, TensorType.INT4, quant, buffer=builder.model.add_buffer(packed)
        )
    return builder.constant(
        "w", random_ints(INT_TYPES[dtype], tuple(shape), rng), quantization=quant
    )


@pytest.mark.parametrize(
    ("dtype", "scale", "zero_point", "axis", "constant"),
    [
        *((*case, constant) for case in DEQUANTIZE_CASES for constant in (False, True)),
        pytest.param("int16", None, None, 3, False, marks=NO_INT16_AXIS),
        ("int4", 0.1, 0, None, True),
        ("int4", 0.3, -2, None, True),
        ("int4", None, None, 2, True),
    ],
)
def test_dequantize(
    dtype: str, scale: float | None, zero_point: int | None, axis: int | None, constant: bool
) -> None:
    rng = np.random.default_rng(1)
    shape = [1, *SHAPE]
    quant = None if dtype == "float16" else quant_params(dtype, scale, zero_point, axis, shape, rng)
    builder = GraphBuilder()
    source = quantized_tensor(builder, dtype, quant, shape, rng, constant)
    dequantized = builder.op("DEQUANTIZE", [source], output_shape=shape)
    if constant:  # weights of a float model: folded by the engine, then added to an input
        model = add_to_input(builder, dequantized, SHAPE)
        feeds = [rng.standard_normal((SAMPLES, *SHAPE)).astype(np.float32)]
    else:
        model = builder.finish([dequantized])
        feeds = [
            rng.standard_normal((SAMPLES, *SHAPE)).astype(np.float16)
            if dtype == "float16"
            else random_ints(INT_TYPES[dtype], (SAMPLES, *SHAPE), rng)
        ]
    compare(model, feeds)


# ------------------------------------------------------------------------------------ QUANTIZE

# (dtype, scale, zero point, quantized dimension of [1, 4, 5, 6] or None for per-tensor)
QUANTIZE_CASES = [
    ("int8", 0.5, 0, None),  # a power-of-two scale puts many values exactly half way
    ("int8", 0.0123, -7, None),
    ("int8", 0.002, 100, None),  # most values saturate
    ("uint8", 0.25, 128, None),
    ("uint8", 0.031, 3, None),
    ("int16", 0.5, 0, None),
    ("int16", 3e-5, 0, None),
    ("int8", None, None, 3),
    ("int8", None, None, 1),
    ("uint8", None, None, 2),
]


@pytest.mark.parametrize(("dtype", "scale", "zero_point", "axis"), QUANTIZE_CASES)
def test_quantize(
    dtype: str, scale: float | None, zero_point: int | None, axis: int | None
) -> None:
    rng = np.random.default_rng(2)
    shape = [1, *SHAPE]
    quant = quant_params(dtype, scale, zero_point, axis, shape, rng)
    x = (rng.standard_normal((SAMPLES, *SHAPE)) * 3).astype(np.float32)
    x[:, 0] = np.round(x[:, 0] * 4) / 4  # quarter steps: exact halves of scale 0.5
    # Near-halves of the scale, where the float32 quotient TFLite takes rounds to an exact half
    # more often than a float64 one would.
    halves = rng.integers(-300, 300, x[:, 1].shape) + 0.5
    x[:, 1] = (halves * quant.scale[:1]).astype(np.float32)
    builder = GraphBuilder()
    inp = builder.input("x", shape)
    out = builder.tensor("q", shape, INT_TYPES[dtype], quant)
    builder.op("QUANTIZE", [inp], [out])
    compare(builder.finish([out]), [x])


REQUANTIZE_CASES = [
    ("int8", 0.05, 3, "int8", 0.1, -5),
    ("int8", 0.05, 3, "int8", 0.02, 1),  # ratio > 1
    ("int8", 0.05, 3, "int8", 0.05, 3),  # identical parameters
    ("int8", 0.1, 0, "int8", 0.2, 0),  # odd inputs land exactly half way
    ("int8", 0.05, 0, "int8", 0.05 * 1000, 0),  # tiny ratio
    ("int8", 0.05, -128, "uint8", 0.05, 0),  # the +128 shift LiteRT has a fast path for
    ("int8", 0.07, 5, "uint8", 0.03, 130),
    ("uint8", 0.07, 128, "int8", 0.011, -2),
    ("uint8", 0.07, 120, "uint8", 0.3, 100),
    ("int16", 0.001, 0, "int16", 0.0007, 0),
    ("int16", 0.001, 0, "int8", 0.1, -4),
]


@pytest.mark.parametrize(
    ("in_dtype", "in_scale", "in_zero", "out_dtype", "out_scale", "out_zero"), REQUANTIZE_CASES
)
def test_requantize(
    in_dtype: str, in_scale: float, in_zero: int, out_dtype: str, out_scale: float, out_zero: int
) -> None:
    rng = np.random.default_rng(3)
    info = np.iinfo(INT_TYPES[in_dtype])
    # Every 8-bit value appears (the fixed-point roundings differ on few of them).
    everything = np.arange(info.min, min(info.max, info.min + 1023) + 1)
    x = rng.permutation(np.resize(everything, SAMPLES * int(np.prod(SHAPE))))
    x = x.reshape(SAMPLES, *SHAPE).astype(info.dtype)
    if info.bits == 16:
        x[:, 1:] = random_ints(info.dtype, (SAMPLES, *SHAPE), rng)[:, 1:]
    builder = GraphBuilder()
    inp = builder.input("x", [1, *SHAPE], INT_TYPES[in_dtype], QuantParams.of(in_scale, in_zero))
    out = builder.tensor(
        "q", [1, *SHAPE], INT_TYPES[out_dtype], QuantParams.of(out_scale, out_zero)
    )
    builder.op("QUANTIZE", [inp], [out])
    compare(builder.finish([out]), [x])


# ------------------------------------------------------------------------------------- DENSIFY


def encode_sparse(
    dense: np.ndarray,
    order: list[int],
    block_map: list[int],
    block_sizes: list[int],
    formats: list[int],
    index_type: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """A dense array in TFLite's sparse format: (stored values, SparsityParameters dict).

    A CSR level keeps the coordinates whose sub-tensor holds a nonzero; a DENSE level keeps all.
    """
    split, outer, inner = [], [], {}
    for d, size in enumerate(dense.shape):
        if d in block_map:
            block = block_sizes[block_map.index(d)]
            split += [size // block, block]
            inner[d] = len(split) - 1
        else:
            split.append(size)
        outer.append(len(split) - 1 - (d in block_map))
    expanded = dense.reshape(split).transpose(outer + [inner[d] for d in block_map])
    levels = expanded.transpose(order)
    segments: list[list[int]] = [[0] for _ in order]
    indices: list[list[int]] = [[] for _ in order]
    values: list[Any] = []

    def visit(sub: np.ndarray, level: int) -> None:
        if level == len(order):
            values.append(sub)
            return
        for i, child in enumerate(sub):
            if formats[level] == CSR:
                if not np.any(child):
                    continue
                indices[level].append(i)
            visit(child, level + 1)
        if formats[level] == CSR:
            segments[level].append(len(indices[level]))

    visit(levels, 0)
    index_dtype = {1: np.int32, 2: np.uint16, 3: np.uint8}[index_type]

    def vector(items: list[int]) -> dict[str, np.ndarray]:
        return {"values": np.array(items, index_dtype)}

    metadata = [
        {
            "format": DENSE,
            "dense_size": levels.shape[k],
            "array_segments_type": 0,
            "array_segments": None,
            "array_indices_type": 0,
            "array_indices": None,
        }
        if fmt == DENSE
        else {
            "format": CSR,
            "dense_size": 0,
            "array_segments_type": index_type,
            "array_segments": vector(segments[k]),
            "array_indices_type": index_type,
            "array_indices": vector(indices[k]),
        }
        for k, fmt in enumerate(formats)
    ]
    sparsity = {
        "traversal_order": np.array(order, np.int32),
        "block_map": np.array(block_map, np.int32) if block_map else None,
        "dim_metadata": metadata,
    }
    return np.array(values, dense.dtype).reshape(-1), sparsity


# (shape, traversal_order, block_map, block_sizes, level formats, array index type)
DENSIFY_CASES = [
    ([20], [0], [], [], [CSR], 3),
    ([6, 8], [0, 1], [], [], [DENSE, CSR], 1),  # CSR
    ([6, 8], [1, 0], [], [], [DENSE, CSR], 2),  # CSC
    ([6, 8], [0, 1], [], [], [CSR, CSR], 3),
    ([6, 8], [0, 1], [], [], [CSR, DENSE], 1),
    ([6, 8], [1, 0], [], [], [DENSE, DENSE], 1),
    ([8, 12], [0, 1, 2], [1], [4], [DENSE, CSR, DENSE], 1),  # 1x4 blocks, as TFLite makes
    ([8, 12], [0, 1, 2, 3], [0, 1], [2, 4], [DENSE, CSR, DENSE, DENSE], 2),
    ([8, 12], [1, 0, 3, 2], [0, 1], [2, 2], [DENSE, CSR, DENSE, DENSE], 3),
    ([8, 12], [0, 1, 3, 2], [0, 1], [4, 2], [CSR, CSR, DENSE, DENSE], 1),
    ([4, 6, 8], [2, 0, 1], [], [], [DENSE, CSR, CSR], 1),
    ([4, 6, 8], [1, 2, 0, 3], [2], [4], [CSR, DENSE, CSR, DENSE], 2),
    ([8, 3, 3, 4], [0, 1, 2, 3], [], [], [DENSE, DENSE, DENSE, CSR], 1),  # conv weights
    ([8, 3, 3, 4], [0, 3, 1, 2, 4], [0], [2], [DENSE, CSR, CSR, DENSE, DENSE], 3),
]
# Valid encodings that LiteRT decodes wrongly, checked against the original values only:
# LiteRT pairs block sizes with block dimensions assuming an ascending block_map, and reads the
# size of block k from level traversal_order[rank + k] (right only when the in-block traversal
# order is its own inverse).
MISREAD_BY_LITERT = [
    ([8, 12], [0, 1, 3, 2], [1, 0], [4, 2], [CSR, CSR, DENSE, DENSE], 1),
    ([4, 8, 6], [0, 1, 2, 4, 5, 3], [0, 1, 2], [2, 4, 3], [DENSE, CSR, CSR] + [DENSE] * 3, 1),
]


def sparse_dense(
    shape: list[int], block_map: list[int], block_sizes: list[int], rng: np.random.Generator
) -> np.ndarray:
    """Random weights where whole blocks (and some whole rows) are zero, plus scattered zeros."""
    dense = rng.standard_normal(shape)
    block_shape = [1] * len(shape)
    for d, size in zip(block_map, block_sizes, strict=True):
        block_shape[d] = size
    keep = rng.random([s // b for s, b in zip(shape, block_shape, strict=True)]) < 0.4
    for d, b in enumerate(block_shape):
        keep = np.repeat(keep, b, axis=d)
    keep[1] = False  # an empty slice along the first dimension
    return dense * keep * (rng.random(shape) < 0.8)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8])
@pytest.mark.parametrize(
    ("shape", "order", "block_map", "block_sizes", "formats", "index_type", "litert"),
    [(*case, True) for case in DENSIFY_CASES] + [(*case, False) for case in MISREAD_BY_LITERT],
    ids=str,
)
def test_densify(
    shape: list[int],
    order: list[int],
    block_map: list[int],
    block_sizes: list[int],
    formats: list[int],
    index_type: int,
    litert: bool,
    dtype: type,
) -> None:
    rng = np.random.default_rng(4)
    dense = sparse_dense(shape, block_map, block_sizes, rng)
    dense = (dense * 40).astype(dtype) if dtype == np.int8 else dense.astype(dtype)
    values, sparsity = encode_sparse(dense, order, block_map, block_sizes, formats, index_type)
    np.testing.assert_array_equal(densify(values, shape, sparsity), dense)

    builder = GraphBuilder()
    quant = QuantParams.of(0.05, 0) if dtype == np.int8 else None
    sparse = builder.tensor("sparse", shape, dtype, quant, buffer=builder.model.add_buffer(values))
    builder.subgraph.tensors[sparse].sparsity = sparsity
    expanded = builder.tensor("dense", shape, dtype, quant)
    builder.op("DENSIFY", [sparse], [expanded])
    if dtype != np.float32:
        expanded = builder.op("DEQUANTIZE", [expanded], output_shape=shape)
    model = add_to_input(builder, expanded, shape)
    x = rng.standard_normal((SAMPLES, *shape)).astype(np.float32)
    got = compare(model, [x])[0] if litert else Engine(model).run([x])[0]
    # LiteRT agreeing is not enough: both must have decoded the encoder's original values.
    weights = dense.astype(np.float32) * np.float32(0.05 if dtype == np.int8 else 1.0)
    np.testing.assert_array_equal(got, x + weights)
