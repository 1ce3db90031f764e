"""Pad, tile and broadcast kernels against LiteRT.

Batched activations, and the engine modes the cases reach: see `movement_data`.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.harness import Act, Const, check_op
from tests.runtime.movement_data import N, i32, i64, random_array


@pytest.mark.parametrize(
    "sample, paddings, mode",
    [
        ((3, 4, 2), [[0, 0], [1, 2], [2, 1], [0, 0]], "batch"),
        ((3, 4, 2), [[0, 0], [0, 0], [0, 3], [1, 1]], "batch"),
        ((5,), [[0, 0], [3, 0]], "batch"),
        ((3, 2, 2, 2), [[0, 0], [1, 0], [0, 1], [1, 1], [2, 0]], "batch"),
        ((3, 4), [[1, 0], [0, 0], [1, 1]], "loop"),
    ],
)
@pytest.mark.parametrize("pad_dtype", [i32, i64])
def test_pad(sample, paddings, mode, pad_dtype):
    check_op(
        "PAD",
        [Act(random_array((N, *sample), 10)), Const(np.array(paddings, pad_dtype))],
        mode,
        version=2,
    )


@pytest.mark.parametrize(
    "paddings, value, mode",
    [
        ([[0, 0], [1, 2], [0, 1]], np.array(-1.5, np.float32), "batch"),
        ([[0, 0], [2, 0], [1, 3]], np.array([7.0], np.float32), "batch"),
        ([[0, 0], [1, 1], [2, 2]], None, "batch"),  # absent optional value: zeros
        ([[0, 1], [0, 0], [0, 0]], np.array(2.0, np.float32), "loop"),
    ],
)
def test_padv2(paddings, value, mode):
    check_op(
        "PADV2",
        [
            Act(random_array((N, 3, 4), 11)),
            Const(np.array(paddings, i32)),
            None if value is None else Const(value),
        ],
        mode,
    )


@pytest.mark.parametrize(
    "mode_code, paddings, mode",
    [
        (0, [[0, 0], [2, 1], [0, 3]], "batch"),  # REFLECT: at most size - 1
        (1, [[0, 0], [3, 3], [4, 1]], "batch"),  # SYMMETRIC: at most size
        (0, [[0, 0], [0, 0], [1, 1]], "batch"),
        (1, [[1, 0], [1, 1], [0, 0]], "loop"),
    ],
)
def test_mirror_pad(mode_code, paddings, mode):
    check_op(
        "MIRROR_PAD",
        [Act(random_array((N, 3, 4), 12)), Const(np.array(paddings, i32))],
        mode,
        options_type="MirrorPadOptions",
        options={"mode": mode_code},
        version=2,
    )


@pytest.mark.parametrize(
    "sample, multiples, dtype, mode",
    [
        ((2, 3), np.array([1, 2, 3], i32), np.float32, "batch"),
        ((2, 3), np.array([1, 1, 2], i64), np.float32, "batch"),
        ((2,), np.array([1, 3], i32), np.int32, "batch"),
        ((2, 3), np.array([2, 1, 1], i32), np.float32, "loop"),
    ],
)
def test_tile(sample, multiples, dtype, mode):
    check_op(
        "TILE",
        [Act(random_array((N, *sample), 13, dtype)), Const(multiples)],
        mode,
        output_dtypes=[dtype],
        version=2,
    )


@pytest.mark.parametrize(
    "sample, target, mode",
    [
        ((1, 3), [1, 4, 3], "batch"),
        ((2, 1), [1, 2, 5], "batch"),
        ((3,), [1, 5, 3], "loop"),  # the input's leading 1 lines up with the target's axis 1
        ((1, 3), [2, 1, 4, 3], "loop"),
    ],
)
@pytest.mark.parametrize("shape_dtype", [i32, i64])
def test_broadcast_to(sample, target, mode, shape_dtype):
    check_op(
        "BROADCAST_TO",
        [Act(random_array((N, *sample), 14)), Const(np.array(target, shape_dtype))],
        mode,
        version=2,
    )
