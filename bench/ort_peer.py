"""Accuracy peer: ONNX Runtime's static int8 quantizer on the real models and data qtool uses.

For each model of `bench.real_models` this converts the float `.tflite` to ONNX with tf2onnx
(opset 17; cached under `build/real_models/onnx/`), runs ORT's recommended pre-processing
(`quant_pre_process`: symbolic shape inference and graph optimisation), then quantizes it with
`onnxruntime.quantization.quantize_static` once per calibration method (MinMax, Entropy,
Percentile, Distribution), everything else as ORT's defaults for: QDQ format, per-channel int8
weights (symmetric), int8 activations (asymmetric), the model's 64 calibration samples.

Accuracy is judged on the 64 held-out samples against the float `.tflite` run in LiteRT
(`ai_edge_litert`): per output, SQNR in dB over all samples (`qtool.numerics.sqnr_db`, float64
sums), ONNX outputs matched to LiteRT's by tensor name (tf2onnx keeps them). The float ONNX model
is compared with LiteRT the same way, so a conversion error cannot pass for quantization error.
Each method's figure is its worst output; the best method is the one whose worst output is
highest. A method that raises is reported with its error and left out of the ranking.

tf2onnx cannot read two things these models hold, so it converts a rewritten copy (checked by
the float comparison above): sparse weights (DENSIFY), folded to dense constants by qtool's
`prepare_float_model`, and MediaPipe's custom Convolution2DTransposeBias, rewritten as the builtin
TRANSPOSE_CONV followed by an ADD of the bias.

Two things to know when reading the numbers (onnxruntime 1.32):
* Entropy equals MinMax: its defaults (128 histogram bins, 128 quantized bins) leave the KL search
  a single candidate, the whole range, and quantize_static does not pass bin counts on.
* Distribution gives symmetric activation ranges, yet the quantizer still drops Relu (it only
  keeps Relu when the ActivationSymmetric option is set), so negative values pass where Relu
  clamped them: on Relu models it collapses. It is meant for float8.

Needs tensorflow, tf2onnx, onnx, onnxruntime (with sympy, for the pre-processing) and
ai_edge_litert besides qtool's own dependencies, so it does not run in the project's `.venv`; the
benchmark venv /tmp/benv has them all. Run from the repository root:

    /tmp/benv/bin/python -m bench.ort_peer                   # the 6 development models
    /tmp/benv/bin/python -m bench.ort_peer face_landmark     # any models of MODELS, by name
    /tmp/benv/bin/python -m bench.ort_peer --all --json build/ort_peer.json

Quantizing all 13 models with the four methods takes about 15 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import struct
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
from qtool.model import Model, Operator, Tensor, TensorType, load_model, save_model
from qtool.numerics import sqnr_db
from qtool.prepare import prepare_float_model

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


def builtin_transpose_convs(model: Model) -> None:
    """Rewrite MediaPipe's custom Convolution2DTransposeBias as the builtin TRANSPOSE_CONV
    followed by an ADD of its bias, in place.

    The custom op reads (input, weights OHWI, bias) and keeps its options as the C struct
    TfLiteTransposeConvParams: padding (TfLitePadding: 1 same, 2 valid), stride_w, stride_h."""
    for subgraph in model.subgraphs:
        operators = []
        for op in subgraph.operators:
            if model.op_type(op) != "Convolution2DTransposeBias":
                operators.append(op)
                continue
            padding, stride_w, stride_h = struct.unpack("<3i", op.custom_options[:12])
            data, weights, bias = op.inputs
            output = subgraph.tensors[op.outputs[0]]
            shape = model.add_buffer(np.array(output.shape, np.int32))
            output_shape = subgraph.add_tensor(
                Tensor(f"{output.name}/output_shape", [4], TensorType.INT32, buffer=shape)
            )
            unbiased = subgraph.add_tensor(
                Tensor(f"{output.name}/unbiased", list(output.shape), output.dtype)
            )
            options = {"padding": padding - 1, "stride_w": stride_w, "stride_h": stride_h}
            operators += [
                Operator(
                    model.opcode_for("TRANSPOSE_CONV"),
                    [output_shape, weights, data],
                    [unbiased],
                    "TransposeConvOptions",
                    options,
                ),
                Operator(model.opcode_for("ADD"), [unbiased, bias], op.outputs, "AddOptions"),
            ]
        subgraph.operators = operators


def convertible_tflite(name: str) -> Path:
    """The float model as tf2onnx can read it, written once and reused.

    tf2onnx reads sparse weights (TFLite's sparsity encoding, expanded by DENSIFY) as if they were
    dense and fails to reshape them: qtool folds them into plain float constants (and float16
    weights behind DEQUANTIZE into float32 ones, which changes no value)."""
    target = ONNX_CACHE / f"{name}.convertible.tflite"
    if not target.exists():
        ONNX_CACHE.mkdir(parents=True, exist_ok=True)
        model = prepare_float_model(load_model(model_path(name))).model
        builtin_transpose_convs(model)
        save_model(model, target)
    return target


def float_onnx(name: str) -> Path:
    """The convertible model converted by tf2onnx, written once and reused."""
    import onnx
    import tf2onnx  # pulls in TensorFlow: only when a conversion is actually needed

    target = ONNX_CACHE / f"{name}.onnx"
    if not target.exists():
        proto, _ = tf2onnx.convert.from_tflite(str(convertible_tflite(name)), opset=OPSET)
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
    with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print progress
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


def best_by_group(results: list[ModelResult]) -> dict[str, list[float]]:
    """The best worst-output SQNR of each quantized model: development, held-out and all."""
    best = {r.name: r.methods[r.best].worst for r in results if r.best}
    return {
        "development": [db for name, db in best.items() if MODELS[name].development],
        "held-out": [db for name, db in best.items() if not MODELS[name].development],
        "all": list(best.values()),
    }


def medians(results: list[ModelResult]) -> dict[str, float]:
    groups = best_by_group(results).items()
    return {group: statistics.median(values) for group, values in groups if values}


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
    for group, values in best_by_group(results).items():
        if values:
            console.print(
                f"median best worst-output SQNR, {group} models ({len(values)}): "
                f"{statistics.median(values):.2f} dB"
            )
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
    logging.getLogger().setLevel(logging.ERROR)  # ORT warns once per tensor while calibrating
    results = [evaluate(name) for name in names]
    show(results)
    if args.json:
        report = {
            "versions": versions(),
            "opset": OPSET,
            "preprocess": "onnxruntime.quantization.shape_inference.quant_pre_process",
            "median_best_worst_db": medians(results),
            "models": [as_json(r) for r in results],
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
