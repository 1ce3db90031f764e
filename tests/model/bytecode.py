"""A package as bundled apps ship it: compiled to .pyc beside where its sources were, no .py."""

from __future__ import annotations

import compileall
import shutil
from pathlib import Path


def bytecode_only_copy(package: Path, site: Path) -> Path:
    """Copy `package` into `site`, compile it, delete every .py; returns the copy."""
    target = site / package.name
    # symlinks=False: package data reached through a symlink (qtool/_schemas) is copied as files.
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
    assert compileall.compile_dir(target, quiet=1, legacy=True)
    for source in target.rglob("*.py"):
        source.unlink()
    return target
