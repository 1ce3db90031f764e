"""The checker's data beyond the op table, read from the "check" section of the spec file.

That section holds what an audit needs that is not a per-operand rule: which ops cross the
float/int8 boundary, risk thresholds, and the rescaling arithmetic of the int8 ADD/SUB kernels.
Target profiles may override rule severities there too: :mod:`qtool.check.severities` applies
them, on top of the rule catalogue, and hands the result down to the rule families.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from qtool.spec import boundary_ops, raw_spec


@dataclass(frozen=True)
class CheckSettings:
    """The "check" section of the spec file, as the rules read it."""

    boundary_ops: frozenset[str]  # ops whose float (or uint8) side is the model boundary
    legacy_dtypes: dict[str, str]  # spec dtype -> its legacy form ("int8" -> "uint8")
    tiny_scale: float  # scales below this are a risk
    min_code_fraction: float  # a range using less of the int8 codes than this wastes precision
    rescale_left_shift: dict[str, int]  # op -> left shift of its int8 rescaling kernel


@functools.cache
def load_settings() -> CheckSettings:
    """The checker's settings from the spec file's "check" section (the same for every profile)."""
    raw = raw_spec()
    section = raw["check"]
    risk = section["risk"]
    return CheckSettings(
        boundary_ops=boundary_ops(),
        legacy_dtypes=dict(section["legacy_dtypes"]),
        tiny_scale=float(risk["tiny_scale"]),
        min_code_fraction=float(risk["min_code_fraction"]),
        rescale_left_shift={op: int(shift) for op, shift in section["rescale_left_shift"].items()},
    )
