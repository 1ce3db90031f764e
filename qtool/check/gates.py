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
    """`--reference FLOAT --data D --min-sqnr DB`: what a quantized model is compared with."""

    reference: Any  # path of the float model, or the Model
    data: Any  # dataset sources (qtool.calibrate.load_dataset), or a Dataset
    min_sqnr: float = DEFAULT_MIN_SQNR
    engine: str = "auto"  # qtool.evaluate engines


SQNR = rule(
    "QT-SQNR",
    "info",
    title="output SQNR against the float reference",
    help=(
        "The quantized model's output over the --data samples compared with the float "
        "model's (SQNR in dB, and top-1 agreement of class-score outputs)."
    ),
)

SQNR_LOW = rule(
    "QT-SQNR-LOW",
    "error",
    title="output SQNR below the threshold",
    help=(
        "The quantized model's output is further from the float reference than --min-sqnr "
        "allows: accuracy regressed. Recalibrate on representative data or keep the "
        "sensitive layers in float."
    ),
)


@family("accuracy against the float reference", SQNR, SQNR_LOW)
def accuracy_findings(
    comparison: Comparison, min_sqnr: float, severity: dict[str, str]
) -> list[Finding]:
    """Per output: its SQNR (and top-1 agreement), an error when below `min_sqnr` dB."""
    findings = []
    for output in comparison.outputs:
        low = not output.sqnr_db >= min_sqnr  # NaN is no measurement: never a pass
        verdict = SQNR_LOW if low else SQNR
        db = "inf" if math.isinf(output.sqnr_db) else f"{output.sqnr_db:.2f}"
        top1 = "" if output.top1 is None else f", top-1 agreement {output.top1:.1%}"
        findings.append(
            verdict.finding(
                severity,
                (
                    f"output '{output.name}': SQNR {db} dB {'<' if low else '>='} min-sqnr "
                    f"{min_sqnr:g} dB{top1} over {comparison.samples} samples (quantized model "
                    f"run {'in LiteRT' if comparison.engine == 'litert' else 'simulated'})"
                ),
                role="output",
                tensor=output.name,
            )
        )
    return findings
