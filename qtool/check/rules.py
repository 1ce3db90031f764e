"""The rule catalogue of `qtool check`: every rule, in the order users read them.

Each rule is declared once, next to the check that emits it (`qtool.check.rulebook.rule`), with
its id, default severity and help; this module only puts the declarations in order for
`--list-rules`, SARIF and the docs. What each rule checks comes from the spec data
(`schemas/int8_spec.json`). Target profiles in that file may change severities through a
``"check": {"severity": {RULE: "error" | "warning" | "info" | "off"}}`` entry.
"""

from __future__ import annotations

from qtool.check import (
    contracts,
    gates,
    graph_rules,
    operands,
    qparams,
    risk,
    state_rules,
    validity,
    weight_rules,
)
from qtool.check.rulebook import RuleInfo, catalogue

RULES: dict[str, RuleInfo] = catalogue(
    # the graph itself
    validity.MODEL_INVALID,
    # structure of parameters
    qparams.QPARAM_COUNT,
    qparams.QPARAM_AXIS,
    qparams.QPARAM_AXIS_SIZE,
    qparams.SCALE_INVALID,
    qparams.ZP_RANGE,
    operands.QPARAM_MISSING,
    # the op table
    operands.DTYPE,
    operands.GRANULARITY,
    operands.WEIGHT_PER_TENSOR,
    operands.WEIGHT_AXIS,
    operands.ZERO_POINT,
    operands.WEIGHT_RANGE,
    operands.BIAS_SCALE,
    operands.FIXED_OUTPUT,
    operands.SAME_SCALE,
    # kernels that keep state
    state_rules.VARIABLE_PARAMS,
    state_rules.LSTM_CONTRACT,
    # the graph as a whole
    graph_rules.NOT_QUANTIZED,
    graph_rules.FLOAT_OP,
    graph_rules.FLOAT_FEED,
    graph_rules.LEGACY_UINT8,
    graph_rules.OP_UNCOVERED,
    graph_rules.OP_EXTENDED,
    graph_rules.CALL_PARAMS,
    # the weight modes: hybrid, weight-only, float16 and int4 weights
    weight_rules.HYBRID_KERNEL,
    weight_rules.HYBRID_PARAMS,
    weight_rules.BLOCKWISE_RULE,
    weight_rules.BLOCK_SCALE,
    weight_rules.BLOCK_SIZE,
    # numerical risks
    risk.BIAS_SATURATED,
    risk.RANGE_UNDERUSED,
    risk.WEIGHT_CODES,
    risk.RESCALE_ABORT,
    risk.RESCALE_FLUSH,
    risk.TINY_SCALE,
    contracts.ACTIVATION_BOUND,
    contracts.ACCUMULATOR_OVERFLOW,
    contracts.COMPARISON_RESOLUTION,
    contracts.SOFTMAX_INPUT_SCALE,
    # the target (--target), and the accuracy gate (--reference)
    gates.TARGET_FALLBACK,
    gates.TARGET_UNSUPPORTED,
    risk.DEAD_CHANNELS,
    gates.SQNR,
    gates.SQNR_LOW,
    gates.METRIC,
    gates.METRIC_LOW,
)
