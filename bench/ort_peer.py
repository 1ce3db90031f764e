"""Accuracy peer: qtool's default against ONNX Runtime's static int8 quantizer, on the real
models and data of `bench.real_models`, judged on photographs that no choice saw.

For each model this quantizes the float `.tflite` with qtool's defaults (`quantize_loaded`,
no option set) and, converted to ONNX with tf2onnx (opset 17; cached under
`$CACHE/real_models/onnx/`) and pre-processed as ORT recommends (`quant_pre_process`: symbolic
shape inference and graph optimisation), with `onnxruntime.quantization.quantize_static` once
per calibrator setting (MinMax, Entropy, Percentile, Distribution at their defaults; Percentile
at 99.99 and 99.9; MinMax averaged over the samples), everything else as ORT's defaults for: QDQ
format, per-channel int8 weights (symmetric), int8 activations (asymmetric).
Both get the same 64 calibration crops; every choice qtool makes (calibrator, bias correction)
is made on folds of those crops.

Judged on the model's 64 held-out crops (`--judge held-out`, the default), which come from
*other photographs* than calibration (and other faces): qtool's written model in LiteRT, ORT's in
ORT, each against the float `.tflite` run in LiteRT. Per output, qtool's own measures
(`qtool.quantize.accuracy.measure_outputs`): the output's kind (probability, mask, logits, boxes,
classes, regression), the plain SQNR (dB), the fitting SQNR (about the 0.5 decision threshold for
probabilities and detector logits, else the plain one) and the kind's measures (decision
agreement and max error; top-1; mean absolute and relative error). A model's figures are its
worst output's SQNR and its worst output's fitting SQNR; ORT's best is chosen per model and per
figure (the method whose worst output is highest). Each output's main measure (decision
agreement, top-1 agreement, relative error) is compared with that of ORT's best by fitting
SQNR: wins, ties, losses. ONNX outputs are matched to LiteRT's by tensor name (tf2onnx keeps
them); the float ONNX model is compared with LiteRT the same way, so a conversion error cannot
pass for quantization error. A method that raises is reported with its error and left out.

`--judge development` judges instead on fresh crops (another seed) of the *calibration*
photographs: the data to study and tune on, so that the held-out photographs stay unseen by
every decision made while developing qtool.

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
ai_edge_litert besides qtool's own dependencies, so it runs in a venv of its own,
`$QTOOL_BENCH_CACHE/ortvenv` (bench/ort-requirements.txt; `make ortvenv` makes it). qtool is
read from the checkout: run from the repository root.

    make ortvenv QTOOL_BENCH_CACHE=/work/bench-cache
    V=/work/bench-cache/ortvenv/bin/python
    QTOOL_BENCH_CACHE=/work/bench-cache $V -m bench.ort_peer --all --json build/ort_peer.json
    ... $V -m bench.ort_peer face_landmark                     # any models, by name
    ... $V -m bench.ort_peer --all --ort-json build/ort_peer.json   # qtool again, ORT's read

The quantized ONNX models are cached beside the float ones (one file per method), so a second
run only runs them. Converting and quantizing all 13 models with the seven settings takes about 25
minutes on 2 cores; qtool's defaults about 2 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import struct
import time
import traceback
from dataclasses import dataclass
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

from bench.peer_report import JUDGES, MethodResult, ModelResult, console, show, summary
from bench.real_models import CACHE, MODELS, make_data, make_development_data, model_path
from qtool.calibrate import load_dataset, model_inputs
from qtool.model import (
    Model,
    Operator,
    Tensor,
    TensorType,
    load_model,
    model_to_bytes,
    save_model,
)
from qtool.numerics import sqnr_db
from qtool.prepare import prepare_float_model
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.quantize.accuracy import LITERT, measure_outputs, model_output_steps

ONNX_CACHE = CACHE / "onnx"
OPSET = 17


@dataclass(frozen=True)
class Setting:
    """One ORT calibrator setting: a method and the calibration options quantize_static passes
    on (`extra_options`; it passes no bin counts)."""

    name: str
    method: CalibrationMethod
    options: tuple[tuple[str, object], ...] = ()


# ORT's four methods at their defaults, and three settings a user tuning ORT would try: lower
# percentiles (the default keeps 99.999% of the values) and min/max averaged over the samples
# (TensorFlow's EMA rule) instead of the extremes.
SETTINGS = (
    *(Setting(method.name, method) for method in CalibrationMethod),
    Setting("Percentile99.99", CalibrationMethod.Percentile, (("CalibPercentile", 99.99),)),
    Setting("Percentile99.9", CalibrationMethod.Percentile, (("CalibPercentile", 99.9),)),
    Setting(
        "MinMaxAverage",
        CalibrationMethod.MinMax,
        (("CalibMovingAverage", True), ("CalibMovingAverageConstant", 0.01)),
    ),
)
QTOOL = "qtool default"

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


def quantized(model: Path, samples: np.ndarray, setting: Setting) -> tuple[Path, float]:
    """ORT's model for a calibrator setting, written once and reused, and the seconds
    quantize_static took (kept beside it)."""
    target = model.with_name(model.name.replace(".pre.onnx", f".{setting.name}.qdq.onnx"))
    timing = target.with_suffix(".seconds")
    if target.exists() and timing.exists():
        return target, float(timing.read_text())
    input_name = ort_session(model).get_inputs()[0].name
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print progress
        quantize_static(
            model,
            target,
            SampleReader(input_name, samples),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=setting.method,
            extra_options=dict(setting.options),
        )
    seconds = time.perf_counter() - started
    timing.write_text(f"{seconds:.3f}\n")
    return target, seconds


def ort_session(model: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])


def ort_outputs(model: Path, samples: np.ndarray) -> Outputs:
    session = ort_session(model)
    input_name = session.get_inputs()[0].name
    names = [output.name for output in session.get_outputs()]
    runs = [session.run(names, {input_name: sample[None]}) for sample in samples]
    return {name: np.concatenate([run[i] for run in runs]) for i, name in enumerate(names)}


def litert_outputs(model: bytes, samples: np.ndarray) -> Outputs:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model)
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


def matched(reference: Outputs, test: Outputs) -> Outputs:
    """`test`'s outputs checked against the reference's names and shapes (tf2onnx keeps the
    TFLite tensor names)."""
    if set(reference) != set(test):
        raise ValueError(f"outputs {sorted(test)} are not LiteRT's {sorted(reference)}")
    for name, values in reference.items():
        if values.shape != test[name].shape:
            raise ValueError(f"output {name}: shape {test[name].shape} != {values.shape}")
    return test


def output_sqnr(reference: Outputs, test: Outputs) -> dict[str, float]:
    """Per-output plain SQNR, outputs matched by name."""
    test = matched(reference, test)
    return {name: sqnr_db(values, test[name]) for name, values in reference.items()}


def output_records(
    float_model: Model, reference: Outputs, test: Outputs, steps: dict[int, float] | None = None
) -> list[dict]:
    """Each output's record (kind, plain and fitting SQNR, the kind's measures), in the float
    model's output order."""
    test = matched(reference, test)
    subgraph = float_model.subgraphs[0]
    names = [subgraph.tensors[t].name for t in subgraph.outputs]
    records = measure_outputs(
        float_model, 0, [reference[n] for n in names], [test[n] for n in names], LITERT, steps
    )
    return [record.to_dict() for record in records]


