"""Why MediaPipe's pose_landmark_full and hand_landmark_full lose their regression outputs in int8,
and what each remedy buys (docs/accuracy.md, "The hard models").

Per output, SQNR (dB) against the float model on the held-out photographs, every model run in
LiteRT; in brackets the same over the samples where the model says its subject is there (pose or
hand flag > 0.5), since on the others the landmarks are not read. Rows:

* `float, input on 8 bits`: the float model fed its held-out samples rounded to 1/255, the grid of
  the camera images it is meant for: how far the model itself moves under an error smaller
  than any int8 quantization of its input.
* `float, N-bit weights`: the float model with every layer's weights replaced by their
  per-channel N-bit values (round to nearest), activations in float: what the weights alone
  cost at 8 bits (TFLite's int8 and 16x8 schemes both store int8 weights), and how many bits
  an output would need (10 to 14: beyond any int8 or 16x8 model's weights).
* qtool's default and the options that remedy it, each with its operators per precision, size
  and time.

A segmentation output (`MASK_OUTPUTS`: logits) is also read as its users read it, the mask
`sigmoid(logit) > 0.5`: its fitting SQNR (qtool's measure for logits, about the threshold) and,
in brackets, the IoU of the two masks, over all samples.

    python -m bench.hard_models [MODEL ...]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.accuracy import litert_outputs
from bench.real_models import make_data, model_path
from qtool.calibrate import load_dataset, model_inputs
from qtool.model import load_model, model_to_bytes
from qtool.numerics import dequantize, quantize, sqnr_db, symmetric_params
from qtool.numerics.measures import LOGITS, OutputMeasures
from qtool.prepare import prepare_float_model
from qtool.quantize import QuantizeOptions, quantize_loaded
from qtool.refusals import target_failure

console = Console(width=160)
MODELS = ("pose_landmark_full", "hand_landmark_full")
FLAG_OUTPUT = "Identity_1"  # both models' presence probability
MASK_OUTPUTS = {"pose_landmark_full": "Identity_2"}  # segmentation logits
WEIGHT_BITS = (8, 10, 12, 14)
# The weight operand of each layer with weights, and the axis of its per-channel scales.
WEIGHT_AXIS = {"CONV_2D": 0, "DEPTHWISE_CONV_2D": 3, "FULLY_CONNECTED": 0, "TRANSPOSE_CONV": 0}
CONFIGS: tuple[tuple[str, dict], ...] = (  # equalization is the default: its rows turn it off
    ("qtool default", {}),
    ("--no-equalize", {"equalize": False}),
    ("--optimize-rounding", {"optimize_rounding": True}),
    ("--activations int16", {"activations": "int16"}),
    (
        "--activations int16 --optimize-rounding",
        {"activations": "int16", "optimize_rounding": True},
    ),
    (
        "--no-equalize --activations int16 --optimize-rounding",
        {"equalize": False, "activations": "int16", "optimize_rounding": True},
    ),
    ("--target-sqnr 20", {"target_sqnr": 20.0}),
)


def rounded_weights_model(name: str, bits: int = 8) -> bytes:
    """The prepared float model with every layer's weights on their per-channel grid of `bits`
    bits (symmetric, round to nearest)."""
    model = prepare_float_model(load_model(model_path(name))).model
    subgraph = model.subgraphs[0]
    for op in subgraph.operators:
        axis = WEIGHT_AXIS.get(model.op_type(op))
        weights = None if axis is None else model.tensor_data(subgraph.tensors[op.inputs[1]])
        if weights is None:
            continue
        weights = np.asarray(weights, np.float32)
        params = symmetric_params(weights, axis=axis, qmax=2 ** (bits - 1) - 1)
        codes = quantize(
            weights, params, dtype=np.int8 if bits == 8 else np.int16, narrow_range=True
        )
        real = dequantize(codes, params)
        model.set_tensor_data(subgraph, op.inputs[1], real.astype(np.float32))
    return bytes(model_to_bytes(model))


class Judge:
    """Per-output SQNR of candidate models against the float model on held-out samples."""

    def __init__(self, name: str) -> None:
        self.samples = np.load(make_data(name)[1])
        self.reference = litert_outputs(model_path(name).read_bytes(), self.samples)
        from ai_edge_litert.interpreter import Interpreter

        details = Interpreter(model_path=str(model_path(name))).get_output_details()
        self.names = [d["name"] for d in details]
        flag = self.reference[self.names.index(FLAG_OUTPUT)].reshape(len(self.samples))
        self.present = flag > 0.5
        self.mask = self.names.index(MASK_OUTPUTS[name]) if name in MASK_OUTPUTS else None

    def columns(self) -> list[str]:
        """The outputs' names, and the mask's reading when the model has one."""
        return [*self.names, *([] if self.mask is None else ["mask fitting [IoU]"])]

    def cells(self, got: list[np.ndarray]) -> list[str]:
        """Per output, its SQNR over all samples and, in brackets, over those with the subject;
        then the mask's fitting SQNR and IoU."""
        found = [
            f"{sqnr_db(r, g):.1f} [{sqnr_db(r[self.present], g[self.present]):.1f}]"
            for r, g in zip(self.reference, got, strict=True)
        ]
        if self.mask is not None:
            measures = OutputMeasures(LOGITS)
            measures.add(self.reference[self.mask], got[self.mask])
            iou = measures.intersection / max(measures.union, 1)
            found.append(f"{measures.fitting_db:.1f} [{iou:.3f}]")
        return found


def bench_model(name: str, only: str | None = None) -> None:
    judge = Judge(name)
    table = Table(title=f"{name}: SQNR dB on held-out photographs, all [subject present]")
    for column in ("model", *judge.columns(), "ops int8/int16", "bytes", "s"):
        table.add_column(column, justify="right")
    rounded = np.round(judge.samples * 255) / 255
    float_bytes = model_path(name).read_bytes()
    table.add_row(
        "float, input on 8 bits", *judge.cells(litert_outputs(float_bytes, rounded)), "", "", ""
    )
    for bits in WEIGHT_BITS:
        weights_only = litert_outputs(rounded_weights_model(name, bits), judge.samples)
        table.add_row(f"float, {bits}-bit weights", *judge.cells(weights_only), "", "", "")
    model = load_model(model_path(name))
    calibration = load_dataset([str(make_data(name)[0])], model_inputs(model))
    for label, options in CONFIGS:
        if only is not None and only not in label:
            continue
        started = time.perf_counter()
        result = quantize_loaded(model, calibration, QuantizeOptions(**options))
        seconds = time.perf_counter() - started
        missed = target_failure(result)
        if missed:  # the CLI writes nothing (exit 1): the row measures the best candidate
            console.print(f"{label}: exit 1, not reached: {missed}")
            label = f"{label} (exit 1; its best candidate)"
        blob = model_to_bytes(result.model)
        modes = [d.mode for d in result.plans[0].decisions]
        row = [
            label,
            *judge.cells(litert_outputs(blob, judge.samples)),
            f"{modes.count('int8')}/{modes.count('int16')}",
            f"{len(blob):,}",
            f"{seconds:.0f}",
        ]
        console.print(" | ".join(row))  # progress: a row can take minutes
        table.add_row(*row)
    console.print(table)
    console.print(f"subject present in {int(judge.present.sum())} of {len(judge.samples)} samples")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS))
    parser.add_argument("--only", help="only the rows whose label contains this text")
    arguments = parser.parse_args()
    for name in arguments.models:
        bench_model(name, arguments.only)


if __name__ == "__main__":
    main()
