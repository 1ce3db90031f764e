"""Shape rules against LiteRT: where LiteRT computes an output shape, the validator infers the
same one (and refuses a declared shape that differs). STRIDED_SLICE, whose masks make the
richest rule, gets random specs."""

from __future__ import annotations

import numpy as np
import pytest

from qtool.model import model_to_bytes, parse_model
from qtool.model.validate import model_problems
from tests.litert import run_litert
from tests.runtime.harness import Act, Const, build_single_op


def _litert_shape(op_type, inputs, **options) -> list[int] | None:
    probe = build_single_op(op_type, inputs, **options)
    try:
        (out,) = run_litert(
            model_to_bytes(probe), [np.asarray(i.value) for i in inputs if isinstance(i, Act)]
        )
    except (RuntimeError, ValueError):
        return None
    return list(out.shape)


def _problems(op_type, inputs, shape, **options) -> list:
    model = build_single_op(op_type, inputs, output_shapes=[shape], **options)
    return model_problems(parse_model(model_to_bytes(model), validate=False))


def _random_slice(rng: np.random.Generator):
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
    x = Act(rng.standard_normal(shape).astype(np.float32), batched=False)
    return [x, Const(begin), Const(end), Const(strides)], options


@pytest.mark.parametrize("seed", range(4))
def test_strided_slice_shapes_agree_with_litert(seed: int) -> None:
    rng = np.random.default_rng(seed)
    agreed = 0
    for _ in range(60):
        inputs, options = _random_slice(rng)
        kwargs = {"options_type": "StridedSliceOptions", "options": options}
        shape = _litert_shape("STRIDED_SLICE", inputs, **kwargs)
        if shape is None:
            continue
        assert _problems("STRIDED_SLICE", inputs, shape, **kwargs) == [], (options, shape)
        if shape:
            wrong = [shape[0] + 1, *shape[1:]]
            assert _problems("STRIDED_SLICE", inputs, wrong, **kwargs), (options, wrong)
        agreed += 1
    assert agreed > 20
