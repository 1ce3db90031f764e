"""Rule families of the op table: every operand of an int8 op against its rule in the spec data."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qtool.check.context import FLOAT_TYPES, AuditContext, Operand
from qtool.check.findings import Finding
from qtool.check.qparams import num
from qtool.check.rulebook import family, rule
from qtool.model import dtype_name


def _params(operand: Operand) -> str:
    q = operand.tensor.quantization
    if q.per_axis:
        return f"{len(q.scale)} per-axis scales along dimension {q.quantized_dimension}"
    return f"(scale {num(q.scale[0])}, zero point {int(q.zero_point[0])})"


QPARAM_MISSING = rule(
    "QT-QPARAM-MISSING",
    "error",
    title="integer operand of an int8 op has no quantization",
    help=(
        "Every int8/int32 operand of a quantized op needs scale and zero point; without them the "
        "kernel has no way to interpret the integers."
    ),
)

DTYPE = rule(
    "QT-DTYPE",
    "error",
    title="operand type differs from the op table",
    help="The int8 spec fixes each operand's type: int8 activations and weights, int32 biases.",
)


@family("operand types", DTYPE, QPARAM_MISSING, per_tensor=True)
def check_dtypes(ctx: AuditContext) -> Iterator[Finding]:
    """Operand types, and integer operands lacking quantization parameters."""
    for op in ctx.int8_ops():
        for operand in ctx.checked_operands(op):
            tensor, wanted = operand.tensor, operand.rule.dtype
            if ctx.dtype_ok(op, operand):
                if not tensor.quantized:
                    yield ctx.finding(
                        QPARAM_MISSING,
                        f"{operand.label} is {dtype_name(tensor.dtype)} "
                        f"without scale/zero point; {op.type} needs them to interpret the integers",
                        op,
                        operand,
                    )
            elif not (operand.kind == "input" and tensor.dtype in FLOAT_TYPES):  # QT-FLOAT-FEED
                # The legacy dtype (uint8) is tolerated in an op that uses it throughout (see
                # QT-LEGACY-UINT8); mixed with the spec dtype, kernels refuse it.
                mixed = f" (mixed with {wanted.upper()} operands)" if ctx.is_legacy(operand) else ""
                yield ctx.finding(
                    DTYPE,
                    f"{operand.label} is {dtype_name(tensor.dtype)}{mixed}; "
                    f"{op.type} requires {wanted.upper()}",
                    op,
                    operand,
                )


GRANULARITY = rule(
    "QT-GRANULARITY",
    "error",
    title="per-axis parameters where the spec requires per-tensor",
    help=(
        "Activations (and, for some targets, FULLY_CONNECTED weights) must have one scale and "
        "zero point for the whole tensor."
    ),
)

WEIGHT_PER_TENSOR = rule(
    "QT-WEIGHT-PER-TENSOR",
    "warning",
    title="per-tensor weights where the spec asks per-axis",
    help=(
        "The op table quantizes these weights per output channel. Per-tensor weights still run "
        "but lose accuracy when channel ranges differ; re-quantize per channel."
    ),
    on_device=(
        "Every int8 CONV_2D/DEPTHWISE_CONV_2D kernel (LiteRT, TFLite Micro, Ethos-U) applies "
        "the one scale to all channels, so channels with small weights keep a few codes or "
        "round to zero."
    ),
)

WEIGHT_AXIS = rule(
    "QT-WEIGHT-AXIS",
    "error",
    title="per-axis weights quantized along the wrong dimension",
    help=(
        "Per-axis weights must be quantized along the output-channel dimension the op table "
        "names for the op; kernels read one scale per output channel."
    ),
)


@family("granularity", GRANULARITY, WEIGHT_PER_TENSOR, WEIGHT_AXIS, per_tensor=True)
def check_granularity(ctx: AuditContext) -> Iterator[Finding]:
    """Per-tensor vs per-axis parameters, and the axis of per-axis weights."""
    for op, operand in ctx.param_operands():
        rule, tensor = operand.rule, operand.tensor
        q = tensor.quantization
        if rule.role == "bias":
            continue  # a bias follows its weights' granularity through the scale rule
        if rule.granularity == "per-tensor":
            if q.per_axis:
                yield ctx.finding(
                    GRANULARITY,
                    f"{operand.label} must be per-tensor{ctx.profile_note(op, operand)}; "
                    f"it has {_params(operand)}",
                    op,
                    operand,
                )
        elif q.per_axis:
            if rule.axis is not None and q.quantized_dimension != rule.axis:
                yield ctx.finding(
                    WEIGHT_AXIS,
                    f"{operand.label} is quantized along dimension "
                    f"{q.quantized_dimension}; {op.type} requires dimension {rule.axis} "
                    f"(shape {list(tensor.shape)})",
                    op,
                    operand,
                )
        elif not rule.per_tensor_allowed:
            channels = (
                tensor.shape[rule.axis]
                if rule.axis is not None and rule.axis < len(tensor.shape)
                else None
            )
            if channels is None or channels > 1:  # one channel: per-tensor is per-axis
                yield ctx.finding(
                    WEIGHT_PER_TENSOR,
                    f"{operand.label} has one scale for "
                    f"{channels if channels is not None else 'all'} channels; the op table asks "
                    f"per-axis along dimension {rule.axis}",
                    op,
                    operand,
                )


ZERO_POINT = rule(
    "QT-ZERO-POINT",
    "error",
    title="zero point differs from the value the spec requires",
    help=(
        "Weights and biases are symmetric (zero point 0): a non-zero weight zero point adds a "
        "data-dependent term to every dot product that int8 kernels do not compute."
    ),
)


@family("zero points", ZERO_POINT, per_tensor=True)
def check_zero_points(ctx: AuditContext) -> Iterator[Finding]:
    """Operands with another zero point than their rule fixes (0 for weights, biases and int16
    activations)."""
    for op, operand in ctx.param_operands():
        wanted = operand.rule.zero_point
        if wanted is None or not ctx.is_dtype(operand.tensor, operand.rule.dtype):
            continue
        zps = operand.tensor.quantization.zero_point
        bad = zps != wanted
        if bad.any():
            first = int(np.argmax(bad))
            where = f"zero_point[{first}]" if len(zps) > 1 else "zero point"
            count = f" ({int(bad.sum())} of {len(zps)} differ)" if len(zps) > 1 else ""
            yield ctx.finding(
                ZERO_POINT,
                f"{operand.label} must have zero point {wanted}; "
                f"{where} is {int(zps[first])}{count}",
                op,
                operand,
            )


WEIGHT_RANGE = rule(
    "QT-WEIGHT-RANGE",
    "error",
    title="constant values outside the operand's range",
    help=(
        "int8 weights never use the most negative code, so that their range is symmetric "
        "around the zero point 0. Clamp the quantized weights to the spec's weight range."
    ),
)


@family("weight values", WEIGHT_RANGE, per_tensor=True)
def check_weight_values(ctx: AuditContext) -> Iterator[Finding]:
    """Constant values outside the operand's range in the spec (the reserved -128 of weights)."""
    for op in ctx.int8_ops():
        for operand in ctx.checked_operands(op):
            rule, tensor = operand.rule, operand.tensor
            narrowed = rule.range != ctx.spec.dtype_ranges.get(rule.dtype)
            if not (narrowed and ctx.is_dtype(tensor, rule.dtype)):
                continue
            values = ctx.model.tensor_data(tensor)
            if values is None or values.size == 0:
                continue
            low, high = rule.range
            lowest, highest = int(values.min()), int(values.max())
            if lowest >= low and highest <= high:
                continue
            outside = int(np.count_nonzero((values < low) | (values > high)))
            yield ctx.finding(
                WEIGHT_RANGE,
                f"{operand.label}: {outside} of {values.size} values lie "
                f"outside [{low}, {high}] (min {lowest}, max {highest})",
                op,
                operand,
            )


