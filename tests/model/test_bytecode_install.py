"""qtool reads and writes models from a bytecode-only install (as bundled apps ship it), and
without the `tflite` package: the schema is data (qtool/model/tflite_schema.json).

The qtool package is copied, compiled to .pyc beside where the sources were and stripped of every
.py file; a fresh interpreter in which `import tflite` fails then loads and writes every fixture
model and must produce the very bytes the normal install does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import qtool
from qtool.model import load_model, model_to_bytes
from tests.conftest import MODELS, float_model_names, tf_int8_model_paths
from tests.model.bytecode import bytecode_only_copy

FIXTURES = [MODELS / f"{name}.tflite" for name in float_model_names()] + tf_int8_model_paths()

SCRIPT = """
import importlib.abc, json, sys

class NoTflite(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tflite" or name.startswith("tflite."):
            raise ImportError(f"{name} is not installed")

sys.meta_path.insert(0, NoTflite())
sys.path.insert(0, sys.argv[1])
import qtool
from qtool.model import load_model, model_to_bytes
out = {"qtool": qtool.__file__, "models": {}}
for path in sys.argv[2:]:
    out["models"][path] = model_to_bytes(load_model(path)).hex()
out["tflite_imported"] = any(m == "tflite" or m.startswith("tflite.") for m in sys.modules)
print(json.dumps(out))
"""


def test_models_round_trip_from_bytecode_without_tflite(tmp_path: Path) -> None:
    site = tmp_path / "site"
    bytecode_only_copy(Path(qtool.__file__).parent, site)
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
    assert out["qtool"] == str(site / "qtool" / "__init__.pyc")
    assert out["tflite_imported"] is False
    for path in paths:
        assert bytes.fromhex(out["models"][path]) == model_to_bytes(load_model(path)), path
