"""Target devices: which ops of a model run on an accelerator or runtime (`qtool check --target`).

Profiles live as data in `schemas/targets/`; constraints are the named functions of
:mod:`qtool.check.targets.constraints`; :func:`place_model` says where every op runs.
"""

from qtool.check.targets.constraints import CONSTRAINTS, Constraint
from qtool.check.targets.placement import (
    CANNOT_RUN,
    FALLBACK,
    ON_TARGET,
    OpPlacement,
    Reason,
    TargetReport,
    checked_target,
    place_model,
    violations,
)
from qtool.targets import Target, load_target, target_names

__all__ = [
    "CANNOT_RUN",
    "CONSTRAINTS",
    "FALLBACK",
    "ON_TARGET",
    "Constraint",
    "OpPlacement",
    "Reason",
    "Target",
    "TargetReport",
    "checked_target",
    "load_target",
    "place_model",
    "target_names",
    "violations",
]
