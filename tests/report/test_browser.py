"""The HTML pages in a real browser: Debian's headless chromium loads each one from a file,
runs its script and paints it, and the console stays silent (no script error, no SVG attribute
it cannot parse, no load the page's Content-Security-Policy had to block).

chromium is required, never skipped: `make test` installs it when missing (its `browser` step).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from qtool.jobs import AnalyzeJob, analyze_file
from tests.conftest import DATA, MODELS
from tests.report.pages import awkward_quantization

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
)
RENDERED = 'data-rendered="yes"'  # set by the last line of the page's script


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    browser = shutil.which("chromium")
    assert browser, "these tests need Debian's chromium: `make test` installs it (make browser)"
    profile = tmp_path / "profile"
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def console(run: subprocess.CompletedProcess) -> list[str]:
    """What the page wrote to the browser console (errors, warnings, blocked loads)."""
    return [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def load(tmp_path: Path, page: str, name: str) -> tuple[Path, str, list[str]]:
    """(the page's file, its DOM after the scripts ran, what it wrote to the console)."""
    path = tmp_path / f"{name}.html"
    path.write_text(page, encoding="utf-8")
    dom = chromium(tmp_path, "--dump-dom", path.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    return path, dom.stdout, console(dom)


def screenshot(tmp_path: Path, path: Path) -> tuple[int, list[str]]:
    """(the size in bytes of a 1200x1600 screenshot of the page, the console lines)."""
    picture = path.with_suffix(".png")
    shot = chromium(tmp_path, "--window-size=1200,1600", f"--screenshot={picture}", path.as_uri())
    assert shot.returncode == 0 and picture.exists(), shot.stderr[-2000:]
    return picture.stat().st_size, console(shot)


@pytest.fixture(scope="module")
def blank_size(tmp_path_factory: pytest.TempPathFactory) -> int:
    """The screenshot size of an empty page: a painted page's is many times larger."""
    tmp_path = tmp_path_factory.mktemp("blank")
    path, _, _ = load(tmp_path, "<!DOCTYPE html><html><body></body></html>", "blank")
    return screenshot(tmp_path, path)[0]


def render(tmp_path: Path, page: str, name: str) -> tuple[str, list[str], int]:
    """(DOM after the scripts ran, console lines of both runs, screenshot size in bytes)."""
    path, dom, messages = load(tmp_path, page, name)
    size, more = screenshot(tmp_path, path)
    return dom, messages + more, size


def test_the_quantize_page_renders_without_console_errors(tmp_path: Path, blank_size: int) -> None:
    dom, messages, size = render(tmp_path, awkward_quantization().html(), "quantize")
    assert messages == []
    assert RENDERED in dom
    assert dom.count("<svg") >= 6 + 11  # a chart per section, a histogram per activation
    assert size > 10 * blank_size


def test_the_analyze_page_renders_without_console_errors(tmp_path: Path, blank_size: int) -> None:
    page = tmp_path / "analysis.html"
    job = AnalyzeJob(
        model_path=str(MODELS / "mixed_ops.tflite"),
        data=(str(DATA / "mixed_ops_calib.npz"),),
        html_path=str(page),
    )
    analyze_file(job)
    dom, messages, size = render(tmp_path, page.read_text(encoding="utf-8"), "analysis")
    assert messages == []
    assert RENDERED in dom and "<svg" in dom
    assert size > 10 * blank_size


def test_the_browser_check_sees_errors_and_blocked_loads(tmp_path: Path) -> None:
    """The checks above can fail: a script error, an SVG attribute chromium cannot parse and
    an external image the page's policy blocks all reach the console, and the render marker is
    missing when the script stops early."""
    page = awkward_quantization().html()
    broken = page.replace(
        "<footer>",
        '<img src="https://example.com/x.png"><svg><rect width="wide"/></svg><footer>',
    ).replace("(function () {", "(function () {\n  notDefined();")
    _, dom, messages = load(tmp_path, broken, "broken")
    assert RENDERED not in dom
    assert any("notDefined" in line for line in messages), messages
    assert any("example.com" in line for line in messages), messages
    assert any("<rect> attribute width" in line for line in messages), messages
