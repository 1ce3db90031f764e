"""Generator kernels (SHAPE, FILL, RANGE) against LiteRT.

Batched activations, and the engine modes the cases reach: see `movement_data`.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model.types import TensorType
from tests.runtime.harness import Act, Const, check_op
from tests.runtime.movement_data import N, i32, i64, random_array


@pytest.mark.parametrize("out_type, dtype", [(TensorType.INT32, i32), (TensorType.INT64, i64)])
@pytest.mark.parametrize(
    "sample, mode",
    [
        ((3, 5), "loop"),
        ((2,), "loop"),
        ((2, 1, 3, 1), "loop"),
        ((), "loop"),  # output [1]: the shape of each sample, one per sample
    ],
)
def test_shape(out_type, dtype, sample, mode):
    check_op(
        "SHAPE",
        [Act(random_array((N, *sample), 20))],
        mode,
        options_type="ShapeOptions",
        options={"out_type": out_type},
        output_dtypes=[dtype],
    )


@pytest.mark.parametrize(
    "dims, value",
    [
        (Const(np.array([2, 3], i32)), Act(np.array(1.5, np.float32), batched=False)),
        (Act(np.array([3, 1, 2], i32), batched=False), Const(np.array(-2.0, np.float32))),
        (Act(np.array([4, 2], i64), batched=False), Const(np.array(7, i32))),
        (Const(np.array([2, 2], i64)), Act(np.array(9, i64), batched=False)),
    ],
)
def test_fill(dims, value):
    check_op("FILL", [dims, value], "serial", output_dtypes=[value.value.dtype])


@pytest.mark.parametrize(
    "start, limit, delta, dtype",
    [
        (0.0, 1.0, 0.1, np.float32),
        (3.5, -2.25, -0.75, np.float32),
        (-1.0, 10.0, 3.0, np.float32),
        (2, 17, 4, np.int32),
        (10, -3, -3, np.int32),
        (5, 6, 1, np.int32),
        (-7, 40, 6, np.int64),
    ],
)
def test_range(start, limit, delta, dtype):
    values = [Act(np.array(v, dtype), batched=False) for v in (start, limit, delta)]
    check_op("RANGE", values, "serial", output_dtypes=[np.dtype(dtype)])


def test_range_constant():
    # All-constant inputs are folded when the engine is built.
    check_op("RANGE", [Const(np.array(v, np.float32)) for v in (1.0, 2.0, 0.125)])
