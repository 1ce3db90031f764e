"""Bad calibration data: directories, paths and generator modules (registered into
`data_cases.CASES`)."""

from __future__ import annotations

import os
import socket
import zipfile
from pathlib import Path

from tests.fuzz.data_cases import (
    ACCEPTED,
    ANY,
    CASES,
    REFUSED,
    DataCase,
    case,
    npy_bytes,
    npy_huge_shape,
    samples,
    save,
)

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
    save(target, samples(shape), "a.npy")
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
    save(target, samples(shape), "a.npy")
    (target / "b.npy").write_bytes(b"not numpy at all")
    return ["--data", str(target)]


@case(ACCEPTED)
def dir_one_sample_per_file(d, shape):
    target = _dir(d)
    for i in range(3):
        save(target, samples(shape, 1)[0], f"{i}.npy")
    return ["--data", str(target)]


@case(ACCEPTED)
def dir_npy_and_npz(d, shape):
    target = _dir(d)
    save(target, samples(shape, 2), "a.npy")
    with zipfile.ZipFile(target / "b.npz", "w") as archive:
        archive.writestr("arr_0.npy", npy_bytes(samples(shape, 3)))
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
    save(d, samples(shape), name)
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
