"""Bad calibration data: hostile .npy/.npz files, directory entries, paths and generators.

Each case builds its files in a fresh directory and returns the `--data` arguments with the exit
codes it may end with: 2 for data that must be refused, 0 for odd but usable data, `ANY` where
either is defensible. The data is for the `mlp` fixture (one float input of 32 values) or the
`multi_io` fixture (two inputs), and for the `cnn` one (an image) where the shape does not matter.
"""

from __future__ import annotations

import io
import os
import socket
import struct
import warnings
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


def _samples(shape: tuple[int, ...], n: int = 4, dtype=np.float32, value=None) -> np.ndarray:
    data = np.random.default_rng(0).random((n, *shape))
    if value is not None:
        data[...] = value
    return data.astype(dtype)


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _npy_header(header: str, version: int = 1, payload: bytes = b"") -> bytes:
    text = header.encode("latin1")
    padding = (64 - (10 + len(text) + 1) % 64) % 64
    text += b" " * padding + b"\n"
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + payload
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(text)) + text + payload


def _write(path: Path, data: bytes) -> list[str]:
    path.write_bytes(data)
    return ["--data", str(path)]


def _save(directory: Path, array: np.ndarray, name: str = "x.npy") -> list[str]:
    return _write(directory / name, _npy_bytes(array))


def _zip(directory: Path, members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> Path:
    path = directory / "x.npz"
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


# --------------------------------------------------------------------------- .npy files


@case(REFUSED)
def npy_huge_shape(d, shape):
    return _write(
        d / "x.npy",
        _npy_header(
            f"{{'descr': '<f4', 'fortran_order': False, 'shape': (10**12, {', '.join(map(str, shape))}), }}"
        ),
    )


@case(REFUSED)
def npy_huge_shape_v2(d, shape):
    header = f"{{'descr': '<f8', 'fortran_order': False, 'shape': (2**40, {', '.join(map(str, shape))}), }}"
    return _write(d / "x.npy", _npy_header(header, version=2, payload=bytes(64)))


@case(REFUSED)
def npy_truncated(d, shape):
    return _write(d / "x.npy", _npy_bytes(_samples(shape, 8))[:-100])


@case(ANY)
def npy_trailing_bytes(d, shape):
    return _write(d / "x.npy", _npy_bytes(_samples(shape)) + b"garbage")


@case(REFUSED)
def npy_object(d, shape):
    return _save(d, np.array([object()] * 4, dtype=object))


@case(REFUSED)
def npy_complex(d, shape):
    return _save(d, _samples(shape).astype(np.complex64))


@case(REFUSED)
def npy_strings(d, shape):
    return _save(d, np.full((4, *shape), "abc"))


@case(ANY)
def npy_bool(d, shape):
    return _save(d, _samples(shape) > 0.5)


@case(REFUSED)
def npy_float64_beyond_float32(d, shape):
    return _save(d, _samples(shape, dtype=np.float64) * 1e300)


@case(REFUSED)
def npy_float64_one_value_beyond(d, shape):
    data = _samples(shape, dtype=np.float64)
    data.reshape(-1)[3] = -4e38
    return _save(d, data)


@case(ACCEPTED)
def npy_float64(d, shape):
    return _save(d, _samples(shape, dtype=np.float64))


@case(ACCEPTED)
def npy_float16(d, shape):
    return _save(d, _samples(shape, dtype=np.float16))


@case(ACCEPTED)
def npy_big_endian(d, shape):
    return _save(d, _samples(shape).astype(">f4"))


@case(ACCEPTED)
def npy_fortran(d, shape):
    return _save(d, np.asfortranarray(_samples(shape)))


@case(REFUSED)
def npy_nan(d, shape):
    return _save(d, _samples(shape, value=np.nan))


@case(REFUSED)
def npy_inf(d, shape):
    data = _samples(shape)
    data.reshape(-1)[0] = -np.inf
    return _save(d, data)


@case(ANY)
def npy_int64_large(d, shape):
    return _save(d, (_samples(shape) * 1e18).astype(np.int64))


@case(REFUSED)
def npy_zero_samples(d, shape):
    return _save(d, np.zeros((0, *shape), np.float32))


@case(REFUSED)
def npy_wrong_shape(d, shape):
    return _save(d, np.zeros((4, *shape[:-1], shape[-1] + 1), np.float32))


@case(REFUSED)
def npy_scalar(d, shape):
    return _save(d, np.float32(1.0))


@case(REFUSED)
def npy_extra_axis(d, shape):
    return _save(d, np.zeros((4, *shape, 1), np.float32))


@case(REFUSED)
def npy_random_bytes(d, shape):
    return _write(d / "x.npy", np.random.default_rng(1).bytes(300))


@case(REFUSED)
def npy_pickle_bytes(d, shape):
    return _write(d / "x.npy", b"\x80\x04\x95" + bytes(40))


@case(ANY)
def npy_version_3(d, shape):
    header = (
        f"{{'descr': '<f4', 'fortran_order': False, 'shape': (4, {', '.join(map(str, shape))}), }}"
    )
    raw = _npy_header(header, version=2, payload=_samples(shape).tobytes())
    return _write(d / "x.npy", raw.replace(b"\x93NUMPY\x02", b"\x93NUMPY\x03", 1))


@case(REFUSED)
def npy_negative_shape(d, shape):
    return _write(
        d / "x.npy", _npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-4, 32), }")
    )


