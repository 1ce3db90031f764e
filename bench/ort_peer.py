"""Accuracy peer: ONNX Runtime's static int8 quantizer on the real models and data qtool uses.

For each model of `bench.real_models` this converts the float `.tflite` to ONNX with tf2onnx
(cached under `build/real_models/onnx/`), runs ORT's recommended pre-processing
(`quant_pre_process`: symbolic shape inference and graph optimisation), then quantizes it with
`onnxruntime.quantization.quantize_static` once per calibration method (MinMax, Entropy,
Percentile, Distribution), each with ORT's defaults otherwise: QDQ format, per-channel int8
weights (symmetric), int8 activations (asymmetric), the model's 64 calibration samples.

Accuracy is judged on the 64 held-out samples against the float `.tflite` run in LiteRT
(`ai_edge_litert`): per output, SQNR in dB over all samples (`qtool.numerics.sqnr_db`, float64
sums). The float ONNX model is compared with LiteRT the same way first, so a conversion error
cannot pass for quantization error. Each method's figure is its worst output; the best method is
the one whose worst output is highest. A method that raises is reported with its error and left
out of the ranking.

Needs tensorflow, tf2onnx, onnx, onnxruntime and ai_edge_litert besides qtool's own dependencies,
so it does not run in the project's `.venv`; the benchmark venv at /tmp/benv has them all. Run
from the repository root:

    /tmp/benv/bin/python -m bench.ort_peer                   # the 6 development models
    /tmp/benv/bin/python -m bench.ort_peer face_landmark     # any models of MODELS, by name
    /tmp/benv/bin/python -m bench.ort_peer --all --json build/ort_peer.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import quant_pre_process
from rich.console import Console
from rich.table import Table

from bench.real_models import CACHE, MODELS, make_data, model_path
from qtool.model import load_model, save_model
from qtool.numerics import sqnr_db
from qtool.quantize import prepare_float_model

ONNX_CACHE = CACHE / "onnx"
OPSET = 17
METHODS = tuple(CalibrationMethod)
console = Console(width=None if sys.stdout.isatty() else 120)

Outputs = dict[str, np.ndarray]  # output name -> outputs of all samples, stacked on axis 0


class SampleReader(CalibrationDataReader):
    """Feeds calibration samples one at a time (the converted models have a fixed batch of 1)."""

    def __init__(self, input_name: str, samples: np.ndarray) -> None:
        self.input_name = input_name
        self.samples = samples
        self.position = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.position == len(self.samples):
            return None
        self.position += 1
        return {self.input_name: self.samples[self.position - 1 : self.position]}

    def rewind(self) -> None:
        self.position = 0


@dataclass
class MethodResult:
    outputs: dict[str, float] = field(default_factory=dict)  # output name -> SQNR dB
    seconds: float = 0.0  # quantize_static's wall time, calibration included
    error: str = ""

    @property
    def worst(self) -> float:
        return min(self.outputs.values())


@dataclass
class ModelResult:
    name: str
    float_onnx: dict[str, float] = field(default_factory=dict)  # float ONNX vs LiteRT, dB
    methods: dict[str, MethodResult] = field(default_factory=dict)
    error: str = ""  # running, converting or pre-processing the float model failed

    @property
    def best(self) -> str | None:
        ranked = [name for name, result in self.methods.items() if not result.error]
        return max(ranked, key=lambda name: self.methods[name].worst, default=None)


def folded_tflite(name: str) -> Path:
    """The float model with its constant operators folded by qtool (`prepare_float_model`).

    tf2onnx reads sparse weights (TFLite's sparsity encoding, expanded by DENSIFY) as if they were
    dense and fails to reshape them; folded, they are plain float constants. Float16 weights
    behind DEQUANTIZE become float32 the same way, which changes no value."""
    target = ONNX_CACHE / f"{name}.folded.tflite"
    if not target.exists():
        ONNX_CACHE.mkdir(parents=True, exist_ok=True)
        save_model(prepare_float_model(load_model(model_path(name))).model, target)
    return target


def float_onnx(name: str) -> Path:
    """The folded model converted by tf2onnx, written once and reused."""
    import onnx
    import tf2onnx  # pulls in TensorFlow: only when a conversion is actually needed

    target = ONNX_CACHE / f"{name}.onnx"
    if not target.exists():
        proto, _ = tf2onnx.convert.from_tflite(str(folded_tflite(name)), opset=OPSET)
        # tf2onnx keeps an op it cannot convert as a node named after the TFLite op
        unconverted = sorted({n.op_type for n in proto.graph.node if n.op_type.startswith("TFL_")})
        if unconverted:
            raise ValueError(f"tf2onnx cannot convert {', '.join(unconverted)}")
        onnx.save(proto, target)
    return target


def preprocessed(float_model: Path) -> Path:
    """ORT's pre-quantization step, which quantize_static warns about when it was skipped."""
    target = float_model.with_suffix(".pre.onnx")
    if not target.exists():
        quant_pre_process(float_model, target)
    return target


def quantized(model: Path, samples: np.ndarray, method: CalibrationMethod) -> Path:
    target = model.with_name(model.name.replace(".pre.onnx", f".{method.name}.qdq.onnx"))
    input_name = ort_session(model).get_inputs()[0].name
    quantize_static(
        model,
        target,
        SampleReader(input_name, samples),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8,
        calibrate_method=method,
    )
    return target


def ort_session(model: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def ort_outputs(model: Path, samples: np.ndarray) -> Outputs:
    session = ort_session(model)
    input_name = session.get_inputs()[0].name
    names = [output.name for output in session.get_outputs()]
    runs = [session.run(names, {input_name: sample[None]}) for sample in samples]
    return {name: np.concatenate([run[i] for run in runs]) for i, name in enumerate(names)}


def litert_outputs(model: Path, samples: np.ndarray) -> Outputs:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(model))
    interpreter.allocate_tensors()
    (feed,) = interpreter.get_input_details()
    fetches = interpreter.get_output_details()
    runs: dict[str, list[np.ndarray]] = {detail["name"]: [] for detail in fetches}
    for sample in samples:
        interpreter.set_tensor(feed["index"], sample[None])
        interpreter.invoke()
        for detail in fetches:
            runs[detail["name"]].append(interpreter.get_tensor(detail["index"]).copy())
    return {name: np.concatenate(arrays) for name, arrays in runs.items()}


def output_sqnr(reference: Outputs, test: Outputs) -> dict[str, float]:
    """Per-output SQNR, outputs matched by name (tf2onnx keeps the TFLite tensor names)."""
    if set(reference) != set(test):
        raise ValueError(f"ONNX outputs {sorted(test)} are not LiteRT's {sorted(reference)}")
    for name, values in reference.items():
        if values.shape != test[name].shape:
            raise ValueError(f"output {name}: ONNX shape {test[name].shape} != {values.shape}")
    return {name: sqnr_db(values, test[name]) for name, values in reference.items()}


def one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0][:300]}"


