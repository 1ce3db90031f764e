"""Run one operator in LiteRT and in the numpy engine on the same inputs and compare.

Usage in a kernel test::

    check_op("CONV_2D",
             [Act(rng.standard_normal((4, 8, 8, 3))), Const(w), Const(b)],
             options_type="Conv2DOptions", options={"padding": SAME, "stride_w": 1, ...})

`Act(samples)` is a model input: its declared shape is [1, *samples.shape[1:]] and every row of
`samples` is one sample (LiteRT runs them one by one; the engine runs them as one batch, which
also exercises the kernel's batch rule). `Act(value, batched=False)` declares the value's own
shape (one sample, no batch substitution). `Const(value)` is a constant tensor; `None` is an
absent optional input (-1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from qtool.model import model_to_bytes
from qtool.model.build import GraphBuilder
from qtool.runtime import Engine
from tests.litert import run_litert


@dataclass
class Act:
    value: np.ndarray
    batched: bool = True


@dataclass
class Const:
    value: np.ndarray


def build_single_op(
    op_type: str,
    inputs: list[Act | Const | None],
    *,
    options_type=None,
    options=None,
    output_shapes=None,
    output_dtypes=None,
    n_outputs: int = 1,
    version: int = 1,
):
    builder = GraphBuilder()
    indices = []
    for i, item in enumerate(inputs):
        if item is None:
            indices.append(-1)
        elif isinstance(item, Const):
            indices.append(builder.constant(f"const_{i}", np.asarray(item.value)))
        else:
            value = np.asarray(item.value)
            shape = [1, *value.shape[1:]] if item.batched else list(value.shape)
            indices.append(builder.input(f"input_{i}", shape, value.dtype))
    output_shapes = output_shapes or [[]] * n_outputs
    output_dtypes = output_dtypes or [np.float32] * n_outputs
    outputs = [
        builder.tensor(f"output_{k}", shape, dtype)
        for k, (shape, dtype) in enumerate(zip(output_shapes, output_dtypes, strict=True))
    ]
    builder.op(
        op_type, indices, outputs, options_type=options_type, options=options, version=version
    )
    return builder.finish(outputs)


def check_op(
    op_type: str,
    inputs: list[Act | Const | None],
    mode: str | None = None,
    *,
    options_type: str | None = None,
    options: dict[str, Any] | None = None,
    n_outputs: int = 1,
    output_dtypes=None,
    rtol: float = 1e-5,
    version: int = 1,
) -> list[np.ndarray]:
    """Assert the engine matches LiteRT (max |diff| <= rtol * max |reference|); return outputs.

    With `mode`, also assert how the engine planned the op: "batch" (one pass over all samples),
    "loop" (once per sample) or "serial" (the whole graph sample by sample).
    """
    acts = [item for item in inputs if isinstance(item, Act)]
    samples = [np.asarray(a.value) for a in acts]
    batched = all(a.batched for a in acts)
    n = samples[0].shape[0] if samples and batched else 1
    if output_dtypes is None:
        first = next((np.asarray(i.value).dtype for i in inputs if i is not None), np.float32)
        output_dtypes = [first if np.issubdtype(first, np.floating) else np.float32] * n_outputs
    probe = build_single_op(
        op_type,
        inputs,
        options_type=options_type,
        options=options,
        n_outputs=n_outputs,
        output_dtypes=output_dtypes,
        version=version,
    )
    sample_feeds = [[s[i : i + 1] for s in samples] for i in range(n)] if batched else [samples]
    reference = [run_litert(model_to_bytes(probe), feed) for feed in sample_feeds]
    # Declare the output shapes LiteRT computed, as a converter would have.
    model = build_single_op(
        op_type,
        inputs,
        options_type=options_type,
        options=options,
        output_shapes=[list(r.shape) for r in reference[0]],
        output_dtypes=[r.dtype for r in reference[0]],
        version=version,
    )
    engine = Engine(model)
    if mode is not None:
        planned = "serial" if engine.serial else engine.steps[0].mode
        assert planned == mode, f"{op_type}: planned {planned}, expected {mode}"
    feeds = samples if batched else [s[None] for s in samples]
    got = engine.run(feeds)
    # Like the engine: per-sample outputs join along their batch-1 axis, or stack on a new one.
    expected = [
        np.concatenate(parts)
        if batched and parts[0].ndim and parts[0].shape[0] == 1
        else np.stack(parts)
        for parts in zip(*reference, strict=True)
    ]
    for k, (e, g) in enumerate(zip(expected, got, strict=True)):
        assert g.shape == e.shape, f"{op_type} output {k}: shape {g.shape} != LiteRT {e.shape}"
        assert g.dtype == e.dtype, f"{op_type} output {k}: dtype {g.dtype} != LiteRT {e.dtype}"
        if np.issubdtype(e.dtype, np.floating):
            scale = max(float(np.max(np.abs(e))) if e.size else 0.0, 1e-30)
            err = float(np.max(np.abs(e.astype(np.float64) - g))) if e.size else 0.0
            assert err <= rtol * scale, (
                f"{op_type} output {k}: max abs error {err:.3g} > {rtol} x max |ref| {scale:.3g}"
            )
        else:
            np.testing.assert_array_equal(g, e, err_msg=f"{op_type} output {k}")
    return got
