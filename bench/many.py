"""10,000 samples through `qtool calibrate` on a development model, against plain inference.

The samples: the model's 128 calibration and held-out crops, then noisy copies of them (sigma
0.02, clipped to the data's range), one `.npy` written once under the cache (iris_landmark: 492
MB). Timed as users run it, fresh processes, alternating:

- `qtool calibrate` of FEW and of MANY samples of that file (wall, CPU with children, peak
  memory, the last progress line);
- LiteRT's plain inference of the same samples (XNNPACK on two threads, a sample per invoke,
  read from the mapped file): the reference.

The issue's bound: the MANY-sample calibration within 1.3x of MANY plain inferences plus the
fixed cost, where the fixed cost is the FEW-sample calibration minus FEW inferences.

    python -m bench.many [MODEL]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.real_models import CACHE, make_data, model_path

FEW, MANY = 100, 10_000
REPEATS = 2
console = Console(width=160)

_INFERENCE = """
import sys, time, numpy as np
from ai_edge_litert.interpreter import Interpreter
samples = np.load(sys.argv[2], mmap_mode="r")[: int(sys.argv[3])]
interpreter = Interpreter(model_path=sys.argv[1], num_threads=2)
interpreter.allocate_tensors()
index = interpreter.get_input_details()[0]["index"]
for i in range(samples.shape[0]):
    interpreter.set_tensor(index, np.ascontiguousarray(samples[i : i + 1]))
    interpreter.invoke()
"""


def many_copies(name: str) -> Path:
    """MANY samples for `name` (see the module docstring), written once."""
    path = CACHE / "data" / f"{name}_{MANY}.npy"
    if path.exists():
        return path
    calibration, holdout = make_data(name)
    crops = np.concatenate([np.load(calibration), np.load(holdout)])
    rng = np.random.default_rng(MANY)
    low, high = float(crops.min()), float(crops.max())
    out = np.lib.format.open_memmap(
        path.with_suffix(".part.npy"), "w+", np.float32, (MANY, *crops.shape[1:])
    )
    for start in range(0, MANY, len(crops)):
        count = min(len(crops), MANY - start)
        noise = rng.normal(0, 0.02, crops[:count].shape).astype(np.float32)
        out[start : start + count] = (
            crops[:count] if start == 0 else np.clip(crops[:count] + noise, low, high)
        )
    out.flush()
    del out
    path.with_suffix(".part.npy").rename(path)
    return path


def _run(command: list[str]) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak MiB, last stderr line) of one process."""
    with tempfile.TemporaryFile("w+") as errors:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        errors.seek(0)
        lines = [line for line in errors.read().splitlines() if line.strip()]
    if process.returncode:
        raise RuntimeError(f"{command[:4]} failed: {lines[-1:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024, lines[-1] if lines else ""


def bench_many(name: str = "iris_landmark") -> None:
    console.print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    data = many_copies(name)
    model = str(model_path(name))
    found: dict[tuple[str, int], list[tuple[float, float, float, str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(REPEATS):
            for count in (FEW, MANY):
                calibrate = [
                    sys.executable,
                    "-m",
                    "qtool",
                    "calibrate",
                    model,
                    "--data",
                    str(data),
                    "--samples",
                    str(count),
                    "-o",
                    str(Path(tmp) / "stats.json"),
                    "--force",
                ]
                inference = [sys.executable, "-c", _INFERENCE, model, str(data), str(count)]
                for what, command in (("calibrate", calibrate), ("inference", inference)):
                    found.setdefault((what, count), []).append(_run(command))
    table = Table(
        title=f"{name}: `qtool calibrate` against LiteRT's plain inference, fresh processes, "
        f"median of {REPEATS} (CPU: the process's own; peak: its resident memory)"
    )
    for column in ("run", "samples", "wall s", "CPU s", "peak MiB", "last progress line"):
        table.add_column(column, justify="right" if column != "last progress line" else "left")
    median = {k: statistics.median(w for w, *_ in runs) for k, runs in found.items()}
    for (what, count), runs in found.items():
        table.add_row(
            what,
            f"{count:,}",
            f"{median[(what, count)]:.2f}",
            f"{statistics.median(c for _, c, *_ in runs):.2f}",
            f"{max(p for *_, p, _ in runs):.0f}",
            runs[-1][3][-70:] if what == "calibrate" else "",
        )
    console.print(table)
    fixed = median[("calibrate", FEW)] - median[("inference", FEW)]
    bound = median[("inference", MANY)] + fixed
    console.print(
        f"fixed cost {fixed:.2f} s; {MANY:,} samples: calibrate {median[('calibrate', MANY)]:.2f}"
        f" s against inference + fixed cost {bound:.2f} s: "
        f"{median[('calibrate', MANY)] / bound:.2f}x (issue 25: <= 1.3x)"
    )
    console.print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    bench_many(*sys.argv[1:2])
