"""Rule severities under target profiles: the catalogue's defaults, then each profile's overrides.

Computed here, above the rule catalogue, and handed down to the rule families (through the audit
context), so that no rule module needs the catalogue that gathers it.
"""

from __future__ import annotations

import functools

from qtool.check.findings import SEVERITIES
from qtool.check.rules import RULES
from qtool.spec import raw_spec

OFF = "off"  # a profile severity that disables a rule


@functools.cache
def rule_severities(profiles: tuple[str, ...] = ()) -> dict[str, str]:
    """Rule id -> severity once `profiles` (spec profiles, in order) have applied their
    ``"check": {"severity": {...}}`` overrides; ``"off"`` disables a rule."""
    severity = {rule_id: rule.severity for rule_id, rule in RULES.items()}
    profile_table = raw_spec()["profiles"]
    for name in profiles:
        overrides = profile_table[name].get("check", {}).get("severity", {})
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
