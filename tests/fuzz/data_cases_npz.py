"""Bad calibration data: hostile `.npz` archives (registered into `data_cases.CASES`)."""

from __future__ import annotations

import io
import struct
import warnings
import zipfile

import numpy as np

from tests.fuzz.data_cases import (
    ACCEPTED,
    ANY,
    REFUSED,
    case,
    npy_bytes,
    npy_header,
    samples,
    save,
    write,
    zip_members,
)

# --------------------------------------------------------------------------- .npz files


@case(REFUSED)
def npz_object_member(d, shape):
    path = zip_members(d, {"arr_0.npy": npy_bytes(np.array([object()] * 4, dtype=object))})
    return ["--data", str(path)]


@case(REFUSED)
def npz_bad_crc(d, shape):
    path = zip_members(d, {"arr_0.npy": npy_bytes(samples(shape))})
    raw = bytearray(path.read_bytes())
    raw[200] ^= 0xFF  # inside the stored member's data
    return write(path, bytes(raw))


@case(REFUSED)
def npz_bad_crc_deflated(d, shape):
    path = zip_members(d, {"arr_0.npy": npy_bytes(samples(shape))}, zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0x55
    return write(path, bytes(raw))


@case(REFUSED)
def npz_truncated(d, shape):
    path = zip_members(d, {"arr_0.npy": npy_bytes(samples(shape))})
    return write(path, path.read_bytes()[:150])


@case(REFUSED)
def npz_truncated_member(d, shape):
    return ["--data", str(zip_members(d, {"arr_0.npy": npy_bytes(samples(shape, 8))[:-64]}))]


@case(REFUSED)
def npz_huge_member_shape(d, shape):
    dims = ", ".join(map(str, shape))
    member = npy_header(f"{{'descr': '<f4', 'fortran_order': False, 'shape': (10**11, {dims}), }}")
    return [
        "--data",
        str(zip_members(d, {"arr_0.npy": member + bytes(1 << 16)}, zipfile.ZIP_DEFLATED)),
    ]


@case(REFUSED)
def npz_member_bomb(d, shape):
    """A deflated member whose declared array is larger than the memory bound."""
    dims = ", ".join(map(str, shape))
    header = npy_header(f"{{'descr': '<f4', 'fortran_order': False, 'shape': (2**26, {dims}), }}")
    info = zipfile.ZipInfo("arr_0.npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    path = d / "x.npz"
    with zipfile.ZipFile(path, "w") as archive:  # 64 MiB of zeros in about 64 KiB
        archive.writestr(info, header + bytes(64 << 20))
    return ["--data", str(path)]


@case(REFUSED)
def npz_empty(d, shape):
    return ["--data", str(zip_members(d, {}))]


@case(REFUSED)
def npz_not_npy_member(d, shape):
    return ["--data", str(zip_members(d, {"notes.txt": b"hello"}))]


@case(REFUSED)
def npz_wrong_keys(d, shape):
    return ["--data", str(zip_members(d, {"other.npy": npy_bytes(samples(shape))}))]


@case(ANY)
def npz_directory_entry(d, shape):
    return ["--data", str(zip_members(d, {"sub/": b"", "arr_0.npy": npy_bytes(samples(shape))}))]


@case(REFUSED)
def npz_encrypted_flag(d, shape):
    path = zip_members(d, {"arr_0.npy": npy_bytes(samples(shape))})
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = raw.find(signature)
        raw[at + offset] |= 1  # general purpose flag bit 0: encrypted
    return write(path, bytes(raw))


@case(REFUSED)
def npz_unknown_compression(d, shape):
    path = zip_members(d, {"arr_0.npy": npy_bytes(samples(shape))})
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        at = raw.find(signature)
        raw[at + offset : at + offset + 2] = struct.pack("<H", 99)
    return write(path, bytes(raw))


@case(ACCEPTED)
def npz_lzma(d, shape):
    return [
        "--data",
        str(zip_members(d, {"arr_0.npy": npy_bytes(samples(shape))}, zipfile.ZIP_LZMA)),
    ]


@case(REFUSED)
def npz_nestedzip_members(d, shape):
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("arr_0.npy", npy_bytes(samples(shape)))
    return ["--data", str(zip_members(d, {"arr_0.npy": inner.getvalue()}))]


@case(ANY)
def npz_duplicate_members(d, shape):
    path = d / "x.npz"
    with zipfile.ZipFile(path, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it is asked to write
        archive.writestr("arr_0.npy", npy_bytes(samples(shape)))
        archive.writestr(zipfile.ZipInfo("arr_0.npy"), npy_bytes(samples(shape, 2)))
    return ["--data", str(path)]


@case(REFUSED)
def npz_member_nan(d, shape):
    return ["--data", str(zip_members(d, {"arr_0.npy": npy_bytes(samples(shape, value=np.nan))}))]


@case(REFUSED)
def npz_member_float64_beyond(d, shape):
    data = samples(shape, dtype=np.float64) * 1e39
    return ["--data", str(zip_members(d, {"arr_0.npy": npy_bytes(data)}))]


@case(REFUSED)
def npz_random_bytes(d, shape):
    return write(d / "x.npz", b"PK\x03\x04" + np.random.default_rng(2).bytes(500))


@case(REFUSED)
def npz_member_garbage(d, shape):
    return ["--data", str(zip_members(d, {"arr_0.npy": b"\x93NUMPY\x01\x00\xff\xff{"}))]


@case(REFUSED, models=("multi_io",))
def npz_counts_differ(d, shape):
    rng = np.random.default_rng(0)
    arrays = {
        "arr_0.npy": npy_bytes(rng.random((4, 16, 16, 3)).astype(np.float32)),
        "arr_1.npy": npy_bytes(rng.random((3, 8)).astype(np.float32)),
    }
    return ["--data", str(zip_members(d, arrays))]


@case(REFUSED, models=("multi_io",))
def npz_one_member_for_two_inputs(d, shape):
    data = np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32)
    return ["--data", str(zip_members(d, {"arr_0.npy": npy_bytes(data)}))]


@case(REFUSED, models=("multi_io",))
def npy_for_two_inputs(d, shape):
    return save(d, np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32))
