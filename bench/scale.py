"""Cost per megabyte as models grow: 1, 10, 100 and 300 MB float models, FULLY_CONNECTED stacks
with random weights built by qtool's own model writer (no Keras), each quantized in a fresh
process (16 samples, min/max, no bias correction: the pipeline without the auto choice's
candidates, whose cost grows with data, not size), the fastest of REPEATS runs kept, and timed
per phase: read, calibrate (LiteRT
or the numpy engine, with the evaluation fold), plan, rewrite, estimate, write, and check (read
back and audit). Target (issue 25): the cost per MB flat within 1.5x from 10 to 300 MB, peak
memory (above the process's own after its imports) under 3x the model's size. The largest
LiteRT child's peak is shown beside it.

    python -m bench.scale [MB ...]
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

SIZES_MB = (1, 10, 100, 300)
WIDTH = 512  # a 512 x 512 float32 layer: 1 MiB of weights
SAMPLES = 16
# Runs per size, the fastest kept: on a loaded 2-core machine one run's total moves by 1.5x.
REPEATS = 3
ROOT = Path(__file__).resolve().parent.parent
console = Console(width=190)
_PHASES = (
    ("qtool.quantize.quantizer", "", "collect", "calibrate"),
    ("qtool.quantize.planner", "Planner", "plan", "plan"),
    ("qtool.quantize.quantizer", "", "rewritten", "rewrite"),
    ("qtool.quantize.planner", "Planner", "accuracy", "estimate"),
)
COLUMNS = ("read", "calibrate", "plan", "rewrite", "estimate", "write", "check")


def build(megabytes: int, folder: Path) -> tuple[Path, Path]:
    """A stack of `megabytes` FULLY_CONNECTED layers of WIDTH x WIDTH random weights (ReLU
    between them) and SAMPLES random inputs, written once under `folder`."""
    from qtool.model import save_model
    from qtool.model.build import GraphBuilder

    path, data = folder / f"fc_{megabytes}mb.tflite", folder / f"fc_{megabytes}mb.npy"
    if path.exists() and data.exists():
        return path, data
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(megabytes)
    builder = GraphBuilder()
    x = builder.input("x", [1, WIDTH])
    for layer in range(megabytes):
        weights = rng.normal(0, 1 / np.sqrt(WIDTH), (WIDTH, WIDTH)).astype(np.float32)
        bias = rng.normal(0, 0.01, WIDTH).astype(np.float32)
        x = builder.fully_connected(x, weights, bias, f"fc{layer}", activation=1)
    save_model(builder.finish([x]), path)
    np.save(data, rng.normal(0, 1, (SAMPLES, WIDTH)).astype(np.float32))
    return path, data


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    """This process's CPU seconds (every thread; LiteRT's children apart): steadier than the
    wall clock on a machine other jobs load."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_peak_mib() -> float:
    """The largest peak resident size (VmHWM) among this process's living children (LiteRT's
    child processes, which run the float model on the folds), in MiB; 0 where /proc cannot
    tell."""
    peaks = [0.0]
    for task in Path("/proc/self/task").glob("*"):
        try:
            pids = (task / "children").read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) / 1024)
    return max(peaks)


def measure(path: Path, data: Path, output: Path) -> dict[str, float]:
    """Seconds per phase of one quantization of `path`, and memory (MiB): the peak, and the
    resident size after the imports (run in a fresh process: `--one`)."""
    from bench.phases import phase_timeline
    from qtool.calibrate import load_dataset, model_inputs
    from qtool.check.audit import audit_model
    from qtool.model import load_model, model_to_bytes
    from qtool.quantize import QuantizeOptions, quantize_loaded
    from qtool.runtime.litert import litert_available

    if litert_available():
        import ai_edge_litert.interpreter  # noqa: F401  (its import in the base, as qtool's)
    base = _peak_mib()
    cpu = _cpu_seconds()
    times: dict[str, float] = {}
    started = time.perf_counter()
    model = load_model(path)
    times["read"] = time.perf_counter() - started
    dataset = load_dataset([str(data)], model_inputs(model))
    options = QuantizeOptions(calibration="minmax", bias_correction=False)
    with phase_timeline(_PHASES) as spent:
        started = time.perf_counter()
        result = quantize_loaded(model, dataset, options)
        quantize = time.perf_counter() - started
    times.update(spent)
    times["other"] = quantize - sum(spent.values())
    started = time.perf_counter()
    output.write_bytes(model_to_bytes(result.model))
    times["write"] = time.perf_counter() - started
    del result, model
    started = time.perf_counter()
    audit_model(load_model(output))
    times["check"] = time.perf_counter() - started
    return {
        **times,
        "cpu": _cpu_seconds() - cpu,
        "base_mib": base,
        "peak_mib": _peak_mib(),
        "child_mib": _children_peak_mib(),
    }


