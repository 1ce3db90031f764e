"""Rule families for numerical risks: legal parameters that lose precision, saturate, or make
the interpreter abort."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qtool.check.context import AuditContext
from qtool.check.findings import Finding
from qtool.check.qparams import num
from qtool.check.rulebook import family, rule
from qtool.model import TensorType, dtype_name
from qtool.model.lowbit import constant_values
from qtool.numerics import multiplier_reaches_one, quantize_multiplier
from qtool.spec import input_scale_below_one

# int32/int64 tensors in a quantized graph are biases, whose scale is a product of scales and
# tiny by construction: values are large integers, no precision is lost.
WIDE_ACCUMULATOR_TYPES = frozenset({TensorType.INT32, TensorType.INT64})


TINY_SCALE = rule(
    "QT-TINY-SCALE",
    "warning",
    title="scale is tiny",
    help=(
        "Scales this small are close to float32 denormals: products and reciprocals lose "
        "precision or overflow, and bias values saturate."
    ),
    on_device=(
        "Kernels that derive requantization multipliers from the scales in float32 (LiteRT, "
        "TFLite Micro, Vela for Ethos-U) get a zero or denormal multiplier, and the activation "
        "collapses to its zero point."
    ),
)

DEAD_CHANNELS = rule(
    "QT-DEAD-CHANNELS",
    "info",
    title="weight channels that are all zero or negligibly small",
    help=(
        "Channels whose weights are zero or below the tiny-scale limit compute 0 in int8 as "
        "in float (dead filters): harmless, reported with their count."
    ),
)


@family("tiny scales", TINY_SCALE, DEAD_CHANNELS)
def check_tiny_scales(ctx: AuditContext) -> Iterator[Finding]:
    """Tiny scales of activations warn; constant channels whose values are negligible anyway
    (dead filters: zero or about 1e-10 weights) are only counted, as an info."""
    limit = ctx.settings.tiny_scale
    for s, t, tensor in ctx.quantized_tensors():
        if tensor.dtype in WIDE_ACCUMULATOR_TYPES:
            continue  # a bias's scale is input scale x weight scale (QT-BIAS-SCALE audits it)
        scales = tensor.quantization.scale
        tiny = scales < limit
        if not tiny.any():
            continue
        dead = _negligible_slices(ctx, tensor, limit) & tiny
        if dead.any() and dead.sum() == tiny.sum():
            yield ctx.tensor_finding(
                DEAD_CHANNELS,
                f"'{tensor.name}': {int(dead.sum())} of {scales.size} channels hold only values "
                f"below {limit * NEGLIGIBLE_CODES:g} in magnitude (scale < tiny_scale {limit:g}): "
                "they compute 0 in int8 as in float",
                s,
                t,
            )
            continue
        smallest = float(scales[tiny & ~dead].min())
        yield ctx.tensor_finding(
            TINY_SCALE,
            f"'{tensor.name}' has scale {num(smallest)} < tiny_scale {limit:g}",
            s,
            t,
        )


NEGLIGIBLE_CODES = 128  # a value this many tiny steps from 0 is still negligible


def _negligible_slices(ctx: AuditContext, tensor, limit: float) -> np.ndarray:
    """Per scale: whether the constant's real values in that slice are all negligible."""
    q = tensor.quantization
    values = constant_values(ctx.model, tensor)  # int4 unpacked
    if values is None or values.size == 0:
        return np.zeros(q.scale.size, bool)
    zero = q.zero_point.astype(np.int64)
    if q.per_axis:
        along = [1] * values.ndim
        along[q.quantized_dimension] = -1
        offsets = np.abs(values.astype(np.int64) - zero.reshape(along))
        peaks = offsets.max(axis=tuple(d for d in range(values.ndim) if d != q.quantized_dimension))
    else:
        peaks = np.array([np.abs(values.astype(np.int64) - zero[0]).max()])
    return peaks * q.scale.astype(np.float64) <= limit * NEGLIGIBLE_CODES


BIAS_SATURATED = rule(
    "QT-BIAS-SATURATED",
    "warning",
    title="bias values saturated at the int32 limit",
    help=(
        "The real bias did not fit in int32 at scale input_scale * weight_scale (tiny scales); "
        "the clamped value is wrong. Enlarge that channel's weight scale."
    ),
    on_device=(
        "The int8 CONV_2D/FULLY_CONNECTED kernels of LiteRT, TFLite Micro and Ethos-U add the "
        "clamped bias, so those channels are offset on every inference."
    ),
)


