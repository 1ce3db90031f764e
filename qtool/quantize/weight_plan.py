"""How each op's weights are stored in the weight modes: a ladder of forms per op, from the
narrowest LiteRT runs to float.

`--mode dynamic`: int8 (or int4) weights read by the op's hybrid kernel; `--mode weights`: int8
(or int4) weights behind a DEQUANTIZE; `--mode float16`: every float constant float16 behind a
DEQUANTIZE. What each op's kernel takes comes from `schemas/weight_modes.json`
(`qtool.weight_spec`). Each op with weights gets a ladder: the form the options ask for where
its kernel has it (int4 blockwise, per axis or per tensor), then wider ones (int8), then float;
the plan starts every op on its first rung, and `--target-sqnr` moves ops up
(`weight_search.py`). An op whose first rung is not what was asked says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qtool.model import Model, Operator, Subgraph, TensorType
from qtool.numerics.lowbit import LowBitWeights, quantize_weights
from qtool.quantize.decisions import keep_float_match
from qtool.quantize.weight_store import DEQUANTIZED, FLOAT16, HYBRID, WeightForm
from qtool.weight_spec import (
    BLOCKWISE,
    PER_AXIS,
    PER_TENSOR,
    WEIGHT_TYPES,
    WeightOpRule,
    block_scales,
    float16_limit,
    weight_rule,
)

DYNAMIC, WEIGHTS, FULL = "dynamic", "weights", "full"
WEIGHT_MODES = (DYNAMIC, WEIGHTS, FLOAT16)


@dataclass(frozen=True)
class WeightSettings:
    """The options of a weight mode (`QuantizeOptions` gives them)."""

    mode: str
    bits: int = 8
    block_size: int | None = None
    min_elements: int = 1024
    per_tensor_fc: bool = False
    keep_float: tuple[str, ...] = ()


@dataclass
class OpWeights:
    """One op with weights: where they are, the forms it may take (narrowest first, None for
    float) and the rung it is on, and why its first rung is not what the options asked."""

    subgraph: int
    index: int  # in the prepared subgraph
    source_index: int  # in the input model
    op_type: str
    positions: tuple[int, ...]  # the weight operands
    ladder: list[WeightForm | None]
    rung: int = 0
    note: str | None = None
    kept_float: str | None = None  # why the op keeps float weights from the start
    rounded: bool = False  # its integer weights' rounding minimises its output error

    @property
    def form(self) -> WeightForm | None:
        """The form the op's weights take now (None: float)."""
        return self.ladder[self.rung] if self.ladder else None


@dataclass
class WeightPlan:
    """Every op with weights in one subgraph, in graph order."""

    subgraph_index: int
    ops: list[OpWeights] = field(default_factory=list)


def plan_weights(
    model: Model, subgraph_index: int, source_index: list[int], settings: WeightSettings
) -> WeightPlan:
    """The ladder of every op with float constant weights of one subgraph."""
    subgraph = model.subgraphs[subgraph_index]
    plan = WeightPlan(subgraph_index)
    for i, op in enumerate(subgraph.operators):
        found = _op_weights(model, subgraph, op, settings)
        if found is None:
            continue
        positions, ladder, note, kept = found
        plan.ops.append(
            OpWeights(
                subgraph_index,
                i,
                source_index[i],
                model.op_type(op),
                positions,
                ladder if kept is None else [None],
                note=note,
                kept_float=kept,
            )
        )
    return plan


def _float_constants(model: Model, subgraph: Subgraph, op: Operator, positions) -> list[int]:
    tensors = subgraph.tensors
    return [
        p
        for p in positions
        if p < len(op.inputs)
        and op.inputs[p] >= 0
        and tensors[op.inputs[p]].dtype == TensorType.FLOAT32
        and model.is_constant(tensors[op.inputs[p]])
    ]


def _op_weights(model: Model, subgraph: Subgraph, op: Operator, settings: WeightSettings):
    """(positions, ladder, note, why kept float) of an op, or None for an op without float
    constant weights."""
    if settings.mode == FLOAT16:
        positions = _float_constants(model, subgraph, op, range(len(op.inputs)))
        if not positions:
            return None
        kept = _keep_float(model, subgraph, op, settings)
        if kept is None:
            positions, kept = _within_float16(model, subgraph, op, positions)
        return tuple(positions), [WeightForm(FLOAT16), None], None, kept
    rule = weight_rule(model.op_type(op))
    if rule is None:
        return None
    positions = _float_constants(model, subgraph, op, rule.weights)
    if not positions:
        return None
    kept = _keep_float(model, subgraph, op, settings)
    tensors = [subgraph.tensors[op.inputs[p]] for p in positions]
    small = [t for t in tensors if t.num_elements < settings.min_elements]
    if kept is None and small and (rule.all_or_none or len(small) == len(tensors)):
        kept = (
            f"{small[0].num_elements} weights, fewer than {settings.min_elements} "
            "(--min-weight-elements): an integer copy would save little"
        )
    kind = HYBRID if settings.mode == DYNAMIC else DEQUANTIZED
    ladder, notes = [], []
    for bits in (4, 8) if settings.bits == 4 else (8,):
        form, why = _form(rule, op, tensors[0].shape, bits, kind, settings)
        if form is not None:
            ladder.append(form)
        if why:
            notes.append(why)
    if not ladder and kept is None:
        kept = "; ".join(notes) or f"{rule.op} has no {kind} form"
    note = "; ".join(notes) if ladder and notes else None
    return tuple(positions), [*ladder, None], note, kept


