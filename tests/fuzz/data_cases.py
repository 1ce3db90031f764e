"""Bad calibration data: hostile .npy/.npz files, directory entries, paths and generators.

This module holds the `.npy` cases and the helpers; `data_cases_npz.py` the `.npz` ones and
`data_cases_places.py` directories, paths and generator modules (importing this module registers
them all).

Each case builds its files in a fresh directory and returns the `--data` arguments with the exit
codes it may end with: 2 for data that must be refused, 0 for odd but usable data, `ANY` where
either is defensible. The data is for the `mlp` fixture (one float input of 32 values) or the
`multi_io` fixture (two inputs), and for the `cnn` one (an image) where the shape does not matter.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REFUSED = frozenset({2})
ACCEPTED = frozenset({0})
ANY = frozenset({0, 2})


@dataclass(frozen=True)
class DataCase:
    name: str
    build: Callable[[Path, tuple[int, ...]], list[str]]  # (case dir, sample shape) -> argv
    expect: frozenset[int]
    models: tuple[str, ...] = ("mlp", "cnn")


CASES: list[DataCase] = []


def case(expect: frozenset[int], models: tuple[str, ...] = ("mlp", "cnn")):
    def register(build):
        CASES.append(DataCase(build.__name__, build, expect, models))
        return build

    return register


def samples(shape: tuple[int, ...], n: int = 4, dtype=np.float32, value=None) -> np.ndarray:
    data = np.random.default_rng(0).random((n, *shape))
    if value is not None:
        data[...] = value
    return data.astype(dtype)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def npy_header(header: str, version: int = 1, payload: bytes = b"") -> bytes:
    text = header.encode("latin1")
    padding = (64 - (10 + len(text) + 1) % 64) % 64
    text += b" " * padding + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + payload


def write(path: Path, data: bytes) -> list[str]:
    path.write_bytes(data)
    return ["--data", str(path)]


def save(directory: Path, array: np.ndarray, name: str = "x.npy") -> list[str]:
    return write(directory / name, npy_bytes(array))


def zip_members(directory: Path, members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> Path:
    path = directory / "x.npz"
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


# --------------------------------------------------------------------------- .npy files


@case(REFUSED)
def npy_huge_shape(d, shape):
    return write(
        d / "x.npy",
        npy_header(
            f"{{'descr': '<f4', 'fortran_order': False, 'shape': (10**12, {', '.join(map(str, shape))}), }}"
        ),
    )


@case(REFUSED)
def npy_huge_shape_v2(d, shape):
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': (2**40, {', '.join(map(str, shape))}), }}"
    return write(d / "x.npy", npy_header(header, version=2, payload=bytes(64)))


@case(REFUSED)
def npy_truncated(d, shape):
    return write(d / "x.npy", npy_bytes(samples(shape, 8))[:-100])


@case(ANY)
def npy_trailing_bytes(d, shape):
    return write(d / "x.npy", npy_bytes(samples(shape)) + b"garbage")


@case(REFUSED)
def npy_object(d, shape):
    return save(d, np.array([object()] * 4, dtype=object))


@case(REFUSED)
def npy_complex(d, shape):
    return save(d, samples(shape).astype(np.complex64))


@case(REFUSED)
def npy_strings(d, shape):
    return save(d, np.full((4, *shape), "abc"))


@case(ANY)
def npy_bool(d, shape):
    return save(d, samples(shape) > 0.5)


@case(REFUSED)
def npy_float64_beyond_float32(d, shape):
    return save(d, samples(shape, dtype=np.float64) * 1e300)


@case(REFUSED)
def npy_float64_one_value_beyond(d, shape):
    data = samples(shape, dtype=np.float64)
    data.reshape(-1)[3] = -4e38
    return save(d, data)


@case(ACCEPTED)
def npy_float64(d, shape):
    return save(d, samples(shape, dtype=np.float64))


@case(ACCEPTED)
def npy_float16(d, shape):
    return save(d, samples(shape, dtype=np.float16))


@case(ACCEPTED)
def npy_big_endian(d, shape):
    return save(d, samples(shape).astype(">f4"))


@case(ACCEPTED)
def npy_fortran(d, shape):
    return save(d, np.asfortranarray(samples(shape)))


@case(REFUSED)
def npy_nan(d, shape):
    return save(d, samples(shape, value=np.nan))


@case(REFUSED)
def npy_inf(d, shape):
    data = samples(shape)
    data.reshape(-1)[0] = -np.inf
    return save(d, data)


@case(ANY)
def npy_int64_large(d, shape):
    return save(d, (samples(shape) * 1e18).astype(np.int64))


@case(REFUSED)
def npy_zerosamples(d, shape):
    return save(d, np.zeros((0, *shape), np.float32))


@case(REFUSED)
def npy_wrong_shape(d, shape):
    return save(d, np.zeros((4, *shape[:-1], shape[-1] + 1), np.float32))


@case(REFUSED)
def npy_scalar(d, shape):
    return save(d, np.float32(1.0))


@case(REFUSED)
def npy_extra_axis(d, shape):
    return save(d, np.zeros((4, *shape, 1), np.float32))


@case(REFUSED)
def npy_random_bytes(d, shape):
    return write(d / "x.npy", np.random.default_rng(1).bytes(300))


@case(REFUSED)
def npy_pickle_bytes(d, shape):
    return write(d / "x.npy", b"\x80\x04\x95" + bytes(40))


@case(ANY)
def npy_version_3(d, shape):
    header = (
        f"{{'descr': '<f4', 'fortran_order': False, 'shape': (4, {', '.join(map(str, shape))}), }}"
    )
    raw = npy_header(header, version=2, payload=samples(shape).tobytes())
    return write(d / "x.npy", raw.replace(b"\x93NUMPY\x02", b"\x93NUMPY\x03", 1))


@case(REFUSED)
def npy_negative_shape(d, shape):
    return write(
        d / "x.npy", npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-4, 32), }")
    )


@case(REFUSED)
def npy_header_garbage(d, shape):
    return write(d / "x.npy", npy_header("{'descr': <f4, shape: (((("))


@case(REFUSED)
def npy_header_not_dict(d, shape):
    return write(d / "x.npy", npy_header("[1, 2, 3]"))


@case(REFUSED)
def npy_empty_file(d, shape):
    return write(d / "x.npy", b"")


@case(REFUSED)
def npy_magic_only(d, shape):
    return write(d / "x.npy", b"\x93NUMPY\x01\x00")


@case(REFUSED)
def npy_void_dtype(d, shape):
    return save(d, np.zeros((4, *shape), dtype="V4"))


@case(REFUSED)
def npy_structured(d, shape):
    return save(d, np.zeros((4, *shape), dtype=[("a", "<f4")]))


@case(REFUSED)
def npy_datetime(d, shape):
    return save(d, np.zeros((4, *shape), dtype="datetime64[s]"))


@case(REFUSED)
def npy_huge_header_length(d, shape):
    return write(d / "x.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31) + b"{")


@case(REFUSED)
def npy_descr_huge_itemsize(d, shape):
    header = f"{{'descr': '|V2147483647', 'fortran_order': False, 'shape': (4, {', '.join(map(str, shape))}), }}"
    return write(d / "x.npy", npy_header(header))


from tests.fuzz import data_cases_npz, data_cases_places  # noqa: E402, F401  (they register cases)
