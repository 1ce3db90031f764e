"""Findings beyond the int8 spec: op placement on a target device, and the accuracy gate."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from qtool.check.findings import Finding

if TYPE_CHECKING:  # placement and the accuracy gate's runtime load only when they run
    from qtool.check.targets import TargetReport
    from qtool.evaluate import Comparison

DEFAULT_MIN_SQNR = 20.0
# The rules this module emits (the spec rule families are in qtool.check.registry).
RULE_IDS = ("QT-TARGET-FALLBACK", "QT-TARGET-UNSUPPORTED", "QT-SQNR", "QT-SQNR-LOW")


def target_findings(report: TargetReport, severity: dict[str, str]) -> list[Finding]:
    """One finding per op that leaves the target's accelerator, naming the broken constraints."""
    from qtool.check.targets import CANNOT_RUN, FALLBACK
    from qtool.check.targets.placement import fallback_name

    target = report.target
    findings = []
    for placement in report.ops:
        if placement.status == FALLBACK:
            rule = "QT-TARGET-FALLBACK"
            message = (
                f"{placement.op} falls back from the {target.accelerator} to "
                f"{fallback_name(target)}: " + "; ".join(map(str, placement.reasons))
            )
        elif placement.status == CANNOT_RUN:
            rule = "QT-TARGET-UNSUPPORTED"
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
            Finding(
                rule=rule,
                severity=severity[rule],
                message=message,
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


def accuracy_findings(
    comparison: Comparison, min_sqnr: float, severity: dict[str, str]
) -> list[Finding]:
    """Per output: its SQNR (and top-1 agreement), an error when below `min_sqnr` dB."""
    findings = []
    for output in comparison.outputs:
        low = output.sqnr_db < min_sqnr
        rule = "QT-SQNR-LOW" if low else "QT-SQNR"
        db = "inf" if math.isinf(output.sqnr_db) else f"{output.sqnr_db:.2f}"
        top1 = "" if output.top1 is None else f", top-1 agreement {output.top1:.1%}"
        findings.append(
            Finding(
                rule=rule,
                severity=severity[rule],
                message=(
                    f"output '{output.name}': SQNR {db} dB {'<' if low else '>='} min-sqnr "
                    f"{min_sqnr:g} dB{top1} over {comparison.samples} samples (quantized model "
                    f"run {'in LiteRT' if comparison.engine == 'litert' else 'simulated'})"
                ),
                role="output",
                tensor=output.name,
            )
        )
    return findings
