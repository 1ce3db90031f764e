"""Rule family: the model is a valid graph. The model validator's problems become findings.

Runs before everything else: the other rules read operands, shapes and parameters, which only
mean something in a graph whose operators fit together.
"""

from __future__ import annotations

from collections.abc import Iterator

from qtool.check.config import load_settings
from qtool.check.findings import Finding
from qtool.model import Model
from qtool.model.validate import model_problems

RULE = "QT-MODEL-INVALID"


def check_validity(model: Model, profiles: tuple[str, ...] = ()) -> Iterator[Finding]:
    severity = load_settings(profiles).severity[RULE]
    for problem in model_problems(model):
        yield Finding(
            rule=RULE,
            severity=severity,
            message=problem.message,
            subgraph=problem.subgraph,
            op_index=problem.op_index,
            op=problem.op_type,
            tensor=problem.tensor_name,
            tensor_index=problem.tensor_index,
        )
