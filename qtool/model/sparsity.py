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


# Index vectors of the narrowest type that holds their values: the schema's SparseIndexVector
# union (1 Int32Vector, 2 Uint16Vector, 3 Uint8Vector).
_INDEX_TYPES = ((np.uint8, 3), (np.uint16, 2), (np.int32, 1))


def _narrowest_vector(values: np.ndarray) -> tuple[int, dict[str, np.ndarray]]:
    top = int(values.max(initial=0))
    for dtype, code in _INDEX_TYPES:
        if top <= np.iinfo(dtype).max:
            return code, {"values": values.astype(dtype)}
    raise ModelError(f"a sparse index of {top} does not fit int32")


def _index_width(top: int) -> int:
    return next(np.dtype(t).itemsize for t, _ in _INDEX_TYPES if top <= np.iinfo(t).max)


def compact_sparsity(
    dense: np.ndarray, sparse_dim: int | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """`dense` encoded with its nonzero elements only, as compactly as TFLite's format allows
    for unstructured sparsity: one dimension SPARSE_CSR, traversed last, the others DENSE in
    their order. The sparse dimension is the one that costs least (its indices fit a byte
    when it has at most 256 elements; segments number the positions of the others), so a
    [192, 1, 1, 1152] kernel is stored along its 192 output channels, not its 1152 inputs.
    `sparse_dim` imposes the sparse dimension instead. Returns the stored values and the
    sparsity parameters (`densify` gives `dense` back)."""
    shape = dense.shape
    nonzero = int(np.count_nonzero(dense))
    total = int(np.prod(shape, dtype=np.int64))

    def cost(d: int) -> int:
        outer = total // max(shape[d], 1)
        return nonzero * _index_width(shape[d] - 1) + (outer + 1) * _index_width(nonzero)

    if sparse_dim is None:
        sparse_dim = min(reversed(range(len(shape))), key=cost)  # ties: the last dimension
    order = [d for d in range(len(shape)) if d != sparse_dim] + [sparse_dim]
    rows = dense.transpose(order).reshape(-1, shape[sparse_dim])
    present = rows != 0
    segments = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int64)
    indices = np.nonzero(present)[1].astype(np.int64)
    levels: list[dict[str, Any]] = [
        {
            "format": DimensionType.DENSE,
            "dense_size": int(shape[d]),
            "array_segments_type": 0,
            "array_segments": None,
            "array_indices_type": 0,
            "array_indices": None,
        }
        for d in order[:-1]
    ]
    segments_type, segments_vector = _narrowest_vector(segments)
    indices_type, indices_vector = _narrowest_vector(indices)
    levels.append(
        {
            "format": DimensionType.SPARSE_CSR,
            "dense_size": 0,
            "array_segments_type": segments_type,
            "array_segments": segments_vector,
            "array_indices_type": indices_type,
            "array_indices": indices_vector,
        }
    )
    sparsity = {
        "traversal_order": np.array(order, np.int32),
        "block_map": None,
        "dim_metadata": levels,
    }
    return np.ascontiguousarray(rows[present]), sparsity
