"""Structural validity of one tensor's quantization parameters, independent of any op.

A tensor with such a problem is "broken": the rules that relate parameters of several tensors
(bias scale, same scale, ...) skip it, so one bad value yields one finding, not a cascade.
"""

from __future__ import annotations

import numpy as np

from qtool.check.rulebook import RuleInfo, rule
from qtool.model import Tensor, dtype_name


def num(value: float) -> str:
    """A float for messages: enough digits to tell float32 values apart."""
    return f"{float(value):.8g}"


def has_params(tensor: Tensor) -> bool:
    """Whether the tensor carries any scale or zero point (even inconsistent ones)."""
    q = tensor.quantization
    return q is not None and (len(q.scale) > 0 or len(q.zero_point) > 0)


QPARAM_COUNT = rule(
    "QT-QPARAM-COUNT",
    "error",
    title="scale and zero_point have different lengths",
    help="A tensor needs one zero point per scale. The interpreter refuses the model.",
)

QPARAM_AXIS = rule(
    "QT-QPARAM-AXIS",
    "error",
    title="quantized_dimension outside the tensor's dimensions",
    help=(
        "quantized_dimension must index a dimension of the tensor. The interpreter refuses "
        "the model."
    ),
)

QPARAM_AXIS_SIZE = rule(
    "QT-QPARAM-AXIS-SIZE",
    "error",
    title="per-axis parameter count differs from the axis size",
    help=(
        "Per-axis quantization needs exactly one scale per slice of quantized_dimension (or a "
        "single scale for per-tensor). The interpreter refuses the model."
    ),
)

SCALE_INVALID = rule(
    "QT-SCALE-INVALID",
    "error",
    title="scale is zero, negative, or not finite",
    help=(
        "Scales must be finite and > 0: a zero scale crashes the interpreter or makes the tensor "
        "all zeros. Widen a degenerate range instead of writing scale 0."
    ),
)

ZP_RANGE = rule(
    "QT-ZP-RANGE",
    "error",
    title="zero point outside the tensor type's range",
    help=(
        "The zero point is a value of the tensor's integer type and must lie in its range, e.g. "
        "[-128, 127] for int8."
    ),
)


def param_problems(
    tensor: Tensor, dtype_ranges: dict[str, tuple[int, int]]
) -> list[tuple[RuleInfo, str]]:
    """(rule, message) for each structural problem of the tensor's scale/zero point."""
    if not has_params(tensor):
        return []
    q = tensor.quantization
    n_scales, n_zps = len(q.scale), len(q.zero_point)
    problems = []
    if n_scales != n_zps:
        problems.append((QPARAM_COUNT, f"{n_scales} scales but {n_zps} zero points"))
    if n_scales == 0:
        return problems
    shape, rank, axis = list(tensor.shape), len(tensor.shape), q.quantized_dimension
    # The interpreter ignores quantized_dimension only for scalars (no dimensions at all).
    if axis < 0 or (rank and axis >= rank):
        problems.append(
            (
                QPARAM_AXIS,
                f"quantized_dimension {axis} is outside the {rank} dimensions of shape {shape}",
            )
        )
    elif n_scales != 1 and rank and shape[axis] >= 0 and n_scales != shape[axis]:
        problems.append(
            (
                QPARAM_AXIS_SIZE,
                f"{n_scales} scales along quantized_dimension {axis} of shape {shape}: "
                f"expected 1 (per-tensor) or {shape[axis]} (per-axis)",
            )
        )
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(q.scale) & (q.scale > 0))
    if bad.any():
        first = int(np.argmax(bad))
        problems.append(
            (
                SCALE_INVALID,
                f"{int(bad.sum())} of {n_scales} scales are not finite and > 0 "
                f"(scale[{first}] = {num(q.scale[first])})",
            )
        )
    limits = dtype_ranges.get(dtype_name(tensor.dtype).lower())
    if limits is not None and n_zps:
        low, high = limits
        outside = (q.zero_point < low) | (q.zero_point > high)
        if outside.any():
            first = int(np.argmax(outside))
            problems.append(
                (
                    ZP_RANGE,
                    f"zero_point[{first}] = {int(q.zero_point[first])} is outside the "
                    f"{dtype_name(tensor.dtype)} range [{low}, {high}]"
                    + (f" ({int(outside.sum())} of {n_zps})" if n_zps > 1 else ""),
                )
            )
    return problems
