"""Integer types a quantized value can have, their ranges, and TFLite's int4 packing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from qtool.errors import UsageError


@dataclass(frozen=True)
class IntType:
    """An integer type: its bit width, signedness and the numpy dtype that stores it.

    4-bit types have no numpy dtype; their values live in int8/uint8 until packed.
    """

    name: str
    bits: int
    signed: bool

    @property
    def qmin(self) -> int:
        """The smallest value of the type."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def qmax(self) -> int:
        """The largest value of the type."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def storage(self) -> np.dtype:
        """The numpy dtype that holds the values (int8/uint8 for 4-bit types)."""
        bits = max(self.bits, 8)
        return np.dtype(f"int{bits}" if self.signed else f"uint{bits}")


INT_TYPES: dict[str, IntType] = {
    t.name: t
    for t in (
        IntType("int4", 4, True),
        IntType("uint4", 4, False),
        IntType("int8", 8, True),
        IntType("uint8", 8, False),
        IntType("int16", 16, True),
        IntType("uint16", 16, False),
        IntType("int32", 32, True),
        IntType("uint32", 32, False),
    )
}


def int_type(dtype: DTypeLike | IntType) -> IntType:
    """Resolve ``"int4"``, ``"int8"``, ``np.int8``, ``np.dtype("uint16")``... to an IntType."""
    if isinstance(dtype, IntType):
        return dtype
    if isinstance(dtype, str) and dtype.strip().lower() in INT_TYPES:
        return INT_TYPES[dtype.strip().lower()]
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in INT_TYPES:
        choices = ", ".join(INT_TYPES)
        raise UsageError(f"unsupported integer type {dtype!r} (choose from {choices})")
    return INT_TYPES[name]


def qrange(dtype: DTypeLike | IntType, narrow_range: bool = False) -> tuple[int, int]:
    """(qmin, qmax) of the type; ``narrow_range`` drops the lowest value (int8 -> [-127, 127])."""
    t = int_type(dtype)
    return t.qmin + int(narrow_range), t.qmax


def pack_int4(values: ArrayLike) -> np.ndarray:
    """Pack 4-bit values two per byte, low nibble first, as TFLite stores int4 buffers.

    Accepts signed [-8, 7] or unsigned [0, 15] values; an odd count leaves the last high nibble 0.
    """
    v = np.asarray(values).ravel()
    if v.dtype.kind not in "iu":
        raise UsageError(f"int4 packing needs integer values, got {v.dtype}")
    if v.size and (v.min() < -8 or v.max() > 15):
        raise UsageError("int4 packing needs values in [-8, 7] (signed) or [0, 15] (unsigned)")
    nibbles = (v.astype(np.int64) & 0x0F).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return nibbles[0::2] | (nibbles[1::2] << 4)


def unpack_int4(packed: ArrayLike, count: int, signed: bool = True) -> np.ndarray:
    """Inverse of :func:`pack_int4`: ``count`` values as int8 (signed) or uint8 (unsigned)."""
    p = np.asarray(packed).ravel()
    if p.dtype not in (np.uint8, np.int8):
        raise UsageError(f"packed int4 data must be bytes (uint8/int8), got {p.dtype}")
    if not 0 <= count <= 2 * p.size:
        raise UsageError(f"{p.size} bytes cannot hold {count} int4 values")
    p = p.view(np.uint8)
    nibbles = np.stack([p & 0x0F, p >> 4], axis=-1).ravel()[:count]
    if not signed:
        return nibbles.astype(np.uint8)
    return (nibbles.astype(np.int8) << 4) >> 4
