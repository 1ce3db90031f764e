"""AVERAGE_POOL_2D, MAX_POOL_2D and L2_POOL_2D against LiteRT."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model.types import ActivationFunctionType as Fn
from qtool.model.types import Padding
from qtool.runtime.kernels import pooling
from tests.runtime.harness import Act, check_op

POOLS = ["AVERAGE_POOL_2D", "MAX_POOL_2D", "L2_POOL_2D"]

# (input HxWxC, filter HxW, stride, padding): odd and even windows, overlapping or not, SAME
# windows hanging over one border or both.
GEOMETRIES = [
    ((8, 8, 3), (2, 2), (2, 2), Padding.VALID),
    ((8, 8, 3), (2, 2), (2, 2), Padding.SAME),
    ((7, 9, 4), (3, 3), (2, 2), Padding.SAME),
    ((7, 9, 4), (3, 3), (2, 2), Padding.VALID),
    ((7, 9, 4), (3, 3), (1, 1), Padding.SAME),
    ((10, 6, 2), (4, 2), (3, 1), Padding.SAME),
    ((10, 6, 2), (5, 5), (1, 2), Padding.SAME),
    ((6, 6, 5), (6, 6), (1, 1), Padding.VALID),  # a global pool
    ((5, 5, 3), (1, 1), (2, 2), Padding.VALID),
    ((12, 12, 16), (3, 3), (2, 2), Padding.SAME),
    ((9, 11, 3), (3, 3), (2, 3), Padding.SAME),
    ((9, 11, 3), (2, 4), (3, 3), Padding.VALID),
]

ACTIVATIONS = [Fn.RELU, Fn.RELU_N1_TO_1, Fn.RELU6, Fn.TANH, Fn.SIGN_BIT]


@pytest.mark.parametrize("op_type", POOLS)
@pytest.mark.parametrize(
    ("in_shape", "filter_hw", "stride", "padding", "activation"),
    [
        *[(*g, Fn.NONE) for g in GEOMETRIES],
        # TANH and SIGN_BIT have no clamp range: LiteRT's pools run them as NONE.
        *[((7, 9, 4), (3, 3), (2, 2), Padding.SAME, act) for act in ACTIVATIONS],
    ],
)
def test_pool_2d(op_type, in_shape, filter_hw, stride, padding, activation, kernel_code):
    _check_pool(op_type, in_shape, filter_hw, stride, padding, activation)


# Budgets (bytes of temporaries) that cut the 3 samples into single rows, into ranges of 3 rows
# (10 = 3 + 3 + 3 + 1), or into blocks of 2 samples and 1.
@pytest.mark.parametrize("op_type", POOLS)
@pytest.mark.parametrize("budget", [1, 7_700, 52_000])
def test_pool_2d_blocks(op_type, budget, monkeypatch, kernel_code):
    monkeypatch.setattr(pooling, "_BLOCK_BYTES", budget)
    _check_pool(op_type, (10, 12, 16), (3, 3), (1, 1), Padding.SAME, Fn.NONE)


def _check_pool(op_type, in_shape, filter_hw, stride, padding, activation) -> None:
    rng = np.random.default_rng(20)
    # Scaled so that the RELU6 and RELU_N1_TO_1 clamps bite.
    x = (rng.standard_normal((3, *in_shape)) * 4).astype(np.float32)
    check_op(
        op_type,
        [Act(x)],
        options_type="Pool2DOptions",
        options={
            "padding": padding,
            "filter_height": filter_hw[0],
            "filter_width": filter_hw[1],
            "stride_h": stride[0],
            "stride_w": stride[1],
            "fused_activation_function": activation,
        },
    )
