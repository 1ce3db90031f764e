"""Findings beyond the int8 spec: op placement on a target device, and the accuracy gate."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qtool.check.findings import Finding
from qtool.check.rulebook import family, rule
from qtool.spec import default_min_sqnr

if TYPE_CHECKING:  # placement and the accuracy gate's runtime load only when they run
    from qtool.evaluate import Comparison
    from qtool.targets.placement import TargetReport

DEFAULT_MIN_SQNR = default_min_sqnr()  # schemas/int8_spec.json: check.accuracy

TARGET_FALLBACK = rule(
    "QT-TARGET-FALLBACK",
    "warning",
    title="op falls back from the target's accelerator to the CPU",
    help=(
        "The target profile (schemas/targets/) says the accelerator does not take this op; "
        "the message names the constraint it breaks and its limits."
    ),
    on_device=(
        "The op runs on the device's CPU instead of the accelerator (e.g. Cortex-M with "
        "TFLite Micro next to an Ethos-U, TFLite's kernels next to XNNPACK or the Edge TPU), "
        "with a copy of its tensors across the boundary."
    ),
)

TARGET_UNSUPPORTED = rule(
    "QT-TARGET-UNSUPPORTED",
    "error",
    title="op cannot run on the target at all",
    help=(
        "Neither the target's accelerator nor its CPU fallback runs this op (e.g. an op "
        "TFLite Micro has no kernel for): the model fails to initialise on the device."
    ),
)


@family("target placement", TARGET_FALLBACK, TARGET_UNSUPPORTED)
def target_findings(report: TargetReport, severity: dict[str, str]) -> list[Finding]:
    """One finding per op that leaves the target's accelerator, naming the broken constraints."""
    from qtool.targets.placement import CANNOT_RUN, FALLBACK, fallback_name

    target = report.target
    findings = []
    for placement in report.ops:
        if placement.status == FALLBACK:
            verdict = TARGET_FALLBACK
            message = (
                f"{placement.op} falls back from the {target.accelerator} to "
                f"{fallback_name(target)}: " + "; ".join(map(str, placement.reasons))
            )
        elif placement.status == CANNOT_RUN:
            verdict = TARGET_UNSUPPORTED
            message = f"{placement.op} cannot run on {target.name}: " + "; ".join(
                map(str, placement.reasons)
            )
            if placement.fallback_reasons:
                message += f"; nor on {fallback_name(target)}: " + "; ".join(
                    map(str, placement.fallback_reasons)
                )
        else:
            continue
        findings.append(
            verdict.finding(
                severity,
                message,
                subgraph=placement.subgraph,
                op_index=placement.index,
                op=placement.op,
            )
        )
    return findings


@dataclass(frozen=True)
class AccuracyGate:
    """`--reference FLOAT --data D --min-sqnr DB [--metric M --min-metric V]`: what a quantized
    model is compared with, and what it must reach."""

    reference: Any  # path of the float model, or the Model
    data: Any  # dataset sources (qtool.calibrate.load_dataset), or a Dataset
    min_sqnr: float = DEFAULT_MIN_SQNR
    engine: str = "auto"  # qtool.evaluate engines
    metric: Any = None  # the user's metric: `module:function`, a callable, or a UserMetric
    min_metric: float | None = None  # the metric's lowest acceptable value


SQNR = rule(
    "QT-SQNR",
    "info",
    title="output SQNR against the float reference",
    help=(
        "The quantized model's output over the --data samples compared with the float "
        "model's: its kind (probability, mask, logits, classes, boxes, regression), its "
        "fitting SQNR in dB (about the decision threshold for probabilities), its plain SQNR, "
        "and the kind's measures (decision agreement, top-1 agreement, mean error...)."
    ),
)

SQNR_LOW = rule(
    "QT-SQNR-LOW",
    "error",
    title="output SQNR below the threshold",
    help=(
        "The quantized model's output is further from the float reference than --min-sqnr "
        "allows (its fitting SQNR): accuracy regressed. Recalibrate on representative data or "
        "keep the sensitive layers in float."
    ),
)

METRIC = rule(
    "QT-METRIC",
    "info",
    title="the user's metric against the float reference",
    help="The value of --metric over the --data samples (the float and quantized outputs).",
)

METRIC_LOW = rule(
    "QT-METRIC-LOW",
    "error",
    title="the user's metric below the threshold",
    help=(
        "--metric over the --data samples is below --min-metric: by the user's own measure, "
        "accuracy regressed."
    ),
)


def _db_text(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2f}"


@family("accuracy against the float reference", SQNR, SQNR_LOW, METRIC, METRIC_LOW)
def accuracy_findings(
    comparison: Comparison,
    min_sqnr: float,
    severity: dict[str, str],
    min_metric: float | None = None,
    metric_name: str = "metric",
) -> list[Finding]:
    """Per output: its kind, fitting SQNR and measures, an error when the fitting SQNR is below
    `min_sqnr` dB; the user's metric, an error when below `min_metric`."""
    findings = []
    how = f"quantized model run {'in LiteRT' if comparison.engine == 'litert' else 'simulated'}"
    for output in comparison.outputs:
        low = not output.fitting_db >= min_sqnr  # NaN is no measurement: never a pass
        verdict = SQNR_LOW if low else SQNR
        plain = (
            ""
            if output.fitting_db == output.sqnr_db
            else f", plain SQNR {_db_text(output.sqnr_db)} dB"
        )
        floored = " (set by its grid: read the decisions)" if output.floored else ""
        headline = output.headline()
        findings.append(
            verdict.finding(
                severity,
                (
                    f"output '{output.name}' ({output.kind}): SQNR {_db_text(output.fitting_db)} dB "
                    f"{'<' if low else '>='} min-sqnr {min_sqnr:g} dB{plain}{floored}"
                    + (f"; {headline}" if headline else "")
                    + f" over {comparison.samples} samples ({how})"
                ),
                role="output",
                tensor=output.name,
            )
        )
    if comparison.metric is not None:
        low = min_metric is not None and comparison.metric < min_metric
        bound = "" if min_metric is None else f" {'<' if low else '>='} min-metric {min_metric:g}"
        findings.append(
            (METRIC_LOW if low else METRIC).finding(
                severity,
                f"{metric_name} {comparison.metric:.6g}{bound} over {comparison.samples} "
                f"samples ({how})",
            )
        )
    return findings
