"""Accepted findings: ignore rules (`RULE[:GLOB]`) and a baseline of findings already known.

A finding's identity leaves out what shifts when a model is re-exported or re-quantized (operator
indices, the numbers in the message) and keeps what names the problem: the model file, the rule,
the op type, the operand's role and the tensor's name. The baseline and SARIF's fingerprints both
use it, so an alert keeps its identity across runs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path, PurePath

from qtool.check.findings import Finding, ModelResult
from qtool.check.rules import RULES
from qtool.errors import DataError, UsageError

Identity = tuple[str, str, str, str, str]  # model path, rule, op type, role, tensor name


def _model_key(path: str) -> str:
    return PurePath(os.path.normpath(path)).as_posix()


def identity(path: str, finding: Finding) -> Identity:
    """What a finding is across runs: model path, rule, op type, role and tensor name (no
    indices, no numbers)."""
    return (
        _model_key(path),
        finding.rule,
        finding.op or "",
        finding.role or "",
        finding.tensor or "",
    )


def fingerprint(path: str, finding: Finding) -> str:
    """A stable hash of the finding's identity (stays the same when op indices shift)."""
    import hashlib  # only SARIF needs it: kept out of every other run's start-up

    return hashlib.sha256("\0".join(identity(path, finding)).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Ignore:
    """`RULE` drops every finding of RULE; `RULE:GLOB` only those whose model path, tensor name
    or op type matches GLOB. RULE may be a glob over rule ids (`QT-TARGET-*`)."""

    rule: str
    where: str | None = None

    @classmethod
    def parse(cls, text: str) -> Ignore:
        """An ignore from its `RULE[:GLOB]` text; UsageError when no rule id matches RULE or the
        glob after ':' is empty."""
        rule, colon, where = text.partition(":")
        if not any(fnmatchcase(rule_id, rule) for rule_id in RULES):
            raise UsageError(f"ignore {text!r}: no rule matches {rule!r}")
        if colon and not where:
            raise UsageError(f"ignore {text!r}: empty pattern after ':'")
        return cls(rule, where if colon else None)

    def matches(self, path: str, finding: Finding) -> bool:
        """Whether the ignore drops `finding` of the model at `path`."""
        if not fnmatchcase(finding.rule, self.rule):
            return False
        if self.where is None:
            return True
        names = (path, _model_key(path), finding.tensor, finding.op)
        return any(name is not None and fnmatchcase(name, self.where) for name in names)


def apply_ignores(
    results: Sequence[ModelResult], ignores: Sequence[Ignore]
) -> tuple[list[ModelResult], int]:
    """The results without the ignored findings, and how many were dropped."""
    if not ignores:
        return list(results), 0
    kept_results, dropped = [], 0
    for result in results:
        kept = [f for f in result.findings if not any(i.matches(result.path, f) for i in ignores)]
        dropped += len(result.findings) - len(kept)
        kept_results.append(replace(result, findings=kept))
    return kept_results, dropped


def load_baseline(path: str | os.PathLike) -> Counter[Identity]:
    """The findings recorded in a `qtool check --format json` report (or --write-baseline file)."""
    try:
        report = json.loads(Path(path).read_text())
        return Counter(
            identity(
                model["path"],
                Finding(
                    rule=finding["rule"],
                    severity=finding["severity"],
                    message=finding["message"],
                    op=finding.get("op"),
                    role=finding.get("role"),
                    tensor=finding.get("tensor"),
                ),
            )
            for model in report["models"]
            for finding in model["findings"]
        )
    except FileNotFoundError:
        raise DataError(f"{path}: no such baseline file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(
            f"{path}: not a baseline (a `qtool check --format json` report): {exc}"
        ) from None


def subtract_baseline(
    results: Sequence[ModelResult], baseline: Counter[Identity]
) -> tuple[list[ModelResult], int]:
    """The results with only the findings the baseline does not hold (counted: two equal
    findings against one recorded leave one), and how many were in the baseline."""
    remaining = Counter(baseline)
    kept_results, known = [], 0
    for result in results:
        kept = []
        for finding in result.findings:
            key = identity(result.path, finding)
            if remaining[key] > 0:
                remaining[key] -= 1
                known += 1
            else:
                kept.append(finding)
        kept_results.append(replace(result, findings=kept))
    return kept_results, known
