"""Small hostile inputs cost bounded work, and inputs LiteRT loads never crash qtool (issue 21).

Found by trying: a 1.1 MB flatbuffer whose 20,000 tensor entries share one table with a 1 MiB
name drove `check` past 4 GB; an .npz with unused 1 GiB members was decompressed whole; mutually
recursive CALL_ONCE subgraphs killed quantize, analyze, calibrate and `check --reference` with
SIGSEGV, and passed `check --target xnnpack`; an input truncated while qtool read it ended in
SIGBUS (inputs were memory-mapped); thirty 1 GiB activations were found only when memory ran
out; a list lookup per output or per signature made `check` quadratic; a `metadata_buffer`
index past the buffer list ended quantize in `internal error: KeyError`, whose hint `rerun with
--debug` was `No such option` after the command.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from qtool.model import load_model, save_model
from qtool.model.build import GraphBuilder
from tests.conftest import DATA, MODELS, ROOT
from tests.fuzz.crafted import (
    CALLS,
    npz_with_unused_members,
    recursive_model,
    shared_offsets_model,
)
from tests.fuzz.judge import run_cli

MLP, MLP_INT8 = MODELS / "mlp.tflite", MODELS / "tf_int8" / "mlp_int8.tflite"
CALIB = DATA / "mlp_calib.npz"


def _run(argv: list[str], cwd: Path, limit_bytes: int | None = None, timeout: float = 300):
    """`python -m qtool ARGV` in its own process (a crash must not take the tests with it)."""
    preexec = None
    if limit_bytes is not None:
        import resource

        def preexec() -> None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "qtool", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=preexec,
    )


def test_shared_flatbuffer_offsets_are_refused_within_a_bounded_decode(tmp_path: Path) -> None:
    path = tmp_path / "shared.tflite"
    path.write_bytes(shared_offsets_model())
    for argv in (["check", path.name], ["inspect", path.name]):
        # 1 GiB of address space is plenty for the refusal; decoding it all needed 20 GB.
        result = _run(argv, tmp_path, limit_bytes=1 << 30, timeout=120)
        assert result.returncode in (1, 2), result.stderr
        assert "decodes to more than" in result.stdout + result.stderr
        assert "MemoryError" not in result.stdout + result.stderr


def test_unused_npz_members_are_never_decompressed(tmp_path: Path, monkeypatch) -> None:
    from qtool.calibrate import npyfile

    features = np.load(CALIB)["serving_default_features:0"]
    path = npz_with_unused_members(
        tmp_path / "data.npz", {"serving_default_features:0": features}, unused=2
    )
    opened = []
    original = npyfile._member_array
    monkeypatch.setattr(
        npyfile, "_member_array", lambda a, info: opened.append(info.filename) or original(a, info)
    )
    argv = ["quantize", str(MLP), "--data", str(path), "-o", str(tmp_path / "q.tflite")]
    result = run_cli([*argv, "--samples", "16", "--quiet"], timeout=300)
    assert result.code == 0, result.stderr  # the corrupt member is never read
    assert set(opened) == {"serving_default_features:0.npy"}


RECURSION_RUNS = {
    "quantize": ["quantize", "float.tflite", "--data", str(CALIB), "-o", "q.tflite"],
    "analyze": ["analyze", "float.tflite", "--data", str(CALIB)],
    "calibrate": ["calibrate", "float.tflite", "--data", str(CALIB), "-o", "s.json"],
    "check --target": ["check", "int8.tflite", "--format", "json", "--target", "xnnpack"],
    "check --reference": [
        *("check", "int8.tflite", "--format", "json"),
        *("--reference", str(MLP), "--data", str(CALIB)),
    ],
}


@pytest.mark.parametrize(
    ("kind", "command"),
    [("CALL_ONCE", command) for command in RECURSION_RUNS]
    + [(kind, "quantize") for kind in CALLS if kind != "CALL_ONCE"]
    + [(kind, "check --reference") for kind in CALLS if kind != "CALL_ONCE"],
)
def test_subgraphs_that_call_each_other_are_invalid_before_any_engine_runs(
    tmp_path: Path, kind: str, command: str
) -> None:
    save_model(recursive_model(MLP, kind), tmp_path / "float.tflite")
    save_model(recursive_model(MLP_INT8, kind), tmp_path / "int8.tflite")
    result = _run(RECURSION_RUNS[command], tmp_path)  # a process: it died of SIGSEGV
    if command.startswith("check"):
        assert result.returncode == 1, (result.returncode, result.stderr)
        findings = json.loads(result.stdout)["models"][0]["findings"]
        assert any(
            f["rule"] == "QT-MODEL-INVALID" and "recursive" in f["message"] for f in findings
        )
    else:
        assert result.returncode == 2, (result.returncode, result.stderr)
        (line,) = result.stderr.splitlines()[-1:]
        assert "recursive calls never finish" in line, line


TRUNCATING = """\
import sys
import numpy as np
from qtool.calibrate import sample_sources as datasets
from qtool.entry import main