@case(REFUSED)
def npy_header_garbage(d, shape):
    return _write(d / "x.npy", _npy_header("{'descr': <f4, shape: (((("))


@case(REFUSED)
def npy_header_not_dict(d, shape):
    return _write(d / "x.npy", _npy_header("[1, 2, 3]"))


@case(REFUSED)
def npy_empty_file(d, shape):
    return _write(d / "x.npy", b"")


@case(REFUSED)
def npy_magic_only(d, shape):
    return _write(d / "x.npy", b"\x93NUMPY\x01\x00")


@case(REFUSED)
def npy_void_dtype(d, shape):
    return _save(d, np.zeros((4, *shape), dtype="V4"))


@case(REFUSED)
def npy_structured(d, shape):
    return _save(d, np.zeros((4, *shape), dtype=[("a", "<f4")]))


@case(REFUSED)
def npy_datetime(d, shape):
    return _save(d, np.zeros((4, *shape), dtype="datetime64[s]"))


@case(REFUSED)
def npy_huge_header_length(d, shape):
    return _write(d / "x.npy", b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**31) + b"{")


@case(REFUSED)
def npy_descr_huge_itemsize(d, shape):
    header = f"{{'descr': '|V2147483647', 'fortran_order': False, 'shape': (4, {', '.join(map(str, shape))}), }}"
    return _write(d / "x.npy", _npy_header(header))


# --------------------------------------------------------------------------- .npz files


@case(REFUSED)
def npz_object_member(d, shape):
    path = _zip(d, {"arr_0.npy": _npy_bytes(np.array([object()] * 4, dtype=object))})
    return ["--data", str(path)]


@case(REFUSED)
def npz_bad_crc(d, shape):
    path = _zip(d, {"arr_0.npy": _npy_bytes(_samples(shape))})
    raw = bytearray(path.read_bytes())
    raw[200] ^= 0xFF  # inside the stored member's data
    return _write(path, bytes(raw))


@case(REFUSED)
def npz_bad_crc_deflated(d, shape):
    path = _zip(d, {"arr_0.npy": _npy_bytes(_samples(shape))}, zipfile.ZIP_DEFLATED)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 3] ^= 0x55
    return _write(path, bytes(raw))


@case(REFUSED)
def npz_truncated(d, shape):
    path = _zip(d, {"arr_0.npy": _npy_bytes(_samples(shape))})
    return _write(path, path.read_bytes()[:150])


