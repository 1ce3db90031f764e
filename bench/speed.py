"""Calibration speed on the real development models, at their native resolution.

For each model, in the same process and run: calibration throughput (samples/s) of the numpy
engine, of the LiteRT engine and of `--engine auto`, against LiteRT plain inference with XNNPACK
(outputs only: the reference limit, on its faster thread count); the whole `qtool quantize` wall
time (a fresh process, as users run it); and where the numpy engine spends its time, per op type.
Targets (issue 12): numpy >= 0.5x XNNPACK, auto >= 0.8x, quantize under 2 s with 64 samples.

    python -m bench.speed [MODEL ...]      # default: the development models
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.real_models import MODELS, make_data, model_path
from bench.timing import REPEATS, best_of
from qtool.calibrate import MinMaxObserver, activation_tensors, calibrate, load_dataset
from qtool.calibrate import model_inputs as input_specs
from qtool.calibrate.statistics import SubgraphStatistics, new_subgraph_statistics
from qtool.errors import UnsupportedOpError
from qtool.model import load_model, model_to_bytes
from qtool.numerics import sqnr_db
from qtool.prepare import prepare_float_model
from qtool.runtime import Engine
from qtool.runtime.litert import XnnpackRunner

SAMPLES = 64
DEVELOPMENT = [name for name, model in MODELS.items() if model.development]
console = Console(width=190)


@dataclass
class Speed:
    name: str
    engines: dict[str, float | None] = field(default_factory=dict)  # samples/s, None: cannot run
    auto_choice: str = ""
    xnnpack: float = 0.0
    xnnpack_threads: int = 1
    exposed: float | None = None  # LiteRT with every activation readable, nothing observed
    statistics: float | None = None  # auto with quantize's observers (histograms, means)
    quantize_s: list[float] | None = None  # sorted wall times of fresh runs
    agreement_db: float | None = None  # numpy engine outputs vs LiteRT's, SQNR
    profile: dict[str, float] = field(default_factory=dict)  # op type -> seconds per SAMPLES


def xnnpack_rate(model_bytes: bytes, samples: np.ndarray, threads: int) -> float:
    """Samples/s of LiteRT's default interpreter (XNNPACK), one sample per invoke."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_bytes, num_threads=threads)
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]

    def run() -> None:
        for i in range(samples.shape[0]):
            interpreter.set_tensor(index, samples[i : i + 1])
            interpreter.invoke()

    return samples.shape[0] / best_of(run)


def exposed_rate(model, samples: np.ndarray) -> float:
    """Samples/s of LiteRT with every activation made readable (an output) and nothing
    observed: the limit of any calibration that reads every activation."""
    runner = XnnpackRunner(model, activation_tensors(model))
    runner.run([samples], [])  # weights packed, thread count chosen
    return samples.shape[0] / best_of(lambda: runner.run([samples], []))


def quantize_observers(model) -> SubgraphStatistics:
    """The observers `qtool quantize` calibrates with: a histogram of every activation and the
    per-element means of layer inputs."""
    subgraph = model.subgraphs[0]
    return new_subgraph_statistics(
        model, 0, activation_tensors(model), subgraph.inputs_lead_with_one()
    )


QUANTIZE_RUNS = 5


