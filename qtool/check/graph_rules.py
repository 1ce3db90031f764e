"""Rule families over the graph as a whole: is it quantized, where does float remain, which ops
does the spec not cover."""

from __future__ import annotations

from collections.abc import Iterator

from qtool.check.context import FLOAT_TYPES, AuditContext
from qtool.check.findings import Finding
from qtool.check.rulebook import family, rule
from qtool.check.weight_rules import weight_forms
from qtool.model import dtype_name
from qtool.model.calls import CallSite, call_sites
from qtool.spec import QUANTIZED, Mode

NOT_QUANTIZED = rule(
    "QT-NOT-QUANTIZED",
    "error",
    title="model is not quantized",
    help=(
        "No operator computes in int8 and no weights are stored narrow: a float model. "
        "Quantize it, e.g. with `qtool quantize` (hybrid, weight-only and float16 models "
        "are audited by their own rules)."
    ),
)


@family("quantized model", NOT_QUANTIZED)
def check_quantized(ctx: AuditContext) -> Iterator[Finding]:
    """One finding when no op computes in int8 and no weights are stored narrow (a float
    model). Hybrid, weight-only and float16 models compute in float by design: the weight
    modes' rules audit them (`weight_rules.py`)."""
    if ctx.quantized or weight_forms(ctx):
        return
    computing = [op for op in ctx.ops if not op.boundary]
    floats = [op for op in computing if op.mode == Mode.FLOAT]
    detail = f"{len(floats)} of {len(computing)} ops compute in float"
    yield ctx.finding(
        NOT_QUANTIZED,
        f"no op computes in int8 ({detail}): the model is not quantized to the int8 spec",
    )


FLOAT_OP = rule(
    "QT-FLOAT-OP",
    "warning",
    title="float op left in an int8 model",
    help=(
        "This op still computes in float between DEQUANTIZE/QUANTIZE: slower, and integer-only "
        "targets cannot run it."
    ),
    on_device=(
        "TFLite Micro on a Cortex-M without an FPU runs the float kernel in software "
        "emulation, Ethos-U leaves the op to the CPU, and the Edge TPU compiler moves it and "
        "every later op to the CPU."
    ),
)


@family("float ops", FLOAT_OP)
def check_float_ops(ctx: AuditContext) -> Iterator[Finding]:
    """An operator that computes in float in a model where others compute in int8 (boundary
    conversions aside); none in a model that computes in float by design (hybrid, weight-only,
    float16)."""
    if not ctx.quantized:
        return
    for op in ctx.ops:
        if op.mode != Mode.FLOAT or op.boundary:
            continue
        floats = [o for o in op.outputs if o.tensor.dtype in FLOAT_TYPES]
        shown = (
            floats[0] if floats else next(o for o in op.operands if o.tensor.dtype in FLOAT_TYPES)
        )
        yield ctx.finding(
            FLOAT_OP,
            f"{op.type} computes in float ({shown.label} is "
            f"{dtype_name(shown.tensor.dtype)}) in an otherwise int8 model",
            op,
            shown,
        )


FLOAT_FEED = rule(
    "QT-FLOAT-FEED",
    "error",
    title="float tensor feeds an int8 op without QUANTIZE",
    help="An int8 op reads a float tensor directly; insert a QUANTIZE between them.",
)


@family("float inputs of int8 ops", FLOAT_FEED)
def check_float_feeds(ctx: AuditContext) -> Iterator[Finding]:
    """A float tensor read by an int8 operator without a QUANTIZE in between."""
    for op in ctx.int8_ops():
        if op.boundary:
            continue
        for operand in op.inputs:
            if operand.rule is not None and operand.tensor.dtype in FLOAT_TYPES:
                yield ctx.finding(
                    FLOAT_FEED,
                    f"{operand.label} is {dtype_name(operand.tensor.dtype)} "
                    f"({ctx.origin(op.subgraph, operand.index)}) but {op.type} computes in int8: "
                    "no QUANTIZE converts it",
                    op,
                    operand,
                )


LEGACY_UINT8 = rule(
    "QT-LEGACY-UINT8",
    "warning",
    title="legacy uint8 tensor inside the graph",
    help=(
        "Asymmetric uint8 quantization is the legacy scheme; the spec uses int8. uint8 is fine "
        "only at the model boundary, converted by a QUANTIZE."
    ),
    on_device=(
        "TFLite Micro has dropped most uint8 kernels and refuses the model at initialisation; "
        "LiteRT's XNNPACK delegate takes only signed int8, so uint8 ops run on the slower "
        "reference kernels."
    ),
)


@family("legacy dtypes", LEGACY_UINT8)
def check_legacy_dtypes(ctx: AuditContext) -> Iterator[Finding]:
    """A quantized uint8 tensor inside the graph (the legacy asymmetric scheme); uint8 model
    inputs and outputs that only boundary conversions touch are fine."""
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
                LEGACY_UINT8,
                f"'{tensor.name}' is a {name.upper()} quantized tensor inside "
                f"the graph (legacy asymmetric scheme); the spec uses {modern[name].upper()}",
                s,
                t,
            )


