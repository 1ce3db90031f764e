"""Accuracy on real trained models: qtool's defaults, each calibrator, bias correction on/off,
16-bit activations, against ONNX Runtime's static quantizer.

Every figure is the SQNR (dB) of a model output against the float model, on held-out
photographs (bench/real_models.py: crops of images that calibration never saw), both models run
in LiteRT with its default kernels; a model's score is its worst output. ORT's column is the best
of its four calibrators (bench/ort_peer.py); it is measured when onnxruntime, tf2onnx and
TensorFlow are importable, else read from build/real_models/ort.json when an earlier
`python -m bench.ort_peer --json build/real_models/ort.json` wrote it.

    python -m bench.accuracy [--all] [--target DB] [MODEL ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.real_models import CACHE, MODELS, make_data, model_path
from qtool.calibrate import load_dataset, model_inputs
from qtool.model import load_model, model_to_bytes
from qtool.numerics import sqnr_db
from qtool.quantize import QuantizeOptions, quantize_loaded

console = Console(width=160)  # whole model names in logs too
ORT_CACHE = CACHE / "ort.json"

# (column, options): the defaults first, then one change at a time.
CONFIGS: tuple[tuple[str, dict], ...] = (
    ("default", {}),
    ("minmax", {"calibration": "minmax", "bias_correction": False}),
    ("minmax+bc", {"calibration": "minmax", "bias_correction": True}),
    ("percentile+bc", {"calibration": "percentile", "bias_correction": True}),
    ("mse", {"calibration": "mse", "bias_correction": False}),
    ("mse+bc", {"calibration": "mse", "bias_correction": True}),
    ("kl+bc", {"calibration": "kl", "bias_correction": True}),
    ("int16", {"activations": "int16"}),
)


@dataclass
class Outcome:
    outputs: list[float]
    seconds: float
    ops: dict[str, int]

    @property
    def worst(self) -> float:
        return min(self.outputs)


def litert_outputs(model_bytes: bytes, samples: np.ndarray) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model_bytes)
    interpreter.allocate_tensors()
    (source,) = interpreter.get_input_details()
    sinks = interpreter.get_output_details()
    outputs: list[list[np.ndarray]] = [[] for _ in sinks]
    for sample in samples:
        interpreter.set_tensor(source["index"], sample[None])
        interpreter.invoke()
        for found, sink in zip(outputs, sinks, strict=True):
            found.append(interpreter.get_tensor(sink["index"]).copy())
    return [np.concatenate(parts) for parts in outputs]


def run(name: str, options: dict) -> Outcome:
    calibration, holdout = make_data(name)
    model = load_model(model_path(name))
    started = time.perf_counter()
    result = quantize_loaded(
        model, load_dataset([str(calibration)], model_inputs(model)), QuantizeOptions(**options)
    )
    seconds = time.perf_counter() - started
    samples = np.load(holdout)
    reference = litert_outputs(model_path(name).read_bytes(), samples)
    got = litert_outputs(model_to_bytes(result.model), samples)
    modes = [d.mode for plan in result.plans.values() for d in plan.decisions]
    return Outcome(
        [sqnr_db(r, g) for r, g in zip(reference, got, strict=True)],
        seconds,
        {mode: modes.count(mode) for mode in sorted(set(modes))},
    )


def ort_best(names: Sequence[str]) -> dict[str, float]:
    """ORT's best worst-output SQNR per model, measured or cached (empty when neither)."""
    if all(importlib.util.find_spec(m) for m in ("onnxruntime", "tf2onnx", "tensorflow")):
        from bench.ort_peer import evaluate

        results = [evaluate(name) for name in names]
        return {r.name: r.methods[r.best].worst for r in results if r.best}
    if ORT_CACHE.exists():
        cached = json.loads(ORT_CACHE.read_text())["models"]
        return {
            row["name"]: row["methods"][row["best"]]["worst_db"]
            for row in cached
            if row["name"] in names and row.get("best")
        }
    return {}


def bench_accuracy(names: Sequence[str] | None = None) -> dict[str, dict[str, Outcome]]:
    names = list(names or [n for n, m in MODELS.items() if m.development])
    results = {name: {column: run(name, options) for column, options in CONFIGS} for name in names}
    ort = ort_best(names)
    table = Table(title="worst output SQNR (dB) on held-out photographs, LiteRT kernels")
    columns = ["model", *[c for c, _ in CONFIGS], "ORT best", "default s"]
    for column in columns:
        table.add_column(column, justify="right")
    for name in names:
        row = results[name]
        table.add_row(
            name,
            *[f"{row[c].worst:.2f}" for c, _ in CONFIGS],
            f"{ort[name]:.2f}" if name in ort else "-",
            f"{row['default'].seconds:.1f}",
        )
    medians = [statistics.median(results[n][c].worst for n in names) for c, _ in CONFIGS]
    ort_median = statistics.median(ort[n] for n in names) if len(ort) == len(names) else None
    table.add_row(
        "median",
        *[f"{m:.2f}" for m in medians],
        f"{ort_median:.2f}" if ort_median is not None else "-",
        "",
    )
    console.print(table)
    if ort_median is None:
        console.print(
            "ORT: not measured here (needs onnxruntime, tf2onnx and tensorflow, or "
            f"{ORT_CACHE} from python -m bench.ort_peer --json)"
        )
    else:
        console.print(
            f"default median {medians[0]:.2f} dB vs ORT's best {ort_median:.2f} dB: "
            f"{medians[0] - ort_median:+.2f} dB (target +3)"
        )
    return results


def bench_target(names: Sequence[str], target: float) -> None:
    table = Table(title=f"--target-sqnr {target:g} --allow-float (held-out photographs, LiteRT)")
    for column in ("model", "outputs dB", "ops int8/int16/float", "size vs plain int8", "s"):
        table.add_column(column, justify="right")
    for name in names:
        calibration, holdout = make_data(name)
        model = load_model(model_path(name))
        started = time.perf_counter()
        options = QuantizeOptions(target_sqnr=target, allow_float=True)
        result = quantize_loaded(
            model, load_dataset([str(calibration)], model_inputs(model)), options
        )
        seconds = time.perf_counter() - started
        samples = np.load(holdout)
        reference = litert_outputs(model_path(name).read_bytes(), samples)
        blob = model_to_bytes(result.model)
        got = litert_outputs(blob, samples)
        modes = [d.mode for d in result.plans[0].decisions]
        table.add_row(
            name,
            " ".join(f"{sqnr_db(r, g):.1f}" for r, g in zip(reference, got, strict=True)),
            f"{modes.count('int8')}/{modes.count('int16')}/{modes.count('float')}",
            f"{len(blob) - result.baseline_size:+,} B",
            f"{seconds:.0f}",
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*")
    parser.add_argument("--all", action="store_true", help="held-out models too")
    parser.add_argument("--target", type=float, help="also run --target-sqnr DB --allow-float")
    args = parser.parse_args()
    names = args.models or [n for n, m in MODELS.items() if m.development or args.all]
    bench_accuracy(names)
    if args.target is not None:
        bench_target(names, args.target)


if __name__ == "__main__":
    main()
