"""Where each op of a model runs on a target: its accelerator, the CPU fallback, or nowhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from qtool.model import Model
from qtool.spec import boundary_ops
from qtool.targets import TFLITE_CPU, ConstraintUse, Target, constraint_uses, load_target
from qtool.targets.compiled import compiled_for, folded_ops
from qtool.targets.constraints import CONSTRAINTS
from qtool.targets.opview import TargetOp, target_ops

ON_TARGET, FALLBACK, CANNOT_RUN = "target", "cpu", "none"
AFTER_PARTITION = "after-partition"  # the id of the first-unsupported partitioning rule


def checked_target(name: str) -> Target:
    """The target profile `name`, every constraint it names registered and every limit given."""
    target = load_target(name)
    for use in constraint_uses(target):
        if use.check not in CONSTRAINTS:
            raise ValueError(f"target {name!r} uses unknown constraint {use.check!r}")
        CONSTRAINTS[use.check].text(use.params)  # every placeholder has its limit
    return target


@dataclass(frozen=True)
class Reason:
    """Why an op cannot run somewhere: a constraint it breaks, as users read it."""

    check: str  # constraint id
    text: str  # the constraint as users read it, with the profile's limits
    detail: str  # what the op has instead
    source: str  # where the fact comes from

    def __str__(self) -> str:
        return f"[{self.check}] {self.text}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class OpPlacement:
    """Where one op runs on a target, its MACs, and why it left the accelerator (and the
    fallback, for CANNOT_RUN)."""

    subgraph: int
    index: int
    op: str
    status: str  # ON_TARGET | FALLBACK | CANNOT_RUN
    macs: int
    reasons: tuple[Reason, ...] = ()  # why the op left the accelerator
    fallback_reasons: tuple[Reason, ...] = ()  # why the fallback runtime cannot run it either

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, the reasons as text (the accelerator's, then the fallback's)."""
        return {
            "subgraph": self.subgraph,
            "op_index": self.index,
            "op": self.op,
            "status": self.status,
            "macs": self.macs,
            "reasons": [str(r) for r in self.reasons + self.fallback_reasons],
        }


@dataclass
class TargetReport:
    """The placement of every op of a model on one target, in model order."""

    target: Target
    ops: list[OpPlacement] = field(default_factory=list)
    compiled: int = 0  # ops a device's compiler already compiled (their MACs are unknown)

    def count(self, status: str) -> int:
        """The number of ops with placement `status` (ON_TARGET, FALLBACK or CANNOT_RUN)."""
        return sum(p.status == status for p in self.ops)

    @property
    def macs(self) -> int:
        """The multiply-accumulates of one inference, over every op."""
        return sum(p.macs for p in self.ops)

    @property
    def target_macs(self) -> int:
        """The multiply-accumulates of the ops that run on the accelerator."""
        return sum(p.macs for p in self.ops if p.status == ON_TARGET)

    @property
    def mac_share(self) -> float | None:
        """Fraction of the MACs the accelerator computes; None when the model has none, or
        holds compiled ops (whose MACs are unknown)."""
        return self.target_macs / self.macs if self.macs and not self.compiled else None

    def macs_text(self) -> str:
        """The MAC share as users read it."""
        return macs_text(self.mac_share, self.macs, self.compiled)

    def summary(self) -> dict[str, Any]:
        """The counts per placement and the MAC totals, JSON-ready."""
        return {
            "target": self.target.name,
            "accelerator": self.target.accelerator,
            "ops": len(self.ops),
            "on_target": self.count(ON_TARGET),
            "fallback": self.count(FALLBACK),
            "cannot_run": self.count(CANNOT_RUN),
            "macs": self.macs,
            "target_macs": self.target_macs,
            "mac_share": self.mac_share,
            "compiled": self.compiled,
        }

    def summary_line(self) -> str:
        """The placement in one line: ops and MAC share on the accelerator, fallbacks, ops that
        cannot run."""
        where = fallback_name(self.target)
        return (
            f"{self.target.name}: {self.count(ON_TARGET)} of {len(self.ops)} ops "
            f"({self.macs_text()}) run on "
            f"the {self.target.accelerator}; {self.count(FALLBACK)} fall back to {where}; "
            f"{self.count(CANNOT_RUN)} cannot run"
        )

    def to_dict(self) -> dict[str, Any]:
        """The summary with every op's placement, JSON-ready."""
        return {**self.summary(), "placement": [p.to_dict() for p in self.ops]}


