"""Smoke run of the qtool command line on every corpus model (bench/corpus.py's manifest): what
a user gets from `quantize` (default), `check` of what it wrote, `calibrate`, `analyze`,
`quantize --target-sqnr 30 --allow-float` and `quantize --target tflm` (its model then run on
held-out samples in TFLite Micro's interpreter, in a child process: a kernel may abort), each
with the model's calibration and held-out data and a 10-minute limit. Writes a Markdown table:
exit code, the error line, the worst output SQNR printed, sizes in and out.

    python -m bench.smoke [--out corpus_status.md] [--runs quantize,check,...] [MODEL ...]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import load_manifest

QTOOL = Path(sys.executable).parent / "qtool"
TIMEOUT = 600
RUNS = {
    "quantize": ["quantize"],
    "check": ["check"],  # of the model quantize wrote
    "calibrate": ["calibrate"],
    "analyze": ["analyze"],
    "target-sqnr 30": ["quantize", "--target-sqnr", "30", "--allow-float"],
    "target tflm": ["quantize", "--target", "tflm"],
}
MICRO_SAMPLES = 4  # held-out samples TFLite Micro runs (in order: a stream's state carries)
# Runs in a child: TFLite Micro on the first samples of a held-out .npy, fed at the model's
# input shape; exit 0 when every invoke returned.
MICRO_CHILD = """
import sys, numpy as np
from tflite_micro.python.tflite_micro import runtime
model, data, count = sys.argv[1], np.load(sys.argv[2], mmap_mode="r"), int(sys.argv[3])
shape = [int(d) for d in sys.argv[4].split(",")]
interpreter = runtime.Interpreter.from_bytes(open(model, "rb").read(), arena_size=1 << 26)
for sample in data[:count]:
    interpreter.set_input(np.asarray(sample, np.float32).reshape(shape), 0)
    interpreter.invoke()
"""
SIZE = re.compile(r"size: ([\d,]+) -> ([\d,]+) bytes")


@dataclass
class Outcome:
    exit_code: int | None  # None: timed out
    seconds: float
    message: str  # the error line, or the worst SQNR and size


def printed_sqnrs(lines: list[str]) -> list[float]:
    """The SQNR column of the 'outputs vs float' table quantize prints (columns are set apart by
    two or more spaces), one value per output."""
    for i, line in enumerate(lines):
        header = re.split(r"\s{2,}", line.strip())
        if "SQNR dB" not in header:
            continue
        column, found = header.index("SQNR dB"), []
        for row in lines[i + 1 :]:
            cells = re.split(r"\s{2,}", row.strip())
            if not row.startswith("  ") or len(cells) <= column:
                break
            found.append(float(cells[column]))
        return found
    return []


def summary(output: str, exit_code: int | None, prints_sqnr: bool = True) -> str:
    """The line that tells what happened: qtool's error, else the worst SQNR and the size."""
    lines = [line for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("qtool: ")]
    sqnrs = printed_sqnrs(output.splitlines())
    size = SIZE.search(output)
    parts = []
    if sqnrs:
        parts.append(f"worst SQNR {min(sqnrs):.1f} dB")
    elif exit_code == 0 and prints_sqnr:
        parts.append("no SQNR printed")
    if size:
        parts.append(f"{size.group(1)} -> {size.group(2)} B")
    if errors:
        parts.append(errors[-1])
    elif exit_code not in (0, None) and lines:
        parts.append(lines[-1])
    return "; ".join(parts) or "-"


def run(run_name: str, entry: dict, work: Path) -> Outcome:
    written = work / f"{entry['name']}_int8.tflite"
    if run_name == "check":
        if not written.exists():
            return Outcome(None, 0.0, "no model from quantize to check")
        command = [str(QTOOL), "check", "--", str(written)]
    else:
        command = [str(QTOOL), *RUNS[run_name], entry["file"], "--data", entry["calib"]]
    if command[1] in ("quantize", "analyze"):
        command += ["--holdout", entry["holdout"]]
    if run_name == "target tflm":
        written = work / f"{entry['name']}_tflm.tflite"
    if command[1] == "quantize":
        command += ["-o", str(written), "--force"]
    if command[1] == "calibrate":
        command += ["-o", str(work / f"{entry['name']}_statistics.json"), "--force"]
    started = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return Outcome(None, TIMEOUT, f"timed out after {TIMEOUT} s")
    seconds = time.perf_counter() - started
    if done.returncode < 0:  # the kernel's out-of-memory killer sends SIGKILL
        return Outcome(done.returncode, seconds, f"killed by signal {-done.returncode}")
    message = summary(done.stdout + "\n" + done.stderr, done.returncode, command[1] == "quantize")
    if run_name == "analyze" and done.returncode == 0:
        message = analyze_summary(done.stdout)
    if run_name == "target tflm" and done.returncode == 0:
        message += "; " + micro_verdict(written, entry)
    return Outcome(done.returncode, seconds, message)


def micro_verdict(model: Path, entry: dict) -> str:
    """Whether TFLite Micro initialises the model and runs the first held-out samples."""
    (shape,) = entry["input_shape"].values()  # the corpus models have one input
    command = [sys.executable, "-c", MICRO_CHILD, str(model), entry["holdout"]]
    command += [str(MICRO_SAMPLES), ",".join(map(str, shape))]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return "TFLite Micro timed out"
    if done.returncode == 0:
        return f"runs in TFLite Micro ({MICRO_SAMPLES} samples)"
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    return "TFLite Micro: " + (errors[-1] if errors else f"exit {done.returncode}")


def analyze_summary(output: str) -> str:
    """analyze's estimated outputs and its worst place (the first row of its table)."""
    lines = output.splitlines()
    parts = [line.strip()[:160] for line in lines if line.startswith("outputs:")]
    for i, line in enumerate(lines):
        if line.startswith("worst places") and i + 2 < len(lines):
            parts.append("worst place: " + " ".join(lines[i + 2].split()[1:4]))
    return "; ".join(parts) or "no outputs line"


def cell(outcome: Outcome) -> str:
    if outcome.exit_code is None and outcome.seconds == 0:  # not run: what it needed is missing
        return outcome.message
    code = "timeout" if outcome.exit_code is None else f"exit {outcome.exit_code}"
    text = outcome.message.replace("|", "\\|")
    return f"{code}, {outcome.seconds:.0f} s: {text}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--out", type=Path, default=Path("corpus_status.md"))
    parser.add_argument("--runs", default=",".join(RUNS), help="which runs, comma-separated")
    args = parser.parse_args()
    entries = load_manifest()
    names = args.models or list(entries)
    runs = [r for r in RUNS if r in args.runs.split(",")]
    lines = [
        "| model | role | data sample | " + " | ".join(runs) + " |",
        "|---|---|---|" + "---|" * len(runs),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            entry = entries[name]
            cells = []
            for run_name in runs:
                outcome = run(run_name, entry, Path(tmp))
                cells.append(cell(outcome))
                print(f"{name} {run_name}: {cells[-1]}", flush=True)
            shape = "x".join(map(str, entry["data_sample_shape"]))
            if "note" in entry:  # data at the shape the model is fed at, not the declared one
                shape += f" ({entry['note']}; feed shape {entry['input_shape']})"
            lines.append(f"| {name} | {entry['role']} | {shape} | " + " | ".join(cells) + " |")
            args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
