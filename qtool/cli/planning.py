"""Options shared by the commands that calibrate a model (quantize, analyze, calibrate) and plan
its quantization (quantize, analyze). Each is declared once; a command may word its help for its
own use of the option."""

from __future__ import annotations

from collections.abc import Callable

import click

from qtool.calibrate import ENGINES
from qtool.quantize.options import ACTIVATION_TYPES, DEFAULT_CALIBRATION

Decorator = Callable[[Callable], Callable]

DATA_AS_FOR_QUANTIZE = "Calibration data, as for qtool quantize. Repeatable."


def data_option(help: str, required: bool = False) -> Decorator:
    """--data: calibration samples, repeatable (KEY=PATH per signature)."""
    return click.option("--data", multiple=True, required=required, metavar="[KEY=]PATH", help=help)


def samples_option(help: str = "Use at most N calibration samples.") -> Decorator:
    return click.option("--samples", type=int, help=help)


def engine_option(help: str = "What runs the float model during calibration.") -> Decorator:
    return click.option(
        "--engine", type=click.Choice(ENGINES), default="auto", show_default=True, help=help
    )


def input_shape_option() -> Decorator:
    """--input-shape NAME=DIMS: the shape a dynamic input runs at, repeatable."""
    return click.option(
        "--input-shape",
        "input_shapes",
        multiple=True,
        metavar="NAME=DIMS",
        help="Run the input NAME (tensor or signature name) at this shape, e.g. input=1,1760, "
        "where its signature leaves dimensions dynamic (-1); the written model keeps its "
        "signature. Without it, a dynamic input takes the shape of the data. Repeatable.",
    )


def custom_ops_option(help: str = "Python module registering custom-op kernels.") -> Decorator:
    return click.option("--custom-ops", metavar="MODULE", help=help)


_OPTIONS = [
    click.option(
        "--holdout",
        multiple=True,
        metavar="[KEY=]PATH",
        help="Held-out samples (same forms as --data) on which the reported accuracy is "
        "measured; they never calibrate and never judge a choice. Without them, a quarter of "
        "the first 128 calibration samples (spread evenly; with 8 samples or more) is kept from "
        "every choice for that estimate. Either way choices are judged on another quarter and "
        "the final ranges are calibrated on all calibration samples.",
    ),
    click.option(
        "--calibration",
        default=DEFAULT_CALIBRATION,
        show_default=True,
        metavar="METHOD",
        help="How activation ranges are chosen: minmax, percentile[:P] (default P 99.99), mse, kl, "
        "or auto (percentile 99.99, percentile 99.95 or mse: the method whose worst output "
        "scores best on held-out calibration samples, the worse of two folds, or whose "
        "--metric does).",
    ),
    click.option(
        "--bias-correction/--no-bias-correction",
        default=None,
        help="Shift biases by the mean output error of the rounded weights (default: on, or "
        "chosen by held-out score with --calibration auto).",
    ),
    click.option(
        "--optimize-rounding",
        is_flag=True,
        help="Round the weights of weight-limited layers up or down to minimise each layer's "
        "output error on the calibration data (AdaRound-style); kept where it helps.",
    ),
    click.option(
        "--equalize/--no-equalize",
        default=True,
        show_default=True,
        help="Before calibration (default: on), scale up the channels of an activation that span a small part "
        "of its range, and scale down the next weighted layer's taps that read them: the float "
        "model computes the same (docs/quantize.md). Off with --statistics.",
    ),
    click.option(
        "--activations",
        type=click.Choice(ACTIVATION_TYPES),
        default="int8",
        show_default=True,
        help="int16: TFLite's 16x8 scheme (int16 activations, int8 weights) on every op that has "
        "a 16x8 kernel; the others stay int8.",
    ),
    click.option(
        "--int16",
        "int16_patterns",
        multiple=True,
        metavar="PATTERN",
        help="Run matching ops in int16x8 (op-type glob or glob over produced tensor names), the "
        "rest in int8. Repeatable.",
    ),
    click.option(
        "--metric",
        metavar="MODULE:FUNCTION",
        help="Your own measure of the outputs: a function (module:function or "
        "file.py:function, as for --data generators) taking the float and the quantized "
        "outputs (lists of arrays, samples along axis 0) and returning a number, higher is "
        "better. Reported on held-out samples; the auto choice maximises it.",
    ),
]

_TARGET_OPTIONS = [
    click.option(
        "--target-sqnr",
        type=float,
        metavar="DB",
        help="Every output must reach this SQNR (the one that fits its kind) on held-out samples, "
        "measured in LiteRT: the most sensitive layers get rounding optimisation or int16 (and "
        "float with --allow-float); exit 1 writing nothing if it cannot be reached or samples "
        "no choice saw contradict it.",
    ),
    click.option(
        "--target-metric",
        type=float,
        metavar="VALUE",
        help="--metric must reach this value on held-out samples (as --target-sqnr: remedies "
        "for the most sensitive layers; exit 1 writing nothing if it cannot be reached).",
    ),
    click.option(
        "--allow-float",
        is_flag=True,
        help="Let --target-sqnr and --target-metric keep layers in float when integer remedies "
        "are not enough.",
    ),
    click.option(
        "--budget",
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        help="Time the target search may take (default: 4 times what quantizing took before "
        "it, at least 10 s); past it, exit 1 naming the best candidate it measured.",
    ),
]


def planning_options(target: bool) -> Decorator:
    """--holdout, --calibration, --bias-correction, --optimize-rounding, --activations, --int16,
    --metric and, with `target`, --target-sqnr, --target-metric, --allow-float and --budget, in
    that order on --help."""
    options = _OPTIONS + (_TARGET_OPTIONS if target else [])

    def decorate(command: Callable) -> Callable:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def options_from(values: dict) -> dict:
    """QuantizeOptions keyword arguments from the shared options' values."""
    return {
        "calibration": values["calibration"],
        "bias_correction": values["bias_correction"],
        "optimize_rounding": values["optimize_rounding"],
        "equalize": values["equalize"],
        "activations": values["activations"],
        "int16": values["int16_patterns"],
        "target_sqnr": values.get("target_sqnr"),
        "metric": values.get("metric"),
        "target_metric": values.get("target_metric"),
        "allow_float": values.get("allow_float", False),
        "budget": values.get("budget"),
    }
