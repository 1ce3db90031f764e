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
from pathlib import PurePath

from qtool.check.findings import Finding, ModelResult, Suppressed
from qtool.check.rules import RULES
from qtool.errors import DataError, UsageError
from qtool.files import open_regular
from qtool.model.types import BuiltinOperator

Identity = tuple[str, str, str, str, str]  # model path, rule, op type, role, tensor name
BASELINE = "baseline"  # the kind of suppression a baseline makes


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


QUALIFIERS = ("path", "op", "tensor")


@dataclass(frozen=True)
class Ignore:
    """`RULE` leaves out every finding of RULE; `RULE:path:GLOB`, `RULE:op:GLOB` and
    `RULE:tensor:GLOB` only those whose model path, op type or tensor name matches GLOB; the
    short `RULE:GLOB` matches the model path or a builtin op type. Tensor names (and custom op
    names) are chosen by whoever made the model, so a glob meets them only when asked for with
    `tensor:` (or `op:`). RULE may be a glob over rule ids (`QT-TARGET-*`). `source` says where
    the user gave it, for the record of what it left out."""

    rule: str
    where: str | None = None
    field: str | None = None  # "path", "op", "tensor", or None for the short form
    source: str = "--ignore"

    @classmethod
    def parse(cls, text: str, source: str | None = None) -> Ignore:
        """An ignore from its `RULE[:GLOB]` or `RULE:path:|op:|tensor:GLOB` text, given at
        `source`; UsageError when no rule id matches RULE or the glob after ':' is empty."""
        rule, colon, rest = text.partition(":")
        if not any(fnmatchcase(rule_id, rule) for rule_id in RULES):
            raise UsageError(f"ignore {text!r}: no rule matches {rule!r}")
        qualifier, separator, pattern = rest.partition(":")
        field, where = (
            (qualifier, pattern) if separator and qualifier in QUALIFIERS else (None, rest)
        )
        if colon and not where:
            raise UsageError(f"ignore {text!r}: empty pattern after ':'")
        return cls(rule, where if colon else None, field, source or f"--ignore {text}")

    def matches(self, path: str, finding: Finding) -> bool:
        """Whether the ignore drops `finding` of the model at `path`."""
        if not fnmatchcase(finding.rule, self.rule):
            return False
        if self.where is None:
            return True
        if self.field == "tensor":
            return finding.tensor is not None and fnmatchcase(finding.tensor, self.where)
        op_type = finding.op if self.field == "op" or _builtin(finding.op) else None
        names = [op_type] if self.field in (None, "op") else []
        if self.field in (None, "path"):
            names += [path, _model_key(path)]
        return any(name is not None and fnmatchcase(name, self.where) for name in names)


def _builtin(op: str | None) -> bool:
    """A builtin op type's name (a custom op's is the model author's choice)."""
    return op is not None and isinstance(getattr(BuiltinOperator, op, None), int)


def apply_ignores(
    results: Sequence[ModelResult], ignores: Sequence[Ignore]
) -> tuple[list[ModelResult], int]:
    """The results with the ignored findings moved to `suppressed` (recorded with the ignore
    that matched first), and how many were moved."""
    if not ignores:
        return list(results), 0
    kept_results, dropped = [], 0
    for result in results:
        kept, suppressed = [], list(result.suppressed)
        for finding in result.findings:
            match = next((i for i in ignores if i.matches(result.path, finding)), None)
            if match is None:
                kept.append(finding)
            else:
                suppressed.append(Suppressed(finding, "ignore", match.source))
        dropped += len(result.findings) - len(kept)
        kept_results.append(replace(result, findings=kept, suppressed=suppressed))
    return kept_results, dropped


def load_baseline(path: str | os.PathLike) -> Counter[Identity]:
    """The findings recorded in a `qtool check --format json` report (or --write-baseline file)."""
    try:
        with open_regular(path) as handle:
            report = json.loads(handle.read())
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
            for finding in [
                *model["findings"],
                # Findings an earlier baseline accepted stay accepted: a report made with
                # --baseline is a baseline too.
                *(f for f in model.get("suppressed", []) if f["suppression"]["kind"] == BASELINE),
            ]
        )
    except FileNotFoundError:
        raise DataError(f"{path}: no such baseline file") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(
            f"{path}: not a baseline (a `qtool check --format json` report): {exc}"
        ) from None


def subtract_baseline(
    results: Sequence[ModelResult], baseline: Counter[Identity], source: str = "baseline"
) -> tuple[list[ModelResult], int]:
    """The results with the findings the baseline holds moved to `suppressed` (counted: two
    equal findings against one recorded leave one), and how many were in the baseline."""
    remaining = Counter(baseline)
    kept_results, known = [], 0
    for result in results:
        kept, suppressed = [], list(result.suppressed)
        for finding in result.findings:
            key = identity(result.path, finding)
            if remaining[key] > 0:
                remaining[key] -= 1
                known += 1
                suppressed.append(Suppressed(finding, BASELINE, source))
            else:
                kept.append(finding)
        kept_results.append(replace(result, findings=kept, suppressed=suppressed))
    return kept_results, known
