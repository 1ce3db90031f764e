"""LiteRT, the real interpreter, as the oracle of the tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType


def make_interpreter(
    model_bytes: bytes, reference: bool = True, preserve_all: bool = False
) -> Interpreter:
    """An interpreter on the reference kernels (no XNNPACK), the closest thing to the spec."""
    resolver = OpResolverType.BUILTIN_REF if reference else OpResolverType.AUTO
    interpreter = Interpreter(
        model_content=bytes(model_bytes),
        experimental_op_resolver_type=resolver,
        experimental_preserve_all_tensors=preserve_all,
    )
    interpreter.allocate_tensors()
    return interpreter


def run_litert(
    model_bytes: bytes, feeds: Sequence[np.ndarray], reference: bool = True
) -> list[np.ndarray]:
    """Run one invocation with `feeds` given in the model's input order (full declared shapes)."""
    interpreter = make_interpreter(model_bytes, reference)
    details = interpreter.get_input_details()
    resized = False
    for detail, feed in zip(details, feeds, strict=True):
        if list(detail["shape"]) != list(np.shape(feed)):
            interpreter.resize_tensor_input(detail["index"], list(np.shape(feed)))
            resized = True
    if resized:
        interpreter.allocate_tensors()
    for detail, feed in zip(details, feeds, strict=True):
        interpreter.set_tensor(detail["index"], np.asarray(feed, dtype=detail["dtype"]))
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def run_litert_samples(
    model_bytes: bytes, feeds: Sequence[np.ndarray], reference: bool = True
) -> list[np.ndarray]:
    """Run every sample of batch-1 feeds (N, *sample_shape) one by one; stack the outputs."""
    n = feeds[0].shape[0]
    per_sample = [
        run_litert(model_bytes, [f[i : i + 1] for f in feeds], reference) for i in range(n)
    ]
    return [np.concatenate(parts) for parts in zip(*per_sample, strict=True)]
