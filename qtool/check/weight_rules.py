"""Rule family of the weight modes: hybrid (dynamic-range), weight-only, float16 and int4 weights,
audited against what LiteRT's kernels take (`schemas/weight_modes.json`).

A float op that reads integer constant weights is a hybrid op: its kernel quantizes the input at
each inference and needs weights of a type, granularity and axis it reads (elsewhere LiteRT
refuses the model or, worse, computes garbage: a per-tensor DEPTHWISE_CONV_2D, a per-axis LSTM).
A DEQUANTIZE of an integer constant in front of a float op is weight-only quantization; of a
float16 constant, a float16 model. Such models compute in float by design: they are recognised
(`weight_forms`) and not reported as unquantized.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from qtool.check.context import AuditContext, Operand, OpView
from qtool.check.findings import Finding
from qtool.check.rulebook import family, rule
from qtool.model import TensorType, dtype_name
from qtool.model.lowbit import blockwise_of, blockwise_scales, constant_values
from qtool.numerics.lowbit import FLOAT16_TINY, round_to_mantissa
from qtool.spec import Mode
from qtool.weight_spec import (
    BLOCKWISE,
    PER_AXIS,
    PER_TENSOR,
    block_scales,
    weight_rule,
)

NARROW_TYPES = {TensorType.INT8: "int8", TensorType.INT4: "int4", TensorType.UINT8: "uint8"}
HYBRID, WEIGHT_ONLY, FLOAT16 = "hybrid", "weight-only", "float16"


@dataclass(frozen=True)
class NarrowRead:
    """A constant stored narrower than what reads it: by a hybrid op, through a DEQUANTIZE
    (weight-only) or a float16 constant behind a DEQUANTIZE."""

    how: str  # HYBRID, WEIGHT_ONLY or FLOAT16
    op: OpView  # the hybrid op, or the DEQUANTIZE
    operand: Operand  # the stored constant
    per_axis_options_hold: bool = True  # the op's options allow per-axis hybrid weights

    @property
    def form(self) -> str:
        """The stored form as messages say it: "int8 per-axis", "int4 blockwise 32"."""
        return describe(self.operand)


def granularity(operand: Operand) -> str:
    """per-axis, per-tensor or blockwise."""
    if blockwise_of(operand.tensor) is not None:
        return BLOCKWISE
    q = operand.tensor.quantization
    return PER_AXIS if q is not None and q.per_axis else PER_TENSOR


def describe(operand: Operand) -> str:
    """An integer constant's type and granularity ("int4 blockwise 32"), or its float type."""
    tensor = operand.tensor
    if tensor.dtype not in NARROW_TYPES:
        return dtype_name(tensor.dtype).lower()
    found = blockwise_of(tensor)
    size = f" {found.block_size}" if found is not None else ""
    return f"{NARROW_TYPES[tensor.dtype]} {granularity(operand)}{size}"


def _integer_constant(ctx: AuditContext, operand: Operand) -> bool:
    tensor = operand.tensor
    return (
        tensor.dtype in NARROW_TYPES
        and ctx.model.is_constant(tensor)
        and (tensor.quantized or blockwise_of(tensor) is not None)
    )


def narrow_reads(ctx: AuditContext) -> list[NarrowRead]:
    """Every constant a float op reads narrower than float32: hybrid weights, weight-only
    weights, float16 constants."""
    found = []
    for op in ctx.ops:
        if op.boundary:
            if op.type != "DEQUANTIZE" or not op.inputs:
                continue
            source = op.inputs[0]
            if source.tensor.dtype == TensorType.FLOAT16 and ctx.model.is_constant(source.tensor):
                found.append(NarrowRead(FLOAT16, op, source))
            elif _integer_constant(ctx, source):
                found.append(NarrowRead(WEIGHT_ONLY, op, source))
            continue
        if op.mode != Mode.FLOAT:
            continue
        weights = weight_rule(op.type)
        operator = ctx.model.subgraphs[op.subgraph].operators[op.index]
        options_hold = weights is None or all(
            operator.option(name) == value for name, value in weights.per_axis_requires.items()
        )
        found += [
            NarrowRead(HYBRID, op, o, options_hold) for o in op.inputs if _integer_constant(ctx, o)
        ]
    return found


def weight_forms(ctx: AuditContext) -> dict[str, dict[str, int]] | None:
    """How the model stores its narrow weights, counted by reader and form ({"hybrid":
    {"int8 per-axis": 3}, "float16": {"float16": 12}}); None when it has none."""
    counts: dict[str, dict[str, int]] = {}
    for read in narrow_reads(ctx):
        kinds = counts.setdefault(read.how, {})
        kinds[read.form] = kinds.get(read.form, 0) + 1
    return counts or None


