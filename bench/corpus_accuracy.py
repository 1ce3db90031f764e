"""The wider real-model table: qtool's default and plain min/max against TensorFlow's converter, on
the corpus models from outside MediaPipe (wake-word front-ends and heads, basic-pitch, the Keras
models trained here; bench/corpus.py). MediaPipe's models have their own table
(bench/accuracy.py).

Each qtool figure is the command line in a fresh process with the model's calibration data
(`qtool quantize MODEL --data CALIB`), its output run in LiteRT beside the float model on the
held-out data, matched output by output through the serving signature, and the worst output's
SQNR (dB) kept (bench/litert_compare.py). TensorFlow's int8 figure is the converter's output from
the SavedModel, measured the same way when the corpus was built (the manifest's baselines).

    python -m bench.corpus_accuracy [MODEL ...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.corpus import MEDIAPIPE, load_manifest
from bench.litert_compare import signature_outputs, worst_sqnr

console = Console(width=170)
QTOOL = Path(sys.executable).parent / "qtool"
TIMEOUT = 900
RUNS = {
    "default": [],
    "minmax": ["--calibration", "minmax", "--no-bias-correction"],
}


@dataclass
class Run:
    """One qtool quantize of a corpus model: held-out worst SQNR and size, or why there is none."""

    worst_db: float | None
    bytes: int | None
    seconds: float
    failure: str = ""


def quantize(entry: dict, options: list[str], work: Path) -> Run:
    """`qtool quantize` with the corpus's calibration data, measured on its held-out data."""
    output = work / f"{entry['name']}_int8.tflite"
    command = [str(QTOOL), "quantize", entry["file"], "--data", entry["calib"], *options]
    command += ["-o", str(output), "--force", "-q", "--"]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return Run(None, None, TIMEOUT, f"timed out after {TIMEOUT} s")
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        return Run(None, None, seconds, lines[-1][:120])
    samples = np.load(entry["holdout"])
    reference = signature_outputs(Path(entry["file"]), samples)
    worst = worst_sqnr(reference, signature_outputs(output, samples))
    return Run(worst, output.stat().st_size, seconds)


def corpus_names(entries: dict[str, dict]) -> list[str]:
    """The corpus models from outside MediaPipe, in the manifest's order."""
    return [n for n, e in entries.items() if e["source"]["package"] != MEDIAPIPE.package]


def bench_corpus_accuracy(names: list[str] | None = None) -> dict[str, dict[str, Run]]:
    """Print (and return) the wider real-model table."""
    entries = load_manifest()
    names = names or corpus_names(entries)
    results: dict[str, dict[str, Run]] = {}
    table = Table(
        title="worst output SQNR (dB) on held-out data, LiteRT; sizes in bytes "
        "(corpus models from outside MediaPipe)"
    )
    columns = ("model", "role", "float B", "qtool default", "default B", "s", "minmax", "TF int8")
    for column in columns:
        table.add_column(column, justify="right")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            entry = entries[name]
            results[name] = {run: quantize(entry, opts, Path(tmp)) for run, opts in RUNS.items()}
            default, minmax = results[name]["default"], results[name]["minmax"]
            tf_int8 = entry.get("baseline_worst_sqnr_db", {}).get("tf_int8")
            tf_bytes = _size(entry.get("baselines", {}).get("tf_int8"))
            table.add_row(
                name,
                entry["role"],
                f"{entry['bytes']:,}",
                _db(default),
                f"{default.bytes:,}" if default.bytes else "-",
                f"{default.seconds:.1f}",
                _db(minmax),
                "-" if tf_int8 is None else f"{tf_int8:.2f} ({tf_bytes})",
            )
            print(f"{name}: default {_db(default)}, minmax {_db(minmax)}", flush=True)
    console.print(table)
    return results


def _db(run: Run) -> str:
    return f"{run.worst_db:.2f}" if run.worst_db is not None else f"failed: {run.failure}"


def _size(path: str | None) -> str:
    if not path or not Path(path).exists():
        return "-"
    return f"{Path(path).stat().st_size:,} B"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    args = parser.parse_args()
    bench_corpus_accuracy(args.models or None)


if __name__ == "__main__":
    main()