BIAS_SCALE = rule(
    "QT-BIAS-SCALE",
    "error",
    title="bias scale is not input scale x weight scale",
    help=(
        "The int32 accumulator has scale input_scale * weight_scale[c]; a bias with another scale "
        "is added in the wrong units and shifts every output silently."
    ),
)


@family("bias scale", BIAS_SCALE)
def check_bias_scales(ctx: AuditContext) -> Iterator[Finding]:
    """A bias whose scale is not input scale x weight scale (per channel, within
    bias_scale_rtol), or whose number of scales differs from the weights'."""
    rtol = ctx.spec.tolerances["bias_scale_rtol"]
    for op, bias in ctx.param_operands():
        if bias.rule.bias_scale_inputs is None:
            continue
        first, second = (op.input_at(p) for p in bias.rule.bias_scale_inputs)
        if first is None or second is None:
            continue
        if not (ctx.sound(op, first) and ctx.sound(op, second)):
            continue
        if first.tensor.quantization.per_axis:
            continue  # QT-GRANULARITY already reports the input; no single scale to multiply
        input_scale = np.float64(first.tensor.quantization.scale[0])
        expected = input_scale * second.tensor.quantization.scale.astype(np.float64)
        actual = bias.tensor.quantization.scale.astype(np.float64)
        if actual.size != expected.size:
            # The bias has the weights' granularity: per-axis bias for per-axis weights only.
            yield ctx.finding(
                BIAS_SCALE,
                f"{bias.label} has {actual.size} scales but {second.label} has "
                f"{expected.size}: one bias scale per weight scale expected",
                op,
                bias,
            )
            continue
        relative = np.abs(actual - expected) / expected
        bad = relative > rtol
        if not bad.any():
            continue
        c = int(np.argmax(relative))
        channel = f"[{c}]" if relative.size > 1 else ""
        count = f"; {int(bad.sum())} of {bad.size} channels differ" if bad.size > 1 else ""
        weight_scale = second.tensor.quantization.scale
        yield ctx.finding(
            BIAS_SCALE,
            f"bias scale{channel} = {num(actual[c])}, expected {first.role} scale "
            f"{num(input_scale)} x {second.role} scale{channel} {num(weight_scale[c])} = "
            f"{num(expected[c])} (relative error {relative[c]:.2e} > bias_scale_rtol "
            f"{rtol:g}){count}",
            op,
            bias,
        )


