"""Shape rules against LiteRT: where LiteRT computes an output shape, the validator infers the
same one (and refuses a declared shape that differs). STRIDED_SLICE, whose masks make the
richest rule, gets random specs."""

from __future__ import annotations

import collections
import os
import pickle

import numpy as np
import pytest

from qtool.model import model_to_bytes, parse_model
from qtool.model.validate import model_problems
from qtool.runtime import Engine
from tests.litert import run_litert
from tests.runtime.harness import Act, Const, build_single_op


def _litert_in_child(model_bytes: bytes, feed: np.ndarray) -> np.ndarray | str:
    """LiteRT's output, or why there is none: "refused", or "crash" when LiteRT kills the
    process (it does on some offset slices)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        try:
            (out,) = run_litert(model_bytes, [feed])
            message = pickle.dumps(out)
        except (RuntimeError, ValueError):
            message = pickle.dumps("refused")
        os.write(write, message)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    return "crash" if os.WIFSIGNALED(status) or not data else pickle.loads(data)


def _problems(op_type, inputs, shape, **options) -> list:
    model = build_single_op(op_type, inputs, output_shapes=[shape], **options)
    return model_problems(parse_model(model_to_bytes(model), validate=False))


def _slice_outcome(x: np.ndarray, spec: list[np.ndarray], options: dict, declared=None) -> str:
    """Run a STRIDED_SLICE in LiteRT (output shape `declared`, else the one LiteRT computes) and
    judge the validator: "refused" when the validator refuses the shape LiteRT ran with;
    "agreed" when it accepts exactly that shape, and the numpy engine computes the same values;
    "litert refused" when LiteRT does not run it. A crash of LiteRT on a spec the validator
    accepts fails the test."""
    kwargs = {"options_type": "StridedSliceOptions", "options": options}
    inputs = [Act(x, batched=False), *(Const(v) for v in spec)]
    if declared is not None and _problems("STRIDED_SLICE", inputs, declared, **kwargs):
        return "refused"  # not run: LiteRT may crash on it
    probe = build_single_op("STRIDED_SLICE", inputs, output_shapes=[declared or []], **kwargs)
    out = _litert_in_child(model_to_bytes(probe), x)
    if isinstance(out, str):
        assert out != "crash", (x.shape, options, spec)
        return "litert refused"
    shape = list(out.shape)
    if _problems("STRIDED_SLICE", inputs, shape, **kwargs):
        return "refused"
    if shape:
        wrong = [shape[0] + 1, *shape[1:]]
        assert _problems("STRIDED_SLICE", inputs, wrong, **kwargs), (options, wrong)
    model = build_single_op("STRIDED_SLICE", inputs, output_shapes=[shape], **kwargs)
    # The engine reads a leading 1 as the sample axis, any other leading size as one sample.
    (got,) = Engine(model).run([x if x.shape[0] == 1 else x[None]])
    np.testing.assert_array_equal(got.reshape(out.shape), out, err_msg=repr((options, spec)))
    return "agreed"


def _random_slice(rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray], dict]:
    rank = int(rng.integers(1, 5))
    shape = [int(d) for d in rng.integers(1, 6, rank)]
    count = int(rng.integers(1, rank + 2))
    begin = rng.integers(-6, 6, count).astype(np.int32)
    end = rng.integers(-6, 7, count).astype(np.int32)
    strides = rng.choice([-2, -1, 1, 2, 3], count).astype(np.int32)
    options = {
        name: int(rng.integers(0, 1 << count)) if rng.random() < 0.5 else 0
        for name in ("begin_mask", "end_mask", "new_axis_mask", "shrink_axis_mask")
    }
    options["ellipsis_mask"] = 1 << int(rng.integers(0, count)) if rng.random() < 0.2 else 0
    options["offset"] = False
    return rng.standard_normal(shape).astype(np.float32), [begin, end, strides], options


@pytest.mark.parametrize("seed", range(4))
def test_strided_slice_shapes_and_values_agree_with_litert(seed: int) -> None:
    """The validator accepts exactly LiteRT's shape, except where LiteRT computes nothing: a
    shrunk axis with a negative stride or an index outside the axis (TensorFlow refuses both).
    Where it accepts, the numpy engine computes LiteRT's values."""
    rng = np.random.default_rng(seed)
    outcomes = collections.Counter(_slice_outcome(*_random_slice(rng)) for _ in range(60))
    assert outcomes["agreed"] > 20, outcomes