def _keep_float(model: Model, subgraph: Subgraph, op: Operator, settings: WeightSettings):
    pattern = keep_float_match(model, subgraph, op, settings.keep_float)
    return None if pattern is None else f"kept in float by keep-float pattern {pattern!r}"


def _within_float16(model: Model, subgraph: Subgraph, op: Operator, positions: list[int]):
    """The positions whose values float16 holds, and why the op keeps float32 when none do."""
    limit = float16_limit()
    fitting = [
        p
        for p in positions
        if np.abs(model.tensor_data(subgraph.tensors[op.inputs[p]])).max(initial=0) <= limit
    ]
    if fitting:
        return fitting, None
    return positions, f"constants beyond float16's range (|x| > {limit:g}) stay float32"


def _form(
    rule: WeightOpRule,
    op: Operator,
    shape: list[int],
    bits: int,
    kind: str,
    settings: WeightSettings,
) -> tuple[WeightForm | None, str | None]:
    """The form of `bits`-bit weights the op's kernel reads, and why it is not the asked one."""
    weight_type = WEIGHT_TYPES[bits]
    if kind == HYBRID:
        allowed = rule.hybrid_granularities(weight_type)
        if not allowed:
            return None, f"{rule.op} has no {weight_type} hybrid kernel in LiteRT"
    else:
        allowed = (PER_AXIS, PER_TENSOR) if rule.channel_axis is not None else (PER_TENSOR,)
    why = None
    if settings.block_size is not None and bits == 4:
        if BLOCKWISE not in allowed:
            why = (
                "blockwise int4 weights are read by hybrid kernels only"
                if kind == DEQUANTIZED
                else f"{rule.op} has no blockwise int4 kernel in LiteRT"
            )
        else:
            why = _blocks_fit(rule, shape, settings.block_size)
            if why is None:
                return WeightForm(kind, bits, BLOCKWISE, settings.block_size), None
    per_axis_ok = (
        PER_AXIS in allowed
        and rule.axis_for(len(shape)) is not None
        and not (settings.per_tensor_fc and rule.op == "FULLY_CONNECTED")
        and all(op.option(name) == value for name, value in rule.per_axis_requires.items())
    )
    if per_axis_ok:
        return WeightForm(kind, bits, PER_AXIS), why
    if PER_TENSOR in allowed:
        return WeightForm(kind, bits, PER_TENSOR), why
    return None, why or f"{rule.op}'s {weight_type} kernel reads per-axis weights only here"


def _blocks_fit(rule: WeightOpRule, shape: list[int], block_size: int) -> str | None:
    """Why blocks of `block_size` cannot hold these weights (None: they can)."""
    block = rule.blockwise
    if len(shape) != 2:
        return f"blockwise weights are 2-D, these are {list(shape)}"
    channels, depth = shape[1 - block.block_axis], shape[block.block_axis]
    if depth % block_size:
        return f"blocks of {block_size} do not tile its {depth} inputs"
    if channels < block.min_channels or depth < block.min_depth:
        return (
            f"LiteRT's blockwise {rule.op} needs >= {block.min_channels} outputs and >= "
            f"{block.min_depth} inputs (it has {channels} and {depth})"
        )
    if block.even_depth and depth % 2:
        return f"int4 rows of an odd depth ({depth}) do not start on a byte"
    return None


def stored_values(
    model: Model, subgraph: Subgraph, op: Operator, ops: OpWeights, position: int
) -> LowBitWeights | None:
    """The quantized weights of one operand in the op's current form (None: float or
    float16)."""
    form = ops.form
    if form is None or form.bits is None:
        return None
    tensor = subgraph.tensors[op.inputs[position]]
    weights = np.asarray(model.tensor_data(tensor), np.float32)
    rule = weight_rule(ops.op_type)
    search = rule.weights_are_outputs  # a lookup: the table's error is the output's
    if form.granularity == BLOCKWISE:  # blocks along the last dimension (the data's block_axis)
        mantissa = block_scales().mantissa_bits
        return quantize_weights(weights, 4, None, form.block_size, mantissa, search)
    axis = rule.axis_for(weights.ndim) if form.granularity == PER_AXIS else None
    return quantize_weights(weights, form.bits, axis, search=search)


def check_block_size(block_size: int | None) -> str | None:
    """Why a block size cannot be used (None: it can): LiteRT's XNNPACK takes multiples of 32."""
    if block_size is None:
        return None
    multiple = block_scales().block_size_multiple
    if block_size < multiple or block_size % multiple:
        return (
            f"block size {block_size} is not a positive multiple of {multiple} (the block sizes "
            "LiteRT's XNNPACK delegate takes)"
        )
    return None
