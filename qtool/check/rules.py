"""The rule catalogue of `qtool check`: every rule id with its default severity and help.

The catalogue only names and explains rules; what each rule checks comes from the spec data
(`schemas/int8_spec.json`). Target profiles in that file may change severities through a
``"check": {"severity": {RULE: "error" | "warning" | "info" | "off"}}`` entry.
"""

from __future__ import annotations

from dataclasses import dataclass

from qtool.check.findings import SEVERITIES


@dataclass(frozen=True)
class RuleInfo:
    id: str
    severity: str  # default severity
    title: str  # one line
    help: str  # why it matters and what to do
    on_device: str = ""  # what goes wrong on a device if a warning is ignored (device/kernel named)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule {self.id}: unknown severity {self.severity!r}")
        if self.severity == "warning" and not self.on_device:
            raise ValueError(f"warning rule {self.id} must say what goes wrong on a device")


def _catalogue(*rules: RuleInfo) -> dict[str, RuleInfo]:
    return {rule.id: rule for rule in rules}


RULES: dict[str, RuleInfo] = _catalogue(
    # ------------------------------------------------------------------ the graph itself
    RuleInfo(
        "QT-MODEL-INVALID",
        "error",
        "the model is not a valid TFLite graph",
        "An operator's operand count, types, options or shapes do not fit together, or the "
        "graph itself is broken (a tensor nothing writes, a cycle, a bad index, a constant "
        "without its data). Runtimes refuse such a model and no other rule is checked; the "
        "message names the operator or tensor and what is wrong with it.",
    ),
    # ------------------------------------------------------------------ structure of parameters
    RuleInfo(
        "QT-QPARAM-COUNT",
        "error",
        "scale and zero_point have different lengths",
        "A tensor needs one zero point per scale. The interpreter refuses the model.",
    ),
    RuleInfo(
        "QT-QPARAM-AXIS",
        "error",
        "quantized_dimension outside the tensor's dimensions",
        "quantized_dimension must index a dimension of the tensor. The interpreter refuses "
        "the model.",
    ),
    RuleInfo(
        "QT-QPARAM-AXIS-SIZE",
        "error",
        "per-axis parameter count differs from the axis size",
        "Per-axis quantization needs exactly one scale per slice of quantized_dimension (or a "
        "single scale for per-tensor). The interpreter refuses the model.",
    ),
    RuleInfo(
        "QT-SCALE-INVALID",
        "error",
        "scale is zero, negative, or not finite",
        "Scales must be finite and > 0: a zero scale crashes the interpreter or makes the tensor "
        "all zeros. Widen a degenerate range instead of writing scale 0.",
    ),
    RuleInfo(
        "QT-ZP-RANGE",
        "error",
        "zero point outside the tensor type's range",
        "The zero point is a value of the tensor's integer type and must lie in its range, e.g. "
        "[-128, 127] for int8.",
    ),
    RuleInfo(
        "QT-QPARAM-MISSING",
        "error",
        "integer operand of an int8 op has no quantization",
        "Every int8/int32 operand of a quantized op needs scale and zero point; without them the "
        "kernel has no way to interpret the integers.",
    ),
    # ------------------------------------------------------------------ the op table
    RuleInfo(
        "QT-DTYPE",
        "error",
        "operand type differs from the op table",
        "The int8 spec fixes each operand's type: int8 activations and weights, int32 biases.",
    ),
    RuleInfo(
        "QT-GRANULARITY",
        "error",
        "per-axis parameters where the spec requires per-tensor",
        "Activations (and, for some targets, FULLY_CONNECTED weights) must have one scale and "
        "zero point for the whole tensor.",
    ),
    RuleInfo(
        "QT-WEIGHT-PER-TENSOR",
        "warning",
        "per-tensor weights where the spec asks per-axis",
        "The op table quantizes these weights per output channel. Per-tensor weights still run "
        "but lose accuracy when channel ranges differ; re-quantize per channel.",
        "Every int8 CONV_2D/DEPTHWISE_CONV_2D kernel (LiteRT, TFLite Micro, Ethos-U) applies the one scale to all channels, so channels with small weights keep a few codes or round to zero.",
    ),
    RuleInfo(
        "QT-WEIGHT-AXIS",
        "error",
        "per-axis weights quantized along the wrong dimension",
        "Per-axis weights must be quantized along the output-channel dimension the op table "
        "names for the op; kernels read one scale per output channel.",
    ),
    RuleInfo(
        "QT-ZERO-POINT",
        "error",
        "zero point differs from the value the spec requires",
        "Weights and biases are symmetric (zero point 0): a non-zero weight zero point adds a "
        "data-dependent term to every dot product that int8 kernels do not compute.",
    ),
    RuleInfo(
        "QT-WEIGHT-RANGE",
        "error",
        "constant values outside the operand's range",
        "int8 weights never use the most negative code, so that their range is symmetric "
        "around the zero point 0. Clamp the quantized weights to the spec's weight range.",
    ),
    RuleInfo(
        "QT-BIAS-SCALE",
        "error",
        "bias scale is not input scale x weight scale",
        "The int32 accumulator has scale input_scale * weight_scale[c]; a bias with another scale "
        "is added in the wrong units and shifts every output silently.",
    ),
    RuleInfo(
        "QT-FIXED-OUTPUT",
        "error",
        "output parameters differ from the fixed ones",
        "Some kernels (SOFTMAX, LOGISTIC, TANH, ...) produce outputs with the fixed (scale, "
        "zero point) of the op table; other values are refused or silently misread.",
    ),
    RuleInfo(
        "QT-SAME-SCALE",
        "error",
        "same-scale op changes scale or zero point",
        "Pooling, reshaping, concatenation and similar ops move int8 values without rescaling: "
        "their inputs and outputs must share scale and zero point.",
    ),
    # ------------------------------------------------------------------ the graph as a whole
    RuleInfo(
        "QT-NOT-QUANTIZED",
        "error",
        "model is not quantized",
        "No operator computes in int8 (float model, or weights-only/dynamic-range quantization). "
        "Quantize it fully, e.g. with `qtool quantize`.",
    ),
    RuleInfo(
        "QT-FLOAT-OP",
        "warning",
        "float op left in an int8 model",
        "This op still computes in float between DEQUANTIZE/QUANTIZE: slower, and integer-only "
        "targets cannot run it.",
        "TFLite Micro on a Cortex-M without an FPU runs the float kernel in software emulation, Ethos-U leaves the op to the CPU, and the Edge TPU compiler moves it and every later op to the CPU.",
    ),
    RuleInfo(
        "QT-FLOAT-FEED",
        "error",
        "float tensor feeds an int8 op without QUANTIZE",
        "An int8 op reads a float tensor directly; insert a QUANTIZE between them.",
    ),
    RuleInfo(
        "QT-LEGACY-UINT8",
        "warning",
        "legacy uint8 tensor inside the graph",
        "Asymmetric uint8 quantization is the legacy scheme; the spec uses int8. uint8 is fine "
        "only at the model boundary, converted by a QUANTIZE.",
        "TFLite Micro has dropped most uint8 kernels and refuses the model at initialisation; LiteRT's XNNPACK delegate takes only signed int8, so uint8 ops run on the slower reference kernels.",
    ),
    RuleInfo(
        "QT-OP-UNCOVERED",
        "warning",
        "int8 op not covered by the int8 spec",
        "The spec has no rules for this op, so its quantization cannot be audited and runtimes "
        "may not support it in int8.",
        "A runtime without an int8 kernel for the op refuses the model at initialisation (TFLite Micro) or runs the op on its slow CPU fallback (XNNPACK, Ethos-U).",
    ),
    RuleInfo(
        "QT-OP-EXTENDED",
        "info",
        "op outside the spec's op table, checked against its kernel",
        "The op is not in the normative op table; it is audited against the rules the TFLite "
        "int8 kernel assumes (extended ops in the spec data).",
    ),
    # ------------------------------------------------------------------ numerical risks
    RuleInfo(
        "QT-BIAS-SATURATED",
        "warning",
        "bias values saturated at the int32 limit",
        "The real bias did not fit in int32 at scale input_scale * weight_scale (tiny scales); "
        "the clamped value is wrong. Enlarge that channel's weight scale.",
        "The int8 CONV_2D/FULLY_CONNECTED kernels of LiteRT, TFLite Micro and Ethos-U add the clamped bias, so those channels are offset on every inference.",
    ),
    RuleInfo(
        "QT-RANGE-UNDERUSED",
        "warning",
        "activation range uses few of the int8 codes",
        "The recorded min/max covers a small fraction of the representable range: precision is "
        "wasted. Recalibrate or narrow the quantization range.",
        "The int8 kernels of LiteRT, TFLite Micro and the NPUs quantize the activation with this scale: the signal occupies few codes and loses about 6 dB of SQNR per unused bit.",
    ),
    RuleInfo(
        "QT-WEIGHT-CODES",
        "warning",
        "constant weights use few of the int8 codes",
        "The largest |weight| of a channel maps far below 127, so few codes are used and "
        "precision is lost: the weight scale is too large for those values.",
        "The int8 CONV_2D/FULLY_CONNECTED kernels of LiteRT, TFLite Micro and Ethos-U multiply these coarse codes as they are, so the layer's output carries the extra rounding error.",
    ),
    RuleInfo(
        "QT-RESCALE-ABORT",
        "error",
        "ADD/SUB scales make the interpreter abort",
        "The int8 ADD/SUB kernel rescales both inputs to twice the larger input scale; if a "
        "multiplier reaches 1 (output scale far smaller than the input scales) or a scale is 0, "
        "the interpreter aborts the process while preparing the model.",
    ),
    RuleInfo(
        "QT-RESCALE-FLUSH",
        "warning",
        "ADD/SUB multiplier flushed to zero",
        "An input (or the output) multiplier of the int8 ADD/SUB kernel is below 2^-32 and is "
        "flushed to 0: that input is ignored (or the output is constant).",
        "LiteRT's and TFLite Micro's int8 ADD/SUB kernels compute with the flushed multiplier: that input contributes nothing (or the output is constant) on the device.",
    ),
    RuleInfo(
        "QT-TINY-SCALE",
        "warning",
        "scale is tiny",
        "Scales this small are close to float32 denormals: products and reciprocals lose "
        "precision or overflow, and bias values saturate.",
        "Kernels that derive requantization multipliers from the scales in float32 (LiteRT, TFLite Micro, Vela for Ethos-U) get a zero or denormal multiplier, and the activation collapses to its zero point.",
    ),
)


