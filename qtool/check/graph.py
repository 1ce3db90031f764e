"""Rule families over the graph as a whole: is it quantized, where does float remain, which ops
does the spec not cover."""

from __future__ import annotations

from collections.abc import Iterator

from qtool.check.context import FLOAT_TYPES, QUANTIZED_TYPES, AuditContext
from qtool.check.findings import Finding
from qtool.model import dtype_name
from qtool.spec import QUANTIZED, Mode


def check_quantized(ctx: AuditContext) -> Iterator[Finding]:
    """One finding when no op computes in int8 (a float or weights-only model)."""
    if ctx.quantized:
        return
    computing = [op for op in ctx.ops if not op.boundary]
    floats = [op for op in computing if op.mode == Mode.FLOAT]
    hybrid = sum(1 for op in floats if any(o.tensor.dtype in QUANTIZED_TYPES for o in op.inputs))
    detail = f"{len(floats)} of {len(computing)} ops compute in float"
    if hybrid:
        detail += f", {hybrid} of them with int8 weights (dynamic-range/hybrid quantization)"
    yield ctx.finding(
        "QT-NOT-QUANTIZED",
        f"no op computes in int8 ({detail}): the model is not quantized to the int8 spec",
    )


def check_float_ops(ctx: AuditContext) -> Iterator[Finding]:
    for op in ctx.ops:
        if op.mode != Mode.FLOAT or op.boundary:
            continue
        floats = [o for o in op.outputs if o.tensor.dtype in FLOAT_TYPES]
        shown = (
            floats[0] if floats else next(o for o in op.operands if o.tensor.dtype in FLOAT_TYPES)
        )
        yield ctx.finding(
            "QT-FLOAT-OP",
            f"{op.type} computes in float ({shown.label} is "
            f"{dtype_name(shown.tensor.dtype)}) in an otherwise int8 model",
            op,
            shown,
        )


def check_float_feeds(ctx: AuditContext) -> Iterator[Finding]:
    for op in ctx.int8_ops():
        if op.boundary:
            continue
        for operand in op.inputs:
            if operand.rule is not None and operand.tensor.dtype in FLOAT_TYPES:
                yield ctx.finding(
                    "QT-FLOAT-FEED",
                    f"{operand.label} is {dtype_name(operand.tensor.dtype)} "
                    f"({ctx.origin(op.subgraph, operand.index)}) but {op.type} computes in int8: "
                    "no QUANTIZE converts it",
                    op,
                    operand,
                )


def check_legacy_dtypes(ctx: AuditContext) -> Iterator[Finding]:
    modern = {legacy: spec for spec, legacy in ctx.settings.legacy_dtypes.items()}
    for s, subgraph in enumerate(ctx.model.subgraphs):
        boundary = set(subgraph.inputs) | set(subgraph.outputs)
        for t, tensor in enumerate(subgraph.tensors):
            name = dtype_name(tensor.dtype).lower()
            if name not in modern:
                continue
            uses = ctx.uses(s, t)
            if not (tensor.quantized or any(op.mode in QUANTIZED for op, _ in uses)):
                continue  # plain bytes (e.g. an image fed to CAST), not a quantized tensor
            if t in boundary and uses and all(op.boundary for op, _ in uses):
                continue  # a uint8 model input/output converted by QUANTIZE: fine
            yield ctx.tensor_finding(
                "QT-LEGACY-UINT8",
                f"'{tensor.name}' is a {name.upper()} quantized tensor inside "
                f"the graph (legacy asymmetric scheme); the spec uses {modern[name].upper()}",
                s,
                t,
            )


def check_coverage(ctx: AuditContext) -> Iterator[Finding]:
    for op in ctx.ops:
        if op.mode not in QUANTIZED or op.boundary:
            continue
        if op.rule is None:
            yield ctx.finding(
                "QT-OP-UNCOVERED",
                f"{op.type} has int8 operands but is not covered by the int8 "
                "spec: its quantization cannot be audited",
                op,
            )
        elif op.rule.origin != "op-table" and op.scheme == "int8":
            yield ctx.finding(
                "QT-OP-EXTENDED",
                f"{op.type} is not in the spec's op table; audited against the "
                f"rules of its TFLite int8 kernel ({op.rule.origin})",
                op,
            )