def quantize_seconds(path: Path, data: Path) -> list[float] | None:
    """Wall times of `QUANTIZE_RUNS` runs of `qtool quantize`, each in a fresh process
    (imports, load, calibrate, write), sorted; None (the error printed) when it fails."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [
            sys.executable,
            "-m",
            "qtool",
            "quantize",
            str(path),
            "--data",
            str(data),
            "--samples",
            str(SAMPLES),
            "-o",
            str(Path(tmp) / "int8.tflite"),
            "--quiet",
            "--force",
        ]
        times = []
        for _ in range(QUANTIZE_RUNS):
            started = time.perf_counter()
            try:
                subprocess.run(command, check=True, capture_output=True, text=True)
            except subprocess.CalledProcessError as exc:
                console.print(f"{path.stem}: quantize failed: {exc.stderr.strip()}")
                return None
            times.append(time.perf_counter() - started)
        return sorted(times)


def measure(name: str) -> Speed:
    path = model_path(name)
    calibration, _ = make_data(name)
    model = prepare_float_model(load_model(path)).model
    dataset = load_dataset([str(calibration)], input_specs(model), limit=SAMPLES)
    samples = np.load(calibration)[:SAMPLES]
    speed = Speed(name)
    for engine in ("numpy", "litert", "auto"):
        try:
            result = calibrate(model, dataset, engine)
        except UnsupportedOpError:
            speed.engines[engine] = None
            continue
        if engine == "auto":
            speed.auto_choice = result.engine
        seconds = best_of(lambda engine=engine: calibrate(model, dataset, engine))
        speed.engines[engine] = SAMPLES / seconds
    if speed.engines["litert"] is not None:
        speed.exposed = exposed_rate(model, samples)
    speed.statistics = SAMPLES / best_of(
        lambda: calibrate(model, dataset, "auto", quantize_observers(model))
    )
    blob = path.read_bytes()
    rates = {threads: xnnpack_rate(blob, samples, threads) for threads in (1, 2)}
    speed.xnnpack_threads = max(rates, key=rates.__getitem__)
    speed.xnnpack = rates[speed.xnnpack_threads]
    speed.quantize_s = quantize_seconds(path, calibration)
    if speed.engines["numpy"] is not None:
        speed.profile = numpy_profile(model, samples)
        speed.agreement_db = agreement_db(model, samples)
    return speed


def agreement_db(model, samples: np.ndarray) -> float:
    """SQNR (dB) of the numpy engine's outputs against LiteRT's (XNNPACK), the worst output."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_to_bytes(model))
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    reference = []
    for i in range(samples.shape[0]):
        interpreter.set_tensor(index, samples[i : i + 1])
        interpreter.invoke()
        reference.append(
            [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
        )
    ours = Engine(model).run([samples])
    return min(
        sqnr_db(np.concatenate(parts), got)
        for parts, got in zip(zip(*reference, strict=True), ours, strict=True)
    )


def numpy_profile(model, samples: np.ndarray) -> dict[str, float]:
    """Seconds per op type of the numpy engine over SAMPLES samples, observers included."""
    engine = Engine(model)
    observer = MinMaxObserver(activation_tensors(model))
    observed = 0.0

    def timed_observer(tensor: int, value: np.ndarray) -> None:
        nonlocal observed
        started = time.perf_counter()
        observer(tensor, value)
        observed += time.perf_counter() - started

    profile: dict[str, float] = {}
    engine.run([samples], observers=[timed_observer], profile=profile)
    profile["(observers)"] = observed
    return profile


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _spread(times: list[float] | None) -> str:
    """The median of sorted times, and their range."""
    if not times:
        return "-"
    return f"{statistics.median(times):.2f} ({times[0]:.2f}-{times[-1]:.2f})"


def _ratio(value: float | None, reference: float) -> str:
    return "-" if value is None else f"{value / reference:.2f}x"


def print_speeds(speeds: list[Speed]) -> None:
    table = Table(
        title=f"calibration throughput, {SAMPLES} samples, samples/s (best of {REPEATS}); "
        "ratios against LiteRT XNNPACK plain inference; exposed: LiteRT with every activation "
        "readable and nothing observed (the ceiling); auto+stats: with quantize's observers"
    )
    for column in (
        "model",
        "numpy",
        "LiteRT engine",
        "auto (choice)",
        "XNNPACK (threads)",
        "numpy ratio",
        "LiteRT ratio",
        "auto ratio",
        "exposed ratio",
        "auto+stats ratio",
        f"quantize s, median ({QUANTIZE_RUNS} runs)",
        "numpy vs LiteRT dB",
    ):
        table.add_column(column, justify="right")
    for s in speeds:
        table.add_row(
            s.name,
            _rate(s.engines["numpy"]),
            _rate(s.engines["litert"]),
            f"{_rate(s.engines['auto'])} ({s.auto_choice or '-'})",
            f"{s.xnnpack:.0f} ({s.xnnpack_threads})",
            _ratio(s.engines["numpy"], s.xnnpack),
            _ratio(s.engines["litert"], s.xnnpack),
            _ratio(s.engines["auto"], s.xnnpack),
            _ratio(s.exposed, s.xnnpack),
            _ratio(s.statistics, s.xnnpack),
            _spread(s.quantize_s),
            "-" if s.agreement_db is None else f"{s.agreement_db:.0f}",
        )
    console.print(table)
    profiled = [s for s in speeds if s.profile]
    if not profiled:
        return
    profile = Table(
        title=f"numpy engine: ms per op type for {SAMPLES} samples (share of the pass), "
        "kernel time summed over threads"
    )
    profile.add_column("op type")
    for s in profiled:
        profile.add_column(s.name, justify="right")
    totals = {s.name: sum(s.profile.values()) for s in profiled}
    op_types = sorted(
        {op for s in profiled for op in s.profile},
        key=lambda op: -sum(s.profile.get(op, 0.0) / totals[s.name] for s in profiled),
    )
    for op in op_types:
        cells = []
        for s in profiled:
            seconds = s.profile.get(op)
            cells.append(
                "" if seconds is None else f"{seconds * 1e3:.0f} ({seconds / totals[s.name]:.0%})"
            )
        profile.add_row(op, *cells)
    console.print(profile)


def bench_speed(names: list[str] = DEVELOPMENT) -> None:
    console.print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    speeds = [measure(name) for name in names]
    print_speeds(speeds)
    console.print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    bench_speed(sys.argv[1:] or DEVELOPMENT)