HYBRID_KERNEL = rule(
    "QT-HYBRID-KERNEL",
    "error",
    title="integer weights of a float op that LiteRT has no hybrid kernel for",
    help=(
        "A float op reading integer constant weights is a hybrid (dynamic-range) op: LiteRT "
        "has hybrid kernels for some ops, weight types and granularities only "
        "(schemas/weight_modes.json). Elsewhere it refuses the model at load or computes "
        "garbage (a per-tensor DEPTHWISE_CONV_2D, a per-axis LSTM). Store those weights as the "
        "kernel reads them, or behind a DEQUANTIZE."
    ),
)

HYBRID_PARAMS = rule(
    "QT-HYBRID-PARAMS",
    "error",
    title="hybrid weights with parameters the kernel misreads",
    help=(
        "Hybrid kernels assume symmetric weights (zero point 0) with one scale per output "
        "channel along the op's channel dimension, or one for the tensor."
    ),
)

BLOCKWISE_RULE = rule(
    "QT-BLOCKWISE",
    "error",
    title="blockwise weights LiteRT cannot compute",
    help=(
        "Blockwise int4 weights are read by the hybrid FULLY_CONNECTED and EMBEDDING_LOOKUP "
        "kernels only, with float16 scales of one value per block, blocks tiling each row, and "
        "(FULLY_CONNECTED) at least 4 outputs and 32 inputs of even depth: elsewhere LiteRT "
        "writes zeros without an error (a DEQUANTIZE of blockwise weights too)."
    ),
)

BLOCK_SCALE = rule(
    "QT-BLOCK-SCALE",
    "warning",
    title="block scales that bfloat16 cannot hold",
    help=(
        "LiteRT's XNNPACK delegate reads float16 block scales as bfloat16 (7 mantissa bits): "
        "round the scales to bfloat16 values so that every runtime computes the same."
    ),
    on_device=(
        "XNNPACK rounds each scale to bfloat16, so its outputs differ from the builtin kernel's "
        "(53.8 dB apart on a 64x256 layer, measured)."
    ),
)

BLOCK_SIZE = rule(
    "QT-BLOCK-SIZE",
    "warning",
    title="block size XNNPACK does not take",
    help="LiteRT's XNNPACK delegate takes block sizes that are multiples of 32.",
    on_device=(
        "XNNPACK leaves the op to LiteRT's builtin 4-bit kernel, several times slower on the "
        "large layers blockwise weights are for."
    ),
)


KERNEL, PARAMS = "kernel", "params"  # what a hybrid problem is about


@family("hybrid weights", HYBRID_KERNEL, HYBRID_PARAMS)
def check_hybrid_weights(ctx: AuditContext) -> Iterator[Finding]:
    """Integer weights of float ops that LiteRT's hybrid kernels do not read, or read wrong."""
    for read in narrow_reads(ctx):
        if read.how != HYBRID or blockwise_of(read.operand.tensor) is not None:
            continue
        found = _hybrid_problem(ctx, read) or _hybrid_bias_problem(ctx, read)
        if found is not None:
            about, message = found
            rule_info = HYBRID_KERNEL if about == KERNEL else HYBRID_PARAMS
            yield ctx.finding(rule_info, message, read.op, read.operand)


@family("blockwise weights", BLOCKWISE_RULE, BLOCK_SCALE, BLOCK_SIZE)
def check_blockwise_weights(ctx: AuditContext) -> Iterator[Finding]:
    """Blockwise weights LiteRT cannot compute, or whose scales or block size XNNPACK reads
    otherwise or not at all."""
    facts = block_scales()
    for read in narrow_reads(ctx):
        found = blockwise_of(read.operand.tensor)
        if found is None or read.how == FLOAT16:
            continue
        op, operand = read.op, read.operand
        problem, scales = _blockwise_problem(ctx, read)
        if problem is not None:
            message = f"{operand.label} ({read.form}): {problem}"
            yield ctx.finding(BLOCKWISE_RULE, message, op, operand)
            continue
        off = scales != round_to_mantissa(scales, facts.mantissa_bits)
        if off.any():
            yield ctx.finding(
                BLOCK_SCALE,
                f"{operand.label}: {int(off.sum())} of {off.size} block scales have more than "
                f"{facts.mantissa_bits} mantissa bits (bfloat16's)",
                op,
                operand,
            )
        if found.block_size % facts.block_size_multiple:
            yield ctx.finding(
                BLOCK_SIZE,
                f"{operand.label}: blocks of {found.block_size}, not a multiple of "
                f"{facts.block_size_multiple}",
                op,
                operand,
            )


