"""Reductions, ARG_MAX/ARG_MIN and CUMSUM against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model.types import TensorType
from qtool.runtime.engine import Engine
from qtool.runtime.registry import OpContext
from tests.runtime.harness import Act, Const, build_single_op, check_op

SHAPE = (3, 4, 5, 6)  # three samples of [1, 4, 5, 6]

# Axis lists as a converter writes them, plus the odd ones TFLite accepts: negative, duplicated,
# unordered; those naming axis 0 make the engine run per sample or serially.
AXES = [
    [1],
    [2],
    [-1],
    [1, 2],
    [2, 1],
    [1, -1],
    [3, 3],
    [-1, 3, 1],
    [1, 2, 3],
    [0],
    [0, 2],
    [-4, 1, 2, 3],
]
# A full reduction without keep_dims gives a scalar per sample, which no batch can stack.
REDUCE_CASES = [
    pytest.param(axes, keep, id=f"{axes}-{'keep' if keep else 'drop'}")
    for axes in AXES
    for keep in (False, True)
    if keep or len(axes) < 4
]


def data(dtype: type = np.float32, shape: tuple[int, ...] = SHAPE, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check_reduce(op: str, x: np.ndarray, axes: list[int], keep_dims: bool) -> None:
    out_dtype = x.dtype if x.dtype != np.float32 else None
    check_op(
        op,
        [Act(x), Const(np.array(axes, np.int32))],
        options_type="ReducerOptions",
        options={"keep_dims": keep_dims},
        output_dtypes=None if out_dtype is None else [out_dtype],
    )


reduce_cases = pytest.mark.parametrize(("axes", "keep_dims"), REDUCE_CASES)


@reduce_cases
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_mean(axes: list[int], keep_dims: bool, dtype: type) -> None:
    check_reduce("MEAN", data(dtype), axes, keep_dims)


@reduce_cases
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_sum(axes: list[int], keep_dims: bool, dtype: type) -> None:
    check_reduce("SUM", data(dtype), axes, keep_dims)


@reduce_cases
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reduce_prod(axes: list[int], keep_dims: bool, dtype: type) -> None:
    x = data(dtype)
    if dtype == np.float32:  # near 1 so that products of up to 120 factors stay representable
        x = (1 + 0.1 * x).astype(np.float32)
    check_reduce("REDUCE_PROD", x, axes, keep_dims)


@reduce_cases
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.uint8])
def test_reduce_max(axes: list[int], keep_dims: bool, dtype: type) -> None:
    check_reduce("REDUCE_MAX", data(dtype), axes, keep_dims)


@reduce_cases
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int8, np.int16])
def test_reduce_min(axes: list[int], keep_dims: bool, dtype: type) -> None:
    check_reduce("REDUCE_MIN", data(dtype), axes, keep_dims)


@reduce_cases
def test_reduce_any(axes: list[int], keep_dims: bool) -> None:
    check_reduce("REDUCE_ANY", data(np.bool_), axes, keep_dims)


@reduce_cases
def test_reduce_all(axes: list[int], keep_dims: bool) -> None:
    x = data(np.float32) > -1.2  # mostly true, so that some reductions stay true
    check_reduce("REDUCE_ALL", x, axes, keep_dims)


ARG_CASES = [(SHAPE, axis) for axis in (1, 2, 3, -1, -3, 0)] + [((4, 7), 1), ((4, 7), -1)]


@pytest.mark.parametrize("output_type", [TensorType.INT32, TensorType.INT64])
@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
@pytest.mark.parametrize(("shape", "axis"), ARG_CASES, ids=str)
@pytest.mark.parametrize("op", ["ARG_MAX", "ARG_MIN"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint8, np.int8, "ties"])
def test_arg_min_max(
    op: str, dtype, shape: tuple[int, ...], axis: int, axis_dtype: type, output_type: int
) -> None:
    # "ties": few distinct values, so that the first-index rule decides most outputs.
    x = (
        data(np.int8, shape).clip(-2, 2).astype(np.float32)
        if dtype == "ties"
        else data(dtype, shape)
    )
    out = np.int32 if output_type == TensorType.INT32 else np.int64
    check_op(
        op,
        [Act(x), Const(np.array([axis], axis_dtype))],
        options_type=f"{op.title().replace('_', '')}Options",
        options={"output_type": output_type},
        output_dtypes=[out],
    )


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("axis", [1, 2, -1, 0, -3])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
def test_cumsum(dtype: type, axis: int, exclusive: bool, reverse: bool) -> None:
    x = data(dtype)
    check_op(
        "CUMSUM",
        [Act(x), Const(np.array(axis, np.int32))],
        options_type="CumsumOptions",
        options={"exclusive": exclusive, "reverse": reverse},
        output_dtypes=None if dtype == np.float32 else [dtype],
    )


@pytest.mark.parametrize(
    ("op", "axes", "expected"),
    [
        ("SUM", [1, -1], True),
        ("SUM", [-4], False),
        ("SUM", [], True),
        ("ARG_MAX", [2], True),
        ("ARG_MAX", [0], False),
        ("CUMSUM", [-4], False),
    ],
)
def test_batch_rule(op: str, axes: list[int], expected: bool) -> None:
    model = build_single_op(op, [Act(data()), Const(np.array(axes, np.int32))], output_shapes=[[]])
    engine = Engine(model)
    subgraph = engine.subgraph
    ctx = OpContext(model, subgraph, 0, subgraph.operators[0], [None, np.array(axes, np.int32)])
    assert engine.steps[0].entry.batch_rule(ctx) is expected
