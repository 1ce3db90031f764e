"""The registry of rule families: what `audit_model` runs, in order, and which rules each emits."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from qtool.check import graph, operands, risk, structure, validity
from qtool.check.findings import Finding


@dataclass(frozen=True)
class Family:
    name: str
    run: Callable[..., Iterator[Finding]]  # of an AuditContext (VALIDITY: of the model)
    rules: tuple[str, ...]  # the rule ids it may emit
    # The rules judge a property of the tensor alone (its type, granularity, values): a tensor
    # read by several ops is reported once, at the first op (its producer when it has one).
    per_tensor: bool = False


FAMILIES: tuple[Family, ...] = (
    Family(
        "parameter structure",
        structure.check_param_structure,
        (
            "QT-QPARAM-COUNT",
            "QT-QPARAM-AXIS",
            "QT-QPARAM-AXIS-SIZE",
            "QT-SCALE-INVALID",
            "QT-ZP-RANGE",
        ),
    ),
    Family("float ops", graph.check_float_ops, ("QT-FLOAT-OP",)),
    Family("float inputs of int8 ops", graph.check_float_feeds, ("QT-FLOAT-FEED",)),
    Family("legacy dtypes", graph.check_legacy_dtypes, ("QT-LEGACY-UINT8",)),
    Family("op coverage", graph.check_coverage, ("QT-OP-UNCOVERED", "QT-OP-EXTENDED")),
    Family(
        "operand types", operands.check_dtypes, ("QT-DTYPE", "QT-QPARAM-MISSING"), per_tensor=True
    ),
    Family(
        "granularity",
        operands.check_granularity,
        ("QT-GRANULARITY", "QT-WEIGHT-PER-TENSOR", "QT-WEIGHT-AXIS"),
        per_tensor=True,
    ),
    Family("zero points", operands.check_zero_points, ("QT-ZERO-POINT",), per_tensor=True),
    Family("weight values", operands.check_weight_values, ("QT-WEIGHT-RANGE",), per_tensor=True),
    Family("bias scale", operands.check_bias_scales, ("QT-BIAS-SCALE",)),
    Family("fixed outputs", operands.check_fixed_outputs, ("QT-FIXED-OUTPUT",)),
    Family("same scale", operands.check_same_scale, ("QT-SAME-SCALE",)),
    Family("tiny scales", risk.check_tiny_scales, ("QT-TINY-SCALE", "QT-DEAD-CHANNELS")),
    Family("bias saturation", risk.check_bias_saturation, ("QT-BIAS-SATURATED",), per_tensor=True),
    Family("activation range use", risk.check_range_use, ("QT-RANGE-UNDERUSED",)),
    Family("weight code use", risk.check_weight_codes, ("QT-WEIGHT-CODES",), per_tensor=True),
    Family("ADD/SUB rescaling", risk.check_rescale, ("QT-RESCALE-ABORT", "QT-RESCALE-FLUSH")),
)

# Runs before anything else, on the model itself: when it reports, the audit stops there (the
# other rules assume a graph whose operators fit together).
VALIDITY = Family("model validity", validity.check_validity, (validity.RULE,))

# Runs next; when it reports (no op computes in int8) the audit stops there: the op-level rules
# would only restate that the model is float.
GATE = Family("quantized model", graph.check_quantized, ("QT-NOT-QUANTIZED",))