@family("bias saturation", BIAS_SATURATED, per_tensor=True)
def check_bias_saturation(ctx: AuditContext) -> Iterator[Finding]:
    """Biases with values at the int32 limit: the real bias did not fit at its scale."""
    limit = ctx.spec.bias_value_limit
    for op in ctx.int8_ops():
        for operand in ctx.checked_operands(op):
            if operand.rule.role != "bias" or not ctx.is_dtype(operand.tensor, operand.rule.dtype):
                continue
            values = ctx.model.tensor_data(operand.tensor)
            if values is None:
                continue
            saturated = int(np.count_nonzero((values >= limit) | (values <= -limit)))
            if saturated:
                yield ctx.finding(
                    BIAS_SATURATED,
                    f"{operand.label}: {saturated} of {values.size} values "
                    f"are at the int32 limit +-{limit}: the real bias did not fit at this scale",
                    op,
                    operand,
                )


RANGE_UNDERUSED = rule(
    "QT-RANGE-UNDERUSED",
    "warning",
    title="activation range uses few of the int8 codes",
    help=(
        "The recorded min/max covers a small fraction of the representable range: precision is "
        "wasted. Recalibrate or narrow the quantization range."
    ),
    on_device=(
        "The int8 kernels of LiteRT, TFLite Micro and the NPUs quantize the activation with "
        "this scale: the signal occupies few codes and loses about 6 dB of SQNR per unused "
        "bit."
    ),
)


@family("activation range use", RANGE_UNDERUSED)
def check_range_use(ctx: AuditContext) -> Iterator[Finding]:
    """Activations whose recorded float range (QuantParams.min/max) uses few of the codes."""
    fraction = ctx.settings.min_code_fraction
    for s, t, tensor in ctx.quantized_tensors():
        q = tensor.quantization
        limits = ctx.spec.dtype_ranges.get(dtype_name(tensor.dtype).lower())
        if (
            limits is None
            or q.per_axis
            or ctx.model.is_constant(tensor)
            or q.min is None
            or q.max is None
            or len(q.min) != 1
            or len(q.max) != 1
        ):
            continue
        low, high = limits
        scale, zp = float(q.scale[0]), int(q.zero_point[0])
        used = (float(q.max[0]) - float(q.min[0])) / (scale * (high - low))
        if used < fraction:
            yield ctx.tensor_finding(
                RANGE_UNDERUSED,
                f"'{tensor.name}': recorded range [{num(q.min[0])}, "
                f"{num(q.max[0])}] covers {used:.1%} of the representable "
                f"[{num((low - zp) * scale)}, {num((high - zp) * scale)}] (about "
                f"{used * (high - low):.0f} of {high - low} steps; min_code_fraction {fraction:g})",
                s,
                t,
            )


WEIGHT_CODES = rule(
    "QT-WEIGHT-CODES",
    "warning",
    title="constant weights use few of the int8 codes",
    help=(
        "The largest |weight| of a channel maps far below 127, so few codes are used and "
        "precision is lost: the weight scale is too large for those values."
    ),
    on_device=(
        "The int8 CONV_2D/FULLY_CONNECTED kernels of LiteRT, TFLite Micro and Ethos-U multiply "
        "these coarse codes as they are, so the layer's output carries the extra rounding "
        "error."
    ),
)


@family("weight code use", WEIGHT_CODES, per_tensor=True)
def check_weight_codes(ctx: AuditContext) -> Iterator[Finding]:
    """Constant weights whose largest magnitude per slice maps far below the top code."""
    fraction = ctx.settings.min_code_fraction
    for op, operand in ctx.param_operands():
        rule, tensor = operand.rule, operand.tensor
        if rule.role != "weight" or not ctx.is_dtype(tensor, rule.dtype):
            continue
        values = ctx.model.tensor_data(tensor)
        if values is None or values.size == 0:
            continue
        q = tensor.quantization
        if q.per_axis and tensor.sparsity is None:
            others = tuple(d for d in range(values.ndim) if d != q.quantized_dimension)
            peaks = np.maximum(
                values.max(axis=others).astype(np.int32), -values.min(axis=others).astype(np.int32)
            )
        else:
            peaks = np.array([max(int(values.max()), -int(values.min()))])
        top = rule.range[1]
        low = (peaks > 0) & (peaks < fraction * top)  # all-zero slices are pruned, not wasted
        if low.any():
            c = int(np.argmin(np.where(low, peaks, top)))
            scope = f"{int(low.sum())} of {peaks.size} channels use" if peaks.size > 1 else "uses"
            channel = f" in channel {c}" if peaks.size > 1 else ""
            yield ctx.finding(
                WEIGHT_CODES,
                f"{operand.label} {scope} few codes: max |q| = "
                f"{int(peaks[c])}{channel}, below min_code_fraction {fraction:g} x {top}",
                op,
                operand,
            )