FIXED_OUTPUT = rule(
    "QT-FIXED-OUTPUT",
    "error",
    title="output parameters differ from the fixed ones",
    help=(
        "Some kernels (SOFTMAX, LOGISTIC, TANH, ...) produce outputs with the fixed (scale, "
        "zero point) of the op table; other values are refused or silently misread."
    ),
)


@family("fixed outputs", FIXED_OUTPUT)
def check_fixed_outputs(ctx: AuditContext) -> Iterator[Finding]:
    """Outputs whose parameters the spec fixes (LOGISTIC's 1/256, -128, ...) with others."""
    rtol = ctx.spec.tolerances["fixed_scale_rtol"]
    for op, operand in ctx.param_operands():
        fixed = operand.rule.fixed
        q = operand.tensor.quantization
        if fixed is None or q.per_axis or not ctx.is_dtype(operand.tensor, operand.rule.dtype):
            continue
        scale, zero_point = fixed
        if abs(float(q.scale[0]) - scale) <= rtol * scale and int(q.zero_point[0]) == zero_point:
            continue
        yield ctx.finding(
            FIXED_OUTPUT,
            f"{operand.label} of {op.type} must have (scale {num(scale)}, zero "
            f"point {zero_point}) (fixed_scale_rtol {rtol:g}); it has {_params(operand)}",
            op,
            operand,
        )


SAME_SCALE = rule(
    "QT-SAME-SCALE",
    "error",
    title="same-scale op changes scale or zero point",
    help=(
        "Pooling, reshaping, concatenation and similar ops move int8 values without rescaling: "
        "their inputs and outputs must share scale and zero point."
    ),
)


@family("same scale", SAME_SCALE)
def check_same_scale(ctx: AuditContext) -> Iterator[Finding]:
    """Operands of a same-scale op (CONCATENATION, MAX_POOL_2D, ...) whose scale or zero point
    differs from the output's."""
    rtol = ctx.spec.tolerances["same_scale_rtol"]
    for op in ctx.int8_ops():
        if not op.rule.same_scale:
            continue
        operands = [
            o
            for o in ctx.checked_operands(op)
            if ctx.sound(op, o) and not o.tensor.quantization.per_axis
        ]
        # The output is the reference: kernels (CONCATENATION, PACK) compare inputs against it.
        reference = next((o for o in operands if o.kind == "output"), None)
        reference = reference or (operands[0] if operands else None)
        if reference is None:
            continue
        ref_q = reference.tensor.quantization
        for operand in operands:
            q = operand.tensor.quantization
            same = (
                np.isclose(q.scale[0], ref_q.scale[0], rtol=rtol, atol=0)
                and q.zero_point[0] == ref_q.zero_point[0]
            )
            if operand is not reference and not same:
                yield ctx.finding(
                    SAME_SCALE,
                    f"{operand.label} has {_params(operand)} but "
                    f"{reference.label} has {_params(reference)}: {op.type} must keep scale and "
                    f"zero point (same_scale_rtol {rtol:g})",
                    op,
                    operand,
                )
