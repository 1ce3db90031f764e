"""Rule family: structure of every tensor's quantization parameters (counts, axis, ranges)."""

from __future__ import annotations

from collections.abc import Iterator

from qtool.check.context import AuditContext
from qtool.check.findings import Finding


def check_param_structure(ctx: AuditContext) -> Iterator[Finding]:
    for (s, t), problems in ctx.broken.items():
        for rule, message in problems:
            yield ctx.tensor_finding(rule, message, s, t)
