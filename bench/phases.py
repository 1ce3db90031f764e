"""Where calibration and quantization spend their time, per phase, on the MediaPipe models.

Calibration (what `qtool calibrate` gathers: histograms and layer-input means), in one process,
64 and 512 samples, the runs of each figure alternating so that drift in the machine's speed
touches them alike:

- inference: LiteRT's plain inference with XNNPACK (outputs only, one sample per invoke, two
  threads): the baseline every ratio is taken against;
- exposure: LiteRT with every activation made readable (qtool's runner), nothing observed,
  minus inference;
- observation: the statistics of `qtool calibrate`, minus exposure and inference.

The marginal calibration throughput is that of the 448 samples between 64 and 512 (the
fixed cost of a run cancels), against inference's over the same samples (issue 25: >= 0.6x).
Process CPU seconds are printed next to wall seconds: on a loaded machine the wall clock shows
the load, the CPU seconds what the work costs.

`qtool quantize` (64 samples): an in-process timeline of its phases (load and prepare,
equalization, calibration with the evaluation fold, the auto choice, plan and rewrite, the
accuracy estimate, audit, report, read-back and write) and the wall and CPU time of the whole
command in a fresh process (issue 25: < 2 s wall). `make bench` compiles qtool's bytecode first:
where PYTHONDONTWRITEBYTECODE is set, each run would compile its sources again (0.15 s of CPU).

    python -m bench.phases [MODEL ...]
"""

from __future__ import annotations

import importlib
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.real_models import CACHE, make_data, model_path
from qtool.calibrate import activation_tensors, load_dataset, model_inputs
from qtool.calibrate.collect import calibration_statistics
from qtool.calibrate.statistics import new_subgraph_statistics
from qtool.model import load_model
from qtool.prepare import prepare_float_model
from qtool.runtime.litert import XnnpackRunner

MODELS = ("palm_detection_full", "pose_landmark_full", "face_landmark", "hand_landmark_full")
FEW, MANY = 64, 512
REPEATS = 3
console = Console(width=190)


