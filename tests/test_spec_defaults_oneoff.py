"""One-off (removed in the next commit): the spec files with operand defaults load to exactly
the rules the fully written files of commit 06de8d0 loaded to, every scheme and profile."""

from __future__ import annotations

import json
import subprocess

import pytest

from qtool import spec as spec_module
from qtool.spec import SPEC_FILES, load_spec, raw_spec
from tests.conftest import ROOT

BEFORE = "06de8d0d640ea7d33d3a1e2c5ba30510e6fc5ae8"


def written_in_full(scheme: str) -> dict:
    text = subprocess.run(
        ["git", "show", f"{BEFORE}:schemas/{SPEC_FILES[scheme]}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    raw = json.loads(text)
    raw["operand_defaults"] = {"activation": {}, "weight": {}, "bias": {}}  # nothing to add
    return raw


@pytest.mark.parametrize("scheme", ["int8", "int16"])
@pytest.mark.parametrize("profiles", [(), ("per-tensor-fc",)])
def test_compact_files_load_as_the_full_ones(monkeypatch, scheme, profiles) -> None:
    compact = load_spec(profiles, scheme)
    monkeypatch.setattr(spec_module, "raw_spec", lambda scheme="int8": written_in_full(scheme))
    load_spec.cache_clear()
    try:
        full = load_spec(profiles, scheme)
    finally:
        load_spec.cache_clear()
    assert list(compact.ops) == list(full.ops)
    for name, rule in full.ops.items():
        assert compact.ops[name] == rule, name
    assert compact == full
    assert raw_spec(scheme)["ops"] != written_in_full(scheme)["ops"]  # the files did change
