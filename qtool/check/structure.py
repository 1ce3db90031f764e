"""Rule family: structure of every tensor's quantization parameters (counts, axis, ranges)."""

from __future__ import annotations

from collections.abc import Iterator

from qtool.check import qparams
from qtool.check.context import AuditContext
from qtool.check.findings import Finding
from qtool.check.rulebook import family


@family(
    "parameter structure",
    qparams.QPARAM_COUNT,
    qparams.QPARAM_AXIS,
    qparams.QPARAM_AXIS_SIZE,
    qparams.SCALE_INVALID,
    qparams.ZP_RANGE,
)
def check_param_structure(ctx: AuditContext) -> Iterator[Finding]:
    """Tensors whose quantization parameters are malformed: counts, axis, scales, zero points out
    of range."""
    for (s, t), problems in ctx.broken.items():
        for rule, message in problems:
            yield ctx.tensor_finding(rule, message, s, t)
