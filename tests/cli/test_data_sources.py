"""`--data` generators as a user names them from the shell, run by the installed console script
with no PYTHONPATH: a module of the current directory, a module inside a package, and a file
path, whose folder is importable as `python path/to/file.py` makes it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.cli.helpers import run_script
from tests.conftest import DATA, MODELS

GENERATOR = """\
import numpy as np

def samples():
    with np.load({data!r}) as data:
        rows = data[data.files[0]][:{count}]
    for row in rows:
        yield [row[None]]
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder holding the model and one generator of each kind (each yields its own count)."""
    shutil.copy(MODELS / "mlp.tflite", tmp_path / "mlp.tflite")
    data = str(DATA / "mlp_calib.npz")
    (tmp_path / "calib_gen.py").write_text(GENERATOR.format(data=data, count=3))
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "calib.py").write_text(GENERATOR.format(data=data, count=4))
    scripts = tmp_path / "path" / "to"
    scripts.mkdir(parents=True)
    (scripts / "rows.py").write_text(GENERATOR.format(data=data, count=5))
    # Imports its sibling module and defines a dataclass (with string annotations, which the
    # dataclass resolves through sys.modules), as a script run by python may.
    (scripts / "file.py").write_text(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "from rows import samples as all_rows\n\n"
        "@dataclass\n"
        "class Take:\n"
        "    count: int = 5\n\n"
        "def function():\n"
        "    yield from list(all_rows())[: Take().count]\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("source", "samples"),
    [
        ("calib_gen:samples", 3),
        ("mypkg.calib:samples", 4),
        ("path/to/file.py:function", 5),
        ("{workdir}/path/to/file.py:function", 5),
    ],
)
def test_generator_forms_from_the_console_script(workdir: Path, source: str, samples: int) -> None:
    source = source.format(workdir=workdir)
    result = run_script(
        workdir, "calibrate", "mlp.tflite", "--data", source, "-o", "stats.json", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["samples"] == samples