def evaluate(name: str) -> ModelResult:
    result = ModelResult(name)
    calibration, holdout = (np.load(path) for path in make_data(name))
    try:
        reference = litert_outputs(model_path(name), holdout)
        float_model = float_onnx(name)
        result.float_onnx = output_sqnr(reference, ort_outputs(float_model, holdout))
        model = preprocessed(float_model)
    except Exception as error:  # a model tf2onnx or ORT cannot take is a result, not a crash
        result.error = one_line(error)
        logging.debug(traceback.format_exc())
        return result
    for method in METHODS:
        started = time.perf_counter()
        try:
            quantized_model = quantized(model, calibration, method)
            seconds = time.perf_counter() - started
            outputs = output_sqnr(reference, ort_outputs(quantized_model, holdout))
            result.methods[method.name] = MethodResult(outputs, seconds)
        except Exception as error:
            seconds = time.perf_counter() - started
            result.methods[method.name] = MethodResult(seconds=seconds, error=one_line(error))
            logging.debug(traceback.format_exc())
        console.log(f"{name} {method.name}: {seconds:.1f} s")
    return result


def median_best(results: list[ModelResult]) -> float | None:
    bests = [r.methods[r.best].worst for r in results if r.best]
    return statistics.median(bests) if bests else None


def summary_table(results: list[ModelResult]) -> Table:
    table = Table(title="Worst-output SQNR (dB) on held-out data, per calibration method")
    for column in ("model", *(m.name for m in METHODS), "best", "best dB", "float ONNX dB"):
        table.add_column(column, justify="left" if column in ("model", "best") else "right")
    for r in results:
        if r.error:
            continue
        cells = [r.methods[m.name] for m in METHODS]
        best = r.methods[r.best].worst if r.best else None
        table.add_row(
            r.name,
            *("error" if m.error else f"{m.worst:.2f}" for m in cells),
            r.best or "-",
            "-" if best is None else f"{best:.2f}",
            f"{min(r.float_onnx.values()):.1f}",
        )
    return table


