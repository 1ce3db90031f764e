"""LiteRT's weight modes as data, loaded once from `schemas/weight_modes.json`.

Which ops have a hybrid kernel (float activations, int8 or int4 weights the kernel reads
directly, per axis, per tensor or in blocks), which read int4 weights with int8 activations,
what a DEQUANTIZE in front of a float op expands, and how float16 constants are written. The
quantizer (`qtool quantize --mode dynamic|weights|float16`, `--weight-bits 4`) plans from it and
the checker audits hybrid, weight-only, float16 and int4 models against it: one copy of each
fact.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

PER_AXIS, PER_TENSOR, BLOCKWISE = "per-axis", "per-tensor", "blockwise"
GRANULARITIES = (PER_AXIS, PER_TENSOR, BLOCKWISE)
WEIGHT_TYPES = {8: "int8", 4: "int4"}  # weight bits -> the type name the data uses


@dataclass(frozen=True)
class BlockwiseRule:
    """Where an op's kernel reads blockwise int4 weights: blocks along `block_axis`, and the
    smallest shapes the kernel computes them for (elsewhere it writes zeros)."""

    block_axis: int
    min_channels: int  # output channels (the other dimension of the 2-D weights)
    min_depth: int  # values along the block axis
    even_depth: bool  # int4 rows start on a byte


@dataclass(frozen=True)
class WeightOpRule:
    """What LiteRT's kernels of one op take as narrow weights.

    Attributes:
        weights: the input positions that hold weights.
        channel_axis: the output-channel dimension of per-axis weights (negative: from the
            end); None when the op takes per-tensor weights only.
        hybrid: weight type ("int8", "int4") -> the granularities its hybrid kernel reads.
        hybrid_options: builtin options the converter sets on a hybrid op.
        int4_with_int8_activations: granularities of int4 weights its int8 kernel reads.
        int4_without_minus_8: granularities of hybrid int4 weights whose kernel misreads -8.
        all_or_none: every weight operand quantized, or none (the LSTM kernels).
        weights_are_outputs: the op outputs rows of its weights (a lookup): their squared error
            is the output's, and the scales may clip.
        per_axis_requires: builtin options per-axis hybrid weights need (BATCH_MATMUL's
            adj_y false).
        versions: the operator version of each form ("hybrid int8 per-axis", "hybrid int8",
            "int8 activations int4"), the most specific applying.
    """

    op: str
    weights: tuple[int, ...]
    channel_axis: int | None
    hybrid: dict[str, tuple[str, ...]]
    hybrid_options: dict[str, Any]
    int4_with_int8_activations: tuple[str, ...]
    int4_without_minus_8: tuple[str, ...]
    blockwise: BlockwiseRule | None
    all_or_none: bool
    weights_are_outputs: bool
    per_axis_requires: dict[str, Any]
    versions: dict[str, int]
    source: str

    def hybrid_granularities(self, weight_type: str) -> tuple[str, ...]:
        """The granularities of `weight_type` weights the hybrid kernel reads (empty: none)."""
        return self.hybrid.get(weight_type, ())

    def version(self, *form: str) -> int:
        """The operator version of a form given from general to specific ("hybrid", "int8",
        "per-axis"): the most specific the data names, else 1."""
        return _most_specific(self.versions, form)

    def axis_for(self, rank: int) -> int | None:
        """The output-channel dimension of weights of `rank` dimensions, or None."""
        if self.channel_axis is None or rank < 1:
            return None
        return self.channel_axis % rank


def _most_specific(versions: dict[str, int], form: tuple[str, ...]) -> int:
    for length in range(len(form), 0, -1):
        found = versions.get(" ".join(form[:length]))
        if found is not None:
            return int(found)
    return 1


def dequantize_version(*form: str) -> int:
    """The DEQUANTIZE version that reads a constant of this form ("int8", "per-axis")."""
    return _most_specific(raw_weight_modes()["dequantize_versions"], form)


@functools.cache
def raw_weight_modes() -> dict[str, Any]:
    """The data file as written."""
    text = resources.files("qtool").joinpath("_schemas", "weight_modes.json").read_text()
    return json.loads(text)


@functools.cache
def weight_rules() -> dict[str, WeightOpRule]:
    """Every op the data describes, by op type."""
    rules = {}
    for name, raw in raw_weight_modes()["ops"].items():
        block = raw.get("blockwise")
        if block is not None and block["block_axis"] != 1:
            raise ValueError(f"{name}: blocks run along the last dimension of 2-D weights")
        rules[name] = WeightOpRule(
            op=name,
            weights=tuple(raw["weights"]),
            channel_axis=raw["channel_axis"],
            hybrid={kind: tuple(found) for kind, found in raw["hybrid"].items()},
            hybrid_options=dict(raw.get("hybrid_options", {})),
            int4_with_int8_activations=tuple(raw.get("int4_with_int8_activations", ())),
            int4_without_minus_8=tuple(raw.get("int4_without_minus_8", ())),
            blockwise=None if block is None else BlockwiseRule(**block),
            all_or_none=raw.get("all_or_none", False),
            weights_are_outputs=raw.get("weights_are_outputs", False),
            per_axis_requires=dict(raw.get("per_axis_requires", {})),
            versions=dict(raw.get("versions", {})),
            source=raw["source"],
        )
    return rules


def weight_rule(op_type: str) -> WeightOpRule | None:
    """The weight facts of `op_type`; None for an op without narrow-weight forms."""
    return weight_rules().get(op_type)


def default_min_weight_elements() -> int:
    """Weights with fewer elements stay float in the dynamic and weights modes."""
    return int(raw_weight_modes()["min_weight_elements"]["default"])


def int4_range() -> tuple[int, int]:
    """The values an int4 weight holds."""
    low, high = raw_weight_modes()["int4"]["range"]
    return int(low), int(high)


@dataclass(frozen=True)
class BlockScales:
    """How blockwise scales are stored: their type, the mantissa bits they may use (XNNPACK
    reads them as bfloat16), and the block sizes XNNPACK takes."""

    scale_type: str
    mantissa_bits: int
    block_size_multiple: int


@functools.cache
def block_scales() -> BlockScales:
    """The blockwise facts of the data file."""
    raw = raw_weight_modes()["blockwise"]
    return BlockScales(raw["scale_type"], raw["scale_mantissa_bits"], raw["block_size_multiple"])


def float16_limit() -> float:
    """The largest magnitude a constant may have to be stored float16 without change."""
    return float(raw_weight_modes()["float16"]["max_abs"])
