"""Shape and data-movement kernels against LiteRT.

Activations of shape (N, ...) are declared [1, ...]: the engine runs them as one batch when the
kernel's batch rule allows it, once per sample when the rule fails but the outputs keep a leading
1, and the whole graph sample by sample otherwise. Cases below name which of these they reach.
"""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model.build import GraphBuilder
from qtool.model.types import TensorType
from qtool.runtime import Engine
from tests.runtime.harness import Act, Const, build_single_op, check_op

N = 4  # samples per batched activation

i32 = np.int32
i64 = np.int64


def _x(shape: tuple[int, ...], seed: int = 0, dtype=np.float32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _check(op_type: str, inputs: list, mode: str | None = None, **kw) -> None:
    check_op(op_type, inputs, mode=mode, **kw)


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
    inputs = [Act(_x((N, *sample)))]
    if shape_input is not None:
        inputs.append(Const(shape_input))
    options = None if new_shape is None else {"new_shape": new_shape}
    _check("RESHAPE", inputs, mode, options_type=options and "ReshapeOptions", options=options)


def test_reshape_runtime_shape():
    # A shape computed at run time is unknown at plan time: the graph runs sample by sample.
    _check(
        "RESHAPE",
        [Act(_x((1, 2, 3, 4)), batched=False), Act(np.array([2, -1], i32), batched=False)],
        "serial",
    )


def test_reshape_scalar():
    # The legacy new_shape [0] means a scalar; the input is a scalar, so the graph is serial.
    _check(
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
    _check(
        "SQUEEZE",
        [Act(_x((N, *sample), 1))],
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
    _check("EXPAND_DIMS", [Act(_x((N, 3, 5), 2)), Const(axis)], mode)


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
    _check("TRANSPOSE", [Act(_x((N, *sample), 3)), Const(np.array(perm, i32))], mode)


# --------------------------------------------------------------------------- joins and splits


@pytest.mark.parametrize(
    "parts, axis, mode",
    [
        ([Act(_x((N, 2, 3), 1)), Act(_x((N, 4, 3), 2))], 1, "batch"),
        ([Act(_x((N, 2, 3), 1)), Act(_x((N, 2, 5), 2)), Act(_x((N, 2, 1), 3))], -1, "batch"),
        ([Act(_x((N, 2, 3), 1)), Const(_x((1, 2, 4), 2))], 2, "batch"),  # constant per sample
        ([Const(_x((1, 1, 3), 2)), Act(_x((N, 2, 3), 1))], -2, "batch"),
        ([Act(_x((N, 2, 3), 1)), Act(_x((N, 2, 3), 2))], 0, "loop"),
        ([Act(_x((N, 2, 3), 1)), Const(_x((1, 2, 3), 2))], -3, "loop"),
        ([Act(_x((N, 3, 2), 1, np.int32)), Act(_x((N, 1, 2), 2, np.int32))], 1, "batch"),
        # Constant scalars become a vector (folded when the engine is built).
        ([Const(np.array(1.5, np.float32)), Const(np.array(-2.0, np.float32))], 0, None),
    ],
)
def test_concatenation(parts, axis, mode):
    dtype = parts[0].value.dtype
    _check(
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
    a, b = _x((N, 2, 3), 1), _x((N, 2, 3), 2)
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
        ([Act(_x((N, 3), 1)), Act(_x((N, 3), 2))], 1, "batch"),
        ([Act(_x((N, 3, 2), 1)), Act(_x((N, 3, 2), 2)), Act(_x((N, 3, 2), 3))], -1, "batch"),
        ([Act(_x((N, 3, 2), 1)), Const(_x((1, 3, 2), 2))], 2, "batch"),
        ([Act(_x((N, 3), 1)), Act(_x((N, 3), 2))], 0, "loop"),
        ([Act(_x((N, 3), 1)), Act(_x((N, 3), 2))], -3, "loop"),
        ([Act(_x((N, 3), 1, np.int32)), Act(_x((N, 3), 2, np.int32))], -1, "batch"),
    ],
)
def test_pack(parts, axis, mode):
    dtype = parts[0].value.dtype
    _check(
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
    _check(
        "UNPACK",
        [Act(_x((N, *sample), 4))],
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
    _check(
        "SPLIT",
        [Const(axis), Act(_x((N, *sample), 5))],
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
    _check(
        "SPLIT_V",
        [Act(_x((N, 6, 5), 6)), Const(sizes), Const(axis)],
        mode,
        options_type="SplitVOptions",
        options={"num_splits": len(sizes)},
        n_outputs=len(sizes),
    )


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
    _check(
        "SLICE",
        [
            Act(_x(shape, 7)),
            Const(np.array(begin, index_dtype)),
            Const(np.array(size, index_dtype)),
        ],
        "batch",
    )


def test_slice_runtime_begin():
    # A begin computed at run time is not known at plan time: the graph runs sample by sample.
    _check(
        "SLICE",
        [
            Act(_x((1, 4, 5), 7), batched=False),
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
    _check(
        "STRIDED_SLICE",
        [
            Act(_x((N, 5, 6, 7), 8)),
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
    _check(
        "STRIDED_SLICE",
        [
            Act(_x(shape, 9, dtype)),
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
        (Act(_x((N, 5, 6), 1)), Const(_INDICES), 1, 0, "batch"),
        (Act(_x((N, 5, 6), 1)), Const(_INDICES.astype(i64)), -1, 0, "batch"),
        (Act(_x((N, 5, 6), 1)), Const(np.array(4, i32)), 2, 0, "batch"),
        (Act(_x((N, 5, 6), 1)), Const(_INDICES.astype(np.int16)), 2, 0, "batch"),
        (Act(_x((N, 5, 6), 1)), Const(np.array([0, 0, 0], i32)), 0, 0, "loop"),
        (Act(_x((N, 5, 6), 1)), Const(np.array([[0]], i32)), -3, 0, "loop"),
        # Embedding lookup: constant table, batched indices along axis 0.
        (
            Const(_x((7, 3), 2)),
            Act(np.random.default_rng(3).integers(0, 7, (N, 5)).astype(i32)),
            0,
            0,
            "batch",
        ),
        (
            Const(_x((2, 7, 3), 2)),
            Act(np.random.default_rng(3).integers(0, 7, (N, 5)).astype(i32)),
            1,
            0,
            "loop",
        ),
        # batch_dims: the sample axis indexes both operands.
        (Act(_x((N, 5, 6), 1)), Const(np.array([[4, 0, 2]], i32)), 1, 1, "batch"),
        (Act(_x((N, 5, 6), 1)), Const(np.array([[4, 0, 2]], i32)), 2, -1, "batch"),
        (Act(_x((N, 3, 5, 6), 1)), Const(np.array([[[1, 4], [0, 0], [2, 3]]], i32)), 2, 2, "batch"),
        (Act(_x((N, 3, 5, 6), 1)), Const(np.array([[[1, 4], [0, 0], [2, 3]]], i32)), 3, 2, "batch"),
        (
            Act(_x((N, 5, 6), 1)),
            Act(np.random.default_rng(4).integers(0, 5, (N, 3)).astype(i32)),
            1,
            1,
            "batch",
        ),
        (
            Const(_x((1, 5, 6), 1)),
            Act(np.random.default_rng(4).integers(0, 6, (N, 3)).astype(i32)),
            2,
            1,
            "batch",
        ),
        (Act(_x((N, 5, 6), 1, np.int32)), Const(_INDICES), 1, 0, "batch"),
    ],
)
def test_gather(params, indices, axis, batch_dims, mode):
    dtype = params.value.dtype
    _check(
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
            Const(_x((5, 6, 3), 1)),
            Act(np.random.default_rng(5).integers(0, 5, (N, 3, 2)).astype(i32)),
            "batch",
        ),
        (
            Const(_x((5, 6, 3), 1)),
            Act(np.random.default_rng(5).integers(0, 5, (N, 1)).astype(i64)),
            "batch",
        ),
        (
            Const(_x((5, 6), 1, np.int32)),
            Act(np.random.default_rng(5).integers(0, 5, (N, 2, 2)).astype(i32)),
            "batch",
        ),
        (Act(_x((N, 5, 6), 1)), Const(np.array([[0, 1], [0, 3]], i32)), "loop"),
        (Act(_x((N, 5, 6), 1)), Const(np.array([[[0, 4, 1]]], i32)), "loop"),
    ],
)
def test_gather_nd(params, indices, mode):
    dtype = params.value.dtype
    _check("GATHER_ND", [params, indices], mode, output_dtypes=[dtype])


# --------------------------------------------------------------------------- pads and tiles


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
    _check(
        "PAD", [Act(_x((N, *sample), 10)), Const(np.array(paddings, pad_dtype))], mode, version=2
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
    _check(
        "PADV2",
        [
            Act(_x((N, 3, 4), 11)),
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
    _check(
        "MIRROR_PAD",
        [Act(_x((N, 3, 4), 12)), Const(np.array(paddings, i32))],
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
    _check(
        "TILE",
        [Act(_x((N, *sample), 13, dtype)), Const(multiples)],
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
    _check(
        "BROADCAST_TO",
        [Act(_x((N, *sample), 14)), Const(np.array(target, shape_dtype))],
        mode,
        version=2,
    )


# --------------------------------------------------------------------------- space/depth/batch


@pytest.mark.parametrize("sample, block", [((4, 6, 3), 2), ((6, 3, 2), 3), ((2, 2, 5), 2)])
def test_space_to_depth(sample, block):
    _check(
        "SPACE_TO_DEPTH",
        [Act(_x((N, *sample), 15))],
        "batch",
        options_type="SpaceToDepthOptions",
        options={"block_size": block},
    )


@pytest.mark.parametrize("sample, block", [((2, 3, 12), 2), ((2, 1, 18), 3), ((1, 1, 4), 2)])
def test_depth_to_space(sample, block):
    _check(
        "DEPTH_TO_SPACE",
        [Act(_x((N, *sample), 16))],
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
    _check(
        "SPACE_TO_BATCH_ND",
        [Act(_x((N, *sample), 17)), Const(np.array(block, i32)), Const(np.array(paddings, i32))],
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
    _check(
        "BATCH_TO_SPACE_ND",
        [
            Act(_x(shape, 18), batched=False),
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
    data = _x((N, 4, 6, 2), 19)
    np.testing.assert_array_equal(engine.run([data])[0], data)


# --------------------------------------------------------------------------- generators


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
    _check(
        "SHAPE",
        [Act(_x((N, *sample), 20))],
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
    _check("FILL", [dims, value], "serial", output_dtypes=[value.value.dtype])


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
    _check("RANGE", values, "serial", output_dtypes=[np.dtype(dtype)])


def test_range_constant():
    # All-constant inputs are folded when the engine is built.
    _check("RANGE", [Const(np.array(v, np.float32)) for v in (1.0, 2.0, 0.125)])


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
    _check(
        "REVERSE_V2",
        [Act(_x((N, 3, 4), 21, dtype)), Const(np.array(axes, i32))],
        mode,
        output_dtypes=[dtype],
        version=3,
    )
