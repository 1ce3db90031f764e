"""qtool reads and writes models from a bytecode-only install (as bundled apps ship it).

Both `qtool` and the `tflite` package it reads the schema from are copied, compiled to .pyc
beside where the sources were, and stripped of every .py file; a fresh interpreter then loads and
writes every fixture model with them and must produce the very bytes the normal install does.
"""

from __future__ import annotations

import compileall
import json
import shutil
import subprocess
import sys
from pathlib import Path

import tflite

import qtool
from qtool.model import load_model, model_to_bytes
from tests.conftest import MODELS, float_model_names, tf_int8_model_paths

FIXTURES = [MODELS / f"{name}.tflite" for name in float_model_names()] + tf_int8_model_paths()

SCRIPT = """
import inspect, json, sys
sys.path.insert(0, sys.argv[1])
import tflite.Model, qtool
from qtool.model import load_model, model_to_bytes
try:
    inspect.getsource(sys.modules["tflite.Model"].Model)
    source = True
except OSError:
    source = False
out = {"tflite": tflite.__file__, "qtool": qtool.__file__, "source_readable": source, "models": {}}
for path in sys.argv[2:]:
    data = model_to_bytes(load_model(path))
    out["models"][path] = data.hex()
print(json.dumps(out))
"""


def _bytecode_copy(package: Path, site: Path) -> None:
    target = site / package.name
    # symlinks=False: package data reached through a symlink (qtool/_schemas) is copied as files.
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__"))
    assert compileall.compile_dir(target, quiet=1, legacy=True)
    for source in target.rglob("*.py"):
        source.unlink()


def test_models_round_trip_without_python_sources(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for package in (Path(tflite.__file__).parent, Path(qtool.__file__).parent):
        _bytecode_copy(package, site)
    assert not list(site.rglob("*.py"))

    paths = [str(p) for p in FIXTURES]
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(site), *paths],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["tflite"].startswith(str(site)) and out["tflite"].endswith(".pyc")
    assert out["qtool"].startswith(str(site)) and out["qtool"].endswith(".pyc")
    assert out["source_readable"] is False
    for path in paths:
        assert bytes.fromhex(out["models"][path]) == model_to_bytes(load_model(path)), path
