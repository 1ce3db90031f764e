"""Layout kernels (reshapes, squeezes, transposes, space/depth/batch) against LiteRT.

Batched activations, and the engine modes the cases reach: see `movement_data`.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model.build import GraphBuilder
from qtool.runtime import Engine
from tests.runtime.harness import Act, Const, check_op
from tests.runtime.movement_data import N, i32, i64, random_array

# --------------------------------------------------------------------------- reshapes


@pytest.mark.parametrize(
    "sample, shape_input, new_shape, mode",
    [
        ((2, 3, 4), np.array([1, 24], i32), None, "batch"),
        ((2, 3, 4), np.array([1, -1], i32), None, "batch"),
        ((2, 3, 4), np.array([-1, 24], i32), None, "batch"),
        ((2, 3, 4), np.array([1, -1, 4], i32), None, "batch"),
        ((2, 3, 4), np.array([1, 1, 6, 4], i32), None, "batch"),
        ((1, 6), np.array([1, 6], i32), None, "batch"),
        ((2, 3, 4), np.array([-1, 12], i32), None, "loop"),  # the sample axis is split
        ((2, 3, 4), np.array([24], i32), None, "loop"),
        ((2, 3, 4), np.array([2, 1, 12], i32), None, "loop"),
        ((2, 3, 4), None, [1, 4, 6], "batch"),  # shape from the options only
        ((2, 3, 4), None, [-1, 2, 3], "loop"),
        # TFLite ignores a shape input that is not an int32 vector and uses the option.
        ((2, 3, 4), np.array([1, 24], i64), [1, 4, 6], "batch"),
        ((2, 3, 4), np.array([[1, 24]], i32), [1, 6, 4], "batch"),
        # Empty tensors: TFLite's own inference of the -1.
        ((1, 0, 3), np.array([1, -1, 3], i32), None, "batch"),
        ((1, 0, 3), np.array([1, -1, 0], i32), None, "batch"),
        ((1, 0, 3), np.array([-1, 0, 2], i32), None, "loop"),
    ],
)
def test_reshape(sample, shape_input, new_shape, mode):
    inputs = [Act(random_array((N, *sample)))]
    if shape_input is not None:
        inputs.append(Const(shape_input))
    options = None if new_shape is None else {"new_shape": new_shape}
    check_op("RESHAPE", inputs, mode, options_type=options and "ReshapeOptions", options=options)


def test_reshape_runtime_shape():
    # A shape computed at run time is unknown at plan time: the graph runs sample by sample.
    check_op(
        "RESHAPE",
        [
            Act(random_array((1, 2, 3, 4)), batched=False),
            Act(np.array([2, -1], i32), batched=False),
        ],
        "serial",
    )


def test_reshape_scalar():
    # The legacy new_shape [0] means a scalar; the input is a scalar, so the graph is serial.
    check_op(
        "RESHAPE",
        [Act(np.array(2.5, np.float32), batched=False)],
        options_type="ReshapeOptions",
        options={"new_shape": [0]},
    )


@pytest.mark.parametrize(
    "sample, dims, mode",
    [
        ((1, 3, 1), [1], "batch"),
        ((1, 3, 1), [-1], "batch"),
        ((1, 3, 1), [1, 3], "batch"),
        ((1, 3, 1), [], "loop"),  # every size-1 axis, the sample axis included
        ((1, 3, 1), [0], "loop"),  # output [1, 3, 1]: the former axis 1 leads
        ((1, 3, 1), [0, 1], "loop"),
        ((3, 1, 2), [-2], "batch"),
    ],
)
def test_squeeze(sample, dims, mode):
    check_op(
        "SQUEEZE",
        [Act(random_array((N, *sample), 1))],
        mode,
        options_type="SqueezeOptions",
        options={"squeeze_dims": dims},
    )


@pytest.mark.parametrize(
    "axis, mode",
    [
        (np.array(1, i32), "batch"),
        (np.array([2], i32), "batch"),
        (np.array(-1, i32), "batch"),
        (np.array([-3], i64), "batch"),
        (np.array(0, i32), "loop"),
        (np.array(-4, i32), "loop"),
    ],
)
def test_expand_dims(axis, mode):
    check_op("EXPAND_DIMS", [Act(random_array((N, 3, 5), 2)), Const(axis)], mode)


@pytest.mark.parametrize(
    "sample, perm, mode",
    [
        ((2, 3, 4), [0, 2, 1, 3], "batch"),
        ((2, 3, 4), [0, 3, 1, 2], "batch"),
        ((2, 3, 4, 2), [0, 4, 2, 3, 1], "batch"),
        ((2, 1, 3, 2, 2), [0, 5, 3, 1, 2, 4], "batch"),
        ((1, 3, 2), [1, 0, 2, 3], "loop"),
        ((2, 3), [2, 1, 0], "loop"),
        ((2, 3), [1, 2, 0], "loop"),
    ],
)
def test_transpose(sample, perm, mode):
    check_op("TRANSPOSE", [Act(random_array((N, *sample), 3)), Const(np.array(perm, i32))], mode)


# --------------------------------------------------------------------------- space/depth/batch


@pytest.mark.parametrize("sample, block", [((4, 6, 3), 2), ((6, 3, 2), 3), ((2, 2, 5), 2)])
def test_space_to_depth(sample, block):
    check_op(
        "SPACE_TO_DEPTH",
        [Act(random_array((N, *sample), 15))],
        "batch",
        options_type="SpaceToDepthOptions",
        options={"block_size": block},
    )


@pytest.mark.parametrize("sample, block", [((2, 3, 12), 2), ((2, 1, 18), 3), ((1, 1, 4), 2)])
def test_depth_to_space(sample, block):
    check_op(
        "DEPTH_TO_SPACE",
        [Act(random_array((N, *sample), 16))],
        "batch",
        options_type="DepthToSpaceOptions",
        options={"block_size": block},
    )


@pytest.mark.parametrize(
    "sample, block, paddings",
    [
        ((4, 6, 3), [2, 2], [[0, 0], [0, 0]]),
        ((4, 6, 3), [2, 3], [[1, 1], [2, 1]]),
        ((3, 5, 2), [3, 2], [[0, 3], [1, 0]]),
        ((6, 3), [2], [[1, 1]]),
    ],
)
def test_space_to_batch_nd(sample, block, paddings):
    check_op(
        "SPACE_TO_BATCH_ND",
        [
            Act(random_array((N, *sample), 17)),
            Const(np.array(block, i32)),
            Const(np.array(paddings, i32)),
        ],
        "loop",
    )


@pytest.mark.parametrize(
    "shape, block, crops",
    [
        ((4, 2, 3, 3), [2, 2], [[0, 0], [0, 0]]),
        ((12, 2, 3, 2), [2, 3], [[1, 0], [2, 1]]),
        ((8, 2, 2, 1), [2, 2], [[0, 1], [1, 1]]),
        ((6, 3, 2), [3], [[1, 2]]),
    ],
)
def test_batch_to_space_nd(shape, block, crops):
    # The input batch holds block-many pieces of each image: it is declared in full.
    check_op(
        "BATCH_TO_SPACE_ND",
        [
            Act(random_array(shape, 18), batched=False),
            Const(np.array(block, i32)),
            Const(np.array(crops, i32)),
        ],
        "serial",
    )


def test_space_to_batch_round_trip():
    # SPACE_TO_BATCH_ND then BATCH_TO_SPACE_ND on one sample is the identity (with zero
    # padding cropped away): the rule-False pair forces a serial graph that stays correct.
    builder = GraphBuilder()
    x = builder.input("x", [1, 4, 6, 2])
    block = builder.constant("block", np.array([2, 2], i32))
    pads = builder.constant("pads", np.array([[1, 1], [0, 2]], i32))
    mid = builder.op("SPACE_TO_BATCH_ND", [x, block, pads], output_shape=[4, 3, 4, 2])
    y = builder.op("BATCH_TO_SPACE_ND", [mid, block, pads], output_shape=[1, 4, 6, 2])
    engine = Engine(builder.finish([y]))
    assert not engine.serial and {s.mode for s in engine.steps} == {"loop"}
    data = random_array((N, 4, 6, 2), 19)
    np.testing.assert_array_equal(engine.run([data])[0], data)