@case(REFUSED)
def npz_truncated_member(d, shape):
    return ["--data", str(_zip(d, {"arr_0.npy": _npy_bytes(_samples(shape, 8))[:-64]}))]


@case(REFUSED)
def npz_huge_member_shape(d, shape):
    dims = ", ".join(map(str, shape))
    member = _npy_header(f"{{'descr': '<f4', 'fortran_order': False, 'shape': (10**11, {dims}), }}")
    return ["--data", str(_zip(d, {"arr_0.npy": member + bytes(1 << 16)}, zipfile.ZIP_DEFLATED))]


@case(REFUSED)
def npz_member_bomb(d, shape):
    """A deflated member whose declared array is larger than the memory bound."""
    dims = ", ".join(map(str, shape))
    header = _npy_header(f"{{'descr': '<f4', 'fortran_order': False, 'shape': (2**26, {dims}), }}")
    info = zipfile.ZipInfo("arr_0.npy")
    info.compress_type = zipfile.ZIP_DEFLATED
    path = d / "x.npz"
    with zipfile.ZipFile(path, "w") as archive:  # 64 MiB of zeros in about 64 KiB
        archive.writestr(info, header + bytes(64 << 20))
    return ["--data", str(path)]


@case(REFUSED)
def npz_empty(d, shape):
    return ["--data", str(_zip(d, {}))]


@case(REFUSED)
def npz_not_npy_member(d, shape):
    return ["--data", str(_zip(d, {"notes.txt": b"hello"}))]


@case(REFUSED)
def npz_wrong_keys(d, shape):
    return ["--data", str(_zip(d, {"other.npy": _npy_bytes(_samples(shape))}))]


@case(ANY)
def npz_directory_entry(d, shape):
    return ["--data", str(_zip(d, {"sub/": b"", "arr_0.npy": _npy_bytes(_samples(shape))}))]


@case(REFUSED)
def npz_encrypted_flag(d, shape):
    path = _zip(d, {"arr_0.npy": _npy_bytes(_samples(shape))})
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = raw.find(signature)
        raw[at + offset] |= 1  # general purpose flag bit 0: encrypted
    return _write(path, bytes(raw))


@case(REFUSED)
def npz_unknown_compression(d, shape):
    path = _zip(d, {"arr_0.npy": _npy_bytes(_samples(shape))})
    raw = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        at = raw.find(signature)
        raw[at + offset : at + offset + 2] = struct.pack("<H", 99)
    return _write(path, bytes(raw))


@case(ACCEPTED)
def npz_lzma(d, shape):
    return ["--data", str(_zip(d, {"arr_0.npy": _npy_bytes(_samples(shape))}, zipfile.ZIP_LZMA))]


@case(REFUSED)
def npz_nested_zip(d, shape):
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as archive:
        archive.writestr("arr_0.npy", _npy_bytes(_samples(shape)))
    return ["--data", str(_zip(d, {"arr_0.npy": inner.getvalue()}))]


@case(ANY)
def npz_duplicate_members(d, shape):
    path = d / "x.npz"
    with zipfile.ZipFile(path, "w") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns about the duplicate it is asked to write
        archive.writestr("arr_0.npy", _npy_bytes(_samples(shape)))
        archive.writestr(zipfile.ZipInfo("arr_0.npy"), _npy_bytes(_samples(shape, 2)))
    return ["--data", str(path)]


@case(REFUSED)
def npz_member_nan(d, shape):
    return ["--data", str(_zip(d, {"arr_0.npy": _npy_bytes(_samples(shape, value=np.nan))}))]


@case(REFUSED)
def npz_member_float64_beyond(d, shape):
    data = _samples(shape, dtype=np.float64) * 1e39
    return ["--data", str(_zip(d, {"arr_0.npy": _npy_bytes(data)}))]


