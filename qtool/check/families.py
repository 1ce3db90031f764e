"""The registry of rule families: what `audit_model` runs, in order.

Each family names the rules it may emit where it is declared (`@family` in its module).
"""

from __future__ import annotations

from qtool.check import (
    contracts,
    graph_rules,
    operands,
    risk,
    state_rules,
    structure,
    validity,
    weight_rules,
)
from qtool.check.rulebook import Family

FAMILIES: tuple[Family, ...] = (
    structure.check_param_structure,
    graph_rules.check_float_ops,
    graph_rules.check_float_feeds,
    graph_rules.check_legacy_dtypes,
    graph_rules.check_coverage,
    graph_rules.check_calls,
    weight_rules.check_hybrid_weights,
    weight_rules.check_blockwise_weights,
    operands.check_dtypes,
    operands.check_granularity,
    operands.check_zero_points,
    operands.check_weight_values,
    operands.check_bias_scales,
    operands.check_fixed_outputs,
    operands.check_same_scale,
    state_rules.check_variables,
    state_rules.check_lstm,
    risk.check_tiny_scales,
    risk.check_bias_saturation,
    risk.check_range_use,
    risk.check_weight_codes,
    risk.check_rescale,
    contracts.check_activation_bounds,
    contracts.check_accumulator,
    contracts.check_comparison_resolution,
    contracts.check_softmax_input_scale,
)

# Runs before anything else, on the model itself: when it reports, the audit stops there (the
# other rules assume a graph whose operators fit together).
VALIDITY: Family = validity.check_validity

# Runs next; when it reports (no op computes in int8) the audit stops there: the op-level rules
# would only restate that the model is float.
GATE: Family = graph_rules.check_quantized
