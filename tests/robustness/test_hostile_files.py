"""No file lost or overwritten (issue 21): every file a run reads is an input no output may
replace, whatever spelling reaches it (`..`, a symbolic link, a hard link), and outputs are
created exclusively without --force, so two runs never both write the same output.

Found by trying: `-o gen.py --force` with `--data gen.py:samples` replaced the user's generator
with model bytes; `Quantized.save(input_path, force=True)` overwrote the input model; `--report
d/../out.tflite` with `-o out.tflite` exited 0 and the report was lost (so did `--html`); two
concurrent runs with the same `-o` and no `--force` both exited 0.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import qtool
from qtool import files
from qtool.errors import UsageError
from tests.conftest import DATA, MODELS
from tests.fuzz.judge import run_cli

GENERATOR = """\
import numpy as np

def samples():
    rows = np.load({data!r})["serving_default_features:0"][:8]
    for row in rows:
        yield [row[None]]
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder with the mlp model, its data, a generator script and a custom-op module."""
    shutil.copy(MODELS / "mlp.tflite", tmp_path / "mlp.tflite")
    shutil.copy(DATA / "mlp_calib.npz", tmp_path / "calib.npz")
    (tmp_path / "gen.py").write_text(GENERATOR.format(data=str(tmp_path / "calib.npz")))
    (tmp_path / "myops.py").write_text("# registers no kernel\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # --custom-ops imports from sys.path
    return tmp_path


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _quantize(*args: str):
    return run_cli(["quantize", "mlp.tflite", "--quiet", *args], timeout=300)


@pytest.mark.parametrize(
    "args",
    [
        # The generator script named by --data, also through `..` and a link.
        ("--data", "gen.py:samples", "-o", "gen.py", "--force"),
        ("--data", "gen.py:samples", "-o", "sub/../gen.py", "--force"),
        ("--data", "gen.py:samples", "-o", "gen_link.py", "--force"),
        ("--data", "gen.py:samples", "--report", "gen.py", "--force"),
        ("--data", "gen.py:samples", "--html", "gen.py", "--force"),
        # A module of the current directory, imported by name.
        ("--data", "gen:samples", "-o", "gen.py", "--force"),
        # The custom-op module.
        ("--data", "calib.npz", "--custom-ops", "myops", "-o", "myops.py", "--force"),
        # The data file through a hard link, and the model itself through `..`.
        ("--data", "calib.npz", "-o", "calib_hardlink.npz", "--force"),
        ("--data", "calib.npz", "--report", "sub/../mlp.tflite", "--force"),
    ],
)
def test_no_output_replaces_a_file_the_run_reads(project: Path, args: tuple[str, ...]) -> None:
    os.symlink("gen.py", project / "gen_link.py")
    os.link(project / "calib.npz", project / "calib_hardlink.npz")
    before = _contents(project)
    result = _quantize(*args)
    assert result.code == 2, (result.stdout, result.stderr)
    assert "refusing to overwrite the input file" in result.stderr
    assert len(result.stderr.splitlines()) == 1
    assert _contents(project) == before


def test_a_file_read_only_once_the_work_began_is_not_replaced_either(project: Path) -> None:
    """A module imported by a dotted name from elsewhere on sys.path cannot be told from the
    command line: it is recorded as it is imported, and the write that would replace it is
    refused before anything is put in place."""
    package = project / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    shutil.move(project / "gen.py", package / "rows.py")
    os.symlink(package / "rows.py", project / "alias.py")
    before = _contents(project)
    result = _quantize("--data", "pkg.rows:samples", "-o", "alias.py", "--force")
    assert result.code == 2 and "refusing to overwrite the input file" in result.stderr
    assert _contents(project) == before


@pytest.mark.parametrize("option", ["--report", "--html"])
def test_outputs_that_are_one_file_through_dotdot_are_refused(project: Path, option: str) -> None:
    before = _contents(project)
    result = _quantize("--data", "calib.npz", "-o", "out.tflite", option, "sub/../out.tflite")
    assert result.code == 2 and "must be written to different files" in result.stderr
    assert _contents(project) == before


def _samples() -> np.ndarray:
    return np.load(DATA / "mlp_calib.npz")["serving_default_features:0"][:16]


def test_save_never_replaces_the_input_model(tmp_path: Path) -> None:
    model = tmp_path / "mlp.tflite"
    shutil.copy(MODELS / "mlp.tflite", model)
    os.link(model, tmp_path / "same.tflite")
    original = model.read_bytes()
    result = qtool.quantize_model(model, _samples())
    for target in (model, tmp_path / "same.tflite", tmp_path / "x" / ".." / "mlp.tflite"):
        (tmp_path / "x").mkdir(exist_ok=True)
        with pytest.raises(UsageError, match="refusing to overwrite the input file"):
            result.save(target, force=True)
    assert model.read_bytes() == original
    with pytest.raises(UsageError, match="must be written to different files"):
        result.save(tmp_path / "m.tflite", report=tmp_path / "x" / ".." / "m.tflite")
    result.save(tmp_path / "m.tflite")  # elsewhere it writes
    assert (tmp_path / "m.tflite").read_bytes() == result.model_bytes


def test_an_output_created_meanwhile_by_another_run_is_not_replaced(tmp_path: Path) -> None:
    """Without overwrite the last step is exclusive: the file another run put there stays, the
    files this commit created are removed again, and no temporary is left."""
    report, model = tmp_path / "m.report.json", tmp_path / "m.tflite"
    staged = [
        files.stage(report, "{}", overwrite=False),
        files.stage(model, b"mine", overwrite=False),
    ]
    model.write_bytes(b"the other run's model")
    with pytest.raises(UsageError, match="already exists"):
        files.commit(*staged)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.tflite"]
    assert model.read_bytes() == b"the other run's model"


def test_a_commit_never_replaces_a_file_read_since_staging(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    staged = files.stage(target, b"output")
    target.write_bytes(b"input")
    with files.recording_inputs():
        files.note_input(target)
        with pytest.raises(UsageError, match="refusing to overwrite the input file"):
            files.commit(staged)
    assert target.read_bytes() == b"input"
    assert list(tmp_path.iterdir()) == [target]
