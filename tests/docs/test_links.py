"""Every link of README.md and docs/ resolves: a relative link to a file of the repository (and
to one of its headings when it names an anchor); anything else only to a public http(s) URL."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.docs.pages import FENCE, INLINE_CODE, PAGES, anchors, slug

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
AUTOLINK = re.compile(r"<([a-z][a-z0-9+.-]*:[^>\s]+)>")


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every Markdown link and autolink outside code."""
    found, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
        if fenced:
            continue
        prose = INLINE_CODE.sub("", line)
        found += [(number, m.group(1)) for m in (*LINK.finditer(prose), *AUTOLINK.finditer(prose))]
    return found


def problem(page: Path, target: str) -> str | None:
    """What is wrong with a link from `page` to `target`, or None."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target):
        return None if re.match(r"https?://[\w.-]+\.[a-z]{2,}(/|$)", target) else "not public"
    path, _, anchor = target.partition("#")
    if path.startswith("/"):
        return "an absolute path"
    file = (page.parent / path).resolve() if path else page
    if not file.is_relative_to(ROOT):
        return "outside the repository"
    if not file.exists():
        return "no such file"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"no heading with anchor #{anchor} in {file.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    wrong = [
        f"{page.relative_to(ROOT)}:{line}: {target}: {why}"
        for line, target in links(page)
        if (why := problem(page, target)) is not None
    ]
    assert not wrong, "\n".join(wrong)


def test_the_links_are_read() -> None:
    """The link reader finds links of every kind, and the checks can fail."""
    readme = ROOT / "README.md"
    targets = [target for _, target in links(readme)]
    assert any(t.startswith("https://") for t in targets) and "docs/quantize.md" in targets
    assert any("#" in t for t in targets)
    assert problem(readme, "../shared/reference/int8-spec.md") == "outside the repository"
    assert problem(readme, "docs/missing.md") == "no such file"
    assert problem(readme, "docs/check.md#nowhere").startswith("no heading")
    assert problem(readme, "file:///etc/passwd") == "not public"
    assert slug("Did accuracy regress? `--reference`") == "did-accuracy-regress---reference"


def test_every_page_says_what_it_covers() -> None:
    """Each page opens with its title, then one paragraph saying what it covers."""
    for page in PAGES:
        lines = page.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[1] == "" and lines[2], page