def _hybrid_problem(ctx: AuditContext, read: NarrowRead) -> tuple[str, str] | None:
    """(KERNEL or PARAMS, message) when LiteRT's hybrid kernel does not read these weights, or
    reads them wrong; None when it reads them."""
    op, operand = read.op, read.operand
    weights = weight_rule(op.type)
    weight_type = NARROW_TYPES[operand.tensor.dtype]
    reading = f"{op.type} reads {operand.label} ({read.form}) with a float input"
    if weights is None or not weights.hybrid:
        return KERNEL, f"{reading}: LiteRT has no hybrid {op.type}"
    if operand.position not in weights.weights:
        return KERNEL, (
            f"{reading}: input {operand.position} holds no weights of LiteRT's hybrid {op.type}"
        )
    allowed = weights.hybrid_granularities(weight_type)
    if not allowed:
        return KERNEL, f"{reading}: LiteRT's hybrid {op.type} reads no {weight_type} weights"
    kind = granularity(operand)
    if kind not in allowed:
        return KERNEL, (
            f"{reading}: LiteRT's hybrid {op.type} reads {weight_type} weights "
            f"{' or '.join(allowed)} only"
        )
    q = operand.tensor.quantization
    if kind == PER_AXIS:
        axis = weights.axis_for(len(operand.tensor.shape))
        if q.quantized_dimension != axis or not read.per_axis_options_hold:
            return PARAMS, (
                f"{operand.label} is per-axis along dimension {q.quantized_dimension}; LiteRT's "
                f"hybrid {op.type} scales dimension {axis}"
                + ("" if read.per_axis_options_hold else f" when {weights.per_axis_requires}")
            )
    if np.any(q.zero_point != 0):
        first = int(q.zero_point[np.argmax(q.zero_point != 0)])
        return PARAMS, (
            f"{operand.label} has zero point {first}: LiteRT's hybrid {op.type} assumes "
            "symmetric weights (zero point 0)"
        )
    if weight_type == "int4" and kind in weights.int4_without_minus_8:
        values = constant_values(ctx.model, operand.tensor)
        if values is not None and values.size and int(values.min()) == -8:
            count = int(np.count_nonzero(values == -8))
            return PARAMS, (
                f"{operand.label} holds -8 ({count} values): LiteRT's optimized 4-bit {op.type} "
                "misreads it (write int4 weights in [-7, 7])"
            )
    return None


def _hybrid_bias_problem(ctx: AuditContext, read: NarrowRead) -> tuple[str, str] | None:
    """A hybrid op whose other float inputs (its bias) come from a DEQUANTIZE of a constant:
    XNNPACK fails to prepare it (`hybrid_bias` of the data file)."""
    op = read.op
    weights = weight_rule(op.type)
    for operand in op.inputs:
        if weights is None or operand.position in weights.weights or operand.position == 0:
            continue
        producer = next(
            (o for o, use in ctx.uses(op.subgraph, operand.index) if use.kind == "output"), None
        )
        if (
            producer is not None
            and producer.type == "DEQUANTIZE"
            and all(source.constant for source in producer.inputs)
        ):
            return KERNEL, (
                f"{operand.label} of hybrid {op.type} comes from a DEQUANTIZE: LiteRT's XNNPACK "
                "fails to prepare a hybrid op whose bias is not a float32 constant"
            )
    return None


def _blockwise_problem(ctx: AuditContext, read: NarrowRead) -> tuple[str | None, np.ndarray]:
    """Why LiteRT cannot compute these blockwise weights (None: it can), and their scales."""
    op, tensor = read.op, read.operand.tensor
    weights = weight_rule(op.type)
    empty = np.zeros(0, np.float32)
    if read.how == WEIGHT_ONLY:
        return "a DEQUANTIZE of blockwise weights writes zeros in LiteRT", empty
    if weights is None or BLOCKWISE not in weights.hybrid_granularities("int4"):
        return f"LiteRT's {op.type} has no blockwise kernel", empty
    if tensor.dtype != TensorType.INT4:
        return f"LiteRT reads blockwise int4 weights only, not {read.form}", empty
    block_size = blockwise_of(tensor).block_size
    problem = _block_shape_problem(weights.blockwise, tensor.shape, block_size)
    if problem is not None:
        return problem, empty
    try:
        scales = blockwise_scales(ctx.model, ctx.model.subgraphs[op.subgraph].tensors, tensor)
    except ValueError as error:
        return str(error), empty
    if not (np.all(np.isfinite(scales)) and np.all(scales >= FLOAT16_TINY)):
        smallest = float(np.min(scales))
        return f"block scales must be normal positive float16 numbers ({smallest:.3g})", scales
    return None, scales


def _block_shape_problem(block, shape: list[int], block_size: int) -> str | None:
    """Why blocks of `block_size` cannot be computed on weights of `shape` (None: they can)."""
    if len(shape) != 2 or block_size < 1:
        return f"blockwise weights are 2-D with a positive block size ({list(shape)}, {block_size})"
    channels, depth = shape[1 - block.block_axis], shape[block.block_axis]
    if depth % block_size:
        return f"blocks of {block_size} do not tile the {depth} values of a row"
    if channels < block.min_channels or depth < block.min_depth or (block.even_depth and depth % 2):
        return (
            f"LiteRT computes blockwise weights of >= {block.min_channels} rows of an even "
            f"depth >= {block.min_depth} only (these are {channels} x {depth}): it writes zeros"
        )
    return None
