"""Integer type ranges and TFLite's int4 packing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qtool.errors import UsageError
from qtool.numerics import int_type, pack_int4, qrange, unpack_int4

FAST = settings(deadline=None, max_examples=60)


@pytest.mark.parametrize(
    ("dtype", "full", "narrow"),
    [
        ("int4", (-8, 7), (-7, 7)),
        ("uint4", (0, 15), (1, 15)),
        (np.int8, (-128, 127), (-127, 127)),
        (np.uint8, (0, 255), (1, 255)),
        ("int16", (-32768, 32767), (-32767, 32767)),
        (np.dtype(np.uint16), (0, 65535), (1, 65535)),
        ("int32", (-(2**31), 2**31 - 1), (-(2**31) + 1, 2**31 - 1)),
        ("uint32", (0, 2**32 - 1), (1, 2**32 - 1)),
    ],
)
def test_qrange(dtype: object, full: tuple[int, int], narrow: tuple[int, int]) -> None:
    assert qrange(dtype) == full
    assert qrange(dtype, narrow_range=True) == narrow


def test_storage_types() -> None:
    assert int_type("int4").storage == np.int8
    assert int_type("uint4").storage == np.uint8
    assert int_type(np.int16).storage == np.int16


@pytest.mark.parametrize("dtype", ["float32", "int64", "bogus", np.float16])
def test_unsupported_types(dtype: object) -> None:
    with pytest.raises(UsageError):
        qrange(dtype)


def test_pack_layout_low_nibble_first() -> None:
    packed = pack_int4(np.array([1, -2, 7, -8, 3], np.int8))
    # 1 | (-2 & 0xF) << 4 = 0xE1; 7 | 8 << 4 = 0x87; odd count: last high nibble is 0.
    assert packed.dtype == np.uint8
    assert packed.tolist() == [0xE1, 0x87, 0x03]
    assert unpack_int4(packed, 5).tolist() == [1, -2, 7, -8, 3]
    assert unpack_int4(packed, 5, signed=False).tolist() == [1, 14, 7, 8, 3]


def test_pack_rejects_out_of_range_values() -> None:
    with pytest.raises(UsageError):
        pack_int4([16])
    with pytest.raises(UsageError):
        pack_int4([-9])
    with pytest.raises(UsageError):
        pack_int4([0.5])
    with pytest.raises(UsageError):
        unpack_int4(np.zeros(2, np.uint8), 5)


@FAST
@given(st.lists(st.integers(-8, 7), max_size=33))
def test_signed_round_trip(values: list[int]) -> None:
    packed = pack_int4(np.array(values, np.int8))
    assert packed.size == (len(values) + 1) // 2
    unpacked = unpack_int4(packed, len(values))
    assert unpacked.dtype == np.int8
    assert unpacked.tolist() == values


@FAST
@given(st.lists(st.integers(0, 15), max_size=33))
def test_unsigned_round_trip(values: list[int]) -> None:
    unpacked = unpack_int4(pack_int4(np.array(values, np.uint8)), len(values), signed=False)
    assert unpacked.tolist() == values