@case(REFUSED)
def npz_random_bytes(d, shape):
    return _write(d / "x.npz", b"PK\x03\x04" + np.random.default_rng(2).bytes(500))


@case(REFUSED)
def npz_member_garbage(d, shape):
    return ["--data", str(_zip(d, {"arr_0.npy": b"\x93NUMPY\x01\x00\xff\xff{"}))]


@case(REFUSED, models=("multi_io",))
def npz_counts_differ(d, shape):
    rng = np.random.default_rng(0)
    arrays = {
        "arr_0.npy": _npy_bytes(rng.random((4, 16, 16, 3)).astype(np.float32)),
        "arr_1.npy": _npy_bytes(rng.random((3, 8)).astype(np.float32)),
    }
    return ["--data", str(_zip(d, arrays))]


@case(REFUSED, models=("multi_io",))
def npz_one_member_for_two_inputs(d, shape):
    data = np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32)
    return ["--data", str(_zip(d, {"arr_0.npy": _npy_bytes(data)}))]


@case(REFUSED, models=("multi_io",))
def npy_for_two_inputs(d, shape):
    return _save(d, np.random.default_rng(0).random((4, 16, 16, 3)).astype(np.float32))


# --------------------------------------------------------------------------- directories


def _dir(d: Path) -> Path:
    target = d / "samples"
    target.mkdir()
    return target


@case(REFUSED)
def dir_empty(d, shape):
    return ["--data", str(_dir(d))]


@case(REFUSED)
def dir_subdirectory_named_npy(d, shape):
    target = _dir(d)
    (target / "x.npy").mkdir()
    return ["--data", str(target)]


@case(REFUSED)
def dir_fifo_named_npy(d, shape):
    target = _dir(d)
    os.mkfifo(target / "x.npy")
    return ["--data", str(target)]


@case(REFUSED)
def dir_fifo_among_good(d, shape):
    target = _dir(d)
    _save(target, _samples(shape), "a.npy")
    os.mkfifo(target / "b.npy")
    return ["--data", str(target)]


@case(REFUSED)
def dir_dangling_link(d, shape):
    target = _dir(d)
    (target / "x.npy").symlink_to(d / "nowhere.npy")
    return ["--data", str(target)]


@case(REFUSED)
def dir_link_loop(d, shape):
    target = _dir(d)
    (target / "x.npy").symlink_to(target / "y.npy")
    (target / "y.npy").symlink_to(target / "x.npy")
    return ["--data", str(target)]


@case(REFUSED)
def dir_link_to_dev_zero(d, shape):
    target = _dir(d)
    (target / "x.npy").symlink_to("/dev/zero")
    return ["--data", str(target)]


@case(REFUSED)
def dir_link_to_proc(d, shape):
    target = _dir(d)
    (target / "x.npy").symlink_to("/proc/self/status")
    return ["--data", str(target)]


@case(REFUSED)
def dir_link_to_directory(d, shape):
    target = _dir(d)
    (target / "x.npz").symlink_to(d)
    return ["--data", str(target)]


@case(REFUSED)
def dir_socket_named_npy(d, shape):
    target = _dir(d)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(target / "x.npy"))
    except OSError:  # a path too long for a socket: a FIFO is the same kind of trap
        os.mkfifo(target / "x.npy")
    finally:
        server.close()
    return ["--data", str(target)]


@case(REFUSED)
def dir_good_and_bad(d, shape):
    target = _dir(d)
    _save(target, _samples(shape), "a.npy")
    (target / "b.npy").write_bytes(b"not numpy at all")
    return ["--data", str(target)]


@case(ACCEPTED)
def dir_one_sample_per_file(d, shape):
    target = _dir(d)
    for i in range(3):
        _save(target, _samples(shape, 1)[0], f"{i}.npy")
    return ["--data", str(target)]


