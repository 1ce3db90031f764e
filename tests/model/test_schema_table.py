"""The shipped schema table (qtool/model/tflite_schema.json) against the `tflite` package.

The table is generated at build time from the flatc-generated classes (qtool/model/schema_gen.py);
these tests hold it to them: it is exactly what the installed package yields, the generator needs
no Python source, and every options table qtool writes reads back the same through the generated
accessors, an implementation independent of qtool's codec.
"""

from __future__ import annotations

import copy
import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tflite
from packaging.version import Version

from qtool.model import model_to_bytes
from qtool.model.reflect import schema, snake_case, union_members
from qtool.model.schema_gen import SCHEMA_FILE, conflicts, dumps, generate
from tests.model.bytecode import bytecode_only_copy
from tests.model.test_roundtrip import options_model, random_table


def test_shipped_table_is_generated_from_the_installed_tflite() -> None:
    """Exactly what the installed package yields when it is the release the table was made from
    (2.18.0, the newest); a later release of the dev extra's range must only add to it."""
    made_from = schema()["generated_from"].split()[1]
    installed = generate()
    if tflite.__version__ == made_from:
        assert SCHEMA_FILE.read_text() == dumps(installed), (
            "regenerate it: python -m qtool.model.schema_gen"
        )
    else:
        assert Version(tflite.__version__) > Version(made_from), tflite.__version__
        assert conflicts(json.loads(SCHEMA_FILE.read_text()), installed) == []


def test_a_release_that_only_adds_to_the_schema_conflicts_with_nothing() -> None:
    shipped = json.loads(SCHEMA_FILE.read_text())
    later = copy.deepcopy(shipped)
    later["enums"]["BuiltinOperator"]["NEW_OP"] = max(shipped["enums"]["BuiltinOperator"].values())
    later["enums"]["BuiltinOperator"]["NEW_OP"] += 1
    later["tables"]["NewOpOptions"] = {
        "slots": 1,
        "fields": [["Axis", 0, "scalar", "Int32", 0, None]],
    }
    conv = later["tables"]["Conv2DOptions"]
    conv["fields"].append(["NewFlag", conv["slots"], "scalar", "Bool", False, None])
    conv["slots"] += 1
    assert conflicts(shipped, later) == []


def test_a_release_that_renumbers_or_drops_conflicts() -> None:
    """tflite 2.10.0 numbers two BuiltinOptions members one lower than 2.18.0 (a member was
    inserted before them in between): a release doing that is outside the tested range."""
    shipped = json.loads(SCHEMA_FILE.read_text())
    other = copy.deepcopy(shipped)
    for member in ("UnsortedSegmentSumOptions", "ATan2Options"):
        other["enums"]["BuiltinOptions"][member] -= 1
    del other["tables"]["SignOptions"]
    other["tables"]["Conv2DOptions"]["fields"][4][4] = 2  # DilationWFactor's default
    assert conflicts(shipped, other) == [
        "Conv2DOptions.DilationWFactor: ['DilationWFactor', 4, 'scalar', 'Int32', 1, None] is now "
        "['DilationWFactor', 4, 'scalar', 'Int32', 2, None]",
        "table SignOptions is gone",
        "BuiltinOptions.UnsortedSegmentSumOptions: 121 is now 120",
        "BuiltinOptions.ATan2Options: 122 is now 121",
    ]


def test_generator_reads_no_source(tmp_path: Path) -> None:
    site = tmp_path / "site"
    bytecode_only_copy(Path(tflite.__file__).parent, site)
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]); import json, tflite; "
        "from qtool.model.schema_gen import generate; "
        "assert tflite.__file__.endswith('.pyc'); print(json.dumps(generate()))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(site)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == generate()  # what the same package yields from source


def _read_back(data: bytes, member: str, slot: int):
    model = sys.modules["tflite.Model"].Model.GetRootAs(data, 0)
    op = model.Subgraphs(0).Operators(0)
    union = op.BuiltinOptions() if slot == 1 else op.BuiltinOptions2()
    table = getattr(importlib.import_module(f"tflite.{member}"), member)()
    table.Init(union.Bytes, union.Pos)
    return table


@pytest.mark.parametrize(("union", "slot"), [("BuiltinOptions", 1), ("BuiltinOptions2", 2)])
def test_written_options_read_back_through_the_generated_accessors(union: str, slot: int) -> None:
    rng = np.random.default_rng(1)
    checked = 0
    for member in union_members(union).values():
        options = random_table(member, rng)
        table = _read_back(model_to_bytes(options_model(member, options, slot)), member, slot)
        for accessor, _, kind, scalar, _, _ in schema()["tables"][member]["fields"]:
            value = options.get(snake_case(accessor))
            if value is None:
                continue
            if kind == "scalar":
                got = getattr(table, accessor)()
                want = np.float32(value) if scalar == "Float32" else value
                assert got == want, (member, accessor)
            elif kind == "scalar_vector":
                got = getattr(table, accessor + "AsNumpy")()
                assert np.array_equal(got, value), (member, accessor)
            elif kind == "string":
                assert getattr(table, accessor)().decode() == value, (member, accessor)
            else:
                continue
            checked += 1
    assert checked > 50
