"""The guard around every command: whatever happens, an exit code and at most one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from qtool.cli.guard import EXIT_INTERNAL, run_guarded
from qtool.errors import DataError
from tests.conftest import DATA, MODELS


def _outcome(capsys, invoke, debug: bool = False) -> tuple[int, list[str]]:
    with pytest.raises(SystemExit) as caught:
        run_guarded(invoke, debug=lambda: debug)
    return caught.value.code, capsys.readouterr().err.strip().splitlines()


def _bug() -> None:
    {}["missing"]


def test_an_unexpected_exception_is_one_line_exit_3(capsys) -> None:
    code, lines = _outcome(capsys, _bug)
    assert code == EXIT_INTERNAL
    assert lines == [
        "qtool: internal error: KeyError: 'missing' (rerun with --debug for the traceback)"
    ]


def test_debug_adds_the_traceback(capsys) -> None:
    code, lines = _outcome(capsys, _bug, debug=True)
    assert code == EXIT_INTERNAL
    assert lines[0] == "Traceback (most recent call last):" and "_bug" in "\n".join(lines)
    assert lines[-1] == "qtool: internal error: KeyError: 'missing'"


def test_a_library_error_keeps_its_exit_code(capsys) -> None:
    def refuse() -> None:
        raise DataError("x.npy: no such file")

    assert _outcome(capsys, refuse) == (2, ["qtool: error: x.npy: no such file"])


def test_an_interrupt_python_would_ignore_still_interrupts(capsys) -> None:
    """A signal whose exception lands where Python ignores exceptions (here a finaliser; in
    the fuzz campaign an at-fork hook of logging) printed "Exception ignored in ..." with a
    traceback, and the command went on to exit 0."""

    class Finalised:
        def __del__(self) -> None:
            raise KeyboardInterrupt

    def command() -> str:
        Finalised()  # finalised at once; Python reports its exception as unraisable
        return "finished"

    assert _outcome(capsys, command) == (130, ["qtool: interrupted"])


def test_python_warnings_are_one_line_and_numpy_stays_quiet(capsys) -> None:
    import warnings

    import numpy as np

    def noisy() -> None:
        np.log(np.zeros(3))  # a RuntimeWarning without the guard
        warnings.warn("the sensor is old\nsecond line", UserWarning, stacklevel=1)

    assert run_guarded(noisy, debug=lambda: False) is None
    assert capsys.readouterr().err.splitlines() == [
        "qtool: warning: UserWarning: the sensor is old"
    ]


def _native_write(text: bytes) -> None:
    os.write(2, text)  # what LiteRT's C++ logging does


def test_native_writes_to_descriptor_2_are_discarded_and_python_stderr_kept(capfd) -> None:
    def noisy() -> None:
        _native_write(b"INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n")
        print("progress line", file=sys.stderr)

    assert run_guarded(noisy, debug=lambda: False) is None
    assert capfd.readouterr().err == "progress line\n"
    assert run_guarded(noisy, debug=lambda: True) is None  # --debug shows everything
    assert "INFO: Created" in capfd.readouterr().err
    _native_write(b"after\n")  # descriptor 2 is back
    assert capfd.readouterr().err == "after\n"


def test_litert_logs_nothing_on_the_terminal(tmp_path: Path) -> None:
    """LiteRT printed `INFO: Created TensorFlow Lite XNNPACK delegate for CPU.` on every run
    it calibrated or analysed with."""
    pytest.importorskip("ai_edge_litert")
    argv = [sys.executable, "-m", "qtool", "analyze", str(MODELS / "mlp.tflite")]
    argv += ["--data", str(DATA / "mlp_calib.npz"), "--engine", "litert", "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, "")


_SLOW_START = """
import importlib.abc, sys, time

class SlowCommandLine(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "qtool.cli":
            print("importing", flush=True)
            time.sleep(30)
        return None

sys.meta_path.insert(0, SlowCommandLine())
sys.argv = ["qtool", "--version"]
from qtool.entry import main
main()
"""


def test_a_signal_before_the_command_line_is_loaded_is_one_line() -> None:
    # The fuzz campaign's SIGINT 0.03 s after start: a KeyboardInterrupt traceback from the
    # imports, before the guard. The entry point handles signals from its first line.
    process = subprocess.Popen(
        [sys.executable, "-c", _SLOW_START],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline() == "importing\n"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert (process.returncode, stderr) == (130, "qtool: interrupted\n")


@pytest.mark.parametrize(
    "command",
    [
        ["inspect", str(MODELS / "cnn.tflite"), "--json", "--ops"],
        ["check", "--list-rules"],
    ],
)
def test_a_reader_that_goes_away_ends_the_command_quietly(command: list[str]) -> None:
    # `qtool ... | head`: the pipe closes before qtool writes; the end is SIGPIPE's (141), with
    # nothing on stderr, neither a traceback nor an internal error.
    process = subprocess.Popen(
        [sys.executable, "-m", "qtool", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    assert stderr == ""


_EXITS = """
import atexit, sys
from qtool.entry import _exit_now
atexit.register(lambda: print("handler ran", flush=False))
print("output", end=" ")  # buffered: the exit flushes it
_exit_now({code})
"""


@pytest.mark.parametrize(
    ("code", "status", "stderr"),
    [("None", 0, ""), ("0", 0, ""), ("2", 2, ""), ("'no room'", 1, "no room\n")],
)
def test_the_quick_exit_keeps_python_s_status_handlers_and_output(
    code: str, status: int, stderr: str
) -> None:
    # The entry point skips Python's freeing of every object at exit (80 ms after a
    # quantization), not what Python's exit does before that.
    done = subprocess.run(
        [sys.executable, "-c", _EXITS.format(code=code)], capture_output=True, text=True
    )
    assert (done.returncode, done.stdout, done.stderr) == (status, "output handler ran\n", stderr)


def test_a_command_s_exit_status_and_temporaries_survive_the_quick_exit(tmp_path: Path) -> None:
    # `check` on a float model: findings, status 1; quantize onto a directory: status 2, one
    # line, nothing left beside it.
    found = subprocess.run(
        [sys.executable, "-m", "qtool", "check", str(MODELS / "cnn.tflite")], capture_output=True
    )
    assert found.returncode == 1
    out = tmp_path / "int8.tflite"
    out.mkdir()  # a directory where the model should go
    failed = subprocess.run(
        [
            sys.executable,
            "-m",
            "qtool",
            "quantize",
            str(MODELS / "cnn.tflite"),
            "--data",
            str(DATA / "cnn_calib.npz"),
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 2 and failed.stderr.startswith("qtool: error: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["int8.tflite"]
