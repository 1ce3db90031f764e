"""Names from models and file names reach terminals and logs as data only (issue 21).

Found by trying: tensor and subgraph names were written raw on a terminal, so a name could clear
the screen, print a green `0 errors, 0 warnings` and conceal the real findings (SGR 8); OSC 8
hyperlinks and window titles got through; a subgraph name with `[/]` ended in `internal error:
MarkupError`, and `[link=...]` became a real link. In a log, a subgraph name with a newline
injected a whole fake line (inspect's table titles), and `check --format sarif -o` wrote the
`qtool: error:` line of an unreadable file raw, so its name could inject a `::error` workflow
command. Terminal runs go through a pseudo-terminal, as a person sees them.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.check.conftest import write_model_files
from tests.conftest import DATA, MODELS
from tests.fuzz.hostile_names import (
    PAYLOADS,
    Output,
    hostile_file_name,
    hostile_model,
    injected,
    run_in_terminal,
    run_piped,
)
from tests.fuzz.judge import run_cli


def _every_payload(base: str) -> str:
    return base + "".join(PAYLOADS.values())


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An audited model and a float model whose every name holds every payload, a model file
    named with them, and an unreadable file named with them."""
    from qtool.model import load_model, save_model

    folder = tmp_path_factory.mktemp("hostile")
    for name, source in (
        ("int8.tflite", write_model_files(folder)["errors"]),
        ("float.tflite", MODELS / "mlp.tflite"),
    ):
        model = load_model(source)
        for s, subgraph in enumerate(model.subgraphs):
            subgraph.name = _every_payload(f"sg{s}")
            for t, tensor in enumerate(subgraph.tensors):
                tensor.name = _every_payload(f"t{t}")
        save_model(model, folder / name)
    # A file name holds at most 255 bytes: the payloads that matter most in a path.
    parts = ("clear", "title", "bidi", "markup_close", "workflow_command", "carriage_return")
    named = "m" + "".join(PAYLOADS[part] for part in parts).replace("/", "_") + ".tflite"
    shutil.copy(folder / "int8.tflite", folder / named)
    (folder / ("bad" + named)).write_bytes(b"not a model")
    # Keyed by position: the input's own name is hostile now.
    np.savez(
        folder / "calib.npz", arr_0=np.load(DATA / "mlp_calib.npz")["serving_default_features:0"]
    )
    return folder


def _names(folder: Path) -> tuple[str, str]:
    named = next(p.name for p in folder.iterdir() if p.name.startswith("m\x1b"))
    return named, "bad" + named


COMMANDS = {
    "check": lambda n: ["check", "int8.tflite", n[0], n[1]],
    "check quiet": lambda n: ["check", "--quiet", "int8.tflite", n[0]],
    "check sarif -o": lambda n: ["check", "--format", "sarif", "-o", "out.sarif", n[0], n[1]],
    "check junit -o": lambda n: ["check", "--format", "junit", "-o", "out.xml", n[1]],
    "check list-rules": lambda n: ["check", "--list-rules"],
    "inspect": lambda n: ["inspect", "--ops", "int8.tflite"],
    "inspect named file": lambda n: ["inspect", n[0]],
    "inspect unreadable": lambda n: ["inspect", n[1]],
    "quantize": lambda n: [
        "quantize",
        "float.tflite",
        "--data",
        "calib.npz",
        "-o",
        "q.tflite",
        "--force",
        "--samples",
        "8",
        "--engine",
        "numpy",
    ],
    "analyze": lambda n: [
        "analyze",
        "float.tflite",
        "--data",
        "calib.npz",
        "--samples",
        "16",
        "--engine",
        "numpy",
    ],
}


@pytest.mark.parametrize("where", ["terminal", "log"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_hostile_names_are_shown_escaped(folder: Path, command: str, where: str) -> None:
    argv = COMMANDS[command](_names(folder))
    output = run_in_terminal(argv, folder) if where == "terminal" else _in_a_log(argv, folder)
    assert not output.hung
    assert output.code in (0, 1, 2), output.data[-400:]
    assert not injected(output.data, terminal=where == "terminal"), (
        injected(output.data, where == "terminal"),
        output.data[-2000:],
    )
    if command not in ("check list-rules", "inspect unreadable", "check junit -o"):
        assert b"\\x1b[2J" in output.data  # the name is there, escaped


def _in_a_log(argv: list[str], folder: Path) -> Output:
    """The command in-process, its output captured as a CI log captures it (no terminal)."""
    previous = os.getcwd()
    os.chdir(folder)
    try:
        result = run_cli(argv, timeout=300)
    finally:
        os.chdir(previous)
    return Output(result.code, (result.stdout + result.stderr).encode(), result.hung)


def test_reports_written_to_files_hold_no_control_characters(folder: Path) -> None:
    """JUnit is XML, where control characters are not even allowed: they are escaped there."""
    named, bad = _names(folder)
    import xml.etree.ElementTree as ET

    from tests.check.validators import validate_junit

    output = run_piped(["check", "--format", "junit", "-o", "out.xml", named, bad], folder)
    assert output.code == 2
    text = (folder / "out.xml").read_text()
    validate_junit(text)
    ET.fromstring(text)
    assert not any(ch in text for ch in "\x1b\x07\x9b\u202e\r\b")


def test_random_hostile_names_in_every_command(tmp_path: Path) -> None:
    """A seeded sample of the fuzz campaign's terminal kind."""
    rng = random.Random(2111)
    model = hostile_model(MODELS / "tf_int8" / "mlp_int8.tflite", tmp_path / "h.tflite", rng)
    named = tmp_path / hostile_file_name(rng)
    shutil.copy(model, named)
    for argv in (["check", named.name], ["inspect", "--ops", named.name]):
        for run, terminal in ((run_in_terminal, True), (run_piped, False)):
            output = run(argv, tmp_path, timeout=120)
            assert not injected(output.data, terminal), (argv, output.data[-1500:])