@case(ACCEPTED)
def dir_npy_and_npz(d, shape):
    target = _dir(d)
    _save(target, _samples(shape, 2), "a.npy")
    with zipfile.ZipFile(target / "b.npz", "w") as archive:
        archive.writestr("arr_0.npy", _npy_bytes(_samples(shape, 3)))
    return ["--data", str(target)]


@case(REFUSED)
def dir_other_files_only(d, shape):
    target = _dir(d)
    (target / "readme.txt").write_text("hi")
    return ["--data", str(target)]


@case(REFUSED)
def dir_huge_header(d, shape):
    target = _dir(d)
    npy_huge_shape(target, shape)
    return ["--data", str(target)]


# --------------------------------------------------------------------------- paths


@case(REFUSED)
def path_fifo(d, shape):
    os.mkfifo(d / "x.npy")
    return ["--data", str(d / "x.npy")]


@case(REFUSED)
def path_fifo_no_suffix(d, shape):
    os.mkfifo(d / "pipe")
    return ["--data", str(d / "pipe")]


@case(REFUSED)
def path_dev_zero(d, shape):
    return ["--data", "/dev/zero"]


@case(REFUSED)
def path_dev_null(d, shape):
    return ["--data", "/dev/null"]


@case(REFUSED)
def path_proc_file(d, shape):
    return ["--data", "/proc/self/status"]


@case(REFUSED)
def path_link_loop(d, shape):
    (d / "a.npy").symlink_to(d / "b.npy")
    (d / "b.npy").symlink_to(d / "a.npy")
    return ["--data", str(d / "a.npy")]


@case(REFUSED)
def path_dangling_link(d, shape):
    (d / "a.npy").symlink_to(d / "gone.npy")
    return ["--data", str(d / "a.npy")]


@case(REFUSED)
def path_missing(d, shape):
    return ["--data", str(d / "missing.npy")]


@case(REFUSED)
def path_empty_string(d, shape):
    return ["--data", ""]


@case(REFUSED)
def path_nul_byte(d, shape):
    return ["--data", str(d / "a\x00b.npy")]


@case(REFUSED)
def path_too_long(d, shape):
    return ["--data", str(d / ("x" * 300 + ".npy"))]


@case(REFUSED)
def path_very_long(d, shape):
    return ["--data", str(d / "/".join(["abcdefgh"] * 600))]


@case(REFUSED)
def path_colon_only(d, shape):
    return ["--data", ":"]


@case(REFUSED)
def path_unknown_key(d, shape):
    return ["--data", f"nokey={d / 'x.npy'}"]


@case(ANY)
def path_not_utf8(d, shape):
    name = os.fsdecode(b"\xff\xfe.npy")
    _save(d, _samples(shape), name)
    return ["--data", str(d / name)]


# --------------------------------------------------------------------------- generators


def _module(d: Path, body: str) -> str:
    name = f"qtool_fuzz_gen_{abs(hash(str(d))) % 10**12}"
    (d / f"{name}.py").write_text(body)
    return name


