"""The checker's data beyond the op table, read from the "check" section of the spec file.

That section holds what an audit needs that is not a per-operand rule: which ops cross the
float/int8 boundary, risk thresholds, and the rescaling arithmetic of the int8 ADD/SUB kernels.
Target profiles may override rule severities there too (see :mod:`qtool.check.rules`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from qtool.check.findings import SEVERITIES
from qtool.spec import boundary_ops, input_scale_below_one, raw_spec

OFF = "off"  # a profile severity that disables a rule


@dataclass(frozen=True)
class CheckSettings:
    boundary_ops: frozenset[str]  # ops whose float (or uint8) side is the model boundary
    legacy_dtypes: dict[str, str]  # spec dtype -> its legacy form ("int8" -> "uint8")
    tiny_scale: float  # scales below this are a risk
    min_code_fraction: float  # a range using less of the int8 codes than this wastes precision
    rescale_left_shift: dict[str, int]  # op -> left shift of its int8 rescaling kernel
    input_scale_below_one: frozenset[str]  # ops whose int8 kernels take input scales as multipliers
    severity: dict[str, str]  # rule id -> severity after profile overrides ("off": disabled)


def _profile_severities(raw: dict[str, Any], profiles: tuple[str, ...]) -> dict[str, str]:
    # Imported here: the catalogue gathers the rules from the modules that check them, and
    # those read these settings.
    from qtool.check.rules import RULES

    severity = {rule_id: rule.severity for rule_id, rule in RULES.items()}
    for name in profiles:
        overrides = raw["profiles"][name].get("check", {}).get("severity", {})
        for rule_id, level in overrides.items():
            if rule_id not in RULES:
                raise KeyError(f"profile {name!r} sets the severity of unknown rule {rule_id!r}")
            if level not in (*SEVERITIES, OFF):
                raise ValueError(
                    f"profile {name!r}: {rule_id} severity {level!r} is not one of "
                    f"{', '.join((*SEVERITIES, OFF))}"
                )
            severity[rule_id] = level
    return severity


@functools.cache
def load_settings(profiles: tuple[str, ...] = ()) -> CheckSettings:
    raw = raw_spec()
    section = raw["check"]
    risk = section["risk"]
    return CheckSettings(
        boundary_ops=boundary_ops(),
        legacy_dtypes=dict(section["legacy_dtypes"]),
        tiny_scale=float(risk["tiny_scale"]),
        min_code_fraction=float(risk["min_code_fraction"]),
        rescale_left_shift={op: int(shift) for op, shift in section["rescale_left_shift"].items()},
        input_scale_below_one=input_scale_below_one(),
        severity=_profile_severities(raw, profiles),
    )
