"""The Python examples of README.md and docs/ (```python blocks; ```py ones are sketches needing a
cluster or your files) run as they are from the repository root."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from tests.docs.pages import PAGES

FOUND = [
    (f"{page.relative_to(ROOT)} example {number}", code)
    for page in PAGES
    for number, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), re.S), 1)
]
EXAMPLE_NAMES = [name for name, _ in FOUND]
EXAMPLES = [code for _, code in FOUND]


def test_the_docs_have_examples() -> None:
    assert any(name.startswith("README.md") for name in EXAMPLE_NAMES)
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize("number", range(len(EXAMPLES)), ids=EXAMPLE_NAMES)
def test_readme_example_runs(number: int, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)
    (ROOT / "build").mkdir(exist_ok=True)
    exec(compile(EXAMPLES[number], EXAMPLE_NAMES[number], "exec"), {"__name__": "readme"})