GENERATORS = {
    "gen_missing_module": ("", "qtool_no_such_module_xyz:samples", REFUSED),
    "gen_missing_function": ("def other():\n    yield []\n", ":samples", REFUSED),
    "gen_import_raises": ("1 / 0\n", ":samples", REFUSED),
    "gen_syntax_error": ("def samples(:\n", ":samples", REFUSED),
    "gen_raises_first": (
        "def samples():\n    raise ValueError('bad sample file')\n    yield\n",
        ":samples",
        REFUSED,
    ),
    "gen_raises_midway": (
        "import numpy as np\n\ndef samples():\n    for i in range(3):\n        yield [np.zeros(SHAPE, np.float32)]\n    raise RuntimeError('disk gone')\n",
        ":samples",
        REFUSED,
    ),
    "gen_yields_none": ("def samples():\n    yield None\n", ":samples", REFUSED),
    "gen_yields_string": ("def samples():\n    yield 'abc'\n", ":samples", REFUSED),
    "gen_yields_object": ("def samples():\n    yield object()\n", ":samples", REFUSED),
    "gen_wrong_key": (
        "import numpy as np\n\ndef samples():\n    yield {'nope': np.zeros(SHAPE, np.float32)}\n",
        ":samples",
        REFUSED,
    ),
    "gen_bytes_key": (
        "import numpy as np\n\ndef samples():\n    yield {b'x': np.zeros(SHAPE, np.float32)}\n",
        ":samples",
        REFUSED,
    ),
    "gen_nan": (
        "import numpy as np\n\ndef samples():\n    yield [np.full(SHAPE, np.nan, np.float32)]\n",
        ":samples",
        REFUSED,
    ),
    "gen_float64_beyond": (
        "import numpy as np\n\ndef samples():\n    yield [np.full(SHAPE, 1e300)]\n",
        ":samples",
        REFUSED,
    ),
    "gen_wrong_shape": (
        "import numpy as np\n\ndef samples():\n    yield [np.zeros((5, 7))]\n",
        ":samples",
        REFUSED,
    ),
    "gen_not_callable": ("samples = 42\n", ":samples", REFUSED),
    "gen_returns_int": ("def samples():\n    return 3\n", ":samples", REFUSED),
    "gen_needs_arguments": ("def samples(path):\n    yield []\n", ":samples", REFUSED),
    "gen_empty": ("def samples():\n    return iter(())\n", ":samples", REFUSED),
    "gen_too_many_arrays": (
        "import numpy as np\n\ndef samples():\n    yield [np.zeros(SHAPE, np.float32)] * 3\n",
        ":samples",
        REFUSED,
    ),
    "gen_exits": ("import sys\nsys.exit(3)\n", ":samples", REFUSED),
    "gen_system_exit_in_loop": (
        "def samples():\n    raise SystemExit(4)\n    yield\n",
        ":samples",
        REFUSED,
    ),
    "gen_memory_error": (
        "def samples():\n    raise MemoryError()\n    yield\n",
        ":samples",
        REFUSED,
    ),
    "gen_recursion": ("def samples():\n    return samples()\n", ":samples", REFUSED),
    "gen_object_arrays": (
        "import numpy as np\n\ndef samples():\n    yield [np.array([None] * 3, dtype=object)]\n",
        ":samples",
        REFUSED,
    ),
    "gen_numpy_warnings": (
        "import numpy as np\n\ndef samples():\n    for i in range(3):\n        x = np.log(np.zeros(SHAPE, np.float32))\n        yield [np.nan_to_num(x, neginf=0.0).astype(np.float32)]\n",
        ":samples",
        ACCEPTED,
    ),
    "gen_python_warning": (
        "import warnings\nimport numpy as np\n\ndef samples():\n    warnings.warn('careful')\n    yield [np.zeros(SHAPE, np.float32)]\n",
        ":samples",
        ACCEPTED,
    ),
    "gen_ints": (
        "import numpy as np\n\ndef samples():\n    for i in range(3):\n        yield [np.ones(SHAPE, np.int32) * i]\n",
        ":samples",
        ACCEPTED,
    ),
    "gen_good_dict": (
        "import numpy as np\n\ndef samples():\n    for i in range(3):\n        yield {'features': np.zeros(SHAPE, np.float32) + i}\n",
        ":samples",
        ACCEPTED,
    ),
}


def _generator_case(name: str, body: str, target: str, expect: frozenset[int]) -> None:
    def build(d: Path, shape: tuple[int, ...], _body=body, _target=target) -> list[str]:
        filled = _body.replace("SHAPE", repr(tuple(shape)))
        module = _module(d, filled) if _body else ""
        return ["--data", module + _target if _target.startswith(":") else _target]

    build.__name__ = name
    CASES.append(DataCase(name, build, expect, ("mlp",)))


for _name, (_body, _target, _expect) in GENERATORS.items():
    _generator_case(_name, _body, _target, _expect)
