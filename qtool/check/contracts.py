"""Rule families for the kernel contracts of the spec files (`kernel_contracts`): limits of
LiteRT's (and TFLite Micro's) integer kernels that the op table does not state, found by the
op-contract tests. A model outside them is refused when the kernel prepares, aborts, or
computes wrong values."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from qtool.check.context import AuditContext, OpView
from qtool.check.findings import Finding
from qtool.check.qparams import num
from qtool.check.rulebook import family, rule
from qtool.model.types import activation_name
from qtool.numerics import largest_products
from qtool.spec import KernelContracts, kernel_contracts

ACTIVATION_BOUND = rule(
    "QT-ACTIVATION-BOUND",
    "error",
    title="clamp bound overflows int32 at this output scale",
    help=(
        "A fused RELU6/RELU_N1_TO_1 (or the RELU6/RELU_N1_TO_1 op) clamps at "
        "zero_point + round(bound / output_scale), computed in int32: with an output scale this "
        "small it overflows. Widen the output's range so the scale exceeds bound / 2^31."
    ),
    on_device=(
        "LiteRT's builtin kernels and TFLite Micro refuse the op at prepare "
        "(no_integer_overflow_from_quantization); the RELU6/RELU_N1_TO_1 ops compute a wrong "
        "clamp; only XNNPACK runs it."
    ),
)

ACCUMULATOR_OVERFLOW = rule(
    "QT-ACCUMULATOR-OVERFLOW",
    "warning",
    title="bias leaves no room in the int32 accumulator",
    help=(
        "The int8 convolution and fully-connected kernels add the bias to an int32 sum of "
        "(input - zero point) * weight products: with this bias, inputs far from the zero point "
        "overflow it. Enlarge the channel's weight scale so |bias| plus the largest sum of "
        "products fits 2^31 - 1."
    ),
    on_device=(
        "LiteRT (builtin and XNNPACK), TFLite Micro and Ethos-U accumulate in int32: the sum "
        "wraps around and the output jumps to the other end of its range."
    ),
)

COMPARISON_RESOLUTION = rule(
    "QT-COMPARISON-RESOLUTION",
    "warning",
    title="comparison input finer than its kernel resolves",
    help=(
        "LiteRT's quantized comparisons compare round(256 * value) of each input: with an "
        "input scale below 1/256 several codes compare equal, and a threshold moves to the "
        "nearest 1/256. Keep the comparison in float."
    ),
    on_device=(
        "LiteRT's comparison kernels (and TFLite Micro's, which share the arithmetic) answer "
        "'equal' for inputs closer than 1/256."
    ),
)

SOFTMAX_INPUT_SCALE = rule(
    "QT-SOFTMAX-INPUT-SCALE",
    "error",
    title="SOFTMAX input scale too small for its kernel",
    help=(
        "LiteRT's reference int8 SOFTMAX and TFLite Micro's need beta * input_scale * 2^26 > 1 "
        "(PreprocessSoftmaxScaling). Widen the input's range."
    ),
    on_device=(
        "LiteRT's reference kernels and TFLite Micro abort the process while preparing the op."
    ),
)


def _contracted(ctx: AuditContext) -> Iterator[tuple[OpView, KernelContracts]]:
    for op in ctx.int8_ops():
        yield op, kernel_contracts(op.scheme)


def _options(ctx: AuditContext, op: OpView) -> dict:
    operator = ctx.model.subgraphs[op.subgraph].operators[op.index]
    return operator.options or {}


@family("activation bounds", ACTIVATION_BOUND)
def check_activation_bounds(ctx: AuditContext) -> Iterator[Finding]:
    """Clamp bounds (fused RELU6/RELU_N1_TO_1, or those ops) that overflow int32 in output
    codes (kernel_contracts.activation_bounds)."""
    for op, contracts in _contracted(ctx):
        output = op.output_at(0)
        if output is None or not ctx.sound(op, output):
            continue
        scale = float(output.tensor.quantization.scale[0])
        zero = int(output.tensor.quantization.zero_point[0])
        fused = _options(ctx, op).get("fused_activation_function")
        for bound, name, _ in contracts.clamp_bounds(
            op.type, activation_name(fused) if fused else None
        ):
            floor = contracts.min_output_scale(bound, zero)
            if scale < floor:
                yield ctx.finding(
                    ACTIVATION_BOUND,
                    f"{name} bound {max(map(abs, bound)):g} / output scale {num(scale)} "
                    f"overflows int32 (the scale must exceed {num(floor)})",
                    op,
                    output,
                )


@family("accumulator headroom", ACCUMULATOR_OVERFLOW)
def check_accumulator(ctx: AuditContext) -> Iterator[Finding]:
    """Biases of weighted ops that leave the int32 accumulator too little room for the products
    (kernel_contracts.accumulator). A bias already at the int32 limit is QT-BIAS-SATURATED's:
    its channels are not counted twice."""
    for op, contracts in _contracted(ctx):
        if op.type not in contracts.accumulator_ops or not contracts.accumulator_limit:
            continue
        headroom = _headroom(ctx, op)
        if headroom is None:
            continue
        bias, values, total = headroom
        saturated = np.abs(values) >= ctx.spec.bias_value_limit
        over = (total > contracts.accumulator_limit) & ~saturated
        if over.any():
            yield ctx.finding(
                ACCUMULATOR_OVERFLOW,
                f"{bias.label}: in {int(over.sum())} of {values.size} channels |bias| plus the "
                "largest sum of products exceeds the int32 accumulator (worst "
                f"{int(total[over].max())})",
                op,
                bias,
            )


def _headroom(ctx: AuditContext, op: OpView):
    """(bias operand, bias values, |bias| + the largest |sum of products| per channel), or None
    when the op's weights, bias or input are missing or unsound."""
    weights, bias = op.rule.weight_rule(), op.rule.bias_rule()
    if weights is None or bias is None or not bias.bias_scale_inputs:
        return None
    w, b = op.input_at(int(weights.index)), op.input_at(int(bias.index))
    x = op.input_at(int(bias.bias_scale_inputs[0]))
    if w is None or b is None or x is None or not all(ctx.sound(op, o) for o in (w, b, x)):
        return None
    codes = ctx.model.tensor_data(w.tensor)
    values = ctx.model.tensor_data(b.tensor)
    if codes is None or values is None:
        return None
    values = values.astype(np.int64).reshape(-1)
    zero = int(x.tensor.quantization.zero_point[0])
    products = largest_products(codes, weights.axis if weights.axis is not None else 0, zero)
    if products.shape != values.shape:  # a bias of the wrong size has its own finding
        return None
    return b, values, np.abs(values) + products


