"""Slicing kernels (slices, strided slices, gathers, reversals) against LiteRT.

Batched activations, and the engine modes the cases reach: see `movement_data`.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.runtime.harness import Act, Const, check_op
from tests.runtime.movement_data import N, i32, i64, random_array

# --------------------------------------------------------------------------- slices


@pytest.mark.parametrize(
    "begin, size",
    [
        ([0, 1, 0], [1, 2, -1]),
        ([0, 0, 2], [-1, -1, 3]),
        ([0, 3, 4], [1, 1, 1]),
        ([0, 1, 0, 1], [1, 2, 3, 2]),
    ],
)
@pytest.mark.parametrize("index_dtype", [i32, i64])
def test_slice(begin, size, index_dtype):
    shape = (N, 4, 5) if len(begin) == 3 else (N, 4, 5, 3)
    check_op(
        "SLICE",
        [
            Act(random_array(shape, 7)),
            Const(np.array(begin, index_dtype)),
            Const(np.array(size, index_dtype)),
        ],
        "batch",
    )


def test_slice_runtime_begin():
    # A begin computed at run time is not known at plan time: the graph runs sample by sample.
    check_op(
        "SLICE",
        [
            Act(random_array((1, 4, 5), 7), batched=False),
            Act(np.array([0, 2, 1], i32), batched=False),
            Const(np.array([1, 2, 3], i32)),
        ],
        "serial",
    )


def _ss(
    begin,
    end,
    strides,
    begin_mask=0,
    end_mask=0,
    ellipsis_mask=0,
    new_axis_mask=0,
    shrink_axis_mask=0,
    offset=False,
):
    return (
        begin,
        end,
        strides,
        {
            "begin_mask": begin_mask,
            "end_mask": end_mask,
            "ellipsis_mask": ellipsis_mask,
            "new_axis_mask": new_axis_mask,
            "shrink_axis_mask": shrink_axis_mask,
            "offset": offset,
        },
    )


@pytest.mark.parametrize(
    "spec, mode",
    [
        (_ss([0, 1, 2, 0], [1, 4, 6, 7], [1, 1, 2, 1]), "batch"),
        (_ss([0, 1, 0, 0], [0, 5, 6, 7], [1, 2, 3, 3], begin_mask=1, end_mask=1), "batch"),
        (_ss([0, -1, -1, 0], [1, 0, -7, 7], [1, -1, -2, 1]), "batch"),
        (_ss([0, 0, 0, 0], [1, 0, 0, 7], [1, -1, -2, 1], begin_mask=6, end_mask=6), "batch"),
        (_ss([0, 4, 5, 6], [1, -10, 0, 0], [1, -2, -3, -4]), "batch"),
        (_ss([0, -3, -100, 0], [100, 100, 3, -1], [1, 1, 1, 2]), "batch"),
        (_ss([0, 7, 2, 0], [1, 9, 1, 7], [1, 1, 1, 1]), "batch"),  # empty slices
        (_ss([0, 1], [1, 3], [1, 1]), "batch"),  # trailing axes whole
        (_ss([0, 1], [0, 3], [1, 1], ellipsis_mask=1), "batch"),  # [..., 1:3]
        (_ss([0, 0, 2], [1, 0, 3], [1, 1, 1], ellipsis_mask=2, shrink_axis_mask=4), "batch"),
        (_ss([0, 0, 2], [0, 0, 4], [1, 1, 1], begin_mask=1, end_mask=1, new_axis_mask=2), "batch"),
        (_ss([0, 0, 0, 1], [1, 0, 0, 5], [1, 1, 1, 2], ellipsis_mask=2, new_axis_mask=4), "batch"),
        (_ss([0, 1, 3, 0], [1, 5, 4, 7], [1, 1, 1, 1], shrink_axis_mask=6), "batch"),
        (_ss([0, -2, -1, 0], [1, 0, 0, 7], [1, 1, 1, 1], shrink_axis_mask=6), "batch"),
        (_ss([0, 1, 1, 2], [1, 2, 3, 4], [1, 1, 1, 1], offset=True), "batch"),
        (_ss([0, 2, 0, 1], [1, 3, 4, 6], [1, 1, 2, 3], offset=True), "batch"),
        (_ss([0, 4, 0, 0], [1, -3, 6, 7], [1, -1, 1, 2], offset=True), "batch"),
        # The sample axis is not kept whole: per-sample runs (loop) or a serial graph.
        (_ss([0, 0], [0, 0], [1, 1], new_axis_mask=1, ellipsis_mask=2), "loop"),
        (_ss([-1, 0], [0, 3], [1, 1], end_mask=1), "loop"),
        (_ss([0, 0], [1, 3], [2, 1]), "loop"),
        (_ss([0, 0], [-1, 3], [1, 1]), "loop"),  # end -1 leaves no sample
        (_ss([0, 0], [0, 3], [-1, 1], begin_mask=1, end_mask=1), "loop"),
        (_ss([0, 1], [1, 3], [1, 1], shrink_axis_mask=1), "loop"),
    ],
)
def test_strided_slice(spec, mode):
    begin, end, strides, options = spec
    check_op(
        "STRIDED_SLICE",
        [
            Act(random_array((N, 5, 6, 7), 8)),
            Const(np.array(begin, i32)),
            Const(np.array(end, i32)),
            Const(np.array(strides, i32)),
        ],
        mode,
        options_type="StridedSliceOptions",
        options=options,
        version=4,
    )


@pytest.mark.parametrize(
    "shape, spec, dtype",
    [
        ((N, 3, 4, 5, 6), _ss([0, 0, 1, 0, 0], [1, 3, 4, 5, 6], [1, 2, 1, 2, 3]), np.float32),
        ((N, 6), _ss([0, 5], [1, 0], [1, -2]), np.int32),
        ((N, 6), _ss([0, 1], [1, 5], [1, 1], shrink_axis_mask=2), np.int64),
    ],
)
def test_strided_slice_shapes_and_dtypes(shape, spec, dtype):
    begin, end, strides, options = spec
    check_op(
        "STRIDED_SLICE",
        [
            Act(random_array(shape, 9, dtype)),
            Const(np.array(begin, i32)),
            Const(np.array(end, i32)),
            Const(np.array(strides, i32)),
        ],
        "batch",
        options_type="StridedSliceOptions",
        options=options,
        output_dtypes=[dtype],
        version=4,
    )


# --------------------------------------------------------------------------- gathers


_INDICES = np.array([[0, 2], [3, 1]], i32)


@pytest.mark.parametrize(
    "params, indices, axis, batch_dims, mode",
    [
        (Act(random_array((N, 5, 6), 1)), Const(_INDICES), 1, 0, "batch"),
        (Act(random_array((N, 5, 6), 1)), Const(_INDICES.astype(i64)), -1, 0, "batch"),
        (Act(random_array((N, 5, 6), 1)), Const(np.array(4, i32)), 2, 0, "batch"),
        (Act(random_array((N, 5, 6), 1)), Const(_INDICES.astype(np.int16)), 2, 0, "batch"),
        (Act(random_array((N, 5, 6), 1)), Const(np.array([0, 0, 0], i32)), 0, 0, "loop"),
        (Act(random_array((N, 5, 6), 1)), Const(np.array([[0]], i32)), -3, 0, "loop"),
        # Embedding lookup: constant table, batched indices along axis 0.
        (
            Const(random_array((7, 3), 2)),
            Act(np.random.default_rng(3).integers(0, 7, (N, 5)).astype(i32)),
            0,
            0,
            "batch",
        ),
        (
            Const(random_array((2, 7, 3), 2)),
            Act(np.random.default_rng(3).integers(0, 7, (N, 5)).astype(i32)),
            1,
            0,
            "loop",
        ),
        # batch_dims: the sample axis indexes both operands.
        (Act(random_array((N, 5, 6), 1)), Const(np.array([[4, 0, 2]], i32)), 1, 1, "batch"),
        (Act(random_array((N, 5, 6), 1)), Const(np.array([[4, 0, 2]], i32)), 2, -1, "batch"),
        (
            Act(random_array((N, 3, 5, 6), 1)),
            Const(np.array([[[1, 4], [0, 0], [2, 3]]], i32)),
            2,
            2,
            "batch",
        ),
        (
            Act(random_array((N, 3, 5, 6), 1)),
            Const(np.array([[[1, 4], [0, 0], [2, 3]]], i32)),
            3,
            2,
            "batch",
        ),
        (
            Act(random_array((N, 5, 6), 1)),
            Act(np.random.default_rng(4).integers(0, 5, (N, 3)).astype(i32)),
            1,
            1,
            "batch",
        ),
        (
            Const(random_array((1, 5, 6), 1)),
            Act(np.random.default_rng(4).integers(0, 6, (N, 3)).astype(i32)),
            2,
            1,
            "batch",
        ),
        (Act(random_array((N, 5, 6), 1, np.int32)), Const(_INDICES), 1, 0, "batch"),
    ],
)
def test_gather(params, indices, axis, batch_dims, mode):
    dtype = params.value.dtype
    check_op(
        "GATHER",
        [params, indices],
        mode,
        options_type="GatherOptions",
        options={"axis": axis, "batch_dims": batch_dims},
        output_dtypes=[dtype],
        version=5,
    )


@pytest.mark.parametrize(
    "params, indices, mode",
    [
        (
            Const(random_array((5, 6, 3), 1)),
            Act(np.random.default_rng(5).integers(0, 5, (N, 3, 2)).astype(i32)),
            "batch",
        ),
        (
            Const(random_array((5, 6, 3), 1)),
            Act(np.random.default_rng(5).integers(0, 5, (N, 1)).astype(i64)),
            "batch",
        ),
        (
            Const(random_array((5, 6), 1, np.int32)),
            Act(np.random.default_rng(5).integers(0, 5, (N, 2, 2)).astype(i32)),
            "batch",
        ),
        (Act(random_array((N, 5, 6), 1)), Const(np.array([[0, 1], [0, 3]], i32)), "loop"),
        (Act(random_array((N, 5, 6), 1)), Const(np.array([[[0, 4, 1]]], i32)), "loop"),
    ],
)
def test_gather_nd(params, indices, mode):
    dtype = params.value.dtype
    check_op("GATHER_ND", [params, indices], mode, output_dtypes=[dtype])


# --------------------------------------------------------------------------- reversals


@pytest.mark.parametrize(
    "axes, dtype, mode",
    [
        ([1], np.float32, "batch"),
        ([-1], np.float32, "batch"),
        ([1, 2], np.float32, "batch"),
        ([-2, -1], np.int32, "batch"),
        ([0], np.float32, "loop"),
        ([0, 1], np.float32, "loop"),
    ],
)
def test_reverse_v2(axes, dtype, mode):
    check_op(
        "REVERSE_V2",
        [Act(random_array((N, 3, 4), 21, dtype)), Const(np.array(axes, i32))],
        mode,
        output_dtypes=[dtype],
        version=3,
    )
