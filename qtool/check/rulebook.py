"""How `qtool check` declares its rules: each once, next to the check that emits it.

A rule is a stable id, a default severity and the text users read (`--list-rules`, SARIF,
JUnit). `rule()` declares one in the module whose check emits it, and findings are made from
that declaration (`FLOAT_OP.finding(...)`), so the id is written once. A family is a function
that emits a few rules; `@family(name, RULE, ...)` names them next to the function. The
catalogue (`qtool.check.rules.RULES`) and the run order (`qtool.check.families`) are built from
these declarations.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from qtool.check.findings import SEVERITIES, Finding

RULE_ID = re.compile(r"QT(-[A-Z0-9]+)+")  # QT-WORD[-WORD...]


@dataclass(frozen=True)
class RuleInfo:
    """A declared rule: its stable id (QT-...), default severity, and the text users read."""

    id: str
    severity: str  # default severity
    title: str  # one line
    help: str  # why it matters and what to do
    on_device: str = ""  # what goes wrong on a device if a warning is ignored (device/kernel named)

    def __post_init__(self) -> None:
        if not RULE_ID.fullmatch(self.id):
            raise ValueError(f"rule id {self.id!r} is not of the form QT-WORD[-WORD...]")
        if self.severity not in SEVERITIES:
            raise ValueError(f"rule {self.id}: unknown severity {self.severity!r}")
        if self.severity == "warning" and not self.on_device:
            raise ValueError(f"warning rule {self.id} must say what goes wrong on a device")

    def finding(self, severity: Mapping[str, str], message: str, **where: Any) -> Finding:
        """A finding of this rule at the level `severity` (rule id -> level) gives it; `where`
        places it (subgraph, op_index, op, role, tensor, tensor_index)."""
        return Finding(rule=self.id, severity=severity[self.id], message=message, **where)


def rule(rule_id: str, severity: str, *, title: str, help: str, on_device: str = "") -> RuleInfo:
    """Declare a rule: its stable id, default severity, and the text users read."""
    return RuleInfo(rule_id, severity, title, help, on_device)


def catalogue(*rules: RuleInfo) -> dict[str, RuleInfo]:
    """The declared rules by id, in the order given (the order users read them in)."""
    by_id: dict[str, RuleInfo] = {}
    for declared in rules:
        if declared.id in by_id:
            raise ValueError(f"rule {declared.id} is listed twice in the catalogue")
        by_id[declared.id] = declared
    return by_id


Check = Callable[..., Iterable[Finding]]


@dataclass(frozen=True)
class Family:
    """A function emitting findings of a few rules. Calling the family runs the function."""

    name: str
    run: Check
    rules: tuple[RuleInfo, ...]  # the rules it may emit
    # The rules judge a property of the tensor alone (its type, granularity, values): a tensor
    # read by several ops is reported once, at the first op (its producer when it has one).
    per_tensor: bool = False

    def __call__(self, *args: Any, **kwargs: Any) -> Iterable[Finding]:
        return self.run(*args, **kwargs)


def family(name: str, *rules: RuleInfo, per_tensor: bool = False) -> Callable[[Check], Family]:
    """Declare the decorated function a rule family emitting `rules`."""
    if not rules:
        raise ValueError(f"family {name!r} names no rules")

    def declare(run: Check) -> Family:
        return Family(name, run, rules, per_tensor)

    return declare
