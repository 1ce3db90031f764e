"""Rule family: the model is a valid graph. The model validator's problems become findings.

Runs before everything else: the other rules read operands, shapes and parameters, which only
mean something in a graph whose operators fit together.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from qtool.check.findings import Finding
from qtool.check.rulebook import family, rule
from qtool.model import Model
from qtool.model.validate import model_problems

MODEL_INVALID = rule(
    "QT-MODEL-INVALID",
    "error",
    title="the model is not a valid TFLite graph",
    help=(
        "An operator's operand count, types, options or shapes do not fit together, or the "
        "graph itself is broken (a tensor nothing writes, a cycle, a bad index, a constant "
        "without its data). Runtimes refuse such a model and no other rule is checked; the "
        "message names the operator or tensor and what is wrong with it."
    ),
)


@family("model validity", MODEL_INVALID)
def check_validity(model: Model, severity: Mapping[str, str]) -> Iterator[Finding]:
    """One finding per problem the model validator finds (the graph does not fit together)."""
    for problem in model_problems(model):
        yield MODEL_INVALID.finding(
            severity,
            problem.message,
            subgraph=problem.subgraph,
            op_index=problem.op_index,
            op=problem.op_type,
            tensor=problem.tensor_name,
            tensor_index=problem.tensor_index,
        )