# Rules of `--target` and of the accuracy gate (`--reference`), one row each:
# id, default severity, title, help, what goes wrong on a device (warnings).
RULES.update(
    (row[0], RuleInfo(*row))
    for row in (
        (
            "QT-TARGET-FALLBACK",
            "warning",
            "op falls back from the target's accelerator to the CPU",
            "The target profile (schemas/targets/) says the accelerator does not take this op; "
            "the message names the constraint it breaks and its limits.",
            "The op runs on the device's CPU instead of the accelerator (e.g. Cortex-M with "
            "TFLite Micro next to an Ethos-U, TFLite's kernels next to XNNPACK or the Edge TPU), "
            "with a copy of its tensors across the boundary.",
        ),
        (
            "QT-TARGET-UNSUPPORTED",
            "error",
            "op cannot run on the target at all",
            "Neither the target's accelerator nor its CPU fallback runs this op (e.g. an op "
            "TFLite Micro has no kernel for): the model fails to initialise on the device.",
        ),
        (
            "QT-DEAD-CHANNELS",
            "info",
            "weight channels that are all zero or negligibly small",
            "Channels whose weights are zero or below the tiny-scale limit compute 0 in int8 as "
            "in float (dead filters): harmless, reported with their count.",
        ),
        (
            "QT-SQNR",
            "info",
            "output SQNR against the float reference",
            "The quantized model's output over the --data samples compared with the float "
            "model's (SQNR in dB, and top-1 agreement of class-score outputs).",
        ),
        (
            "QT-SQNR-LOW",
            "error",
            "output SQNR below the threshold",
            "The quantized model's output is further from the float reference than --min-sqnr "
            "allows: accuracy regressed. Recalibrate on representative data or keep the "
            "sensitive layers in float.",
        ),
    )
)
