"""The built wheel, installed outside the repository, does what the checkout does: every data
file it reads at run time is packaged, and nothing reaches back into the source tree.

It is installed by pip into an environment of its own, as a user's `pip install` would, so that
its `qtool` console script runs with no PYTHONPATH, from a folder outside the repository. Its
dependencies (numpy, click, LiteRT...) come from the test environment through a path file,
a plain sys.path entry: that environment's own editable qtool is never loaded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import venv
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.check.validators import validate_junit, validate_sarif
from tests.conftest import DATA, MODELS, ROOT
from tests.report.pages import PageOutline
from tests.test_readme_examples import EXAMPLE_NAMES, EXAMPLES

CNN, CNN_DATA = str(MODELS / "cnn.tflite"), str(DATA / "cnn_calib.npz")


@dataclass(frozen=True)
class Installed:
    python: Path  # the environment's interpreter
    script: Path  # its `qtool` console script
    site: Path  # where pip put the package


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """The wheel built from the checkout, pip-installed into a new environment."""
    work = tmp_path_factory.mktemp("wheel")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    subprocess.run([*pip_wheel, "-w", str(work / "dist"), str(ROOT)], check=True)
    (wheel,) = (work / "dist").glob("qtool-*.whl")
    environment = work / "env"
    venv.EnvBuilder(with_pip=False).create(environment)
    python = environment / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run(python, work, "-c", purelib).stdout.strip())
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # --ignore-installed: pip neither looks at nor touches the test environment's qtool.
    pip_install = ["-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    installing = run(python, work, *pip_install, "--ignore-installed", str(wheel))
    assert installing.returncode == 0, installing.stderr
    return Installed(python, environment / "bin" / "qtool", site)


def run(program: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`program ARGS` in `cwd` as a user's shell runs it: no PYTHONPATH."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    return subprocess.run(
        [str(program), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def succeeds(result: subprocess.CompletedProcess, codes: tuple[int, ...] = (0,)) -> str:
    assert result.returncode in codes, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return result.stdout


def test_the_installed_package_is_the_wheel(installed: Installed, tmp_path: Path) -> None:
    found = succeeds(run(installed.python, tmp_path, "-c", "import qtool; print(qtool.__file__)"))
    assert found.strip().startswith(str(installed.site)), found
    assert installed.script.read_text().startswith(f"#!{installed.python}\n")
    assert succeeds(run(installed.script, tmp_path, "--version")).startswith("qtool, version ")


def test_wheel_quantizes_checks_analyzes_and_calibrates(installed: Installed, tmp_path) -> None:
    out = tmp_path / "cnn_int8.tflite"
    steps = [
        ("quantize", CNN, "--data", CNN_DATA, "-o", str(out), "--activations", "int16", "-q"),
        ("check", str(out), "--target", "tflm", "-q"),
        ("analyze", CNN, "--data", CNN_DATA, "--top", "3", "-q"),
        ("inspect", str(out), "--json"),
    ]
    for step in steps:
        succeeds(run(installed.script, tmp_path, *step), codes=(0, 1))
    api = (
        "import qtool, numpy as np; "
        f"x = np.load({CNN_DATA!r})['serving_default_image:0']; "
        f"print(qtool.quantize_model({CNN!r}, x).compliant)"
    )
    assert succeeds(run(installed.python, tmp_path, "-c", api)).strip().endswith("True")


GENERATORS = f"""\
import numpy as np

def _rows():
    with np.load({CNN_DATA!r}) as data:
        return data["serving_default_image:0"]

def first():
    yield from ([x[None]] for x in _rows()[:24])

def rest():
    yield from ([x[None]] for x in _rows()[24:])

def every():
    yield from ([x[None]] for x in _rows())
"""


@pytest.fixture(scope="module")
def merged(installed: Installed, tmp_path_factory) -> Path:
    """The console script, in a folder holding a generator module: calibrate two shards and
    all the data, then quantize from the merged shards (with the HTML page) and from the whole."""
    work = tmp_path_factory.mktemp("shards")
    (work / "calib_gen.py").write_text(GENERATORS)
    for shard in ("first", "rest", "every"):
        calibrate = ("calibrate", CNN, "--data", f"calib_gen:{shard}", "-o", f"{shard}.json")
        succeeds(run(installed.script, work, *calibrate, "-q"))
    shards = ("--statistics", "first.json", "--statistics", "rest.json")
    quantize = ("quantize", CNN, *shards, "-o", "merged.tflite", "--html", "merged.html", "-q")
    succeeds(run(installed.script, work, *quantize))
    whole = ("quantize", CNN, "--statistics", "every.json", "-o", "whole.tflite", "-q")
    succeeds(run(installed.script, work, *whole))
    return work


def test_console_script_merges_calibration_shards_of_a_generator(merged: Path) -> None:
    assert json.loads((merged / "first.json").read_text())
    assert (merged / "merged.tflite").read_bytes() == (merged / "whole.tflite").read_bytes()


def test_quantize_writes_the_html_page(merged: Path) -> None:
    page = (merged / "merged.html").read_text()
    outline = PageOutline(page)
    assert {"outputs", "layers", "ranges"} <= set(outline.svgs)
    assert all(link.startswith("#") for link in outline.links)


def test_check_writes_junit_and_sarif_files(installed: Installed, merged: Path) -> None:
    for fmt, name in (("junit", "audit.xml"), ("sarif", "audit.sarif")):
        check = ("check", "merged.tflite", "--format", fmt, "-o", name, "--fail-on", "warning")
        succeeds(run(installed.script, merged, *check), codes=(0, 1))
    junit = (merged / "audit.xml").read_text()
    assert ET.fromstring(junit).find("testsuite").get("name") == "merged.tflite"
    validate_junit(junit)
    sarif = json.loads((merged / "audit.sarif").read_text())
    (result,) = sarif["runs"]
    assert result["tool"]["driver"]["name"] == "qtool"
    validate_sarif(sarif)  # last: a skip where the schema's package is missing (Python 3.10)


@pytest.mark.parametrize("number", range(len(EXAMPLES)), ids=EXAMPLE_NAMES)
def test_readme_example_runs_on_the_installed_package(
    installed: Installed, tmp_path: Path, number: int
) -> None:
    """Each Python example of the docs as a script, in a folder outside the repository holding the files it
    names (as the repository root does), run by the installed package."""
    example = EXAMPLES[number]
    for name in set(re.findall(r"fixtures/[\w/.-]+", example)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "build").mkdir()
    installed_check = f"import qtool\nassert qtool.__file__.startswith({str(installed.site)!r})\n"
    (tmp_path / "example.py").write_text(installed_check + example)
    succeeds(run(installed.python, tmp_path, "example.py"))


def test_the_wheel_carries_the_c_kernels(installed: Installed, tmp_path: Path) -> None:
    # Built by pip from pyproject.toml's ext-modules (optional only where no C compiler is):
    # calibration's one pass and the numpy engine's kernels.
    probe = (
        "from qtool.calibrate.histogram import one_pass; "
        "from qtool.runtime.kernels import native; "
        "print(one_pass is not None, native.kernels is not None)"
    )
    assert succeeds(run(installed.python, tmp_path, "-c", probe)).strip() == "True True"