def _random_offset_slice(rng: np.random.Generator) -> tuple[np.ndarray, list, dict, list]:
    shape = [int(d) for d in rng.integers(1, 6, int(rng.integers(1, 4)))]
    begin = np.array([rng.integers(-d - 1, d + 2) for d in shape], np.int32)
    sizes = np.array([rng.integers(-d - 1, d + 2) for d in shape], np.int32)
    strides = rng.choice([-2, -1, 1, 2], len(shape)).astype(np.int32)
    options = {
        name: int(rng.integers(0, 1 << len(shape))) if rng.random() < 0.3 else 0
        for name in ("begin_mask", "end_mask", "shrink_axis_mask")
    }
    options.update(ellipsis_mask=0, new_axis_mask=0, offset=True)
    declared = [  # LiteRT's ceil(size / stride) for every kept axis
        max(-(-int(n) // int(s)), 0)
        for i, (n, s) in enumerate(zip(sizes, strides, strict=True))
        if not options["shrink_axis_mask"] >> i & 1
    ]
    x = rng.standard_normal(shape).astype(np.float32)
    return x, [begin, sizes, strides], options, declared


@pytest.mark.parametrize("seed", range(2))
def test_offset_strided_slices_the_validator_accepts_run_in_litert_as_numpy_does(seed) -> None:
    """`offset` slices (ends are sizes counted from the begins): LiteRT crashes or leaves output
    unwritten on many of them. The validator accepts exactly LiteRT's shape for those that stay
    inside the input, and there LiteRT does not crash and computes the numpy engine's values."""
    rng = np.random.default_rng(100 + seed)
    outcomes = collections.Counter(_slice_outcome(*_random_offset_slice(rng)) for _ in range(40))
    assert outcomes["agreed"] > 5, outcomes


def test_an_offset_slice_leaving_the_input_is_refused() -> None:
    """Fuzzing: LiteRT segfaulted on a STRIDED_SLICE with offset and fewer sizes than axes
    (it reads a size per axis), and wrote part of its output only when a slice left the input."""
    x = Act(np.zeros((2, 2, 3), np.float32), batched=False)
    short = [x, Const(np.array([-3], np.int32)), Const(np.array([-6], np.int32))]
    short.append(Const(np.array([3], np.int32)))
    options = {"shrink_axis_mask": 1, "offset": True}
    kwargs = {"options_type": "StridedSliceOptions", "options": options}
    (problem,) = _problems("STRIDED_SLICE", short, [2, 3], **kwargs)
    assert "an offset slice needs one size per input axis (3, got 1)" in problem.message
    beyond = [x, Const(np.array([1, 0, 0], np.int32)), Const(np.array([2, 2, 3], np.int32))]
    beyond.append(Const(np.array([1, 1, 1], np.int32)))
    kwargs["options"] = {"offset": True}
    (problem,) = _problems("STRIDED_SLICE", beyond, [2, 2, 3], **kwargs)
    assert "the offset slice of axis 0 (begin 1, size 2, stride 1) leaves" in problem.message


def test_a_shrunk_axis_outside_the_input_or_backwards_is_refused() -> None:
    """Fuzzing: a shrink index equal to the axis size passed the validator and the numpy kernel
    raised IndexError; LiteRT writes nothing for it, nor for a shrink with a negative stride."""
    x = Act(np.zeros((1, 3), np.float32), batched=False)
    kwargs = {"options_type": "StridedSliceOptions", "options": {"shrink_axis_mask": 2}}
    for begin, stride, fragment in (
        (3, 1, "slice spec 1 shrinks its axis to index 3, outside its 3 elements"),
        (-4, 1, "slice spec 1 shrinks its axis to index -4, outside its 3 elements"),
        (1, -1, "slice spec 1 shrinks its axis with the negative stride -1"),
    ):
        spec = [np.array([0, begin], np.int32), np.array([1, 4], np.int32)]
        spec.append(np.array([1, stride], np.int32))
        (problem,) = _problems("STRIDED_SLICE", [x, *map(Const, spec)], [1], **kwargs)
        assert problem.message == fragment


def test_convolution_filters_are_checked_alike() -> None:
    """CONV_2D and TRANSPOSE_CONV share one filter check: every size known and positive, and a
    transposed convolution's filter reads the input's channels."""
    x = Act(np.zeros((1, 5, 5, 2), np.float32))
    conv = {"options_type": "Conv2DOptions", "options": {"stride_h": 1, "stride_w": 1}}
    transposed = {"options_type": "TransposeConvOptions", "options": {"stride_h": 1, "stride_w": 1}}
    output_shape = Const(np.array([1, 5, 5, 4], np.int32))
    empty = Const(np.zeros((4, 3, 0, 2), np.float32))
    for op_type, inputs, options in (
        ("CONV_2D", [x, empty], conv),
        ("TRANSPOSE_CONV", [output_shape, empty, x], transposed),
    ):
        (problem,) = _problems(op_type, inputs, [1, 5, 5, 4], **options)
        assert problem.message == "filter shape [4, 3, 0, 2] must be static and positive"
    three_channels = Const(np.zeros((4, 3, 3, 3), np.float32))
    (problem,) = _problems(
        "TRANSPOSE_CONV", [output_shape, three_channels, x], [1, 5, 5, 4], **transposed
    )
    assert problem.message == "filter of 3 input channels for an input of 2"
