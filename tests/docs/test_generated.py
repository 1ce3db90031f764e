"""The generated pages of docs/ are what `make docs` writes from the declarations today."""

from __future__ import annotations

import pytest

from docs.generate import DOCS, PAGES, stale_pages
from qtool.check.rules import RULES
from qtool.spec import raw_spec
from qtool.targets import target_names


@pytest.mark.parametrize("name", sorted(PAGES))
def test_generated_page_is_current(name: str) -> None:
    page = DOCS / name
    assert page.is_file() and page.read_text() == PAGES[name](), (
        f"docs/{name} is not current: run make docs"
    )


def test_stale_pages_are_found(tmp_path) -> None:
    (tmp_path / "rules.md").write_text(PAGES["rules.md"]().replace("error", "warning", 1))
    assert stale_pages(tmp_path) == ["rules.md", "ops.md"]


def test_the_pages_hold_every_declaration() -> None:
    rules, ops = PAGES["rules.md"](), PAGES["ops.md"]()
    assert all(f"\n## {rule_id}\n" in rules for rule_id in RULES)
    spec = raw_spec("int8")
    assert all(f"\n### {op}\n" in ops for op in (*spec["ops"], *spec["extended_ops"]))
    assert all(f"\n### {name}\n" in ops for name in target_names())
