""".npy and .npz files read with every declared size checked before anything is allocated.

The header of a .npy file says how many bytes of data follow; a header that promises more than
the file holds is refused before any allocation. The data is then read a block of rows at a
time (`read_rows`), never memory-mapped: a mapped file that another program truncates while
qtool reads it ends the process with SIGBUS, where a read comes up short and says so. An .npz
member has to be decompressed into memory, so its uncompressed size (from the zip directory)
must stay under `MAX_MEMBER_BYTES`, and its header must fit inside it; members are read only
when asked for by name (`NpzArchive`), so unused ones cost nothing. Pickled (object) arrays are
never loaded. Every problem is an `ArrayFileError` whose message reads well after the file's
name.
"""

from __future__ import annotations

import ast
import lzma
import math
import struct
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from qtool.errors import exception_summary

MAGIC = b"\x93NUMPY"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
MAX_HEADER_BYTES = 10_000  # numpy's own bound on a header's length
MAX_MEMBER_BYTES = 1 << 30  # an .npz member is decompressed whole: at most 1 GiB
# What reading a damaged or unusual zip archive raises: bad CRCs and headers, truncation,
# encryption (RuntimeError), unknown compression methods (NotImplementedError).
_ZIP_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    RuntimeError,
    NotImplementedError,
    ValueError,
    struct.error,
)


class ArrayFileError(ValueError):
    """A .npy/.npz file (or member) qtool will not read; the message explains why."""


@dataclass(frozen=True)
class Header:
    """What a .npy header declares: the dtype, the shape, the memory order, and the offset where
    the data starts."""

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    offset: int  # where the data starts

    @property
    def nbytes(self) -> int:
        """The number of data bytes the header declares."""
        return math.prod(self.shape) * self.dtype.itemsize

    def describe(self) -> str:
        """The declared array as text: "shape [2, 3] of float32 (24 bytes)"."""
        return f"shape {list(self.shape)} of {self.dtype} ({self.nbytes:,} bytes)"


def _read_exact(handle: BinaryIO, count: int, what: str) -> bytes:
    data = handle.read(count)
    if len(data) != count:
        raise ArrayFileError(f"truncated .npy {what}")
    return data


def read_header(handle: BinaryIO) -> Header:
    """Parse a .npy header (any version) without numpy's unpickling fallbacks."""
    if handle.read(len(MAGIC)) != MAGIC:
        raise ArrayFileError("not a .npy file")
    major, _minor = _read_exact(handle, 2, "version")
    if major not in (1, 2, 3):
        raise ArrayFileError(f"unknown .npy format version {major}")
    length_format = "<H" if major == 1 else "<I"
    (length,) = struct.unpack(
        length_format, _read_exact(handle, struct.calcsize(length_format), "header")
    )
    if length > MAX_HEADER_BYTES:
        raise ArrayFileError(f".npy header of {length:,} bytes (at most {MAX_HEADER_BYTES:,})")
    text = _read_exact(handle, length, "header").decode(
        "utf-8" if major == 3 else "latin1", "replace"
    )
    try:
        fields = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ArrayFileError("unreadable .npy header") from None
    if not isinstance(fields, dict) or set(fields) != {"descr", "fortran_order", "shape"}:
        raise ArrayFileError("a .npy header needs exactly descr, fortran_order and shape")
    shape = fields["shape"]
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise ArrayFileError(f"invalid shape {shape!r} in the .npy header")
    try:
        dtype = np.lib.format.descr_to_dtype(fields["descr"])
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ArrayFileError(f"invalid dtype {fields['descr']!r} in the .npy header") from None
    if dtype.hasobject:
        raise ArrayFileError("holds Python objects (a pickle), which qtool never loads")
    offset = len(MAGIC) + 2 + struct.calcsize(length_format) + length
    return Header(dtype, shape, bool(fields["fortran_order"]), offset)


def npy_header(handle: BinaryIO, size: int) -> Header:
    """The header of a .npy file of `size` bytes, checked against what the file holds."""
    header = read_header(handle)
    available = size - header.offset
    if header.nbytes > available:
        raise ArrayFileError(
            f"the header declares {header.describe()}, but the file holds {max(available, 0):,} "
            "bytes of data"
        )
    return header


