"""Model sizes on the real-model corpus: the source file, qtool's default int8 output, the output
of a `--target-sqnr 30 --allow-float` run, and TensorFlow's converter's int8 output where a
SavedModel exists (issue "Small by construction").

Every qtool run is the command line in a fresh process (`qtool quantize`, the corpus's
calibration and held-out data, the input shape the corpus names); sizes are the written files'.
A run that fails or passes its time limit is shown as such, never left out. The issue's goals
are printed with the table: the default output at most 0.65x a float16 source, 0.35x a float32
source above 1 MB and 0.45x one below; a target run never bigger than the source.

    python -m bench.size [--no-target] [--timeout SECONDS] [MODEL ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.corpus import load_manifest
from qtool.model import load_model
from qtool.model.sizes import size_breakdown

console = Console(width=170)
TARGET_DB = 30.0
MB = 1_000_000


@dataclass
class Run:
    """One `qtool quantize` of a model: the written size, or why there is none."""

    bytes: int | None
    seconds: float
    failure: str = ""


def source_kind(path: Path) -> str:
    """FLOAT16 or FLOAT32: the type holding most of the source's weights (sparse or not)."""
    parts = size_breakdown(load_model(path), path.stat().st_size).parts
    weights = {k.split()[-1]: v for k, v in parts.items() if k.startswith("weights ")}
    return max(weights, key=weights.get) if weights else "-"


def goal(kind: str, source_bytes: int) -> float | None:
    """The issue's ceiling on the default output's size, as a ratio of the source's."""
    if kind == "FLOAT16":
        return 0.65
    if kind == "FLOAT32":
        return 0.35 if source_bytes > MB else 0.45
    return None


def quantize(entry: dict, extra: list[str], timeout: float) -> Run:
    with tempfile.TemporaryDirectory() as scratch:
        output = Path(scratch) / "out.tflite"
        shapes = [
            f"{name}={','.join(map(str, shape))}" for name, shape in entry["input_shape"].items()
        ]
        command = [sys.executable, "-m", "qtool", "quantize", entry["file"], "-o", str(output)]
        command += ["--data", entry["calib"], "--holdout", entry["holdout"], "-q", *extra]
        if "note" in entry:  # the data's shape differs from the declared one
            command += [arg for shape in shapes for arg in ("--input-shape", shape)]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Run(None, timeout, f"over {timeout:.0f} s")
        seconds = time.perf_counter() - start
        if not output.exists():
            lines = (done.stderr or done.stdout).strip().splitlines()
            return Run(None, seconds, lines[-1][:60] if lines else f"exit {done.returncode}")
        return Run(output.stat().st_size, seconds)


def ratio(run: Run, source: int) -> str:
    if run.bytes is None:
        return run.failure
    return f"{run.bytes:,} ({run.bytes / source:.3f})"


def bench_size(
    names: list[str] | None = None,
    target: bool = True,
    timeout: float = 900.0,
    json_path: Path | None = None,
) -> list[dict]:
    """Print the size table of `names` (default: the whole corpus); returns its rows."""
    entries = load_manifest()
    names = names or list(entries)
    table = Table(title="sizes: source, qtool default, --target-sqnr 30 --allow-float, TF int8")
    for column in ("model", "source", "bytes", "default (ratio)", "goal", "target run (ratio)"):
        table.add_column(column, justify="left" if column in ("model", "source") else "right")
    table.add_column("TF int8 (ratio)", justify="right")
    rows = []
    for name in names:
        entry = entries[name]
        path = Path(entry["file"])
        source = path.stat().st_size
        kind = source_kind(path)
        default = quantize(entry, [], timeout)
        target_run = (
            quantize(entry, ["--target-sqnr", str(TARGET_DB), "--allow-float"], timeout)
            if target
            else Run(None, 0.0, "-")
        )
        tf_path = entry.get("baselines", {}).get("tf_int8", "")
        tf_bytes = Path(tf_path).stat().st_size if tf_path.endswith(".tflite") else None
        ceiling = goal(kind, source)
        met = (
            default.bytes is not None and ceiling is not None and default.bytes <= ceiling * source
        )
        table.add_row(
            name,
            kind,
            f"{source:,}",
            ratio(default, source),
            "-" if ceiling is None else f"{ceiling:.2f} {'met' if met else 'MISSED'}",
            ratio(target_run, source),
            "-" if tf_bytes is None else f"{tf_bytes:,} ({tf_bytes / source:.3f})",
        )
        rows.append(
            {
                "model": name,
                "source_kind": kind,
                "source_bytes": source,
                "default_bytes": default.bytes,
                "default_seconds": round(default.seconds, 2),
                "default_failure": default.failure,
                "goal_ratio": ceiling,
                "target_bytes": target_run.bytes,
                "target_seconds": round(target_run.seconds, 2),
                "target_failure": target_run.failure,
                "tf_int8_bytes": tf_bytes,
            }
        )
    console.print(table)
    if json_path is not None:
        json_path.write_text(json.dumps(rows, indent=2) + "\n")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help="corpus models (default: all)")
    parser.add_argument("--no-target", action="store_true", help="skip the --target-sqnr runs")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    bench_size(args.models, not args.no_target, args.timeout, args.json)


if __name__ == "__main__":
    main()
