"""Writes that never lose a file: outputs appear whole and together, or not at all.

Every output-path case of `tests/fuzz/output_cases.py` runs here; the tests below pin the issue's
findings: `--force` over an existing output followed by a failing report write lost the old
output; SIGTERM left a temporary file; a kill between the two renames left a model without its
report; a 300-character `-o` gave a traceback; and every file was written with mode 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import qtool.files
import qtool.jobs
from qtool.model import load_model, model_to_bytes
from tests.conftest import DATA, MODELS, ROOT
from tests.fuzz.judge import run_cli
from tests.fuzz.output_cases import CASES
from tests.fuzz.tasks import run_output_case

OLD_MODEL, OLD_REPORT = b"previous model", '{"previous": true}'


@pytest.mark.parametrize("name", [case.name for case in CASES])
def test_output_paths_fail_cleanly_or_write_both_files(name: str, tmp_path: Path) -> None:
    verdict = run_output_case(name, str(tmp_path))
    assert verdict.failures == {}, verdict.failures


@pytest.fixture
def old_pair(tmp_path: Path) -> tuple[Path, Path]:
    out, report = tmp_path / "m.tflite", tmp_path / "m.report.json"
    out.write_bytes(OLD_MODEL)
    report.write_text(OLD_REPORT)
    return out, report


def _quantize(out: Path, *extra: str) -> tuple[int, str]:
    argv = ["quantize", str(MODELS / "mlp.tflite"), "--data", str(DATA / "mlp_calib.npz")]
    result = run_cli([*argv, "-o", str(out), "--quiet", *extra], timeout=120)
    assert result.error is None, result.site
    return result.code, result.stderr


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _consistent(out: Path, report: Path) -> bool:
    recorded = json.loads(report.read_text())["output_model"]["sha256"]
    return recorded == hashlib.sha256(out.read_bytes()).hexdigest()


def test_force_keeps_the_old_output_when_the_report_cannot_be_written(old_pair) -> None:
    out, report = old_pair
    code, stderr = _quantize(out, "--force", "--report", str(out.parent / "missing" / "r.json"))
    assert code == 2 and "output directory does not exist" in stderr
    assert out.read_bytes() == OLD_MODEL and report.read_text() == OLD_REPORT
    assert _files(out.parent) == ["m.report.json", "m.tflite"]


def test_written_files_follow_the_umask_and_replaced_ones_keep_their_mode(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        code, _ = _quantize(tmp_path / "new.tflite")
        assert code == 0
        for name in ("new.tflite", "new.report.json"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640
        kept = tmp_path / "kept.tflite"
        kept.write_bytes(OLD_MODEL)
        kept.chmod(0o604)
        assert _quantize(kept, "--force")[0] == 0
        assert stat.S_IMODE(kept.stat().st_mode) == 0o604 and kept.read_bytes() != OLD_MODEL
        check_report = tmp_path / "audit.json"
        result = run_cli(["check", str(kept), "--format", "json", "-o", str(check_report)], 60)
        assert result.code == 0 and stat.S_IMODE(check_report.stat().st_mode) == 0o640
    finally:
        os.umask(previous)


def test_sigterm_while_files_are_staged_removes_them(old_pair, monkeypatch) -> None:
    out, report = old_pair
    check = qtool.jobs.written_model_problem

    def terminated_during_the_check(path: Path, source: bytes | None = None) -> str | None:
        assert path.parent == out.parent and path.exists()  # the model is staged
        os.kill(os.getpid(), signal.SIGTERM)
        return check(path, source)

    monkeypatch.setattr(qtool.jobs, "written_model_problem", terminated_during_the_check)
    code, stderr = _quantize(out, "--force")
    assert code == 128 + signal.SIGTERM
    assert stderr.strip().splitlines()[-1] == "qtool: terminated by SIGTERM"
    assert _files(out.parent) == ["m.report.json", "m.tflite"]
    assert out.read_bytes() == OLD_MODEL and report.read_text() == OLD_REPORT


def test_a_signal_between_the_two_renames_waits_until_both_are_done(old_pair, monkeypatch) -> None:
    out, report = old_pair
    replace = os.replace
    renamed = []

    def signalled_after_the_first(source, target) -> None:
        replace(source, target)
        renamed.append(Path(target).name)
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(qtool.files.os, "replace", signalled_after_the_first)
    code, _ = _quantize(out, "--force")
    assert renamed == ["m.report.json", "m.tflite"]  # the report first: never a lone model
    assert code == 128 + signal.SIGTERM
    assert _files(out.parent) == ["m.report.json", "m.tflite"]
    assert _consistent(out, report)


def test_sigterm_to_a_running_quantize_loses_nothing(tmp_path: Path, old_pair) -> None:
    out, report = old_pair
    model = MODELS / "cnn.tflite"
    argv = [sys.executable, "-m", "qtool", "quantize", str(model), "--synthetic"]
    process = subprocess.Popen(
        [*argv, "--samples", "64", "-o", str(out), "--force", "--quiet"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert b"Traceback" not in stderr
    assert _files(out.parent) == ["m.report.json", "m.tflite"]
    old = out.read_bytes() == OLD_MODEL
    assert old == (report.read_text() == OLD_REPORT)  # both old, or both new
    assert old or _consistent(out, report)


def test_a_name_too_long_is_one_line(tmp_path: Path) -> None:
    long = tmp_path / ("m" * 300 + ".tflite")
    code, stderr = _quantize(long)
    assert code == 2
    assert stderr.strip().splitlines() == [f"qtool: error: cannot write {long}: file name too long"]
    assert _files(tmp_path) == []


def test_a_model_litert_refuses_is_not_written(tmp_path: Path) -> None:
    """The read-back check: exit 1 with LiteRT's reason, nothing written."""
    model = load_model(MODELS / "mlp.tflite")
    model.operator_codes[0].version = 77  # no LiteRT kernel has this version
    source = tmp_path / "v77.tflite"
    source.write_bytes(model_to_bytes(model))
    out = tmp_path / "out"
    out.mkdir()
    argv = ["quantize", str(source), "--data", str(DATA / "mlp_calib.npz")]
    result = run_cli([*argv, "-o", str(out / "q.tflite"), "--quiet"], timeout=120)
    assert result.code == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"qtool: error: {out / 'q.tflite'}: the quantized model is not valid")
    assert "LiteRT refuses it" in line and "version '77'" in line
    assert _files(out) == []