def _read_exactly(handle: BinaryIO, offset: int, nbytes: int) -> np.ndarray:
    data = np.empty(nbytes, np.uint8)
    view = memoryview(data)
    handle.seek(offset)
    done = 0
    while done < nbytes:
        got = handle.readinto(view[done:])
        if not got:
            raise ArrayFileError(
                f"the file was truncated while qtool read it ({offset + done:,} of "
                f"{offset + nbytes:,} bytes)"
            )
        done += got
    return data


def read_rows(handle: BinaryIO, header: Header, start: int, count: int) -> np.ndarray:
    """Rows `start` to `start + count` (along the first axis) of the array, read from the file
    now; a 0-d array is read whole."""
    if not header.shape:
        return _read_exactly(handle, header.offset, header.nbytes).view(header.dtype).reshape(())
    row_shape = header.shape[1:]
    row_bytes = math.prod(row_shape) * header.dtype.itemsize
    if header.fortran_order and len(header.shape) > 1:  # rows are not contiguous: read it all
        whole = _read_exactly(handle, header.offset, header.nbytes).view(header.dtype)
        return whole.reshape(header.shape, order="F")[start : start + count]
    data = _read_exactly(handle, header.offset + start * row_bytes, count * row_bytes)
    return data.view(header.dtype).reshape((count, *row_shape))


def load_npy(handle: BinaryIO, size: int) -> np.ndarray:
    """The array of a .npy file of `size` bytes, read into memory."""
    header = npy_header(handle, size)
    return read_rows(handle, header, 0, header.shape[0] if header.shape else 1)


def _members(archive: zipfile.ZipFile) -> Iterator[zipfile.ZipInfo]:
    """The .npy members of an archive (directories and other files are not arrays)."""
    for info in archive.infolist():
        if not info.is_dir() and info.filename.endswith(".npy"):
            yield info


def _member_array(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    if info.file_size > MAX_MEMBER_BYTES:
        raise ArrayFileError(
            f"{info.file_size:,} bytes uncompressed, over qtool's limit of {MAX_MEMBER_BYTES:,}"
        )
    with archive.open(info) as member:
        header = read_header(member)
        if header.offset + header.nbytes > info.file_size:
            raise ArrayFileError(
                f"the header declares {header.describe()}, but the member holds "
                f"{max(info.file_size - header.offset, 0):,} bytes of data"
            )
        data = member.read()  # to the end, so that the CRC is checked
    if len(data) < header.nbytes:
        raise ArrayFileError("truncated member")
    order = "F" if header.fortran_order else "C"
    count = math.prod(header.shape)
    return np.frombuffer(data, header.dtype, count=count).reshape(header.shape, order=order)


class NpzArchive(Mapping[str, np.ndarray]):
    """The .npy members of an .npz archive by name (without `.npy`), each read and decompressed
    only when asked for: an archive's unused members are never decompressed."""

    def __init__(self, handle: BinaryIO) -> None:
        try:
            self.archive = zipfile.ZipFile(handle)
            self.members = {info.filename[: -len(".npy")]: info for info in _members(self.archive)}
        except _ZIP_ERRORS as exc:
            raise ArrayFileError(
                f"not a readable .npz archive ({exception_summary(exc)})"
            ) from None

    def __getitem__(self, name: str) -> np.ndarray:
        info = self.members[name]
        try:
            return _member_array(self.archive, info)
        except ArrayFileError as exc:
            raise ArrayFileError(f"member {info.filename}: {exc}") from None
        except _ZIP_ERRORS as exc:
            raise ArrayFileError(f"member {info.filename}: {exception_summary(exc)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)


def first_shape(handle: BinaryIO) -> tuple[int, ...] | None:
    """The shape of a .npy file, or of an .npz archive's first member, from headers alone."""
    try:
        if handle.read(len(MAGIC)) == MAGIC:
            handle.seek(0)
            return read_header(handle).shape
        handle.seek(0)
        with zipfile.ZipFile(handle) as archive:
            members = sorted(_members(archive), key=lambda info: info.filename)
            if not members:
                return None
            with archive.open(members[0]) as member:
                return read_header(member).shape
    except (ArrayFileError, *_ZIP_ERRORS):
        return None  # reading the data says what is wrong