def _total(found: dict[str, float]) -> float:
    return sum(found[c] for c in (*COLUMNS, "other") if c in found)


def bench_scale(sizes: tuple[int, ...] = SIZES_MB) -> None:
    folder = ROOT / "build" / "scale"
    console.print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    rows = {}
    for megabytes in sizes:
        # Built in a process of its own: a process's peak memory survives exec, so a child
        # started from one that held the model would report the builder's peak.
        subprocess.run(
            [sys.executable, "-m", "bench.scale", "--build", str(megabytes)], check=True, cwd=ROOT
        )
        path, data = build(megabytes, folder)
        runs = []
        for _ in range(REPEATS):
            done = subprocess.run(
                [sys.executable, "-m", "bench.scale", "--one", str(path), str(data)],
                check=True,
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            runs.append(json.loads(done.stdout.splitlines()[-1]))
        fastest = min(runs, key=_total)
        # CPU seconds move less with the load than the wall clock, but the fastest run's are
        # not the typical ones: the median of the runs.
        fastest["cpu_median"] = float(np.median([run["cpu"] for run in runs]))
        rows[megabytes] = (path.stat().st_size / 2**20, fastest)
    table = Table(
        title=f"quantize by model size (FULLY_CONNECTED stacks, 16 samples, minmax, fastest of "
        f"{REPEATS} runs): seconds per MB of model per phase; memory: peak above the process's own after its imports, in "
        "multiples of the model's size; a LiteRT child's whole peak, likewise"
    )
    columns = ("total s", "s per MB", "CPU s", "peak MiB", "memory / size", "child peak / size")
    for column in ("model MB", *COLUMNS, *columns):
        table.add_column(column, justify="right")
    for size, found in rows.values():
        total = _total(found)
        table.add_row(
            f"{size:.1f}",
            *(f"{found.get(c, 0.0) / size:.3f}" for c in COLUMNS),
            f"{total:.2f}",
            f"{total / size:.3f}",
            f"{found['cpu']:.2f}",
            f"{found['peak_mib']:.0f}",
            f"{(found['peak_mib'] - found['base_mib']) / size:.2f}x",
            f"{found['child_mib'] / size:.2f}x",
        )
    console.print(table)
    # The fixed cost (imports aside: LiteRT's start, the children) weighs on the small models'
    # cost per MB; what each further MB costs, between consecutive sizes, is the flat one.
    for what, seconds in (
        ("seconds (fastest run)", _total),
        ("CPU seconds (median run)", lambda found: found["cpu_median"]),
    ):
        totals = [(size, seconds(found)) for size, found in rows.values()]
        marginal = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in itertools.pairwise(totals)]
        if marginal:
            steps = ", ".join(f"{m:.3f}" for m in marginal)
            spread = max(marginal) / min(marginal) if min(marginal) > 0 else float("inf")
            console.print(
                f"{what} per further MB between consecutive sizes: {steps} "
                f"(largest / smallest {spread:.2f})"
            )
    console.print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--build"]:
        build(int(sys.argv[2]), ROOT / "build" / "scale")
    elif sys.argv[1:2] == ["--one"]:
        model_file, data_file = Path(sys.argv[2]), Path(sys.argv[3])
        found = measure(model_file, data_file, model_file.with_suffix(".int8.tflite"))
        print(json.dumps(found))
    else:
        bench_scale(tuple(int(a) for a in sys.argv[1:]) or SIZES_MB)
