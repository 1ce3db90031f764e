"""The README's Python examples (```python blocks; ```py ones are sketches needing a cluster or
your files) run as they are from the repository root."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT

EXAMPLES = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 2


@pytest.mark.parametrize("number", range(len(EXAMPLES)))
def test_readme_example_runs(number: int, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    (ROOT / "build").mkdir(exist_ok=True)
    exec(compile(EXAMPLES[number], f"README example {number}", "exec"), {"__name__": "readme"})