def macs_text(share: float | None, macs: int, compiled: int) -> str:
    """The accelerator's share of the MACs as text ("87.5% of 1,024 MACs", "no MACs", or
    unknown when the model holds ops already compiled for the device)."""
    if compiled:
        return f"MACs unknown: {compiled} op{'s' * (compiled != 1)} already compiled"
    return "no MACs" if share is None else f"{share:.1%} of {macs:,} MACs"


def fallback_name(target: Target) -> str:
    """Where the target's unsupported ops run, as text ("the TFLite CPU kernels", "nothing (no
    CPU fallback)")."""
    if target.fallback is None:
        return "nothing (no CPU fallback)"
    if target.fallback == TFLITE_CPU:
        return "the TFLite CPU kernels"
    return f"the CPU ({load_target(target.fallback).title})"


def _applies(use: ConstraintUse, op: TargetOp) -> bool:
    return op.type not in use.exempt


def violations(target: Target, op: TargetOp) -> tuple[Reason, ...]:
    """The constraints of `target` that `op` breaks (empty: it runs on the accelerator)."""
    if op.type not in target.ops:
        check = CONSTRAINTS["op-list"]
        params = {"op": op.type, "target": target.title}
        return (Reason(check.id, check.text(params), "", target.op_source),)
    reasons = []
    for use in (*target.generic, *target.ops[op.type]):
        if not _applies(use, op) or any(r.check == use.check for r in reasons):
            continue
        check = CONSTRAINTS[use.check]
        detail = check.check(op, **use.params)
        if detail is not None:
            reasons.append(Reason(check.id, check.text(use.params), detail, use.source))
    return tuple(reasons)


def _partition_reason(target: Target, first: TargetOp) -> Reason:
    text = (
        f"Ops after the first op the {target.accelerator} cannot run stay on the CPU "
        "(the compiler partitions the graph once)"
    )
    return Reason(AFTER_PARTITION, text, f"after op {first.index} {first.type}", "partition")


def _model_boundary(
    op: TargetOp, conversions: frozenset[str], io: tuple[set[int], set[int]]
) -> bool:
    """A boundary conversion of the spec (`conversions`: QUANTIZE, DEQUANTIZE) reading model
    inputs or writing model outputs (`io`: its subgraph's, as sets) : the float (or uint8) I/O
    conversion, not a cut in the integer graph."""
    if op.type not in conversions:
        return False
    inputs, outputs = io
    return all(t in inputs for t in op.operator.inputs) or all(
        t in outputs for t in op.operator.outputs
    )


def place_model(model: Model, target: Target | str) -> TargetReport:
    """Each op's placement on `target`, in model order."""
    if isinstance(target, str):
        target = checked_target(target)
    fallback = load_target(target.fallback) if target.fallback not in (None, TFLITE_CPU) else None
    report = TargetReport(target)
    conversions = boundary_ops()
    io = [(set(s.inputs), set(s.outputs)) for s in model.subgraphs]
    first_unsupported: dict[int, TargetOp] = {}
    folded = folded_ops(model, target)
    for op in target_ops(model):
        if (op.subgraph, op.index) in folded:  # the compiler resolves it: no work anywhere
            report.ops.append(OpPlacement(op.subgraph, op.index, op.type, ON_TARGET, 0))
            continue
        device = compiled_for(op.type)
        report.compiled += device is not None  # a device's program: its MACs are unknown
        if device == target.name:  # its own compiler's program: the accelerator's part
            report.ops.append(OpPlacement(op.subgraph, op.index, op.type, ON_TARGET, 0))
            continue
        reasons = violations(target, op)
        if (
            not reasons
            and target.partition == "first-unsupported"
            and op.subgraph in first_unsupported
        ):
            reasons = (_partition_reason(target, first_unsupported[op.subgraph]),)
        if not reasons:
            report.ops.append(OpPlacement(op.subgraph, op.index, op.type, ON_TARGET, op.macs))
            continue
        if not _model_boundary(op, conversions, io[op.subgraph]):
            first_unsupported.setdefault(op.subgraph, op)
        if target.fallback is None:
            status, fallback_reasons = CANNOT_RUN, ()
        elif fallback is None:
            status, fallback_reasons = FALLBACK, ()
        else:
            fallback_reasons = violations(fallback, op)
            status = CANNOT_RUN if fallback_reasons else FALLBACK
        report.ops.append(
            OpPlacement(op.subgraph, op.index, op.type, status, op.macs, reasons, fallback_reasons)
        )
    return report
