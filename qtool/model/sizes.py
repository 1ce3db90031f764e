"""Where the bytes of a model file go: weights by type, biases, sparse indices, quantization
parameters, names, metadata and the graph structure, and the largest tensors.

Constants are sorted by the role they play for the operator that reads them (through the
DENSIFY and DEQUANTIZE that may expand them first): the weights and bias operands of the spec's
weighted ops, and every other constant. Quantization parameters count each distinct vector
once, as the writer stores them (`SharingBuilder`). What no category claims is the flatbuffer's
own structure: tables, offsets, shapes and padding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qtool.model.graph import Model, Subgraph, Tensor
from qtool.model.sparsity import sparsity_nbytes
from qtool.model.types import dtype_name
from qtool.spec import weighted_operands

# Operators that only change how a constant is stored: the role is their reader's.
_STORAGE_OPS = ("DENSIFY", "DEQUANTIZE")
LARGEST = 10  # tensors listed by size


@dataclass(frozen=True)
class TensorSize:
    """One constant tensor's stored bytes (values, plus its sparse indices)."""

    subgraph: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    role: str  # "weights", "bias" or "constant"
    nbytes: int
    sparse: bool


@dataclass
class SizeBreakdown:
    """A model file's bytes by category (`parts`, in reading order) and its largest tensors."""

    total: int
    parts: dict[str, int] = field(default_factory=dict)
    largest: list[TensorSize] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The breakdown as the report stores it."""
        return {
            "total_bytes": self.total,
            "parts": dict(self.parts),
            "largest_tensors": [
                {
                    "subgraph": t.subgraph,
                    "name": t.name,
                    "dtype": t.dtype,
                    "shape": list(t.shape),
                    "role": t.role,
                    "bytes": t.nbytes,
                    "sparse": t.sparse,
                }
                for t in self.largest
            ],
        }


def _roles(model: Model, subgraph: Subgraph) -> dict[int, str]:
    """Constant tensor index -> the role its reader gives it."""
    roles: dict[int, str] = {}
    producers = subgraph.producers()
    for op in subgraph.operators:
        operands = weighted_operands(model.op_type(op))
        if operands is None:
            continue
        for role, position in (("weights", operands.weights), ("bias", operands.bias)):
            if position is None or position >= len(op.inputs) or op.inputs[position] < 0:
                continue
            t = op.inputs[position]
            roles.setdefault(t, role)
            # Back through the ops that only expand it (a sparse or float16 store).
            while t in producers:
                source = subgraph.operators[producers[t]]
                if model.op_type(source) not in _STORAGE_OPS or not source.inputs:
                    break
                t = source.inputs[0]
                roles.setdefault(t, role)
    return roles


def _vector_bytes(values: np.ndarray | None) -> tuple[str, bytes] | None:
    if values is None or np.size(values) == 0:
        return None
    array = np.ascontiguousarray(values)
    return array.dtype.str, array.tobytes()


def size_breakdown(model: Model, total: int) -> SizeBreakdown:
    """The breakdown of `model`, whose file is `total` bytes long."""
    parts = dict.fromkeys(("biases", "sparse indices", "quantization parameters", "names"), 0)
    weights: dict[str, int] = {}
    other: dict[str, int] = {}
    sizes: list[TensorSize] = []
    vectors: set[tuple[str, bytes]] = set()
    metadata_buffers = {entry["buffer"] for entry in model.metadata if "buffer" in entry}
    counted_buffers: set[int] = set()
    for s, subgraph in enumerate(model.subgraphs):
        roles = _roles(model, subgraph)
        parts["names"] += len((subgraph.name or "").encode())
        for t, tensor in enumerate(subgraph.tensors):
            parts["names"] += len(tensor.name.encode())
            _count_quantization(tensor, vectors)
            if not tensor.buffer or tensor.buffer in counted_buffers:
                continue
            stored = model.buffers[tensor.buffer].nbytes
            if not stored:
                continue
            counted_buffers.add(tensor.buffer)
            indices = sparsity_nbytes(tensor.sparsity) if tensor.sparsity is not None else 0
            parts["sparse indices"] += indices
            role = roles.get(t, "constant")
            dtype = dtype_name(tensor.dtype)
            if role == "bias":
                parts["biases"] += stored
            elif role == "weights":
                weights[dtype] = weights.get(dtype, 0) + stored
            else:
                other[dtype] = other.get(dtype, 0) + stored
            sizes.append(
                TensorSize(
                    s,
                    tensor.name,
                    dtype,
                    tuple(tensor.shape),
                    role,
                    stored + indices,
                    tensor.sparsity is not None,
                )
            )
    parts["quantization parameters"] = sum(4 + len(data) for _, data in vectors)
    parts["metadata"] = sum(
        model.buffers[b].nbytes for b in metadata_buffers if 0 <= b < len(model.buffers)
    )
    ordered = {f"weights {k}": v for k, v in sorted(weights.items(), key=lambda kv: -kv[1])}
    ordered.update({f"other constants {k}": v for k, v in sorted(other.items())})
    ordered.update(parts)
    ordered["graph structure"] = max(total - sum(ordered.values()), 0)
    largest = sorted(sizes, key=lambda t: -t.nbytes)[:LARGEST]
    return SizeBreakdown(total, ordered, largest)


def _count_quantization(tensor: Tensor, vectors: set[tuple[str, bytes]]) -> None:
    q = tensor.quantization
    if q is None:
        return
    for values in (q.scale, q.zero_point, q.min, q.max):
        key = _vector_bytes(values)
        if key is not None:
            vectors.add(key)
