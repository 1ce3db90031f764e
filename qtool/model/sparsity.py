"""TFLite's sparse tensor format: where the stored elements of a sparse tensor sit in its dense
form, and the conversions both ways (DENSIFY's, and its inverse for writing sparse weights)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from qtool.errors import ModelError
from qtool.model.types import DimensionType


def dense_offsets(shape: Sequence[int], sparsity: dict[str, Any]) -> np.ndarray:
    """Where each stored element of a TFLite sparse tensor sits in the dense array of `shape`
    (flat row-major offsets, in storage order).

    `sparsity` is the tensor's decoded SparsityParameters. The
    format: the dense tensor is viewed with each blocked dimension d (block_map) split into
    (d / block, block), giving rank + len(block_map) "expanded" dimensions, traversed as nested
    levels in `traversal_order` (original dimensions first, then the in-block ones). A DENSE level
    enumerates all its coordinates; a SPARSE_CSR level lists, for each position of its parent
    level, the coordinates present (array_indices[array_segments[p]:array_segments[p + 1]]).
    A DENSE level's positions number its parent's positions times its size plus the coordinate;
    a CSR level's positions are indices into its array_indices. The leaves in traversal order
    take the stored values in turn; all other elements are zero.
    """
    shape = [int(d) for d in shape]
    rank = len(shape)
    order = [int(d) for d in sparsity["traversal_order"]]
    block_map = [
        int(d) for d in (() if sparsity.get("block_map") is None else sparsity["block_map"])
    ]
    levels = sparsity["dim_metadata"] or []
    if (
        sorted(order[:rank]) != list(range(rank))
        or sorted(order) != list(range(rank + len(block_map)))
        or len(levels) != len(order)
        or len(set(block_map)) != len(block_map)
        or not all(0 <= d < rank for d in block_map)
    ):
        raise ModelError(
            f"sparse tensor of shape {shape}: inconsistent traversal_order {order}, "
            f"block_map {block_map} and {len(levels)} dim_metadata levels"
        )
    level_of = {dim: level for level, dim in enumerate(order)}
    block_size = {d: int(levels[level_of[rank + k]]["dense_size"]) for k, d in enumerate(block_map)}
    if any(size <= 0 or shape[d] % size for d, size in block_size.items()):
        raise ModelError(
            f"sparse tensor of shape {shape}: block sizes {block_size} do not "
            "divide their dimensions"
        )
    strides = [int(np.prod(shape[d + 1 :], dtype=np.int64)) for d in range(rank)]
    # Per level: how many coordinates it has, and how far one step moves in the dense array.
    extents, steps = [], []
    for dim in order:
        if dim < rank:
            extents.append(shape[dim] // block_size.get(dim, 1))
            steps.append(strides[dim] * block_size.get(dim, 1))
        else:
            extents.append(block_size[block_map[dim - rank]])
            steps.append(strides[block_map[dim - rank]])

    offset = np.zeros(1, np.int64)  # dense offset of every node of the current level
    position = np.zeros(1, np.int64)  # its position in the level's storage
    for level, (meta, extent, step) in enumerate(zip(levels, extents, steps, strict=True)):
        where = f"sparse tensor of shape {shape}, level {level}"
        if meta["format"] == DimensionType.DENSE:
            if int(meta["dense_size"]) != extent:
                raise ModelError(f"{where}: dense_size {meta['dense_size']} != {extent}")
            coords = np.tile(np.arange(extent, dtype=np.int64), offset.size)
            position = np.repeat(position * extent, extent) + coords
            offset = np.repeat(offset, extent)
        elif meta["format"] == DimensionType.SPARSE_CSR:
            segments = _index_vector(meta["array_segments"], where)
            indices = _index_vector(meta["array_indices"], where)
            if position.size and position[-1] + 1 >= segments.size:
                raise ModelError(
                    f"{where}: {segments.size} segment bounds for "
                    f"{position[-1] + 1} parent positions"
                )
            starts = segments[position]
            counts = segments[position + 1] - starts
            if np.any(counts < 0) or (starts.size and np.max(starts + counts) > indices.size):
                raise ModelError(f"{where}: array_segments do not index array_indices")
            # Child j of a parent sits at its parent's start + j in array_indices.
            first_child = np.repeat(np.cumsum(counts) - counts, counts)
            position = np.repeat(starts, counts) + np.arange(first_child.size) - first_child
            coords = indices[position]
            if np.any((coords < 0) | (coords >= extent)):
                raise ModelError(f"{where}: array_indices out of [0, {extent})")
            offset = np.repeat(offset, counts)
        else:
            raise ModelError(f"{where}: unknown dimension format {meta['format']}")
        offset = offset + coords * step
    return offset


def densify(values: np.ndarray, shape: Sequence[int], sparsity: dict[str, Any]) -> np.ndarray:
    """The dense array of `shape` that a TFLite sparse tensor encodes: its stored `values` in
    place, every other element zero."""
    offset = dense_offsets(shape, sparsity)
    values = np.asarray(values).reshape(-1)
    if values.size < offset.size:
        raise ModelError(
            f"sparse tensor of shape {shape}: {values.size} stored values for "
            f"{offset.size} encoded elements"
        )
    dense = np.zeros(int(np.prod(shape, dtype=np.int64)), values.dtype)
    dense[offset] = values[: offset.size]
    return dense.reshape(shape)


def stored_values(dense: np.ndarray, sparsity: dict[str, Any]) -> np.ndarray:
    """The values a sparse tensor with `sparsity` stores for the dense array `dense`: the
    inverse of `densify` where `dense` is zero outside the encoded positions (elsewhere those
    elements are dropped)."""
    return np.ascontiguousarray(dense.reshape(-1)[dense_offsets(dense.shape, sparsity)])


def _index_vector(vector: dict[str, Any] | None, where: str) -> np.ndarray:
    if vector is None or vector.get("values") is None:
        raise ModelError(f"{where}: a SPARSE_CSR level lacks array_segments or array_indices")
    return np.asarray(vector["values"], np.int64)


def sparsity_nbytes(sparsity: dict[str, Any]) -> int:
    """The bytes of a sparse tensor's index vectors (array_segments and array_indices) and
    traversal metadata: what storing it sparse costs beyond its values."""
    block_map = sparsity.get("block_map")
    total = 4 * (len(sparsity["traversal_order"]) + (0 if block_map is None else len(block_map)))
    for level in sparsity["dim_metadata"] or ():
        for name in ("array_segments", "array_indices"):
            vector = level.get(name)
            if vector and vector.get("values") is not None:
                total += np.asarray(vector["values"]).nbytes
    return total
