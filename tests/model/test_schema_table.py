"""The shipped schema table (qtool/model/tflite_schema.json) against the `tflite` package.

The table is generated at build time from the flatc-generated classes (qtool/model/schema_gen.py);
these tests hold it to them: it is exactly what the installed package yields, the generator needs
no Python source, and every options table qtool writes reads back the same through the generated
accessors, an implementation independent of qtool's codec.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tflite

from qtool.model import model_to_bytes
from qtool.model.reflect import schema, snake_case, union_members
from qtool.model.schema_gen import SCHEMA_FILE, dumps, generate
from tests.model.bytecode import bytecode_only_copy
from tests.model.test_roundtrip import options_model, random_table


def test_shipped_table_is_generated_from_the_installed_tflite() -> None:
    assert SCHEMA_FILE.read_text() == dumps(generate()), (
        "regenerate it: python -m qtool.model.schema_gen"
    )
    assert schema()["generated_from"].startswith(f"tflite {tflite.__version__} ")


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
    assert json.loads(run.stdout) == json.loads(SCHEMA_FILE.read_text())


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
