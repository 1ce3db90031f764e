"""qtool against ai-edge-quantizer on the Keras models of the corpus: full-integer quantization
from a float .tflite and calibration samples, time and accuracy, in the same run.

Each tool runs as a user runs it, in a fresh process with the model's calibration data:
`qtool quantize MODEL --data CALIB -o OUT` and ai-edge-quantizer's `static_wi8_ai8` recipe
(int8 weights and activations: `bench/aeq_peer.py --calibration`, in its own venv,
build/aeqvenv). Wall seconds are the best of `REPEATS` runs, the tools alternating so that the
load of the machine touches both alike; CPU seconds are the child's user + system time of that
run. Accuracy: the worst output's SQNR (dB) against the float model on the held-out data, both
in LiteRT (bench/litert_compare.py). Issue 25 asks qtool's time to be at or below the peer's
(median over the models).

    python -m bench.aeq_time [MODEL ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.corpus import load_manifest
from bench.litert_compare import signature_outputs, worst_sqnr
from bench.modes import aeq_python

QTOOL = Path(sys.executable).parent / "qtool"
ROOT = Path(__file__).resolve().parent.parent
REPEATS = 2
TIMEOUT = 900


@dataclass
class Run:
    """One tool on one model: best wall seconds, that run's CPU seconds, held-out worst SQNR,
    bytes written; or why it wrote nothing."""

    wall: float | None = None
    cpu: float | None = None
    worst_db: float | None = None
    bytes: int | None = None
    failure: str = ""


def _timed(command: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """Wall and CPU seconds of a command run to completion in a child process."""
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, done


def commands(entry: dict, out: Path) -> dict[str, tuple[list[str], Path]]:
    """Each tool's command line for one corpus model, with the model file it writes."""
    model, calib = entry["file"], entry["calib"]
    ours, theirs = out / "q.tflite", out / "a.tflite"
    return {
        "qtool": (
            [str(QTOOL), "quantize", model, "--data", calib, "-o", str(ours), "--force"],
            ours,
        ),
        "ai-edge-quantizer": (
            [
                str(aeq_python()),
                "-m",
                "bench.aeq_peer",
                model,
                str(theirs),
                "static_wi8_ai8",
                "--calibration",
                calib,
            ],
            theirs,
        ),
    }


def measure(entry: dict, out: Path) -> dict[str, Run]:
    """Both tools on one model: timed `REPEATS` times alternating, then judged on held-out data."""
    tools = commands(entry, out)
    runs = {tool: Run() for tool in tools}
    for _ in range(REPEATS):
        for tool, (command, written) in tools.items():
            if runs[tool].failure:
                continue
            wall, cpu, done = _timed(command)
            if done.returncode not in (0, 1) or not written.exists():
                lines = [line for line in done.stderr.splitlines() if line.strip()] or ["?"]
                runs[tool].failure = lines[-1][:120]
                continue
            if runs[tool].wall is None or wall < runs[tool].wall:
                runs[tool].wall, runs[tool].cpu = wall, cpu
    samples = np.load(entry["holdout"])
    reference = signature_outputs(Path(entry["file"]), samples)
    for tool, (_, written) in tools.items():
        if runs[tool].failure or not written.exists():
            continue
        runs[tool].bytes = written.stat().st_size
        runs[tool].worst_db = worst_sqnr(reference, signature_outputs(written, samples))
        written.unlink()
    return runs


def _seconds(run: Run) -> str:
    return run.failure or f"{run.wall:.2f} ({run.cpu:.2f} CPU)"


def _accuracy(run: Run) -> str:
    return "-" if run.worst_db is None else f"{run.worst_db:.2f} dB, {run.bytes:,} B"


def bench_aeq_time(models: list[str] | None = None) -> list[float]:
    """Print the table; returns qtool's wall time over the peer's, per model both ran."""
    entries = load_manifest()
    names = models or [name for name in entries if name.startswith("keras_")]
    table = Table(title="full-integer quantization from a .tflite: wall s (CPU s), held-out")
    for column in ("model", "qtool s", "AEQ s", "qtool / AEQ", "qtool", "AEQ"):
        table.add_column(column, justify="right")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            runs = measure(entries[name], Path(tmp))
            ours, theirs = runs["qtool"], runs["ai-edge-quantizer"]
            ratio = "-"
            if ours.wall is not None and theirs.wall is not None:
                ratios.append(ours.wall / theirs.wall)
                ratio = f"{ratios[-1]:.2f}x"
            table.add_row(
                name, _seconds(ours), _seconds(theirs), ratio, _accuracy(ours), _accuracy(theirs)
            )
            print(f"{name}: {ratio}", flush=True)
    if ratios:
        table.add_row("median", "", "", f"{statistics.median(ratios):.2f}x", "", "")
    Console(width=200).print(table)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    bench_aeq_time(parser.parse_args().models)


if __name__ == "__main__":
    main()
