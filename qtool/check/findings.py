"""What an audit produces: findings, and the per-model result of `qtool check`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

# Ordered from least to most severe; "--fail-on" compares ranks.
SEVERITIES = ("info", "warning", "error")
SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """One thing the audit found: the rule, its severity, the message, and where in the model
    (None fields: not that specific)."""

    rule: str  # stable id, e.g. QT-BIAS-SCALE
    severity: str  # "error" | "warning" | "info"
    message: str  # expected vs actual values
    subgraph: int | None = None
    op_index: int | None = None
    op: str | None = None  # op type, e.g. "CONV_2D"
    role: str | None = None  # "input 0", "weight", "bias", "output 0", ...
    tensor: str | None = None  # tensor name
    tensor_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return asdict(self)

    def sort_key(self) -> tuple:
        """The order reports list findings in: model-level first, then graph order, the most
        severe first at one place."""
        # Model-level findings first, then in graph order; errors before warnings at one place.
        return (
            -1 if self.subgraph is None else self.subgraph,
            -1 if self.op_index is None else self.op_index,
            -SEVERITY_RANK[self.severity],
            self.rule,
            -1 if self.tensor_index is None else self.tensor_index,
        )


@dataclass(frozen=True)
class Suppressed:
    """A finding left out of the verdict on purpose, and what the user gave that left it out.
    Every report format records it (JSON `suppressed`, SARIF `suppressions`, JUnit skipped)."""

    finding: Finding
    kind: str  # "ignore" (--ignore or `ignore` in pyproject.toml) or "baseline"
    source: str  # e.g. "--ignore QT-TINY-SCALE", "pyproject.toml: ignore QT-*", "baseline b.json"

    def to_dict(self) -> dict[str, Any]:
        return {**self.finding.to_dict(), "suppression": {"kind": self.kind, "source": self.source}}


@dataclass
class ModelResult:
    """The audit of one model file; `error` is set (and findings empty) when it could not be read."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None
    operators: list[tuple[int, int, str]] = field(default_factory=list)  # (subgraph, index, type)
    target: dict[str, Any] | None = None  # placement on the --target (TargetReport.to_dict)
    accuracy: dict[str, Any] | None = None  # comparison with the --reference model
    # How the model stores narrow weights, by reader and form ({"hybrid": {"int8 per-axis":
    # 3}}): a hybrid, weight-only or float16 model; None when it has none.
    weights: dict[str, dict[str, int]] | None = None
    seconds: float = 0.0  # time taken to read and audit the model
    suppressed: list[Suppressed] = field(default_factory=list)  # left out by ignores, baselines

    @property
    def summary(self) -> dict[str, int]:
        """The number of findings per severity: {"errors", "warnings", "infos"}."""
        return severity_counts(self.findings)

    def fails(self, fail_on: str) -> bool:
        """Whether any finding is at or above severity `fail_on`."""
        threshold = SEVERITY_RANK[fail_on]
        return any(SEVERITY_RANK[f.severity] >= threshold for f in self.findings)


def severity_counts(findings: Iterable[Finding]) -> dict[str, int]:
    """{"errors": n, "warnings": n, "infos": n}: the summary every report of an audit shows."""
    counts = {"errors": 0, "warnings": 0, "infos": 0}
    for finding in findings:
        counts[f"{finding.severity}s"] += 1
    return counts