RESCALE_ABORT = rule(
    "QT-RESCALE-ABORT",
    "error",
    title="ADD/SUB or comparison scales make the interpreter abort",
    help=(
        "The int8 ADD/SUB kernel rescales both inputs to twice the larger input scale; if a "
        "multiplier reaches 1 (output scale far smaller than the input scales) or a scale is 0, "
        "the interpreter aborts the process while preparing the model. LiteRT's int8 "
        "comparisons (EQUAL, GREATER, ...) take each input scale itself as a multiplier: an "
        "input scale of 1 or more (a constant of zeros quantized alone gets 1) aborts the "
        "process when the op runs."
    ),
)

RESCALE_FLUSH = rule(
    "QT-RESCALE-FLUSH",
    "warning",
    title="ADD/SUB multiplier flushed to zero",
    help=(
        "An input (or the output) multiplier of the int8 ADD/SUB kernel is below 2^-32 and is "
        "flushed to 0: that input is ignored (or the output is constant)."
    ),
    on_device=(
        "LiteRT's and TFLite Micro's int8 ADD/SUB kernels compute with the flushed multiplier: "
        "that input contributes nothing (or the output is constant) on the device."
    ),
)


@family("int8 rescaling", RESCALE_ABORT, RESCALE_FLUSH)
def check_rescale(ctx: AuditContext) -> Iterator[Finding]:
    """The multipliers of the int8 ADD/SUB kernels and of LiteRT's int8 comparisons, prepared
    as TFLite does.

    Both inputs are rescaled to twice the larger input scale, with a left shift for headroom:
    input multipliers s_i / (2 max s), output multiplier 2 max s / (2^shift s_out). TFLite
    requires each to be in (0, 1) after rounding to Q31 (QuantizeMultiplierSmallerThanOneExp
    aborts the process otherwise) and flushes those below 2^-32 to zero. A comparison's input
    multipliers are the input scales themselves.
    """
    for op in ctx.int8_ops():
        if op.type in input_scale_below_one(op.scheme):
            yield from _comparison_scales(ctx, op)
            continue
        shift = ctx.settings.rescale_left_shift.get(op.type)
        operands = (op.input_at(0), op.input_at(1), op.output_at(0))
        if shift is None or any(
            o is None or not ctx.sound(op, o) or o.tensor.quantization.per_axis for o in operands
        ):
            continue
        first, second, out = (float(o.tensor.quantization.scale[0]) for o in operands)
        twice_max = 2 * max(first, second)
        multipliers = (first / twice_max, second / twice_max, twice_max / ((1 << shift) * out))
        formulas = (
            "input 0 scale / (2 max input scale)",
            "input 1 scale / (2 max input scale)",
            f"2 max input scale / (2^{shift} output scale)",
        )
        for operand, real, formula in zip(operands, multipliers, formulas, strict=True):
            mantissa, exponent = quantize_multiplier(real)
            if exponent > 0:  # real >= 1, or just below 1 and rounded up to 1
                yield ctx.finding(
                    RESCALE_ABORT,
                    f"{op.type} multiplier {formula} = {num(real)} rounds to "
                    ">= 1: the interpreter aborts while preparing the op (output scale "
                    f"{num(out)}, input scales {num(first)} and {num(second)})",
                    op,
                    operand,
                )
            elif mantissa == 0:
                effect = (
                    "the output is constant"
                    if operand.kind == "output"
                    else f"{operand.label} is ignored"
                )
                yield ctx.finding(
                    RESCALE_FLUSH,
                    f"{op.type} multiplier {formula} = {num(real)} is below "
                    f"2^-32 and flushed to 0: {effect}",
                    op,
                    operand,
                )


def _comparison_scales(ctx: AuditContext, op) -> Iterator[Finding]:
    for position in range(2):
        operand = op.input_at(position)
        if operand is None or not ctx.sound(op, operand) or operand.tensor.quantization.per_axis:
            continue
        scale = float(operand.tensor.quantization.scale[0])
        if multiplier_reaches_one(scale):
            yield ctx.finding(
                RESCALE_ABORT,
                f"{op.type} {operand.label} scale {num(scale)} is not below 1: LiteRT's int8 "
                "comparison takes it as a multiplier and aborts the process when the op runs",
                op,
                operand,
            )