def many_samples(name: str) -> Path:
    """MANY samples for a model: its calibration and held-out photographs' crops (128), then
    three copies with Gaussian noise (sigma 0.02, clipped to the data's range), shuffled;
    written once under the cache."""
    path = CACHE / "data" / f"{name}_{MANY}.npy"
    if path.exists():
        return path
    calibration, holdout = make_data(name)
    crops = np.concatenate([np.load(calibration), np.load(holdout)])
    rng = np.random.default_rng(25)
    low, high = float(crops.min()), float(crops.max())
    copies = [crops] + [
        np.clip(crops + rng.normal(0, 0.02, crops.shape).astype(np.float32), low, high)
        for _ in range(MANY // len(crops) - 1)
    ]
    samples = np.concatenate(copies)[rng.permutation(MANY)]
    np.save(path, samples)
    return path


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def calibration_phases(name: str) -> dict[str, dict[int, tuple[float, float]]]:
    """Per phase ("inference", "exposed", "calibrate") and sample count: the median wall and
    the least CPU seconds of REPEATS alternating runs."""
    from ai_edge_litert.interpreter import Interpreter

    path = model_path(name)
    data = many_samples(name)
    samples = np.load(data)
    model = prepare_float_model(load_model(path)).model
    interpreter = Interpreter(model_content=path.read_bytes(), num_threads=2)
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    tensors = activation_tensors(model)
    ordered = new_subgraph_statistics(model, 0, tensors, True).ordered_tensors
    runner = XnnpackRunner(model, tensors, ordered=ordered)
    runner.run([samples[:FEW]], [])  # interpreters made, weights packed

    def inference(n: int) -> None:
        for i in range(n):
            interpreter.set_tensor(index, samples[i : i + 1])
            interpreter.invoke()

    def calibrate(n: int) -> None:
        # As `qtool calibrate` does it, its engine's set-up included.
        dataset = load_dataset([str(data)], model_inputs(model), limit=n)
        calibration_statistics(model, {0: dataset})

    runs = {
        "inference": inference,
        "exposed": lambda n: runner.run([samples[:n]], []),
        "calibrate": calibrate,
    }
    times: dict[str, dict[int, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for _ in range(REPEATS):
        for n in (FEW, MANY):
            for phase, run in runs.items():
                times[phase][n].append(_timed(lambda run=run, n=n: run(n)))
    return {
        phase: {
            n: (statistics.median(w for w, _ in found), min(c for _, c in found))
            for n, found in by_count.items()
        }
        for phase, by_count in times.items()
    }


_QUANTIZE_PHASES = (  # (module, class or "", function) where qtool calls it, and its label
    ("qtool.jobs", "", "load_job_inputs", "load, prepare"),
    ("qtool.quantize.quantizer", "", "_equalize", "equalization"),
    ("qtool.quantize.quantizer", "", "collect", "calibration + fold"),
    ("qtool.quantize.quantizer", "", "choose_recipe", "auto choice"),
    ("qtool.quantize.quantizer", "", "rewritten", "plan, rewrite"),
    # The estimate's plan and LiteRT run start before the final plan (start_estimate); its
    # measures and the simulation check come after the rewrite (estimate_accuracy).
    ("qtool.quantize.quantizer", "", "start_estimate", "estimate"),
    ("qtool.quantize.quantizer", "", "estimate_accuracy", "estimate"),
    ("qtool.jobs", "", "audit_model", "audit"),
    ("qtool.jobs", "", "build_report", "report"),
    ("qtool.jobs", "", "write_pair", "read-back, write"),
)


@contextmanager
def phase_timeline(
    phases: Sequence[tuple[str, str, str, str]] = _QUANTIZE_PHASES,
) -> Iterator[dict[str, float]]:
    """Seconds spent in each of `phases` ((module, class or "", function, label), as
    `_QUANTIZE_PHASES`) while the block runs: the functions wrapped where qtool calls them,
    and restored after."""
    spent: dict[str, float] = defaultdict(float)
    active: list[str] = []  # a phase inside another (the choice's estimates) counts in the outer
    restore = []
    for module_name, class_name, attribute, label in phases:
        owner = importlib.import_module(module_name)
        owner = getattr(owner, class_name) if class_name else owner
        original = getattr(owner, attribute)

        def wrapped(*args, _original=original, _label=label, **kwargs):
            if active:
                return _original(*args, **kwargs)
            active.append(_label)
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_label] += time.perf_counter() - started
                active.pop()

        setattr(owner, attribute, wrapped)
        restore.append((owner, attribute, original))
    try:
        yield spent
    finally:
        for owner, attribute, original in restore:
            setattr(owner, attribute, original)


def quantize_phases(name: str) -> tuple[dict[str, float], float]:
    """The in-process timeline of `qtool quantize` with FEW samples (the fastest of REPEATS
    runs by total), and its total."""
    from qtool.jobs import QuantizeJob, quantize_file

    calibration, _ = make_data(name)
    best: tuple[dict[str, float], float] | None = None
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(REPEATS):
            job = QuantizeJob(
                model_path=str(model_path(name)),
                output_path=str(Path(tmp) / "int8.tflite"),
                data=(str(calibration),),
                samples=FEW,
                force=True,
            )
            with phase_timeline() as spent:
                started = time.perf_counter()
                quantize_file(job)
                total = time.perf_counter() - started
            if best is None or total < best[1]:
                best = (dict(spent), total)
    assert best is not None
    return best


def quantize_wall(name: str) -> list[tuple[float, float]]:
    """(wall, CPU) seconds of REPEATS fresh `qtool quantize` processes with FEW samples (the
    CPU of the process and of its LiteRT children), sorted by wall."""
    calibration, _ = make_data(name)
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            *("-m", "qtool", "quantize", str(model_path(name))),
            *("--data", str(calibration), "--samples", str(FEW)),
            *("-o", str(Path(tmp) / "int8.tflite"), "--quiet", "--force"),
        ]
        times = []
        for _ in range(REPEATS):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
            times.append((wall, cpu))
    return sorted(times)


def _marginal(phase: dict[int, tuple[float, float]], k: int) -> float:
    return max(phase[MANY][k] - phase[FEW][k], 1e-9)


def bench_phases(names: tuple[str, ...] = MODELS) -> None:
    console.print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    calibration = Table(
        title=f"qtool calibrate's statistics, per phase: ms per sample, marginal ({FEW} -> "
        f"{MANY} samples, same process), wall (median of {REPEATS}) / CPU (least); ratio: "
        "marginal calibration throughput against LiteRT plain inference"
    )
    for column in (
        "model",
        "inference",
        "exposure",
        "observation",
        f"calibrate {FEW} / {MANY} s",
        "ratio wall",
        "ratio CPU",
    ):
        calibration.add_column(column, justify="right")
    quantize = Table(
        title=f"qtool quantize, {FEW} samples: in-process timeline (fastest of {REPEATS}), s; "
        f"whole command in a fresh process, median (range) of {REPEATS} and its CPU (with "
        "the LiteRT children's)"
    )
    labels = [label for *_, label in _QUANTIZE_PHASES]
    for column in ("model", *labels, "other", "in-process", "command"):
        quantize.add_column(column, justify="right")
    for name in names:
        found = calibration_phases(name)
        per = MANY - FEW
        cells = []
        for k in (0, 1):  # wall, CPU
            inference = _marginal(found["inference"], k)
            exposed = _marginal(found["exposed"], k)
            calibrate = _marginal(found["calibrate"], k)
            cells.append((inference, exposed - inference, calibrate - exposed, calibrate))
        (wall, cpu) = cells
        calibration.add_row(
            name,
            *(
                f"{w / per * 1e3:.2f} / {c / per * 1e3:.2f}"
                for w, c in zip(wall[:3], cpu[:3], strict=True)
            ),
            f"{found['calibrate'][FEW][0]:.2f} / {found['calibrate'][MANY][0]:.2f}",
            f"{wall[0] / wall[3]:.2f}x",
            f"{cpu[0] / cpu[3]:.2f}x",
        )
        spent, total = quantize_phases(name)
        command = quantize_wall(name)
        quantize.add_row(
            name,
            *(f"{spent.get(label, 0.0):.2f}" for label in labels),
            f"{total - sum(spent.values()):.2f}",
            f"{total:.2f}",
            f"{statistics.median(w for w, _ in command):.2f} "
            f"({command[0][0]:.2f}-{command[-1][0]:.2f}), "
            f"CPU {statistics.median(c for _, c in command):.2f}",
        )
    console.print(calibration)
    console.print(quantize)
    console.print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    bench_phases(tuple(sys.argv[1:]) or MODELS)