def one_line(error: Exception) -> str:
    lines = str(error).strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0][:300]}"


def qtool_default(name: str, calibration: Path) -> tuple[bytes, Model, float, str]:
    """qtool's default model for `name` (calibrated on the calibration file only), its
    `Model`, the seconds quantize took and its auto choice with each candidate's score."""
    model = load_model(model_path(name))
    started = time.perf_counter()
    data = load_dataset([str(calibration)], model_inputs(model))
    result = quantize_loaded(model, data, QuantizeOptions())
    seconds = time.perf_counter() - started
    recipe = result.recipes.get(0)
    chosen = f"{recipe.method}{'+bc' if recipe.bias_correction else ''}" if recipe else "-"
    scores = ", ".join(f"{label} {db:.1f}" for label, db in result.method_scores.items())
    return model_to_bytes(result.model), result.model, seconds, f"{chosen} ({scores})"


def judged_samples(name: str, judge: str) -> tuple[Path, np.ndarray]:
    """The calibration file and the samples that judge (held-out or development crops)."""
    calibration, holdout = make_data(name)
    judged = holdout if judge == "held-out" else make_development_data(name)
    return calibration, np.load(judged)


def evaluate(name: str, judge: str = JUDGES[0], ort_results: dict | None = None) -> ModelResult:
    """qtool's default and each ORT setting on one model; ORT's results are taken from
    `ort_results` (an earlier run's, by model name, on the same judging samples) where it has
    them, and measured for the settings it lacks."""
    result = ModelResult(name, judge)
    calibration_path, samples = judged_samples(name, judge)
    float_model = load_model(model_path(name))
    reference = litert_outputs(model_path(name).read_bytes(), samples)
    blob, written, seconds, choice = qtool_default(name, calibration_path)
    steps = model_output_steps(written)
    records = output_records(float_model, reference, litert_outputs(blob, samples), steps)
    result.qtool = MethodResult(records, seconds, choice=choice)
    console.log(f"{name} {QTOOL}: {seconds:.1f} s, {choice}, worst {result.qtool.worst:.2f} dB")
    earlier = (ort_results or {}).get(name)
    if earlier is not None and earlier.judge == judge:
        result.float_onnx, result.methods, result.error = (
            earlier.float_onnx,
            dict(earlier.methods),
            earlier.error,
        )
    missing = [s for s in SETTINGS if s.name not in result.methods]
    if result.error or not missing:
        return result
    calibration = np.load(calibration_path)
    try:
        float_path = float_onnx(name)
        result.float_onnx = output_sqnr(reference, ort_outputs(float_path, samples))
        model = preprocessed(float_path)
    except Exception as error:  # a model tf2onnx or ORT cannot take is a result, not a crash
        result.error = one_line(error)
        logging.debug(traceback.format_exc())
        return result
    for setting in missing:
        seconds = 0.0
        try:
            quantized_model, seconds = quantized(model, calibration, setting)
            records = output_records(float_model, reference, ort_outputs(quantized_model, samples))
            result.methods[setting.name] = MethodResult(records, seconds)
        except Exception as error:
            result.methods[setting.name] = MethodResult(seconds=seconds, error=one_line(error))
            logging.debug(traceback.format_exc())
        console.log(f"{name} {setting.name}: {seconds:.1f} s")
    return result


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
    parser.add_argument("--judge", choices=JUDGES, default=JUDGES[0], help="the judging samples")
    parser.add_argument("--json", type=Path, help="write the numbers to this file")
    parser.add_argument("--ort-json", type=Path, help="read ORT's results from an earlier --json")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models: {', '.join(unknown)}")
    names = args.models or [m.name for m in MODELS.values() if m.development or args.all]
    earlier = {}
    if args.ort_json:
        rows = json.loads(args.ort_json.read_text())["models"]
        earlier = {row["name"]: ModelResult.from_json(row) for row in rows}
    logging.getLogger().setLevel(logging.ERROR)  # ORT warns once per tensor while calibrating
    results = []
    for name in names:
        results.append(evaluate(name, args.judge, earlier))
        if args.json:  # after every model: a long run that stops keeps what it measured
            report = {
                "versions": versions(),
                "opset": OPSET,
                "judge": args.judge,
                "preprocess": "onnxruntime.quantization.shape_inference.quant_pre_process",
                "summary": summary(results),
                "models": [r.to_json() for r in results],
            }
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    show(results)


if __name__ == "__main__":
    main()
