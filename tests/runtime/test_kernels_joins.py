"""Join and split kernels (concatenations, packs, unpacks, splits) against LiteRT.

Batched activations, and the engine modes the cases reach: see `movement_data`.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.runtime import Engine
from tests.runtime.harness import Act, Const, build_single_op, check_op
from tests.runtime.movement_data import N, i32, i64, random_array


@pytest.mark.parametrize(
    "parts, axis, mode",
    [
        ([Act(random_array((N, 2, 3), 1)), Act(random_array((N, 4, 3), 2))], 1, "batch"),
        (
            [
                Act(random_array((N, 2, 3), 1)),
                Act(random_array((N, 2, 5), 2)),
                Act(random_array((N, 2, 1), 3)),
            ],
            -1,
            "batch",
        ),
        (
            [Act(random_array((N, 2, 3), 1)), Const(random_array((1, 2, 4), 2))],
            2,
            "batch",
        ),  # constant per sample
        ([Const(random_array((1, 1, 3), 2)), Act(random_array((N, 2, 3), 1))], -2, "batch"),
        ([Act(random_array((N, 2, 3), 1)), Act(random_array((N, 2, 3), 2))], 0, "loop"),
        ([Act(random_array((N, 2, 3), 1)), Const(random_array((1, 2, 3), 2))], -3, "loop"),
        (
            [Act(random_array((N, 3, 2), 1, np.int32)), Act(random_array((N, 1, 2), 2, np.int32))],
            1,
            "batch",
        ),
        # Constant scalars become a vector (folded when the engine is built).
        ([Const(np.array(1.5, np.float32)), Const(np.array(-2.0, np.float32))], 0, None),
    ],
)
def test_concatenation(parts, axis, mode):
    dtype = parts[0].value.dtype
    check_op(
        "CONCATENATION",
        parts,
        mode,
        options_type="ConcatenationOptions",
        options={"axis": axis, "fused_activation_function": 0},
        output_dtypes=[dtype],
    )


@pytest.mark.parametrize(
    "activation, fn",
    [
        (1, lambda v: np.maximum(v, 0)),
        (2, lambda v: np.clip(v, -1, 1)),
        (3, lambda v: np.clip(3 * v, 0, 6)),
        (4, lambda v: v),  # TANH is not a clamp: TFLite kernels run it as NONE
    ],
)
def test_concatenation_activation(activation, fn):
    # LiteRT's CONCATENATION rejects any fused activation at prepare time, so the engine's
    # (TFLite's clamp semantics) is checked against numpy.
    a, b = random_array((N, 2, 3), 1), random_array((N, 2, 3), 2)
    scale = 3 if activation == 3 else 1  # reach RELU6's upper clamp
    model = build_single_op(
        "CONCATENATION",
        [Act(scale * a), Act(scale * b)],
        options_type="ConcatenationOptions",
        options={"axis": -1, "fused_activation_function": activation},
        output_shapes=[[1, 2, 6]],
    )
    got = Engine(model).run([scale * a, scale * b])[0]
    expected = fn(np.concatenate([a, b], axis=-1)).astype(np.float32)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "parts, axis, mode",
    [
        ([Act(random_array((N, 3), 1)), Act(random_array((N, 3), 2))], 1, "batch"),
        (
            [
                Act(random_array((N, 3, 2), 1)),
                Act(random_array((N, 3, 2), 2)),
                Act(random_array((N, 3, 2), 3)),
            ],
            -1,
            "batch",
        ),
        ([Act(random_array((N, 3, 2), 1)), Const(random_array((1, 3, 2), 2))], 2, "batch"),
        ([Act(random_array((N, 3), 1)), Act(random_array((N, 3), 2))], 0, "loop"),
        ([Act(random_array((N, 3), 1)), Act(random_array((N, 3), 2))], -3, "loop"),
        (
            [Act(random_array((N, 3), 1, np.int32)), Act(random_array((N, 3), 2, np.int32))],
            -1,
            "batch",
        ),
    ],
)
def test_pack(parts, axis, mode):
    dtype = parts[0].value.dtype
    check_op(
        "PACK",
        parts,
        mode,
        options_type="PackOptions",
        options={"values_count": len(parts), "axis": axis},
        output_dtypes=[dtype],
    )


@pytest.mark.parametrize(
    "sample, axis, mode",
    [
        ((3, 2), 1, "batch"),
        ((3, 2), -1, "batch"),
        ((3, 2, 4), 2, "batch"),
        ((3, 2), 0, "loop"),  # one output per declared sample, without the sample axis
        ((3, 2), -3, "loop"),
    ],
)
def test_unpack(sample, axis, mode):
    num = ((1, *sample))[axis]
    check_op(
        "UNPACK",
        [Act(random_array((N, *sample), 4))],
        mode,
        options_type="UnpackOptions",
        options={"num": num, "axis": axis},
        n_outputs=num,
    )


@pytest.mark.parametrize(
    "sample, axis, splits, mode",
    [
        ((6, 4), np.array(1, i32), 3, "batch"),
        ((6, 4), np.array([-1], i32), 2, "batch"),
        ((6, 4), np.array(2, i32), 4, "batch"),
        ((6, 4), np.array(0, i32), 1, "loop"),
        ((6, 4), np.array(-3, i32), 1, "loop"),
    ],
)
def test_split(sample, axis, splits, mode):
    check_op(
        "SPLIT",
        [Const(axis), Act(random_array((N, *sample), 5))],
        mode,
        options_type="SplitOptions",
        options={"num_splits": splits},
        n_outputs=splits,
    )


@pytest.mark.parametrize(
    "sizes, axis, mode",
    [
        (np.array([1, 2, 3], i32), np.array(1, i32), "batch"),
        (np.array([2, -1], i32), np.array([-1], i32), "batch"),
        (np.array([-1, 1], i64), np.array(2, i32), "batch"),
        (np.array([1], i32), np.array(0, i32), "loop"),
    ],
)
def test_split_v(sizes, axis, mode):
    check_op(
        "SPLIT_V",
        [Act(random_array((N, 6, 5), 6)), Const(sizes), Const(axis)],
        mode,
        options_type="SplitVOptions",
        options={"num_splits": len(sizes)},
        n_outputs=len(sizes),
    )