@family("comparison resolution", COMPARISON_RESOLUTION)
def check_comparison_resolution(ctx: AuditContext) -> Iterator[Finding]:
    """Compared activations finer than the comparison kernel's resolution
    (kernel_contracts.comparison_scale). A constant is not one: its values move by at most half
    the resolution, which an input the kernel resolves tells apart exactly as the float op."""
    for op, contracts in _contracted(ctx):
        if op.type not in contracts.comparison_ops:
            continue
        resolution = contracts.comparison_scale[0]
        for position in range(2):
            operand = op.input_at(position)
            if (
                operand is None
                or ctx.model.is_constant(operand.tensor)
                or not ctx.sound(op, operand)
                or operand.tensor.quantization.per_axis
            ):
                continue
            scale = float(operand.tensor.quantization.scale[0])
            if scale < resolution:
                yield ctx.finding(
                    COMPARISON_RESOLUTION,
                    f"{op.type} {operand.label} scale {num(scale)} is finer than the kernel's "
                    f"resolution {num(resolution)}: about {resolution / scale:.0f} codes "
                    "compare equal",
                    op,
                    operand,
                )


@family("softmax input scale", SOFTMAX_INPUT_SCALE)
def check_softmax_input_scale(ctx: AuditContext) -> Iterator[Finding]:
    """SOFTMAX inputs whose beta * scale is below what its kernel prepares
    (kernel_contracts.softmax_input_scale)."""
    for op, contracts in _contracted(ctx):
        floor = contracts.softmax_min_beta_scale
        operand = op.input_at(0)
        if (
            op.type not in contracts.softmax_ops
            or not floor
            or operand is None
            or not ctx.sound(op, operand)
        ):
            continue
        beta = float(_options(ctx, op).get("beta", 1.0) or 1.0)
        scale = float(operand.tensor.quantization.scale[0])
        if beta * scale <= floor:
            yield ctx.finding(
                SOFTMAX_INPUT_SCALE,
                f"beta {beta:g} * input scale {num(scale)} is not above {num(floor)} "
                "(beta * scale * 2^26 <= 1)",
                op,
                operand,
            )