datasets.READ_CHUNK_BYTES = 1024  # 8 samples a block: the file is read in several
convert = datasets._as_samples
blocks = []

def truncate_after_the_first_block(array, spec, where):
    blocks.append(where)
    if len(blocks) == 1:
        with open({npy!r}, "r+b") as handle:
            handle.truncate(200)
    return convert(array, spec, where)

datasets._as_samples = truncate_after_the_first_block
sys.argv = ["qtool", *{argv!r}]
main()
"""

TRUNCATE_MODEL = """\
from pathlib import Path
import numpy as np

def samples():
    Path({model!r}).write_bytes(b"")  # the model is emptied once qtool has read it
    rows = np.load({data!r})["serving_default_features:0"][:16]
    for row in rows:
        yield [row[None]]
"""


def test_an_npy_truncated_while_it_is_read_is_one_error(tmp_path: Path) -> None:
    npy = tmp_path / "x.npy"
    np.save(npy, np.load(CALIB)["serving_default_features:0"])
    argv = ["quantize", str(MLP), "--data", str(npy), "-o", str(tmp_path / "q.tflite"), "--quiet"]
    script = tmp_path / "run.py"
    script.write_text(TRUNCATING.format(npy=str(npy), argv=argv))
    result = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 2, (result.returncode, result.stderr)  # not SIGBUS (-7)
    (line,) = result.stderr.splitlines()
    assert line.startswith("qtool: error: ") and "truncated while qtool read it" in line


def test_a_model_emptied_during_the_run_does_not_affect_it(tmp_path: Path) -> None:
    """The report describes the model quantized, not what the file holds by the end (the
    report read the file again: a removed model was an internal error)."""
    model = tmp_path / "m.tflite"
    shutil.copy(MLP, model)
    (tmp_path / "gen.py").write_text(TRUNCATE_MODEL.format(model=str(model), data=str(CALIB)))
    result = _run(["quantize", "m.tflite", "--data", "gen.py:samples", "-o", "q.tflite"], tmp_path)
    assert result.returncode == 0, (result.returncode, result.stderr)  # not SIGBUS (-7)
    assert load_model(tmp_path / "q.tflite")
    report = json.loads((tmp_path / "q.report.json").read_text())["input_model"]
    original = MLP.read_bytes()
    assert report["sha256"] == hashlib.sha256(original).hexdigest()
    assert report["size_bytes"] == len(original)


def _huge_activations(layers: int) -> GraphBuilder:
    builder = GraphBuilder()
    x = builder.input("x", [1, 16384, 16384])  # 1 GiB of float32 a sample
    for layer in range(layers):
        x = builder.op("RELU", [x], output_shape=[1, 16384, 16384], name=f"relu{layer}")
    builder.finish([x])
    return builder


def test_calibration_that_cannot_fit_in_memory_is_refused_up_front(
    tmp_path: Path, monkeypatch
) -> None:
    from qtool.calibrate import memory

    save_model(_huge_activations(30).model, tmp_path / "huge.tflite")
    monkeypatch.setattr(memory, "available_memory", lambda: 16 << 30)
    argv = ["quantize", str(tmp_path / "huge.tflite"), "--synthetic", "--samples", "2"]
    result = run_cli([*argv, "-o", str(tmp_path / "q.tflite")], timeout=120)
    assert result.code == 2, result.stderr
    (line,) = result.stderr.splitlines()[-1:]
    assert "needs at least 31.0 GiB of memory" in line and "16.0 GiB available" in line


def test_metadata_buffer_indices_past_the_buffers_are_dropped(tmp_path: Path) -> None:
    model = load_model(MLP)
    model.metadata_buffer = [579, -1, 1]
    save_model(model, tmp_path / "meta.tflite")
    argv = ["quantize", str(tmp_path / "meta.tflite"), "--data", str(CALIB)]
    result = run_cli([*argv, "-o", str(tmp_path / "q.tflite"), "--quiet", "--debug"], timeout=300)
    assert result.code == 0, result.stderr
    assert load_model(tmp_path / "q.tflite").metadata_buffer == [1]


def test_debug_is_accepted_after_the_command_and_shows_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "gen.py").write_text(
        textwrap.dedent(
            """\
            def samples():
                raise OSError("camera offline")
                yield
            """
        )
    )
    argv = ["quantize", str(MLP), "--data", "gen.py:samples", "-o", "q.tflite"]
    result = _run([*argv, "--debug"], tmp_path)
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "camera offline" in result.stderr


@pytest.mark.parametrize("shape", ["signatures", "unpack"])
def test_validating_100000_entries_stays_linear(shape: str) -> None:
    """A hang guard, not a timing target (bench/wide.py measures check as a whole): a list
    lookup per entry made the validator take minutes here (100,000 signatures, one UNPACK with
    100,000 outputs); linear, it takes a fraction of a second."""
    from bench.wide import signatures, unpack
    from qtool.model.validate import model_problems
    from tests.fuzz.judge import deadline

    model = (signatures if shape == "signatures" else unpack)(100_000)
    with deadline(20):
        assert model_problems(model) == []