def outputs_table(results: list[ModelResult]) -> Table:
    table = Table(title="Best method, each output (dB); float ONNX vs LiteRT alongside")
    for column in ("model", "method", "output", "SQNR", "float ONNX"):
        table.add_column(column, justify="right" if column in ("SQNR", "float ONNX") else "left")
    for r in results:
        if r.best:
            for output, db in r.methods[r.best].outputs.items():
                table.add_row(r.name, r.best, output, f"{db:.2f}", f"{r.float_onnx[output]:.1f}")
    return table


def timing_table(results: list[ModelResult]) -> Table:
    table = Table(title="quantize_static wall time (s), calibration included")
    for column in ("model", *(m.name for m in METHODS)):
        table.add_column(column, justify="left" if column == "model" else "right")
    for r in results:
        if not r.error:
            table.add_row(r.name, *(f"{r.methods[m.name].seconds:.0f}" for m in METHODS))
    return table


def show(results: list[ModelResult]) -> None:
    for table in (summary_table(results), outputs_table(results), timing_table(results)):
        console.print(table)
    median = median_best(results)
    ranked = sum(1 for r in results if r.best)
    if median is not None:
        console.print(f"median over {ranked} models of the best worst-output SQNR: {median:.2f} dB")
    for r in results:
        if r.error:
            console.print(f"{r.name}: not quantized: {r.error}")
        for method, m in r.methods.items():
            if m.error:
                console.print(f"{r.name} {method}: failed: {m.error}")


def as_json(result: ModelResult) -> dict:
    methods = {
        name: {**asdict(m), "worst_db": None if m.error else m.worst}
        for name, m in result.methods.items()
    }
    return {**asdict(result), "methods": methods, "best": result.best}


def versions() -> dict[str, str]:
    import onnx
    import tf2onnx

    return {
        "onnxruntime": ort.__version__,
        "onnx": onnx.__version__,
        "tf2onnx": tf2onnx.__version__,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help=f"any of {', '.join(MODELS)}")
    parser.add_argument("--all", action="store_true", help="every model of MODELS")
    parser.add_argument("--json", type=Path, help="write the numbers to this file")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")
    names = args.models or [m.name for m in MODELS.values() if m.development or args.all]
    logging.getLogger().setLevel(logging.ERROR)  # ORT's per-tensor calibration chatter
    results = [evaluate(name) for name in names]
    show(results)
    if args.json:
        report = {
            "versions": versions(),
            "opset": OPSET,
            "preprocess": "onnxruntime.quantization.shape_inference.quant_pre_process",
            "median_best_worst_db": median_best(results),
            "models": [as_json(r) for r in results],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