OP_UNCOVERED = rule(
    "QT-OP-UNCOVERED",
    "warning",
    title="int8 op not covered by the int8 spec",
    help=(
        "The spec has no rules for this op, so its quantization cannot be audited and runtimes "
        "may not support it in int8."
    ),
    on_device=(
        "A runtime without an int8 kernel for the op refuses the model at initialisation "
        "(TFLite Micro) or runs the op on its slow CPU fallback (XNNPACK, Ethos-U)."
    ),
)

OP_EXTENDED = rule(
    "QT-OP-EXTENDED",
    "info",
    title="op outside the spec's op table, checked against its kernel",
    help=(
        "The op is not in the normative op table; it is audited against the rules the TFLite "
        "int8 kernel assumes (extended ops in the spec data)."
    ),
)


@family("op coverage", OP_UNCOVERED, OP_EXTENDED)
def check_coverage(ctx: AuditContext) -> Iterator[Finding]:
    """An int8 operator the spec does not cover (cannot be audited), or one audited against its
    kernel's rules because the op table lacks it."""
    for op in ctx.ops:
        if op.mode not in QUANTIZED or op.boundary:
            continue
        if op.rule is None:
            yield ctx.finding(
                OP_UNCOVERED,
                f"{op.type} has {op.scheme} operands but is not covered by the "
                f"{'int8' if op.scheme == 'int8' else '16x8'} spec (under the target's "
                "profiles): its quantization cannot be audited",
                op,
            )
        elif op.rule.origin != "op-table" and op.scheme == "int8":
            yield ctx.finding(
                OP_EXTENDED,
                f"{op.type} is not in the spec's op table; audited against the "
                f"rules of its TFLite int8 kernel ({op.rule.origin})",
                op,
            )


CALL_PARAMS = rule(
    "QT-CALL-PARAMS",
    "error",
    title="control flow passes a tensor to a subgraph that reads it otherwise",
    help=(
        "IF and WHILE copy the bytes of their operands into the subgraphs they run and of the "
        "subgraphs' outputs into theirs, never rescaling (LiteRT's if.cc, while.cc): each "
        "operand and the subgraph tensor it becomes must have one type and one set of "
        "quantization parameters, or the subgraph reads other values than the caller wrote."
    ),
)


def _described(tensor) -> str:
    q = tensor.quantization
    shown = dtype_name(tensor.dtype)
    if q is not None and q.is_quantized:
        shown += f" scale {float(q.scale[0]):.6g} zero point {int(q.zero_point[0])}"
    return shown


def _passed_pairs(ctx: AuditContext, site: CallSite) -> Iterator[tuple[str, int, int, int, int]]:
    """(what, caller subgraph, caller tensor, callee subgraph, callee tensor) of every tensor a
    call site hands over, either way."""
    op = ctx.model.subgraphs[site.subgraph].operators[site.op_index]
    offset = 1 if site.op_type == "IF" else 0  # IF's condition is not passed on
    for position, body in enumerate(site.bodies):
        callee = ctx.model.subgraphs[body]
        for k, t in enumerate(op.inputs[offset:]):
            if k < len(callee.inputs) and t >= 0:
                yield f"input {k + offset}", site.subgraph, t, body, callee.inputs[k]
        returns = site.op_type == "IF" or position == len(site.bodies) - 1
        for j, t in enumerate(op.outputs if returns else ()):
            if j < len(callee.outputs):
                yield f"output {j}", site.subgraph, t, body, callee.outputs[j]


@family("control flow", CALL_PARAMS)
def check_calls(ctx: AuditContext) -> Iterator[Finding]:
    """Every tensor an IF or WHILE hands to a subgraph, or takes from it, has one type and one
    set of quantization parameters on both sides (QT-CALL-PARAMS)."""
    for s in range(len(ctx.model.subgraphs)):
        for site in call_sites(ctx.model, s):
            view = next(op for op in ctx.ops if (op.subgraph, op.index) == (s, site.op_index))
            for what, caller, t, body, inner in _passed_pairs(ctx, site):
                outer_tensor = ctx.model.subgraphs[caller].tensors[t]
                inner_tensor = ctx.model.subgraphs[body].tensors[inner]
                same_type = outer_tensor.dtype == inner_tensor.dtype
                if same_type and (
                    outer_tensor.quantization is None
                    or not outer_tensor.quantization.is_quantized
                    or outer_tensor.quantization.same_params(inner_tensor.quantization)
                ):
                    continue
                yield ctx.finding(
                    CALL_PARAMS,
                    f"{site.op_type} {what} '{outer_tensor.name}' is {_described(outer_tensor)}"
                    f" but subgraph {body} holds it as '{inner_tensor.name}', "
                    f"{_described(inner_tensor)}: the bytes are copied, not rescaled",
                    view,
                )
