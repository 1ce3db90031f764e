"""Int4 constants and blockwise quantization parameters.

An INT4 constant holds two values a byte (`qtool.numerics.pack_int4`). Blockwise parameters
(the schema's BlockwiseQuantization, newer than the `tflite` package: `tflite_schema_later.json`)
keep their scales in another tensor of the subgraph, named by index: a float16 constant of one
scale per block, which no operator reads. The helpers here read and write both, and name the
tensors a tensor's parameters refer to, so that dropping unused tensors keeps (and renumbers)
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from qtool.model.graph import Model, QuantParams, Tensor
from qtool.model.reflect import union_codes
from qtool.model.types import TensorType
from qtool.numerics import unpack_int4

BLOCKWISE = "BlockwiseQuantization"


@dataclass(frozen=True)
class Blockwise:
    """Blockwise parameters: the tensor holding the scales ([rows, blocks]), the zero points'
    tensor (-1: none, zero), and the number of values a scale covers."""

    scales: int
    zero_points: int
    block_size: int


def blockwise_code() -> int:
    """The QuantizationDetails union's type code of BlockwiseQuantization."""
    return union_codes("QuantizationDetails")[BLOCKWISE]


def blockwise_of(tensor: Tensor) -> Blockwise | None:
    """The tensor's blockwise parameters; None when it has none."""
    q = tensor.quantization
    if q is None or q.extra.get("details_type") != blockwise_code():
        return None
    details = q.extra.get("details") or {}
    return Blockwise(
        int(details.get("scales", 0)),
        int(details.get("zero_points", 0)),
        int(details.get("block_size", 0)),
    )


def blockwise_params(scales: int, block_size: int, quantized_dimension: int = 0) -> QuantParams:
    """Blockwise parameters with scales in tensor `scales` and no zero points (-1), as LiteRT
    and ai-edge-quantizer write them."""
    return QuantParams(
        scale=np.zeros(0, np.float32),
        zero_point=np.zeros(0, np.int64),
        quantized_dimension=quantized_dimension,
        extra={
            "details_type": blockwise_code(),
            "details": {"scales": scales, "zero_points": -1, "block_size": block_size},
        },
    )


def referenced_tensors(tensor: Tensor) -> list[int]:
    """The tensors the tensor's quantization parameters refer to (blockwise scales and zero
    points)."""
    found = blockwise_of(tensor)
    if found is None:
        return []
    return [t for t in (found.scales, found.zero_points) if t >= 0]


def renumber_references(tensor: Tensor, remap: Mapping[int, int]) -> None:
    """Point the tensor's parameter references at the tensors' new indices."""
    if blockwise_of(tensor) is None:
        return
    details = tensor.quantization.extra["details"]
    for key in ("scales", "zero_points"):
        if details.get(key, -1) >= 0:
            details[key] = remap[details[key]]


def constant_values(model: Model, tensor: Tensor) -> np.ndarray | None:
    """A constant's values in its shape, INT4 unpacked to int8; None for activations and sparse
    constants."""
    data = model.tensor_data(tensor)
    if data is None or tensor.sparsity is not None:
        return None
    if tensor.dtype == TensorType.INT4:
        return unpack_int4(data, tensor.num_elements).reshape(tensor.shape)
    return data


def blockwise_scales(model: Model, subgraph_tensors: list[Tensor], tensor: Tensor) -> np.ndarray:
    """The float32 block scales of a blockwise tensor, [rows, blocks]; ValueError when its
    scale tensor is missing or not a float16 constant of that many values."""
    found = blockwise_of(tensor)
    if found is None or not 0 <= found.scales < len(subgraph_tensors):
        raise ValueError(f"'{tensor.name}' names no scale tensor")
    holder = subgraph_tensors[found.scales]
    values = model.tensor_data(holder)
    if values is None or holder.dtype != TensorType.FLOAT16 or found.block_size < 1:
        raise ValueError(f"the scales of '{tensor.name}' are not a float16 constant")
    rows = tensor.shape[0] if tensor.shape else 1
    if values.size * found.block_size != tensor.num_elements:
        raise ValueError(
            f"'{tensor.name}' has {tensor.num_elements} values but {values.size} scales of "
            f"blocks of {found.block_size}"
        )
    return values.astype(np.float32).reshape(rows, -1)
